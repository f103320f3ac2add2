"""The worked examples of the design and the analytic checks, each derivable with a pencil."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpsim import Options, Workload, collective_sweep, simulate
from tpsim.calibration import ideal as ideal_calibration
from tpsim.core.comm.collectives import make_planner, ring_all_reduce_time
from tpsim.core.comm.group import tp_group
from tpsim.core.engine.simulation import run
from tpsim.core.kernels.costs import gemm, hardware_for
from tpsim.core.program import Op, Program, Programs
from tpsim.models.spec import ModelSpec
from tpsim.topologies.gpus import get_gpu
from tpsim.topologies.io import load_topology

DATA = Path(__file__).parents[1] / "data"
KiB, MiB = 1024, 1024**2

#: The illustrative model of the design: 32 layers, d = 4096, 32 heads (MHA), bf16.
ILLUSTRATIVE = DATA / "models" / "illustrative.json"


def ring_file(tmp_path: Path, p: int, bandwidth_GBps: float, latency_us: float) -> Path:
    """A ring of ``p`` H100s joined gpu_i -> gpu_{i+1} in both directions."""
    lines = ["name: ring", "gpus: {g: h100-sxm}", "nodes:"]
    lines += [f"  - {{id: gpu{i}, kind: gpu, type: g}}" for i in range(p)]
    lines.append("links:")
    for i in range(p):
        j = (i + 1) % p
        if p == 2 and i == 1:
            break  # two GPUs: one duplex link
        lines.append(
            f"  - {{src: gpu{i}, dst: gpu{j}, bandwidth_GBps: {bandwidth_GBps}, "
            f"latency_us: {latency_us}, duplex: true}}"
        )
    path = tmp_path / f"ring{p}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_napkin_all_reduce_over_300_GBps(tmp_path: Path) -> None:
    # 8e6 B over one 300 GB/s link, 2 GPUs, ideal ring: 2 steps of 4e6 B = 26.67 us
    topo = load_topology(ring_file(tmp_path, 2, 300, 0))
    (row,) = collective_sweep(topo, 2, [8_000_000], algo="ring", ideal=True)
    assert row["time_s"] == pytest.approx(8e6 / 300e9, rel=1e-12)
    assert row["time_s"] == pytest.approx(26.667e-6, abs=1e-9)


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("nbytes", [8 * KiB, 1 * MiB, 64 * MiB])
def test_ideal_ring_equals_closed_form(tmp_path: Path, p: int, nbytes: int) -> None:
    topo = load_topology(ring_file(tmp_path, p, 100, 2))
    (row,) = collective_sweep(topo, p, [nbytes], algo="ring", ideal=True)
    expect = 2 * (p - 1) * (2e-6 + nbytes / (p * 100e9))
    assert row["time_s"] == pytest.approx(expect, rel=1e-12)
    assert expect == pytest.approx(ring_all_reduce_time(nbytes, p, 2e-6, 100e9), rel=1e-15)
    assert row["algorithm"] == "ring"


@pytest.mark.parametrize(("batch", "payload"), [(32, 256 * KiB), (1, 8 * KiB)])
def test_bytes_per_gpu_of_the_illustrative_model(batch: int, payload: int) -> None:
    # d = 4096 bf16: one token's hidden state is 8 KiB; 32 tokens 256 KiB. A ring moves
    # 2(p-1)/p of it per GPU: 384 KiB at TP 4. Two all-reduces a layer: 64, 24 MiB.
    r = simulate(
        str(ILLUSTRATIVE),
        "dgx-h100",
        4,
        Workload(batch, "decode", context_len=128),
        Options(allreduce_algo="ring"),
    )
    sites = r.summary["communication"]["by_site"]
    count = sites["attn_out"]["count"] + sites["mlp_out"]["count"]
    sent = sites["attn_out"]["bytes_sent_per_gpu"] + sites["mlp_out"]["bytes_sent_per_gpu"]
    assert count == 64
    assert sent == 64 * payload * 2 * 3 // 4
    if batch == 32:
        assert sent == 24 * MiB
    first = next(x for x in r.records if x.site == "attn_out" and x.kind == "collective")
    assert f"all_reduce {payload} B" in first.detail


def test_70b_weights_at_tp4_are_about_35_GB() -> None:
    r = simulate("llama-2-70b", "dgx-h100", 4, Workload(1, "decode", context_len=128))
    w = r.summary["memory"]["weights_bytes_per_gpu"]
    assert 33e9 <= w <= 36.5e9  # 69 B parameters x 2 bytes / 4, plus replicated norms


def test_p1_has_no_communication() -> None:
    r = simulate("llama-3.1-8b", "dgx-h100", 1, Workload(4, "decode", context_len=256))
    assert r.summary["communication"]["collectives"] == 0
    assert not [x for x in r.records if x.kind == "collective"]


@pytest.mark.parametrize(("m", "n", "k"), [(1, 8192, 8192), (4096, 8192, 8192), (64, 128, 64)])
def test_lone_gemm_equals_its_roofline(m: int, n: int, k: int) -> None:
    gpu = get_gpu("h100-sxm")
    hw = hardware_for(gpu, "bf16", ideal_calibration().kernels)
    cost = gemm(m, n, k, hw, act_bytes=2, w_bytes=2)
    roof = max(2 * m * n * k / 989e12, 2 * (m * k + k * n + m * n) / 3.35e12)
    op = Op(
        "gemm",
        "gemm",
        0,
        "",
        "compute",
        0.0,
        cost.seconds,
        cost.flops,
        cost.bytes,
        cost.category,
        "",
        (),
    )
    records, _ = run(Programs.same(Program((op,)), 1), planner=lambda call: None)  # type: ignore[arg-type,return-value]
    (rec,) = records
    assert rec.start_s == 0.0
    assert rec.end_s == pytest.approx(roof, rel=1e-12)


def test_communication_bound_layer_from_the_design(tmp_path: Path) -> None:
    # A layer with 20 us of compute and an 8e6-byte all-reduce over 300 GB/s (26.7 us):
    # the critical path holds both, and communication is the larger share.
    from tpsim.core import metrics
    from tpsim.core.program import CollectiveCall

    group = tp_group(load_topology(ring_file(tmp_path, 2, 300, 0)), 2)
    fab = group.fabric(ideal_calibration())
    planner = make_planner(fab, group.ring, algo="ring")
    compute = Op("mlp", "gemm", 0, "", "compute", 0.0, 20e-6, 0.0, 0, "compute", "", ())
    call = CollectiveCall("all_reduce", 8_000_000)
    reduce = Op(
        "mlp_out.all_reduce",
        "collective",
        0,
        "mlp_out",
        "comm",
        0.0,
        0.0,
        0.0,
        call.nbytes,
        "communication",
        "",
        (0,),
        call,
    )
    records, _ = run(Programs.same(Program((compute, reduce)), 2), planner, fab.capacities)
    parts = metrics.breakdown(records)
    assert parts["compute"] == pytest.approx(20e-6)
    assert parts["communication"] == pytest.approx(8e6 / 300e9)
    assert metrics.makespan(records) == pytest.approx(20e-6 + 8e6 / 300e9)
    assert metrics.regime(parts) == "communication-bound"


def test_tp_group_ring_on_two_hosts_keeps_hosts_contiguous() -> None:
    from tpsim.topologies.io import get_topology

    group = tp_group(get_topology("dgx-h100", 2), 16)
    hosts = [group.gpu_ranks[t] // 8 for t in group.ring]
    assert sum(a != b for a, b in zip(hosts, hosts[1:] + hosts[:1], strict=True)) == 2
    fab = group.fabric(ideal_calibration())
    assert fab.multi_host and fab.path(group.ring[7], group.ring[8]).link_class == "net"


def test_illustrative_model_loads() -> None:
    from tpsim.models.catalog import get_model

    m: ModelSpec = get_model(str(ILLUSTRATIVE))
    assert (m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads) == (4096, 32, 32, 32)
