"""Tests of topologies/: builders, files, routing, ring order. Numbers derivable by hand."""

from __future__ import annotations

import itertools
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpsim.topologies import (
    DESCRIPTIONS,
    GPUS,
    TOPOLOGIES,
    Routes,
    TopologyError,
    build,
    get_gpu,
    get_topology,
    join_hosts,
    load_topology,
    ring_order,
    validate,
)
from tpsim.topologies.gpus import gpu_from_dict

DATA = Path(__file__).parents[1] / "data" / "topologies"


def kinds_on_path(g: nx.DiGraph, routes: Routes, a: int, b: int) -> list[str]:
    path = routes.path(a, b)
    nodes = [path[0][0]] + [v for _, v in path]
    return [g.nodes[n]["kind"] for n in nodes]


# --- GPU catalog ---------------------------------------------------------------------------


def test_gpu_catalog_figures():
    assert set(GPUS) == {
        "a100-sxm-80gb",
        "h100-sxm",
        "h100-pcie",
        "h100-nvl",
        "a100-pcie-80gb",
        "h200-sxm",
        "h800-sxm",
        "b200",
        "l40s",
        "rtx-4090",
        "rtx-6000-ada",
        "mi300x",
    }
    a100 = get_gpu("A100-SXM-80GB")
    assert a100.bf16_flops == 312e12 and a100.fp8_flops is None
    assert a100.hbm_efficiency == pytest.approx(1.68 / 2.0)  # midpoint of 1.61-1.75
    assert a100.matmul_efficiency == pytest.approx(271.2 / 312)
    assert GPUS["h100-sxm"].hbm_efficiency == pytest.approx(3.04 / 3.35)
    assert GPUS["h200-sxm"].hbm_efficiency == pytest.approx(4.24 / 4.8)
    assert GPUS["h100-pcie"].bf16_flops == 756e12 and GPUS["h100-pcie"].sm_count == 114
    assert GPUS["h800-sxm"].scaleup_Bps == 200e9  # H100's die, NVLink cut to 8 links
    assert GPUS["l40s"].matmul_efficiency == 0.75 and GPUS["l40s"].hbm_efficiency == 0.85
    assert GPUS["mi300x"].matmul_efficiency == pytest.approx(668.4 / 1307)
    assert all(s.kernel_overhead_s == 2e-6 for s in GPUS.values())
    assert all(s.hbm_bytes == int(s.hbm_bytes) for s in GPUS.values())


def test_unknown_gpu_lists_catalog():
    with pytest.raises(TopologyError, match=r"h100-sxm.*mi300x") as e:
        get_gpu("h100")
    assert "\n" not in str(e.value)


def test_gpu_from_dict_defaults_and_errors():
    spec = gpu_from_dict({"bf16_tflops": 100, "hbm_TBps": 1.5, "hbm_GB": 16}, "gpus.x in f.yaml")
    assert (spec.name, spec.bf16_flops, spec.hbm_Bps, spec.hbm_bytes) == ("x", 100e12, 1.5e12, 16e9)
    assert (spec.fp8_flops, spec.scaleup_Bps, spec.scaleup_kind) == (None, 0.0, "none")
    assert (spec.matmul_efficiency, spec.hbm_efficiency, spec.kernel_overhead_s) == (
        0.75,
        0.85,
        2e-6,
    )
    with pytest.raises(TopologyError, match=r"^gpus\.x\.hbm_GB in f\.yaml: missing field$"):
        gpu_from_dict({"bf16_tflops": 100, "hbm_TBps": 1.5}, "gpus.x in f.yaml")
    with pytest.raises(TopologyError, match=r"gpus\.x\.sm_count=True in f\.yaml"):
        gpu_from_dict(
            {"bf16_tflops": 1, "hbm_TBps": 1, "hbm_GB": 1, "sm_count": True}, "gpus.x in f.yaml"
        )


# --- builders ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_builders_validate_with_dense_ranks(name):
    g = build(name)
    validate(g, name)
    assert name in DESCRIPTIONS and "\n" not in DESCRIPTIONS[name]
    gpus = {n: d for n, d in g.nodes(data=True) if d["kind"] == "gpu"}
    assert len(gpus) == 8 == g.graph["gpus_per_host"] and g.graph["hosts"] == 1
    assert {n: d["rank"] for n, d in gpus.items()} == {f"gpu{i}": i for i in range(8)}
    # A3 Mega's NVSwitch could, but Google's NCCL profile sets NCCL_NVLS_ENABLE=0
    assert g.graph["nvls"] == (name in ("dgx-h100", "hgx-h200", "dgx-b200"))
    for *_, d in g.edges(data=True):
        assert d["bandwidth_Bps"] > 0 and 0 < d["latency_s"] < 5e-6


@pytest.mark.parametrize(
    ("name", "bw"),
    [("dgx-a100", 300e9), ("dgx-h100", 450e9), ("hgx-h200", 450e9), ("dgx-b200", 900e9)],
)
def test_nvswitch_routes(name, bw):
    routes = Routes(build(name))
    assert routes.num_ranks == 8
    assert routes.path(0, 5) == (("gpu0", "nvswitch"), ("nvswitch", "gpu5"))
    assert routes.bandwidth_Bps(0, 5) == bw
    assert routes.latency_s(0, 5) == pytest.approx(2 * 0.35e-6)  # two NVLink traversals
    assert routes.link_kinds(0, 5) == ("nvlink", "nvlink")
    assert routes.path(3, 3) == () and routes.bandwidth_Bps(3, 3) == float("inf")


def test_rtx4090_every_copy_bounces_through_a_cpu():
    g = build("pcie-rtx4090")
    routes = Routes(g)
    for a, b in itertools.permutations(range(8), 2):
        kinds = kinds_on_path(g, routes, a, b)
        assert "cpu" in kinds, (a, b)
        assert routes.bandwidth_Bps(a, b) == 31.5e9
    # same switch: up to the CPU's host memory and back down; PCIe 4 hops x 0.5 µs
    assert routes.path(0, 1) == (
        ("gpu0", "psw0"),
        ("psw0", "cpu0"),
        ("cpu0", "psw0"),
        ("psw0", "gpu1"),
    )
    assert routes.transport(0, 1) == "shm"
    assert routes.latency_s(0, 1) == pytest.approx(2e-6)


def test_l40s_p2p_through_the_switch_and_upi_across_sockets():
    g = build("pcie-l40s")
    routes = Routes(g)
    for a in range(0, 8, 2):  # GPUs 2k and 2k+1 share PCIe switch k
        assert routes.path(a, a + 1) == (
            (f"gpu{a}", f"psw{a // 2}"),
            (f"psw{a // 2}", f"gpu{a + 1}"),
        )
        assert routes.latency_s(a, a + 1) == pytest.approx(1e-6)
    for a, b in itertools.product(range(4), range(4, 8)):  # sockets: GPUs 0-3 and 4-7
        assert "upi" in routes.link_kinds(a, b) and "upi" in routes.link_kinds(b, a)
    assert routes.link_kinds(0, 2) == ("pcie",) * 4  # same socket, other switch
    assert routes.bandwidth_Bps(0, 7) == 31.5e9  # PCIe gen4 x16 below UPI's 67.2 GB/s


def test_mi300x_full_mesh():
    routes = Routes(build("mi300x"))
    for a, b in itertools.permutations(range(8), 2):
        assert routes.path(a, b) == ((f"gpu{a}", f"gpu{b}"),)
        assert routes.bandwidth_Bps(a, b) == 64e9 and routes.link_kinds(a, b) == ("xgmi",)


def test_two_hosts_dgx_h100():
    g = build("dgx-h100", nodes=2)
    validate(g, "dgx-h100x2")
    routes = Routes(g)
    assert routes.num_ranks == 16 and (g.graph["hosts"], g.graph["gpus_per_host"]) == (2, 8)
    assert [routes.node(r) for r in (0, 7, 8, 15)] == ["n0.gpu0", "n0.gpu7", "n1.gpu0", "n1.gpu7"]
    assert [routes.host(r) for r in (7, 8)] == [0, 1]
    assert routes.bandwidth_Bps(0, 9) == 50e9  # NDR 400 Gb/s
    assert any("ib_switch" in e for e in routes.path(0, 9))
    assert set(routes.link_kinds(0, 9)) == {"pcie", "infiniband"}
    assert routes.latency_s(0, 8) == pytest.approx((0.5 + 0.6 + 0.6 + 0.5) * 1e-6)
    assert routes.bandwidth_Bps(1, 6) == 450e9  # in-host stays on NVLink


def test_join_hosts_nic_speeds_and_limits():
    assert Routes(build("dgx-a100", 2)).bandwidth_Bps(0, 8) == 25e9  # HDR
    assert Routes(build("mi300x", 2)).bandwidth_Bps(0, 8) == 50e9  # NDR
    g = build("dgx-h100")
    assert join_hosts(g, 1) is g
    for bad in (0, 1025, True, 2.0):
        with pytest.raises(TopologyError, match="nodes="):
            join_hosts(g, bad)
    with pytest.raises(TopologyError, match="one-host"):
        join_hosts(build("dgx-h100", 2), 2)


def test_unknown_topology_name():
    with pytest.raises(TopologyError, match=r"did you mean 'dgx-h100'.*known: dgx-a100") as e:
        build("dgx-h10")
    assert "\n" not in str(e.value)
    with pytest.raises(TopologyError, match="neither a catalog name"):
        get_topology("nonesuch")


def test_1024_gpus_build_validate_ring():
    g = build("dgx-h100", 128)
    validate(g, "big")
    routes = Routes(g)
    order = ring_order(routes, range(1024))
    assert order == list(range(1024))  # all in-host pairs equal: lexicographic order wins
    assert routes.bandwidth_Bps(1023, 0) == 50e9


# --- ring order ----------------------------------------------------------------------------


def test_ring_order_prefers_fat_ring():
    g = load_topology(DATA / "fat_ring.yaml")
    routes = Routes(g)
    assert routes.path(0, 1) == (("gpu0", "gpu2"), ("gpu2", "gpu1"))  # 400 via gpu2 beats 25
    assert ring_order(routes, [3, 2, 1, 0]) == [0, 2, 1, 3]


def test_ring_order_keeps_hosts_contiguous():
    routes = Routes(build("pcie-l40s", 2))
    order = ring_order(routes, [9, 0, 12, 3, 8, 5, 15])
    assert order[0] == 0 and sorted(order) == [0, 3, 5, 8, 9, 12, 15]
    assert [routes.host(r) for r in order] == [0, 0, 0, 1, 1, 1, 1]


@settings(max_examples=30, deadline=None)
@given(st.sets(st.integers(0, 15), min_size=1))
def test_ring_order_is_a_host_contiguous_permutation(ranks):
    routes = ROUTES_2X_H100
    order = ring_order(routes, sorted(ranks, reverse=True))
    assert sorted(order) == sorted(ranks) and order[0] == min(ranks)
    hosts = [routes.host(r) for r in order]
    assert hosts == sorted(hosts)


ROUTES_2X_H100 = Routes(build("dgx-h100", 2))


def test_ring_order_bad_input():
    routes = Routes(build("dgx-h100"))
    for bad in ([], [0, 0], [8]):
        with pytest.raises(TopologyError):
            ring_order(routes, bad)


def _star(n: int) -> nx.DiGraph:
    """n H100s on one switch node, built by hand (as a user of the conventions would)."""
    g = nx.DiGraph(name=f"star{n}", nvls=False, hosts=1, gpus_per_host=n)
    g.add_node("sw", kind="nvswitch", host=0)
    for i in range(n):
        g.add_node(f"gpu{i}", kind="gpu", gpu=GPUS["h100-sxm"], rank=i, host=0)
        for a, b in ((f"gpu{i}", "sw"), ("sw", f"gpu{i}")):
            g.add_edge(a, b, bandwidth_Bps=100e9, latency_s=1e-6, link="nvlink")
    return g


def test_ring_order_greedy_beyond_eight_per_host():
    g = _star(12)
    validate(g, "star12")
    assert ring_order(Routes(g), range(11, -1, -1)) == list(range(12))


@pytest.mark.parametrize(
    ("breakage", "needle"),
    [
        (lambda g: g.nodes["gpu1"].pop("rank"), "nodes['gpu1'].rank"),
        (lambda g: g.nodes["gpu1"].update(gpu="h100-sxm"), "nodes['gpu1'].gpu='h100-sxm'"),
        (lambda g: g.edges["sw", "gpu0"].update(bandwidth_Bps=0.0), "edges['sw' -> 'gpu0']"),
        (lambda g: g.edges["sw", "gpu0"].update(link="ethernet"), "link='ethernet'"),
        (lambda g: g.graph.update(gpus_per_host=3), "graph.gpus_per_host=3"),
        (lambda g: g.remove_edge("sw", "gpu2"), "gpu0 cannot reach gpu2 in star"),
    ],
)
def test_validate_rejects_broken_graphs(breakage, needle):
    g = _star(4)
    breakage(g)
    with pytest.raises(TopologyError) as e:
        validate(g, "star")
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)
