"""Launch modes, overlap, sequence parallelism, the critical path and the trace."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpsim import Options, Workload, simulate
from tpsim.calibration import default as default_calibration
from tpsim.core import metrics
from tpsim.core.comm.collectives import make_planner
from tpsim.core.comm.group import tp_group
from tpsim.core.comm.schedules import predict
from tpsim.core.engine.simulation import run
from tpsim.core.errors import ConfigError
from tpsim.core.program import CollectiveCall, Op, Program, Programs
from tpsim.models.catalog import get_model
from tpsim.models.spec import ModelSpec
from tpsim.outputs.export import chrome_trace
from tpsim.topologies.builders import build
from tracecheck import check_trace_structure

COMM_SMS = default_calibration().collectives.comm_sms


def short(name: str, layers: int = 4) -> ModelSpec:
    """A catalog model cut to a few layers: same per-layer shapes, a fast test."""
    return dataclasses.replace(get_model(name), num_layers=layers)


def test_eager_decode_is_overhead_bound_and_graphs_are_not() -> None:
    wl = Workload(1, "decode", context_len=256)
    eager = simulate("llama-2-7b", "dgx-a100", 8, wl, Options(launch="eager"))
    graph = simulate("llama-2-7b", "dgx-a100", 8, wl, Options(launch="graph"))
    assert eager.summary["regime"] == "overhead-bound"
    assert graph.summary["regime"] != "overhead-bound"
    assert eager.latency_s > 1.3 * graph.latency_s


def test_compiled_runs_fewer_kernels_than_graph() -> None:
    wl = Workload(1, "decode", context_len=256)
    runs = {
        m: simulate(short("llama-2-7b"), "dgx-a100", 8, wl, Options(launch=m, fused=False))
        for m in ("graph", "compiled")
    }
    kernels = {
        m: sum(1 for x in r.records if x.stream == "compute" and x.rank == 0)
        for m, r in runs.items()
    }
    assert kernels["compiled"] < kernels["graph"]
    assert runs["compiled"].latency_s < runs["graph"].latency_s


def test_pcie_prefill_is_communication_bound() -> None:
    r = simulate(short("llama-2-7b"), "pcie-rtx4090", 8, Workload(8, "prefill", prompt_len=1024))
    assert r.summary["regime"] == "communication-bound"


def test_chunked_and_microbatch_overlap_beat_none() -> None:
    """Four chunks of a 128 MiB all-reduce hide behind the GEMMs; at the default tp = 8
    chunks each 16 MiB NVLS all-reduce pays NCCL's latency and pipeline fill again (about
    55 us), which eats most of the overlap."""
    wl = Workload(4, "prefill", prompt_len=2048)
    model = short("llama-3.1-70b")
    t = {
        m: simulate(model, "dgx-h100", 8, wl, Options(overlap=m)).latency_s
        for m in ("none", "chunked", "microbatch")
    }
    four = simulate(model, "dgx-h100", 8, wl, Options(overlap="chunked", overlap_chunks=4))
    assert four.latency_s < 0.97 * t["none"]
    assert t["chunked"] < t["none"]
    assert t["microbatch"] < 0.97 * t["none"]


def test_microbatch_needs_two_sequences() -> None:
    with pytest.raises(ConfigError, match="batch >= 2"):
        simulate(short("llama-2-7b"), "dgx-h100", 2, Workload(1), Options(overlap="microbatch"))


def test_sequence_parallel_moves_the_same_bytes_in_twice_the_collectives() -> None:
    wl = Workload(8, "prefill", prompt_len=256)
    plain = simulate(short("llama-2-7b"), "dgx-h100", 4, wl, Options(allreduce_algo="ring"))
    sp = simulate(
        short("llama-2-7b"),
        "dgx-h100",
        4,
        wl,
        Options(allreduce_algo="ring", sequence_parallel=True),
    )
    a, b = plain.summary["communication"]["by_site"], sp.summary["communication"]["by_site"]
    for site, before in (("attn_in", "attn_out"), ("mlp_in", "mlp_out")):
        # reduce-scatter (p-1)/p n + all-gather (p-1)/p n = ring all-reduce 2(p-1)/p n
        assert (
            b[site]["bytes_sent_per_gpu"] + b[before]["bytes_sent_per_gpu"]
            == (a[before]["bytes_sent_per_gpu"])
        )
        assert b[site]["count"] == b[before]["count"] == a[before]["count"]
    norms = [x for x in sp.records if x.name == "input_norm" and x.rank == 0]
    assert "[512, 4096]" in norms[1].detail  # 2048 tokens / 4 ranks


def test_compute_slows_while_a_collective_holds_sms() -> None:
    # a 100 us kernel that starts with a long all-reduce in flight runs 132/116 slower
    topo = build("dgx-h100")
    group = tp_group(topo, 2)
    fab = group.fabric(default_calibration())
    plan = make_planner(fab, group.ring, algo="ring")
    call = CollectiveCall("all_reduce", 1 << 30)
    ops = (
        Op(
            "big",
            "collective",
            0,
            "x",
            "comm",
            0.0,
            0.0,
            0.0,
            call.nbytes,
            "communication",
            "",
            (),
            call,
        ),
        Op("gemm", "gemm", 0, "", "compute", 0.0, 100e-6, 0.0, 0, "compute", "", ()),
    )
    recs, _ = run(
        Programs.same(Program(ops), 2), plan, fab.capacities, comm_sms=COMM_SMS, sm_count=132
    )
    (g,) = [x for x in recs if x.name == "gemm" and x.rank == 0]
    assert g.duration_s == pytest.approx(100e-6 * 132 / (132 - COMM_SMS))
    recs, _ = run(
        Programs.same(Program(ops[1:]), 2), plan, fab.capacities, comm_sms=COMM_SMS, sm_count=132
    )
    assert recs[0].duration_s == pytest.approx(100e-6)  # alone: full speed


def test_launch_skew_delays_every_collective() -> None:
    wl = Workload(4, "decode", context_len=128)
    base = simulate(short("llama-2-7b"), "dgx-h100", 8, wl)
    skewed = simulate(short("llama-2-7b"), "dgx-h100", 8, wl, Options(launch_skew_s=50e-6))
    assert skewed.latency_s >= base.latency_s + 50e-6 * (1 - 1e-9)


# ----------------------------------------------------------------------- invariants
models = st.builds(
    lambda layers, heads, d_head, mlp: ModelSpec(
        name="rand",
        hidden_size=heads * d_head,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=d_head,
        intermediate_size=mlp,
        vocab_size=4096,
    ),
    st.integers(1, 3),
    st.sampled_from([8, 16]),
    st.sampled_from([64, 128]),
    st.sampled_from([512, 2048, 8192]),
)


@settings(max_examples=25, deadline=None)
@given(
    model=models,
    tp=st.sampled_from([1, 2, 4, 8]),
    batch=st.integers(2, 16),
    phase=st.sampled_from(["prefill", "decode"]),
    overlap=st.sampled_from(["none", "chunked", "microbatch"]),
    launch=st.sampled_from(["eager", "graph", "compiled"]),
    sp=st.booleans(),
)
def test_makespan_bounds_and_exact_breakdown(model, tp, batch, phase, overlap, launch, sp):  # type: ignore[no-untyped-def]
    opts = Options(overlap=overlap, launch=launch, sequence_parallel=sp)
    r = simulate(model, "dgx-h100", tp, Workload(batch, phase, prompt_len=64, context_len=64), opts)
    # lower bound: one rank's kernels back to back, or its collectives back to back alone
    compute = math.fsum(x.duration_s for x in r.records if x.rank == 0 and x.stream == "compute")
    group = tp_group(build("dgx-h100"), tp)
    fab = group.fabric(default_calibration())
    plan = make_planner(fab, group.ring)
    comm = 0.0
    if tp > 1:
        ops = {x.op for x in r.records if x.rank == 0 and x.kind == "collective"}
        calls = [x for x in r.records if x.rank == 0 and x.kind == "collective"]
        by_op = {c.op: c for c in calls}
        comm = math.fsum(predict(fab, plan(_call(by_op[o]))) for o in ops)
    slow = 132 / (132 - COMM_SMS)
    assert r.latency_s >= max(compute / slow, comm) * (1 - 1e-9)
    # the breakdown covers the makespan exactly
    assert math.fsum(r.summary["breakdown_s"].values()) == pytest.approx(r.latency_s, rel=1e-12)
    # records on one stream never overlap
    for rank in range(tp):
        for stream in ("cpu", "compute", "comm"):
            spans = sorted(
                (x.start_s, x.end_s) for x in r.records if x.rank == rank and x.stream == stream
            )
            for (_, e1), (s2, _) in itertools.pairwise(spans):
                assert s2 >= e1 - 1e-15
    # tokens/s x latency = tokens
    tokens = batch * (64 if phase == "prefill" else 1)
    assert r.summary["tokens_per_s"] * r.latency_s == pytest.approx(tokens)


def _call(rec) -> CollectiveCall:  # type: ignore[no-untyped-def]
    op, nbytes = rec.detail.split(";")[0].split()[:2]
    return CollectiveCall(op, int(nbytes))


def test_trace_has_flows_counters_and_clean_structure() -> None:
    r = simulate(
        short("llama-3.1-8b", 2),
        "dgx-h100",
        4,
        Workload(8, "decode"),
        Options(launch="eager"),
        link_usage=True,
    )
    t = chrome_trace(
        r.records,
        title="t",
        rank_labels=r.rank_labels,
        critical=r.critical_path,
        link_usage=r.link_usage,
    )
    assert check_trace_structure(t) == []
    ev = t["traceEvents"]
    assert any(e["ph"] == "s" for e in ev) and any(e["ph"] == "f" for e in ev)
    counters = [e for e in ev if e["ph"] == "C"]
    assert counters and all("GB/s" in e["args"] for e in counters)
    assert all(e["args"].get("on_critical_path") in (True, False) for e in ev if e["ph"] == "X")


def test_layers_breakdown_adds_up() -> None:
    r = simulate(short("llama-2-7b"), "dgx-a100", 8, Workload(1, "decode"), Options())
    total = r.summary["breakdown_s"]
    layers = r.summary["layers"]
    assert [x["layer"] for x in layers] == [-1, 0, 1, 2, 3, 4]
    for k, v in total.items():
        assert math.fsum(x["breakdown_s"][k] for x in layers) == pytest.approx(v, abs=1e-12)
    assert metrics.regime(layers[2]["breakdown_s"]) == layers[2]["regime"]
