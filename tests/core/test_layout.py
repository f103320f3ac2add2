"""Pipeline stages and data-parallel replicas (issue #16), against numbers worked by hand.

Pipeline: with ``--ideal`` each stage processes its identical micro-batches in order, one
at a time, and hands each to the next stage by one send on its own stream over links no
other send uses: a flow shop of identical jobs, whose makespan is the sum of every machine's
time per job plus (M - 1) times the slowest machine's, and with P equal stages of time t
and sends of time c, (M + P - 1) t + (P - 1) c.
"""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from tpsim import Layout, Options, Workload, simulate
from tpsim.core.comm.layout import stage_layers
from tpsim.core.errors import ConfigError
from tpsim.core.memory import memory_per_gpu, memory_per_stage
from tpsim.models.catalog import get_model
from tpsim.topologies.io import get_topology, load_topology

IDEAL = Options(ideal=True)


def _busy(records, rank, stream, kinds):  # type: ignore[no-untyped-def]
    return math.fsum(
        r.end_s - r.start_s
        for r in records
        if r.rank == rank and r.stream == stream and r.kind in kinds
    )


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 4), (4, 1), (3, 6)])
def test_pipeline_is_a_flow_shop(pp: int, m: int) -> None:
    """Makespan = sum of every stage's and every send's time per micro-batch + (M - 1) x
    the slowest of them; bubble = the time before the last stage starts its first one."""
    layers = 6 * pp  # balanced stages of 6 layers of llama-2-7b
    spec = replace(get_model("llama-2-7b"), num_layers=layers)
    res = simulate(spec, "dgx-h100", Layout(1, pp=pp, micro_batches=m),
                   Workload(m, "decode", context_len=256), IDEAL)  # fmt: skip
    recs = res.records
    gpu = ("gemm", "attention", "elementwise")
    stage = [_busy(recs, s, "compute", gpu) / m for s in range(pp)]
    send = [_busy(recs, s, "p2p", ("p2p",)) / m for s in range(pp - 1)]
    machines = stage + send
    expect = math.fsum(machines) + (m - 1) * max(machines)
    assert res.latency_s == pytest.approx(expect, rel=1e-12)
    parts = res.summary["breakdown_s"]
    assert math.fsum(parts.values()) == pytest.approx(res.latency_s, rel=1e-12)
    if pp > 1:  # the last stage starts when micro-batch 0 has crossed the others (its
        # send into it is communication on the path, not bubble)
        fill = math.fsum(stage[:-1]) + math.fsum(send[:-1])
        assert parts["bubble"] == pytest.approx(fill, rel=1e-9)


def test_equal_stages_closed_form() -> None:
    """P equal stages of time t and sends of time c: (M + P - 1) t + (P - 1) c. Real stages
    differ (embedding, head), so with t the slowest stage it is an upper bound, met exactly
    by the flow shop above."""
    pp, m = 4, 8
    res = simulate("llama-2-7b", "dgx-h100", Layout(1, pp=pp, micro_batches=m),
                   Workload(m, "decode", context_len=256), IDEAL)  # fmt: skip
    recs = res.records
    gpu = ("gemm", "attention", "elementwise")
    t = max(_busy(recs, s, "compute", gpu) / m for s in range(pp))
    c = _busy(recs, 0, "p2p", ("p2p",)) / m
    assert 0 < c < t
    assert res.latency_s <= (m + pp - 1) * t + (pp - 1) * c + 1e-15


def test_two_tp4_replicas_on_nvswitch_equal_one() -> None:
    w = Workload(8, "decode", context_len=512)
    one = simulate("llama-2-7b", "dgx-h100", Layout(4), w, IDEAL).summary
    two = simulate("llama-2-7b", "dgx-h100", Layout(4, dp=2), w, IDEAL).summary
    assert two["latency_s"] == one["latency_s"]
    assert two["tokens_per_s"] == pytest.approx(2 * one["tokens_per_s"], rel=1e-12)
    assert two["tokens_per_s_per_replica"] == pytest.approx(one["tokens_per_s"], rel=1e-12)
    assert two["engine"]["ranks_simulated"] == 4  # one replica stood for both: exact
    full = simulate("llama-2-7b", "dgx-h100", Layout(4, dp=2), w, IDEAL, use_symmetry=False)
    assert full.summary["latency_s"] == one["latency_s"]
    assert full.summary["engine"]["ranks_simulated"] == 8


#: 8 GPUs on two PCIe switches joined by one uplink; GPU ranks alternate pairs, so each
#: TP 4 group of consecutive ranks spans both switches and crosses the uplink.
SHARED_UPLINK = (
    """\
name: shared-uplink
gpus: {g: h100-pcie}
nodes:
  - {id: sw0, kind: switch}
  - {id: sw1, kind: switch}
"""
    + "".join(f"  - {{id: gpu{i}, kind: gpu, type: g, rank: {i}}}\n" for i in range(8))
    + """\
links:
  - {src: sw0, dst: sw1, bandwidth_GBps: 16, latency_us: 0, duplex: true}
"""
    + "".join(
        f"  - {{src: gpu{i}, dst: sw{(i // 2) % 2}, bandwidth_GBps: 32, latency_us: 0, "
        "duplex: true}\n"
        for i in range(8)
    )
)


def test_replicas_sharing_an_uplink_are_slower(tmp_path: Path) -> None:
    """Each ring all-reduce crosses the uplink once each way per step; two groups share it,
    so every collective takes twice as long: the pass grows by exactly one pass's
    communication time (ideal, no overlap, 0 latency)."""
    path = tmp_path / "t.yaml"
    path.write_text(SHARED_UPLINK)
    g = load_topology(path)
    opts = Options(ideal=True, allreduce_algo="ring")
    w = Workload(2, "prefill", prompt_len=128)
    one = simulate("llama-2-7b", g, Layout(4), w, opts).summary
    two = simulate("llama-2-7b", g, Layout(4, dp=2), w, opts).summary
    assert two["engine"]["ranks_simulated"] == 8  # shared links: every replica simulated
    comm = one["breakdown_s"]["communication"]
    assert comm > 0
    assert two["latency_s"] == pytest.approx(one["latency_s"] + comm, rel=1e-9)


def test_memory_per_stage() -> None:
    spec = get_model("llama-3.1-70b")
    gpu = get_topology("dgx-h100").nodes["gpu0"]["gpu"]
    w = Workload(8, "decode", context_len=2048)
    whole = memory_per_gpu(spec, 8, w, IDEAL, gpu)
    same = memory_per_stage(spec, 8, w, IDEAL, gpu, layers=range(80), first=True, last=True)
    assert same == whole
    a = memory_per_stage(spec, 8, w, IDEAL, gpu, layers=range(40), first=True, last=False)
    b = memory_per_stage(spec, 8, w, IDEAL, gpu, layers=range(40, 80), first=False, last=True)
    # each stage holds half the layers' weights and KV cache; the embedding and the head
    # (untied: one vocab x d matrix each) sit on the first and the last
    vocab_d = -(-spec.vocab_size // 8) * spec.hidden_size * 2  # bytes, bf16
    assert a.kv_cache_bytes_per_gpu * 2 == whole.kv_cache_bytes_per_gpu
    assert a.weights_bytes_per_gpu + b.weights_bytes_per_gpu == whole.weights_bytes_per_gpu
    assert b.weights_bytes_per_gpu - a.weights_bytes_per_gpu == spec.hidden_size * 2
    assert a.weights_bytes_per_gpu > vocab_d


def test_placement_fills_hosts_tp_first() -> None:
    s = simulate("llama-3.1-8b", "dgx-h100", Layout(4, pp=2, dp=2, micro_batches=2),
                 Workload(4, "decode", context_len=256), IDEAL, nodes=2).summary  # fmt: skip
    place = s["config"]["placement"]
    assert [(p["dp"], p["pp"], p["tp"]) for p in place[:5]] == [
        (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 1, 0)]  # fmt: skip
    assert {p["gpu"].split(".")[0] for p in place if p["dp"] == 0} == {"n0"}
    assert {p["gpu"].split(".")[0] for p in place if p["dp"] == 1} == {"n1"}
    assert s["config"]["layout"] == {
        "tp": 4, "pp": 2, "dp": 2, "micro_batches": 2, "pp_layers": [16, 16],
        "ep": 1, "attention_dp": 1, "moe_tp": 4}  # fmt: skip


def test_stage_layers() -> None:
    assert [len(r) for r in stage_layers(80, 3)] == [27, 27, 26]
    assert [len(r) for r in stage_layers(80, 2, (30, 50))] == [30, 50]
    for bad, field in [((30, 40), "pp_layers=30,40"), ((80,), "pp_layers=80")]:
        with pytest.raises(ConfigError, match=field):
            stage_layers(80, 2, bad)
    with pytest.raises(ConfigError, match="pp=81"):
        stage_layers(80, 81)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--tp", "8", "--pp", "2"], "tp\\*pp\\*dp=8\\*2\\*1=16"),
        (["--tp", "1", "--pp", "40"], "pp=40"),
        (["--tp", "1", "--pp", "2", "--pp-layers", "10,10"], "pp_layers=10,10"),
        (["--tp", "1", "--pp", "2", "--pp-layers", "0,32"], "--pp-layers"),
        (["--tp", "1", "--dp", "0"], "dp=0"),
        (["--tp", "1", "--pp", "2", "--micro-batches", "4", "--batch", "2"], "micro_batches=4"),
    ],
)
@pytest.mark.slow
def test_bad_layouts_exit_2(args: list[str], field: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tpsim", "run", "--model", "llama-2-7b", "--topology",
         "dgx-h100", *args], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and __import__("re").search(field, lines[0]), lines


@pytest.mark.slow
def test_plan_ranks_layouts_and_recommends() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tpsim", "plan", "--model", "llama-2-7b", "--topology",
         "dgx-h100", "--gpus", "4", "--batch-max", "8", "--ideal", "--jobs", "1",
         "--slo-tpot-ms", "50"], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for layout in ("TP 4 x PP 1 x DP 1", "TP 2 x PP 1 x DP 2", "TP 1 x PP 1 x DP 4"):
        assert layout in text
    assert "Recommended: TP " in text and "Runner-up: TP " in text


@pytest.mark.slow
def test_plan_worked_example_tp4_dp2_beside_tp8_and_tp2_dp4() -> None:
    """The source notes' example: 8 GPUs serving independent requests as TP 4 x DP 2; plan
    shows it next to TP 8 and TP 2 x DP 4, each with total tokens/s and latency. With the
    same batch per replica, replicas multiply tokens/s while TP shortens the step."""
    import json

    out = subprocess.run(
        [sys.executable, "-m", "tpsim", "plan", "--model", "llama-2-7b", "--topology",
         "dgx-h100", "--batch-max", "16", "--ideal", "--jobs", "1", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = {(r["tp"], r["pp"], r["dp"]): r for r in json.loads(out.stdout)["layouts"]}
    tp8, tp4dp2, tp2dp4 = rows[8, 1, 1], rows[4, 1, 2], rows[2, 1, 4]
    for r in (tp8, tp4dp2, tp2dp4):
        assert r["tokens_per_s"] > 0 and r["tpot_s"] > 0 and r["ttft_s"] > 0
    if tp8["batch"] == tp4dp2["batch"] == tp2dp4["batch"]:
        assert tp8["tpot_s"] < tp4dp2["tpot_s"] < tp2dp4["tpot_s"]  # TP shortens the step
        assert tp8["tokens_per_s"] < tp4dp2["tokens_per_s"] < tp2dp4["tokens_per_s"]


def test_placement_overrides_the_derived_one(capsys: pytest.CaptureFixture[str]) -> None:
    """Two TP 2 replicas on the PCIe L40S box: the derived placement keeps each TP pair on
    one PCIe switch; placing each pair across the sockets is slower (its all-reduce crosses
    UPI), and bad placements are refused with the field named."""
    from tpsim.cli import main

    w = Workload(8, "decode", context_len=512)
    near = simulate("llama-3.1-8b", "pcie-l40s", Layout(2, dp=2), w)
    far = simulate("llama-3.1-8b", "pcie-l40s",
                   Layout(2, dp=2, placement=("gpu0", "gpu4", "gpu1", "gpu5")), w)  # fmt: skip
    assert [p["gpu"] for p in far.summary["config"]["placement"]] == [
        "gpu0",
        "gpu4",
        "gpu1",
        "gpu5",
    ]
    assert (
        far.summary["breakdown_s"]["communication"] > near.summary["breakdown_s"]["communication"]
    )
    base = ["run", "--model", "llama-3.1-8b", "--topology", "pcie-l40s", "--tp", "2"]
    for bad, needle in (("gpu0,gpux", "'gpux' is not a GPU"), ("gpu0", "1 GPUs, the layout has"),
                        ("gpu0,gpu0", "a GPU twice")):  # fmt: skip
        assert main([*base, "--placement", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err


def test_stage_sends_are_a_slice_per_tp_rank_then_an_all_gather() -> None:
    """vLLM's send_tensor_dict with all_gather_group (Megatron's scatter-gather): each TP
    rank of a stage sends its 1/tp of the hidden states and of the residual, and the next
    stage's TP group all-gathers each tensor whole again, before its first kernel."""
    tp, batch = 4, 8
    res = simulate("llama-2-7b", "dgx-h100", Layout(tp, pp=2), Workload(batch, "decode",
                   context_len=256), IDEAL)  # fmt: skip
    each = batch * 4096 * 2  # one [T, d] tensor in bf16
    recs = res.records
    sends = [r for r in recs if r.kind == "p2p" and r.name == "pp_send"]
    assert sorted(r.rank for r in sends) == [0, 1, 2, 3]
    assert all(r.bytes == 2 * each // tp for r in sends)
    gathers = [r for r in recs if r.kind == "collective" and r.site == "pp"]
    assert {r.rank for r in gathers} == {4, 5, 6, 7}  # the receiving stage only
    assert all(r.name.startswith("pp.all_gather") for r in gathers)
    for rank in range(4, 8):
        mine = [r for r in gathers if r.rank == rank]
        assert len({r.op for r in mine}) == 2  # one per tensor
        first_kernel = min(r.start_s for r in recs if r.rank == rank and r.stream == "compute")
        assert max(r.end_s for r in mine) <= first_kernel


def test_pipeline_layers_add_up_to_the_breakdown() -> None:
    """With a pipeline, the per-layer cut counts the fill before the last stage takes over
    as the crossed layers' ``bubble``, so the layers still add up to ``breakdown_s``; and
    ``tokens_per_s_per_gpu`` is the whole layout's tokens over all its GPUs."""
    s = simulate("llama-3.1-8b", "dgx-h100", Layout(2, pp=2, dp=2, micro_batches=2),
                 Workload(8, "decode", context_len=256)).summary  # fmt: skip
    total, layers = s["breakdown_s"], s["layers"]
    assert total["bubble"] > 0
    for k, v in total.items():
        assert math.fsum(x["breakdown_s"].get(k, 0.0) for x in layers) == pytest.approx(v)
    first = next(x for x in layers if x["layer"] == 0)["breakdown_s"]
    assert first["bubble"] > 0 and first["memory"] == 0  # stage 0's work is the fill
    assert s["tokens_per_s_per_gpu"] * 8 == pytest.approx(s["tokens_per_s"])
