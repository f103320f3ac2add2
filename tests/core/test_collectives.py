"""Collectives: each algorithm's closed form in ideal mode, contention, selection, invariants
and the calibration figures against the published measurements."""

from __future__ import annotations

from pathlib import Path

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from tpsim.calibration import default as default_calibration
from tpsim.calibration import ideal as ideal_calibration
from tpsim.calibration import measured
from tpsim.cli import main
from tpsim.core.collective_bench import collective_sweep
from tpsim.core.comm.collectives import make_planner
from tpsim.core.comm.group import tp_group
from tpsim.core.comm.schedules import chunk_sizes, predict
from tpsim.core.engine.flows import FlowNetwork
from tpsim.core.errors import ConfigError
from tpsim.experiments.validation.collectives import CURVES, compare, measured_peaks, peaks
from tpsim.topologies.builders import build
from tpsim.topologies.io import get_topology, load_topology

DATA = Path(__file__).parents[1] / "data"
KiB, MiB, GiB = 1024, 1024**2, 1024**3


def ring_file(tmp_path: Path, p: int, bandwidth_GBps: float = 100, latency_us: float = 2) -> Path:
    lines = ["name: ring", "gpus: {g: h100-sxm}", "nodes:"]
    lines += [f"  - {{id: gpu{i}, kind: gpu, type: g}}" for i in range(p)]
    lines.append("links:")
    for i in range(p if p > 2 else 1):
        lines.append(
            f"  - {{src: gpu{i}, dst: gpu{(i + 1) % p}, bandwidth_GBps: {bandwidth_GBps},"
            f" latency_us: {latency_us}, duplex: true}}"
        )
    path = tmp_path / f"ring{p}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def one(topology, p: int, n: int, algo: str, **kw) -> dict:  # type: ignore[no-untyped-def]
    (row,) = collective_sweep(topology, p, [n], algo=algo, ideal=True, **kw)
    return row


# ----------------------------------------------------------------------- closed forms (ideal)
H100_LINK = 450e9  # raw NVLink per GPU per direction
H100_HOP = 0.7e-6  # GPU -> NVSwitch -> GPU, 0.35 us each way


@pytest.mark.parametrize("n", [64 * KiB, 16 * MiB])
def test_oneshot_closed_form(n: int) -> None:
    # one step: each rank pulls n from 7 peers through its NVSwitch port: 7n over 450 GB/s
    t = one("dgx-h100", 8, n, "oneshot")["time_s"]
    assert t == pytest.approx(H100_HOP + 7 * n / H100_LINK, rel=1e-9)


@pytest.mark.parametrize("n", [64 * KiB, 16 * MiB])
def test_twoshot_closed_form(n: int) -> None:
    # reduce-scatter then all-gather: two steps of 7 chunks of n/8 through one port
    t = one("dgx-h100", 8, n, "twoshot")["time_s"]
    assert t == pytest.approx(2 * (H100_HOP + 7 * (n / 8) / H100_LINK), rel=1e-9)


@pytest.mark.parametrize("n", [64 * KiB, 16 * MiB])
def test_nvls_closed_form(n: int) -> None:
    # n (p+1)/p up and down each port at once, 0.35 us to the switch
    t = one("dgx-h100", 8, n, "nvls")["time_s"]
    assert t == pytest.approx(0.35e-6 + n * 9 / 8 / H100_LINK, rel=1e-9)


@pytest.mark.parametrize("n", [8 * KiB, 64 * MiB])
def test_ring_on_nvswitch_closed_form(n: int) -> None:
    t = one("dgx-h100", 8, n, "ring")["time_s"]
    assert t == pytest.approx(2 * 7 * (H100_HOP + n / 8 / H100_LINK), rel=1e-9)


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("n", [8 * KiB, 64 * MiB])
def test_all_to_all_closed_form(n: int, p: int) -> None:
    # each rank sends n/p to each of its p-1 peers at once through its one NVSwitch port:
    # alpha (GPU -> NVSwitch -> GPU) + (p-1)/p n / B, as nccl-tests' alltoall sizes it
    row = one("dgx-h100", p, n, "nccl", op="all_to_all")
    assert row["algorithm"] == "pairwise"
    assert row["time_s"] == pytest.approx(H100_HOP + (p - 1) / p * n / H100_LINK, rel=1e-9)
    assert row["busbw_GBps"] == pytest.approx(n / row["time_s"] * (p - 1) / p / 1e9)


def test_all_to_all_sends_p_minus_1_over_p_of_the_buffer_per_rank() -> None:
    from tpsim.core import metrics
    from tpsim.core.comm.group import connect, run_programs
    from tpsim.core.program import CollectiveCall, Op, Program, Programs

    n, p = 64 * MiB, 8
    comms = connect(get_topology("dgx-h100", 1), p, calib=ideal_calibration(), algo="nccl")
    call = CollectiveCall("all_to_all", n)
    op = Op("all_to_all", "collective", 0, "a2a", "comm", 0.0, 0.0, 0.0, n, "communication",
            "", (), collective=call)  # fmt: skip
    ran = run_programs(comms, Programs.same(Program((op,)), p))
    for rank in range(p):
        sent = metrics.communication(ran.records, rank=rank)["bytes_sent_per_gpu"]
        assert sent == (p - 1) * n // p


def test_tree_closed_form_on_a_chain(tmp_path: Path) -> None:
    # 4 GPUs in a ring, one host: NCCL's tree is the chain 0-1-2-3 (depth 3); both trees
    # share it, so each step moves n/k over a link: 2 (3 + k - 1) (a + n / (k B))
    topo = load_topology(ring_file(tmp_path, 4))
    group = tp_group(topo, 4)
    fab = group.fabric(ideal_calibration())
    from tpsim.core.comm.algorithms.tree import tree

    IDEAL = ideal_calibration().collectives.protocols["ideal"]

    n = 8 * MiB
    for k in (1, 4):
        sched = tree(fab, n, IDEAL, group.ring, chunks=k)
        assert predict(fab, sched) == pytest.approx(2 * (3 + k - 1) * (2e-6 + n / k / 100e9))
    t = one(topo, 4, n, "tree")["time_s"]
    best = min(2 * (3 + k - 1) * (2e-6 + n / k / 100e9) for k in range(1, 65))
    assert t == pytest.approx(best, rel=1e-6)  # the pipeline depth that is fastest; whole bytes


def test_hierarchical_closed_form() -> None:
    # 2 hosts x 8 H100: reduce-scatter in the host (7 steps of n/8 over NVLink), all-reduce
    # across the two hosts on n/8 (2 steps of n/16 over 50 GB/s NDR, 2.2 us), all-gather in
    # the host (7 steps)
    n = 64 * MiB
    t = one("dgx-h100", 16, n, "hierarchical", nodes=2)["time_s"]
    intra = 7 * (H100_HOP + n / 8 / H100_LINK)
    inter = 2 * (2.2e-6 + n / 16 / 50e9)
    assert t == pytest.approx(2 * intra + inter, rel=1e-9)


def test_ideal_matches_prediction_for_every_algorithm() -> None:
    topo = get_topology("dgx-h100", 1)
    group = tp_group(topo, 8)
    fab = group.fabric(ideal_calibration())
    for algo in ("ring", "tree", "oneshot", "twoshot", "nvls"):
        plan = make_planner(fab, group.ring, algo=algo)
        from tpsim.core.program import CollectiveCall

        sched = plan(CollectiveCall("all_reduce", 4 * MiB))
        assert one(topo, 8, 4 * MiB, algo)["time_s"] == pytest.approx(predict(fab, sched))


@pytest.mark.parametrize("op", ["all_reduce", "all_gather"])
def test_ll_ring_moves_nccls_share_of_the_link(tmp_path: Path, op: str) -> None:
    # tuning.cc (NCCL 2.21+): the LL ring's busbw is half the link's in every collective
    # (llMaxBw, 141 GB/s on Hopper, does not bind at 50 GB/s); each step pays the LL hop
    # (0.73 us measured, under the 2 us wire) once and moves n/p at that rate, after LL's
    # measured fixed cost (5.4 us; NCCL's model 6.6)
    share = 1 / 2
    from tpsim.core.comm import schedules

    PROTOCOLS = default_calibration().collectives.protocols

    topo = load_topology(ring_file(tmp_path, 4))
    group = tp_group(topo, 4)
    fab = group.fabric(default_calibration())
    n = 64 * MiB
    sched = schedules.ring(fab, op, n, PROTOCOLS["LL"], [group.ring])
    steps = 6 if op == "all_reduce" else 3
    rate = share * fab.capacities[0]
    assert predict(fab, sched) == pytest.approx(5.4e-6 + steps * (2e-6 + n / 4 / rate))


# ----------------------------------------------------------------------- contention
def test_two_flows_over_one_link_take_twice_as_long() -> None:
    def finish(n_flows: int) -> float:
        env = simpy.Environment()
        net = FlowNetwork(env, [100e9])
        done = [net.send((0,), 1e6) for _ in range(n_flows)]
        env.run(simpy.AllOf(env, done))
        return env.now

    assert finish(1) == pytest.approx(1e6 / 100e9)
    assert finish(2) == pytest.approx(2 * finish(1))


def test_max_min_fairness_gives_the_unshared_rest_to_the_other_flow() -> None:
    env = simpy.Environment()
    net = FlowNetwork(env, [100e9, 100e9, 30e9])
    a = net.send((0, 1), 1e6)  # shares link 0 with b
    b = net.send((0, 2), 1e6)  # held to 30 GB/s by link 2
    env.run(simpy.AllOf(env, [a, b]))
    # b runs at 30 the whole time; a gets 70 while b runs... b ends at 1e6/30e9 = 33.3 us,
    # a ends at 1e6/70e9 = 14.3 us then b alone is still capped at 30
    assert env.now == pytest.approx(1e6 / 30e9)


def test_pcie_switch_uplink_is_shared() -> None:
    # RTX 4090: no P2P, GPU pairs bounce through the CPU; two GPUs behind one switch share
    # its uplink, so their transfers at once take twice as long as one alone
    g = build("pcie-rtx4090")
    group = tp_group(g, 8)
    fab = group.fabric(ideal_calibration())
    p01, p10 = fab.path(0, 2), fab.path(1, 3)  # 0 and 1 share switch 0 on the way up
    shared = set(p01.links) & set(p10.links)
    assert shared


def test_rtx4090_ring_is_slower_than_its_links_alone() -> None:
    # eight GPUs over PCIe gen4 (31.5 GB/s per direction): the ring crosses the socket link
    # and switch uplinks in both directions, so busbw falls below one link
    row = one("pcie-rtx4090", 8, 256 * MiB, "ring")
    assert row["busbw_GBps"] < 31.5


# ----------------------------------------------------------------------- selection and errors
def test_auto_picks_small_and_large_algorithms() -> None:
    rows = collective_sweep("dgx-h100", 8, [8 * KiB, 1 * GiB], algo="auto")
    assert rows[0]["algorithm"] in ("oneshot", "twoshot")
    assert rows[1]["algorithm"] == "nvls"
    a100 = collective_sweep("dgx-a100", 8, [1 * GiB], algo="nccl")
    assert a100[0]["algorithm"] == "ring" and a100[0]["protocol"] == "Simple"


def test_collective_defaults_to_what_nccl_would_run(capsys: pytest.CaptureFixture[str]) -> None:
    """nccl-tests measures NCCL's own choice, never a serving engine's custom kernel."""
    rows = collective_sweep("dgx-h100", 8, [8 * KiB, 1 * MiB])
    assert {r["algorithm"] for r in rows} <= {"ring", "tree", "nvls", "multiring"}
    assert main(["collective", "--topology", "dgx-h100", "--ranks", "8", "--sizes", "8K"]) == 0
    assert "NCCL's own choice" in capsys.readouterr().out


def test_multiring_uses_the_full_mesh() -> None:
    # 8 GPUs, each with 7 links: 7 rings that share no directed link (a Hamiltonian
    # decomposition; shift rings alone reach only the 4 odd shifts), so 7x one ring
    rows = collective_sweep("mi300x", 8, [1 * GiB], algo="nccl")
    assert rows[0]["algorithm"] == "ring x7"
    single = collective_sweep("mi300x", 8, [1 * GiB], algo="ring")
    assert rows[0]["busbw_GBps"] == pytest.approx(7 * single[0]["busbw_GBps"], rel=0.01)
    group = tp_group(get_topology("mi300x", 1), 8)
    fab = group.fabric(default_calibration())
    from tpsim.core.comm.algorithms.multiring import ring_set

    rings = ring_set(fab, group.ring)
    arcs = [(r[i], r[(i + 1) % 8]) for r in rings for i in range(8)]
    assert len(set(arcs)) == len(arcs) == 56
    assert all(sorted(r) == list(range(8)) for r in rings)


def test_four_gpu_mesh_has_two_disjoint_rings() -> None:
    # a complete 4-GPU mesh has no decomposition into 3 rings (Tillson): a ring and its
    # reverse, the search's best within its budget
    rows = collective_sweep("mi300x", 4, [1 * GiB], algo="nccl")
    assert rows[0]["algorithm"] == "ring x2"


@pytest.mark.parametrize(
    ("topo", "algo", "needle"),
    [
        ("dgx-a100", "nvls", "NVSwitch"),
        ("pcie-l40s", "oneshot", "NVLink"),
        ("dgx-h100", "hierarchical", "more than one host"),
    ],
)
def test_infeasible_algorithm_is_refused(topo: str, algo: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        collective_sweep(topo, 8, [1 * MiB], algo=algo)


def test_ops_and_bus_factors() -> None:
    for op in ("all_gather", "reduce_scatter"):
        (row,) = collective_sweep("dgx-h100", 8, [64 * MiB], op=op, ideal=True, algo="ring")
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 7 / 8)
        # (p-1) steps of n/p at 450 GB/s
        assert row["time_s"] == pytest.approx(7 * (H100_HOP + 64 * MiB / 8 / H100_LINK))


# ----------------------------------------------------------------------- invariants
@settings(max_examples=20, deadline=None)
@given(
    scale=st.floats(1.0, 8.0),
    n=st.integers(1, 1 << 28),
    algo=st.sampled_from(["ring", "tree", "oneshot", "twoshot", "nvls", "auto"]),
)
def test_more_bandwidth_is_never_slower(scale: float, n: int, algo: str) -> None:
    slow = build("dgx-h100")
    fast = slow.copy()
    for _, _, d in fast.edges(data=True):
        d["bandwidth_Bps"] *= scale
    t_slow = collective_sweep(slow, 8, [n], algo=algo)[0]["time_s"]
    t_fast = collective_sweep(fast, 8, [n], algo=algo)[0]["time_s"]
    assert t_fast <= t_slow * (1 + 1e-12)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1024, 1 << 30),
    topo=st.sampled_from(["dgx-a100", "dgx-h100", "mi300x", "pcie-l40s"]),
)
def test_ring_busbw_never_above_the_bottleneck_link(n: int, topo: str) -> None:
    g = build(topo)
    group = tp_group(g, 8)
    fab = group.fabric(ideal_calibration())
    bottleneck = min(
        fab.path(a, b).bandwidth_Bps
        for a, b in zip(group.ring, group.ring[1:] + group.ring[:1], strict=True)
    )
    row = collective_sweep(g, 8, [n], algo="ring", ideal=True)[0]
    assert row["busbw_GBps"] * 1e9 <= bottleneck * (1 + 1e-9)


@pytest.mark.parametrize(
    ("algo", "per_rank"),
    [
        ("ring", lambda n, p: 2 * (p - 1) * n // p),
        ("oneshot", lambda n, p: (p - 1) * n),
        ("twoshot", lambda n, p: 2 * (p - 1) * n // p),
        ("nvls", lambda n, p: n),
    ],
)
def test_bytes_sent_per_rank_equal_the_formula(algo: str, per_rank) -> None:  # type: ignore[no-untyped-def]
    from tpsim import Options, Workload, simulate

    r = simulate(
        "llama-2-7b",
        "dgx-h100",
        8,
        Workload(16, "decode", context_len=64),
        Options(allreduce_algo=algo),
    )
    n = 16 * 4096 * 2  # one all-reduce: 16 tokens of 4096 fp16 values
    site = r.summary["communication"]["by_site"]["attn_out"]
    assert site["bytes_sent_per_gpu"] == 32 * per_rank(n, 8)


def test_chunk_sizes_cover_the_message() -> None:
    for n, p in ((10, 3), (8, 8), (1, 4)):
        parts = chunk_sizes(n, p)
        assert sum(parts) == n and max(parts) - min(parts) <= 1


# ----------------------------------------------------------------------- calibration
@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.topology)
def test_calibration_curves(curve) -> None:  # type: ignore[no-untyped-def]
    _, err = compare(curve, measured())
    # issue #14: the A100 sweep no worse than 11.5% (where #3 left it); 9.2% since the
    # -g 8 host is modelled (host-bound up to 4 MiB; between 8 and 256 MiB the measurement
    # is slower than NCCL's own model, and no constant is fitted to close that); 8.8% since
    # the ring's blocks bound it (ring_block_copy_GBps) and Simple's last receive is a hop;
    # every single-node file within 12%
    bound = {"dgx-a100": 0.09, "dgx-h100": 0.12}[curve.topology]
    assert err < bound


def test_hopper_peaks_within_5_percent() -> None:
    want_peaks = measured_peaks()
    assert want_peaks == {"nvls": 480.0, "ring": 368.5}  # the file's 480 and 367-370
    got = peaks(want_peaks)
    for algo, want in want_peaks.items():
        assert got[algo] == pytest.approx(want, rel=0.05)
