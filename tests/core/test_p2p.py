"""P2P as a property of the topology, and NVLink bridges.

Without PCIe peer-to-peer a GPU pair's traffic goes through host memory at the CPU nearest
the receiver (NCCL's SHM transport), so on a PCIe switch every transfer climbs the switch's
one uplink to the CPU and comes back down; with P2P the switch turns it around. NCCL uses
P2P over PCIe switches only (its default level PXB): a route through a CPU root complex or
across sockets goes through host memory whatever the topology allows. NVLink bridges are
NVLink to NCCL: path class nvlink, LL128 allowed, NCCL's per-link bandwidth.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest
from tpsim.calibration import default
from tpsim.cli import main
from tpsim.core.collective_bench import collective_sweep
from tpsim.core.comm.group import connect
from tpsim.topologies import (
    Routes,
    TopologyError,
    build,
    load_topology,
    save_topology,
    validate,
)

DATA = Path(__file__).parents[1] / "data" / "topologies"
PAIRS = DATA / "pcie_switch_p2p_pairs.yaml"  # 4 GPUs on one switch; p2p false but gpu2-gpu3
BRIDGED = DATA / "h100_nvl_bridged.yaml"  # gpu0-gpu1: 3 bridges, gpu2-gpu3: 1 bridge
GiB = 2**30
PCIE4, PCIE5 = 31.5e9, 63e9  # x16 per direction (links.yaml)
BRIDGE = 100e9  # one NVLink bridge per direction: 4 links x 25 GB/s (links.yaml)


def busbw(topology: nx.DiGraph | str, ranks: int, *, ideal: bool, nbytes: int = GiB) -> float:
    """Bus bandwidth (B/s) of an NCCL all-reduce of ``nbytes``."""
    row = collective_sweep(topology, ranks, [nbytes], algo="nccl", ideal=ideal)[0]
    return row["busbw_GBps"] * 1e9


def without_p2p_pairs(g: nx.DiGraph, p2p: bool) -> nx.DiGraph:
    h = g.copy()
    h.graph.update(p2p=p2p, p2p_pairs={})
    return h


# --- the routing consequence ---------------------------------------------------------------


def test_without_p2p_every_copy_turns_at_the_cpu():
    routes = Routes(load_topology(PAIRS))
    assert routes.path(0, 1) == (("gpu0", "sw"), ("sw", "cpu"), ("cpu", "sw"), ("sw", "gpu1"))
    assert routes.transport(0, 1) == "shm" and routes.latency_s(0, 1) == pytest.approx(2e-6)


def test_per_pair_exception_is_honoured_both_ways(tmp_path):
    routes = Routes(load_topology(PAIRS))  # p2p: false, except gpu2-gpu3
    expect = {(2, 3): "p2p", (3, 2): "p2p"}
    for a in range(4):
        for b in range(4):
            if a != b:
                assert routes.transport(a, b) == expect.get((a, b), "shm"), (a, b)
    assert routes.path(2, 3) == (("gpu2", "sw"), ("sw", "gpu3"))
    assert routes.path(3, 2) == (("gpu3", "sw"), ("sw", "gpu2"))
    # the opposite default: P2P everywhere except one pair
    text = PAIRS.read_text().replace("p2p: false", "p2p: true")
    text = text.replace("{gpus: [gpu2, gpu3], p2p: true}", "{gpus: [gpu1, gpu0], p2p: false}")
    path = tmp_path / "flipped.yaml"
    path.write_text(text)
    routes = Routes(load_topology(path))
    assert routes.transport(0, 1) == routes.transport(1, 0) == "shm"
    assert routes.transport(0, 2) == routes.transport(2, 3) == routes.transport(3, 1) == "p2p"
    assert "cpu" not in {v for _, v in routes.path(0, 2)}


def test_nccl_p2p_level_through_a_cpu_is_shm_even_where_p2p_is_allowed():
    routes = Routes(build("pcie-l40s"))  # P2P allowed; 2 GPUs per switch, 2 switches per socket
    assert routes.transport(0, 1) == "p2p"  # one switch: PIX
    assert routes.transport(0, 2) == "shm"  # through the root complex: PHB > PXB
    assert routes.transport(0, 4) == "shm"  # across UPI: SYS
    # host memory of the receiver's socket: up to cpu0, over UPI to cpu1, down to gpu4
    assert [v for _, v in routes.path(0, 4)] == ["psw0", "cpu0", "cpu1", "psw2", "gpu4"]


def test_multi_host_join_keeps_p2p_and_its_exceptions():
    g = build("pcie-rtx4090", nodes=2)
    validate(g, "pcie-rtx4090x2")
    assert g.graph["p2p"] is False
    routes = Routes(g)
    assert routes.transport(0, 1) == "shm" and routes.transport(0, 8) == "net"
    from tpsim.topologies import join_hosts

    joined = join_hosts(load_topology(PAIRS), 2)
    assert joined.graph["p2p_pairs"] == {("n0.gpu2", "n0.gpu3"): True, ("n1.gpu2", "n1.gpu3"): True}
    assert Routes(joined).transport(6, 7) == "p2p" and Routes(joined).transport(4, 5) == "shm"


# --- the time a collective takes -----------------------------------------------------------


@pytest.mark.parametrize("ranks", [2, 4])
def test_one_switch_without_p2p_shares_the_uplink(ranks):
    """Ideal: without P2P the ring's ``ranks`` transfers all climb the switch's one uplink
    (each gets 1/ranks of it); with P2P each uses its own GPU link whole."""
    g = load_topology(PAIRS)
    shm = busbw(without_p2p_pairs(g, False), ranks, ideal=True)
    p2p = busbw(without_p2p_pairs(g, True), ranks, ideal=True)
    assert shm == pytest.approx(PCIE4 / ranks, rel=1e-3)
    assert p2p == pytest.approx(PCIE4, rel=1e-3)


@pytest.mark.parametrize("ranks", [2, 8])
def test_p2p_doubles_busbw_on_the_catalog_box(ranks):
    """Two GPUs per switch: without P2P the uplink carries both GPUs' transfers, with P2P at
    most the one leaving the switch, so busbw doubles: exactly in the ideal model, and
    within the fixed latencies in the calibrated one for a pair on one socket. Eight ranks
    span both sockets, and calibrated, the ring's crossing between them bounds it either way:
    NCCL's 10 GB/s for GPU traffic over the socket interconnect (links.yaml)."""
    for ideal in (True, False):
        shm = busbw("pcie-rtx4090", ranks, ideal=ideal)
        p2p = busbw("pcie-rtx4090-p2p", ranks, ideal=ideal)
        if ideal:
            assert p2p / shm == pytest.approx(2.0, rel=1e-3)
        elif ranks == 2:
            assert 1.9 < p2p / shm < 2.05
        else:
            assert shm == pytest.approx(p2p, rel=1e-3)
            assert 9.5e9 < p2p <= 10e9
    assert busbw("pcie-rtx4090-p2p", ranks, ideal=True) == pytest.approx(PCIE4, rel=1e-3)


def test_a_pair_across_sockets_pays_for_the_socket_interconnect() -> None:
    """TP 2 on pcie-l40s: a pair on one PCIe switch talks P2P at PCIe speed; a pair on two
    sockets is staged through host memory across UPI, at NCCL's 10 GB/s: a 2K prefill's
    all-reduces take longer (they were the same 44.6 ms before)."""
    from tpsim import Layout, Workload, simulate

    wl = Workload(1, "prefill", prompt_len=2048)

    def comm_s(placement: tuple[str, ...]) -> float:
        r = simulate("llama-3.1-8b", "pcie-l40s", Layout(2, placement=placement), wl)
        return float(r.summary["communication"]["time_s"])

    same_switch, across = comm_s(("gpu0", "gpu1")), comm_s(("gpu0", "gpu4"))
    assert across > 2 * same_switch


def test_rtx6000ada_workstation_box_uses_p2p():
    routes = Routes(build("pcie-rtx6000ada"))
    assert routes.transport(0, 1) == "p2p" and routes.bandwidth_Bps(0, 1) == PCIE4


# --- NVLink bridges ------------------------------------------------------------------------


def test_bridged_pairs_use_nvlink_and_others_pcie():
    g = build("pcie-h100-nvl")
    routes = Routes(g)
    for a in range(0, 8, 2):
        assert routes.link_kinds(a, a + 1) == ("nvlink_bridge",)
        assert routes.bandwidth_Bps(a, a + 1) == 3 * BRIDGE
        assert routes.transport(a, a + 1) == "p2p"
    assert routes.link_kinds(1, 2) == ("pcie",) * 4 and routes.transport(1, 2) == "shm"
    fab = connect(g, 8).fabric
    assert fab.path(0, 1).link_class == "nvlink" and fab.path(1, 2).link_class == "pci"
    # NCCL's bandwidth: 12 links x 20.6 GB/s (SM90_NVLINK_BW)
    assert fab.path(0, 1).bandwidth_Bps == pytest.approx(12 * 20.6e9)
    a100 = connect(build("pcie-a100-bridged"), 2).fabric
    assert a100.path(0, 1).bandwidth_Bps == pytest.approx(12 * 20e9)  # SM80_NVLINK_BW


def test_ll128_only_when_the_ring_stays_on_nvlink():
    names = {}
    for topo, ranks in [("pcie-h100-nvl", 2), ("pcie-h100-nvl", 8), ("pcie-rtx4090-p2p", 2)]:
        fab = connect(build(topo), ranks).fabric
        order = list(range(ranks))
        names[topo, ranks] = [
            p.name for p in fab.tuning.protocols_over(fab.nvlink_within_hosts(order))
        ]
    assert names["pcie-h100-nvl", 2] == ["LL", "LL128", "Simple"]
    assert names["pcie-h100-nvl", 8] == names["pcie-rtx4090-p2p", 2] == ["LL", "Simple"]


def test_bridge_pair_against_pcie_pair_two_rank_all_reduce():
    """Ideal: a 2-rank ring's busbw is the path's bandwidth: 3 bridges (300 GB/s) against
    PCIe gen5 through the switch (63 GB/s); calibrated: 247.2 against 0.8 x 63."""
    bridged = build("pcie-h100-nvl")
    pcie = bridged.copy()
    pcie.remove_edges_from(
        [(a, b) for a, b, k in bridged.edges(data="link") if k == "nvlink_bridge"]
    )
    assert busbw(bridged, 2, ideal=True) == pytest.approx(3 * BRIDGE, rel=1e-3)
    assert busbw(pcie, 2, ideal=True) == pytest.approx(PCIE5, rel=1e-3)
    eff = default().links
    assert busbw(bridged, 2, ideal=False) == pytest.approx(
        3 * BRIDGE * eff.efficiency_of("nvlink_bridge", "nvlink4"), rel=0.01
    )
    assert busbw(pcie, 2, ideal=False) == pytest.approx(PCIE5 * 0.8, rel=0.01)


def test_bridges_in_a_topology_file():
    g = load_topology(BRIDGED)
    assert g.edges["gpu0", "gpu1"] == {
        "bandwidth_Bps": 3 * BRIDGE,
        "latency_s": 0.35e-6,  # default: one NVLink traversal (links.yaml nvlink_hop)
        "link": "nvlink_bridge",
        "bridges": 3,
    }
    assert g.edges["gpu1", "gpu0"] == g.edges["gpu0", "gpu1"]  # a bridge is duplex
    assert g.edges["gpu3", "gpu2"]["bandwidth_Bps"] == BRIDGE
    assert g.edges["gpu3", "gpu2"]["latency_s"] == 0.5e-6
    routes = Routes(g)
    assert routes.link_kinds(2, 3) == ("nvlink_bridge",)
    assert routes.link_kinds(1, 2) == ("pcie", "pcie")  # P2P through the switch


@pytest.mark.parametrize("source", ["pcie-h100-nvl", "pcie-rtx4090-p2p", PAIRS, BRIDGED])
def test_save_load_round_trip(tmp_path, source):
    g = build(source) if isinstance(source, str) else load_topology(source)
    for suffix in (".yaml", ".json"):
        path = tmp_path / f"saved{suffix}"
        save_topology(g, path)
        h = load_topology(path)
        assert h.graph == g.graph
        assert list(h.nodes(data=True)) == list(g.nodes(data=True))
        assert sorted(h.edges(data=True)) == sorted(g.edges(data=True))


def test_validate_refuses_a_bad_p2p_attribute():
    g = build("pcie-l40s")
    g.graph["p2p"] = "yes"
    with pytest.raises(TopologyError, match=r"^graph\.p2p='yes' in t: must be a bool$"):
        validate(g, "t")


# --- malformed fields: exit 2, one line naming the field and the value ----------------------

BRIDGE_LINK = "{src: gpu0, dst: gpu1, link: nvlink_bridge, bridges: 3}"
P2P_PAIR = "{gpus: [gpu2, gpu3], p2p: true}"
BAD = [
    ("p2p-string", PAIRS, "p2p: false", "p2p: 'yes'", "p2p='yes' in"),
    ("p2p-int", PAIRS, "p2p: false", "p2p: 1", "p2p=1 in"),
    ("pairs-mapping", PAIRS, f"\n  - {P2P_PAIR}", " {gpu2: gpu3}", "p2p_pairs={'gpu2': 'gpu3'}"),
    ("pair-unknown", PAIRS, "[gpu2, gpu3]", "[gpu2, gpu9]", "p2p_pairs[0].gpus=['gpu2', 'gpu9']"),
    ("pair-switch", PAIRS, "[gpu2, gpu3]", "[gpu2, sw]", "p2p_pairs[0].gpus=['gpu2', 'sw']"),
    ("pair-twice", PAIRS, "[gpu2, gpu3]", "[gpu2, gpu2]", "p2p_pairs[0].gpus=['gpu2', 'gpu2']"),
    ("pair-three", PAIRS, "[gpu2, gpu3]", "[gpu1, gpu2, gpu3]", "p2p_pairs[0].gpus=['gpu1'"),
    ("pair-value", PAIRS, "p2p: true}", "p2p: maybe}", "p2p_pairs[0].p2p='maybe'"),
    ("pair-field", PAIRS, "p2p: true}", "p2p: true, level: PIX}", "p2p_pairs[0].level"),
    ("pair-missing", PAIRS, ", p2p: true}", "}", "p2p_pairs[0].p2p in"),
    ("pair-dup", PAIRS, P2P_PAIR, P2P_PAIR + "\n  - {gpus: [gpu3, gpu2], p2p: false}", "[1].gpus"),
    ("no-cpu", PAIRS, "  - {id: cpu, kind: cpu}\n", "  - {id: cpu, kind: switch}\n", "p2p=False"),
    ("bridges-4", BRIDGED, "bridges: 3", "bridges: 4", "links[0].bridges=4"),
    ("bridges-0", BRIDGED, "bridges: 3", "bridges: 0", "links[0].bridges=0"),
    ("bridges-str", BRIDGED, "bridges: 3", "bridges: three", "links[0].bridges='three'"),
    ("bridges-bool", BRIDGED, "bridges: 3", "bridges: true", "links[0].bridges=True"),
    ("bridges-float", BRIDGED, "bridges: 3", "bridges: 1.5", "links[0].bridges=1.5"),
    ("bridges-and-bw", BRIDGED, "bridges: 3", "bridges: 3, bandwidth_GBps: 9", "bandwidth_GBps=9"),
    ("bridge-count", BRIDGED, ", bridges: 3", "", "links[0].bridges in"),
    ("bridges-on-pcie", BRIDGED, "link: pcie}", "link: pcie, bridges: 1}", "links[2].bridges in"),
    ("bridge-no-connector", BRIDGED, "{g: h100-nvl}", "{g: rtx-4090}", "links[0].link='nvlink_br"),
    ("bridge-to-switch", BRIDGED, "dst: gpu1, link: nvl", "dst: sw, link: nvl", "links[0].link"),
    ("bridge-kind", BRIDGED, "nvlink_bridge, bridges: 3", "nvlink-bridge", "'nvlink-bridge'"),
    ("too-many", BRIDGED, "dst: gpu3, link", "dst: gpu0, link", "links[1].bridges=1"),
    ("spec", BRIDGED, "{g: h100-nvl}", "{g: {bf16_tflops: 1, hbm_TBps: 1, hbm_GB: 1, "
     "nvlink_bridge: nvlink9}}", "gpus.g.nvlink_bridge='nvlink9'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("source", "old", "new", "needle"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_malformed_p2p_and_bridge_fields_exit_2_with_one_line(
    tmp_path, monkeypatch, capsys, source, old, new, needle
):
    text = source.read_text()
    assert old in text
    monkeypatch.chdir(tmp_path)
    Path("t.yaml").write_text(text.replace(old, new, 1))
    rc = main(["collective", "--topology", "t.yaml", "--ranks", "2", "--sizes", "1M"])
    out, err = capsys.readouterr()
    assert rc == 2 and not out
    assert err.count("\n") == 1 and err.startswith("tpsim: error: "), err
    assert needle in err and "t.yaml" in err, err
