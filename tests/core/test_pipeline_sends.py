"""A pipeline's activations cross stages as NCCL's send/receive (``group.p2p_router``): the
P2P kernel's fixed latency and protocol (LL up to the P2P LL threshold, else Simple with its
chunk fill), on the channels the bytes get; each pair priced on its own two GPUs' fabric
(``group.pair_router``), so a pair inside a host keeps NCCL's one-host channels though the
layout spans hosts. The ideal calibration: the path's wire latency and its links' rate."""

from __future__ import annotations

import pytest
from tpsim import calibration
from tpsim.core.comm.fabric import build_fabric
from tpsim.core.comm.group import p2p_router, p2p_seconds, pair_router
from tpsim.core.comm.layout import place
from tpsim.topologies.io import get_topology
from tpsim.topologies.routing import Routes

KiB, MiB = 2**10, 2**20


def _layout(nodes: int, tp: int, pp: int, ideal: bool = False):
    graph = get_topology("dgx-h100", nodes)
    routes = Routes(graph)
    ranks = place(routes, tp, pp, 1, 8)
    gpu = graph.nodes[routes.node(ranks[0])]["gpu"]
    calib = calibration.ideal() if ideal else calibration.default()
    return routes, ranks, gpu, calib


def test_a_send_pays_nccls_p2p_kernel_and_protocol() -> None:
    routes, ranks, gpu, calib = _layout(1, 4, 2)
    fab = build_fabric(routes, ranks, gpu, calib)
    route = p2p_router(fab, 2)
    simple, ll = fab.tuning.protocols["Simple"], fab.tuning.protocols["LL"]
    small = route(0, 4, 4 * KiB)  # under the P2P LL threshold
    assert small.latency_s >= ll.base("p2p") + ll.hop("p2p", "nvlink")
    big = route(0, 4, 4 * MiB)
    assert big.latency_s > simple.base("p2p")
    assert big.cap_Bps < fab.path(0, 4).bandwidth_Bps  # its channels, not the port
    assert (small.notify, small.peer) == ((4,), 4)


def test_the_ideal_calibration_sends_at_the_links() -> None:
    routes, ranks, gpu, calib = _layout(1, 4, 2, ideal=True)
    fab = build_fabric(routes, ranks, gpu, calib)
    snd = p2p_router(fab)(0, 4, MiB)
    path = fab.path(0, 4)
    assert snd.latency_s == path.latency_s and snd.cap_Bps == float("inf")


def test_a_pair_inside_a_host_keeps_one_host_channels_in_a_two_host_layout() -> None:
    """TP 4 x PP 2 on one host against TP 4 x PP 4 over two: stage 0 to 1 inside the first
    host costs the same in both; stage 1 to 2 crosses the network and costs more."""
    one = pair_router(*_layout(1, 4, 2), 2)
    routes, ranks, gpu, calib = _layout(2, 4, 4)
    two = pair_router(routes, ranks, gpu, calib, 2)
    assert routes.host(ranks[0]) == routes.host(ranks[4]) != routes.host(ranks[8])
    inside, alone = two(0, 4, MiB), one(0, 4, MiB)
    assert (inside.latency_s, inside.cap_Bps, inside.net) == (alone.latency_s, alone.cap_Bps, False)
    across = two(4, 8, MiB)
    assert (across.notify, across.peer) == ((8,), 8)
    bw = build_fabric(routes, ranks, gpu, calib).path(4, 8).bandwidth_Bps
    assert p2p_seconds(two, 4, 8, MiB, bw) > p2p_seconds(two, 0, 4, MiB, bw)


def test_a_decode_boundary_costs_microseconds_not_a_wire_latency() -> None:
    """Llama-70B decode at batch 16 over TP 4 x PP 2: 2 x 16 x 8192 x 2 B / 4 = 128 KiB a
    rank, a Simple send: NCCL's P2P base (8.4 us) and the chunk fill, about 15 us, where the
    bare NVLink path took 1 us."""
    routes, ranks, gpu, calib = _layout(1, 4, 2)
    route = pair_router(routes, ranks, gpu, calib, 2)
    bw = build_fabric(routes, ranks, gpu, calib).path(0, 4).bandwidth_Bps
    assert p2p_seconds(route, 0, 4, 128 * KiB, bw) == pytest.approx(15.2e-6, rel=0.1)
