"""Catalog topologies: the one-host builders, and :func:`build` of a catalog name joined
over hosts (:mod:`.join`). The graph's conventions and their check are :mod:`.graph`'s, the
raw link bandwidths :mod:`.link_bandwidths`'s.
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx
from tpsim.calibration.hardware import link_figures
from tpsim.topologies.errors import TopologyError, did_you_mean, show
from tpsim.topologies.gpus import GPUSpec, get_gpu
from tpsim.topologies.graph import LINK_KINDS, NODE_KINDS, TopologyGraph, duplex_link, validate
from tpsim.topologies.join import MAX_NODES, join_hosts
from tpsim.topologies.link_bandwidths import (
    bridge_bandwidth_Bps,
    nic_bandwidth_Bps,
    pcie_bandwidth_Bps,
)
from tpsim.topologies.network import Network, network_named

#: The names this module defines, and those of :mod:`.graph`, :mod:`.join` and
#: :mod:`.link_bandwidths` it has always been imported for.
__all__ = [
    "DESCRIPTIONS",
    "LINK_KINDS",
    "MAX_NODES",
    "NODE_KINDS",
    "TOPOLOGIES",
    "TopologyGraph",
    "bridge_bandwidth_Bps",
    "build",
    "join_hosts",
    "nic_bandwidth_Bps",
    "pcie_bandwidth_Bps",
    "two_gpus",
    "validate",
]


def _graph(name: str, nvls: bool, gpus: int, p2p: bool = True) -> nx.DiGraph:
    return nx.DiGraph(name=name, nvls=nvls, hosts=1, gpus_per_host=gpus, p2p=p2p, p2p_pairs={})


def _add_gpus(g: nx.DiGraph, spec: GPUSpec, n: int) -> list[str]:
    ids = [f"gpu{i}" for i in range(n)]
    for i, node in enumerate(ids):
        g.add_node(node, kind="gpu", gpu=spec, rank=i, host=0)
    return ids


def _nvswitch_box(name: str, gpu: str, nvls: bool) -> nx.DiGraph:
    """8 GPUs on one logical NVSwitch node (the real fabric is 4-6 switch chips that
    together give every GPU its full NVLink bandwidth to every other)."""
    g = _graph(name, nvls, 8)
    g.add_node("nvswitch", kind="nvswitch", host=0)
    spec = get_gpu(gpu)
    for node in _add_gpus(g, spec, 8):
        duplex_link(g, node, "nvswitch", spec.scaleup_Bps, link_figures().nvlink_hop_s, "nvlink")
    return g


def dgx_a100() -> nx.DiGraph:
    return _nvswitch_box("dgx-a100", "a100-sxm-80gb", nvls=False)


def dgx_h100() -> nx.DiGraph:
    return _nvswitch_box("dgx-h100", "h100-sxm", nvls=True)


def hgx_h200() -> nx.DiGraph:
    return _nvswitch_box("hgx-h200", "h200-sxm", nvls=True)


def hgx_h800() -> nx.DiGraph:
    return _nvswitch_box("hgx-h800", "h800-sxm", nvls=False)


def dgx_b200() -> nx.DiGraph:
    return _nvswitch_box("dgx-b200", "b200", nvls=True)


def a3_mega() -> nx.DiGraph:
    """GCP A3 Mega: an 8x H100 NVSwitch host whose hosts join over GPUDirect-TCPXO. NVLS is
    off: Google's NCCL profile for these VMs (nccl-env-profile.sh, sourced by every TCPXO
    workload) sets NCCL_NVLS_ENABLE=0, beside NCCL_PROTO (the network's protocols)."""
    g = _nvswitch_box("a3-mega", "h100-sxm", nvls=False)
    g.graph["network"] = network_named("gcp-tcpxo")
    return g


def _pcie_box(name: str, gpu: str, p2p: bool, bridges: int = 0) -> nx.DiGraph:
    """2 sockets joined by UPI; each socket has 2 PCIe switches with 2 GPUs each.

    ``p2p``: whether the driver lets GPUs write to each other over PCIe. Without it every
    GPU-to-GPU transfer goes through host memory (the routes turn at a CPU, never inside a
    switch: tpsim.topologies.routing). ``bridges``: NVLink bridges joining the two GPUs of
    each switch (0: none).
    """
    spec = get_gpu(gpu)
    bw = pcie_bandwidth_Bps(spec.pcie_gen)
    links = link_figures()
    g = _graph(name, False, 8, p2p=p2p)
    gpus = _add_gpus(g, spec, 8)
    for cpu in ("cpu0", "cpu1"):
        g.add_node(cpu, kind="cpu", host=0)
    duplex_link(g, "cpu0", "cpu1", links.upi_Bps, links.upi_hop_s, "upi")
    for i in range(4):
        cpu = f"cpu{i // 2}"
        members = gpus[2 * i : 2 * i + 2]
        sw = f"psw{i}"
        g.add_node(sw, kind="pcie_switch", host=0)
        duplex_link(g, sw, cpu, bw, links.pcie_hop_s, "pcie")
        for node in members:
            duplex_link(g, node, sw, bw, links.pcie_hop_s, "pcie")
        if bridges:
            a, b = members
            duplex_link(
                g, a, b, bridge_bandwidth_Bps(spec, bridges), links.nvlink_hop_s, "nvlink_bridge"
            )
            g.edges[a, b]["bridges"] = g.edges[b, a]["bridges"] = bridges
    return g


def pcie_l40s() -> nx.DiGraph:
    return _pcie_box("pcie-l40s", "l40s", p2p=True)


def pcie_rtx4090() -> nx.DiGraph:
    return _pcie_box("pcie-rtx4090", "rtx-4090", p2p=False)


def pcie_rtx4090_p2p() -> nx.DiGraph:
    return _pcie_box("pcie-rtx4090-p2p", "rtx-4090", p2p=True)


def pcie_rtx6000ada() -> nx.DiGraph:
    return _pcie_box("pcie-rtx6000ada", "rtx-6000-ada", p2p=True)


def pcie_h100_nvl() -> nx.DiGraph:
    return _pcie_box("pcie-h100-nvl", "h100-nvl", p2p=True, bridges=3)


def pcie_a100_bridged() -> nx.DiGraph:
    return _pcie_box("pcie-a100-bridged", "a100-pcie-80gb", p2p=True, bridges=3)


def mi300x() -> nx.DiGraph:
    g = _graph("mi300x", False, 8)
    gpus = _add_gpus(g, get_gpu("mi300x"), 8)
    links = link_figures()
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            duplex_link(g, a, b, links.xgmi_peer_Bps, links.xgmi_hop_s, "xgmi")
    return g


TOPOLOGIES: dict[str, Callable[[], nx.DiGraph]] = {
    "dgx-a100": dgx_a100,
    "dgx-h100": dgx_h100,
    "hgx-h200": hgx_h200,
    "hgx-h800": hgx_h800,
    "dgx-b200": dgx_b200,
    "a3-mega": a3_mega,
    "pcie-l40s": pcie_l40s,
    "pcie-rtx4090": pcie_rtx4090,
    "mi300x": mi300x,
    "pcie-rtx4090-p2p": pcie_rtx4090_p2p,
    "pcie-rtx6000ada": pcie_rtx6000ada,
    "pcie-h100-nvl": pcie_h100_nvl,
    "pcie-a100-bridged": pcie_a100_bridged,
}

DESCRIPTIONS: dict[str, str] = {
    "dgx-a100": "8x A100 SXM 80GB on NVSwitch, 300 GB/s per direction per GPU",
    "dgx-h100": "8x H100 SXM on NVSwitch (NVLS), 450 GB/s per direction per GPU",
    "hgx-h200": "8x H200 SXM on NVSwitch (NVLS), 450 GB/s per direction per GPU",
    "hgx-h800": "8x H800 SXM on NVSwitch, 200 GB/s per direction per GPU (DeepEP's machines)",
    "dgx-b200": "8x B200 on NVSwitch (NVLS), 900 GB/s per direction per GPU",
    "a3-mega": "GCP A3 Mega: 8x H100 SXM on NVSwitch; hosts join over TCPXO, 8x 200 Gb/s NICs",
    "pcie-l40s": "8x L40S, PCIe gen4 switches on 2 sockets joined by UPI, P2P allowed",
    "pcie-rtx4090": "8x RTX 4090, PCIe gen4 on 2 sockets, no P2P (every copy via the CPU)",
    "mi300x": "8x MI300X, xGMI full mesh, 64 GB/s per direction per peer link",
    "pcie-rtx4090-p2p": "8x RTX 4090 as pcie-rtx4090, P2P enabled (patched driver)",
    "pcie-rtx6000ada": "8x RTX 6000 Ada, PCIe gen4 switches on 2 sockets, P2P allowed",
    "pcie-h100-nvl": "8x H100 NVL, PCIe gen5 switches on 2 sockets, pairs with 3 NVLink bridges",
    "pcie-a100-bridged": "8x A100 80GB PCIe, PCIe gen4 switches, pairs with 3 NVLink bridges",
}


def build(name: str, nodes: int = 1, network: Network | None = None) -> nx.DiGraph:
    """A catalog topology (name case-insensitive), joined over `nodes` hosts (over `network`
    where given, else the catalog join's)."""
    key = name.lower() if isinstance(name, str) else name
    if key not in TOPOLOGIES:
        hint = did_you_mean(key, list(TOPOLOGIES))
        raise TopologyError(
            f"topology={show(name)}: unknown topology{hint}; known: {', '.join(TOPOLOGIES)}"
        )
    return join_hosts(TOPOLOGIES[key](), nodes, network)


def two_gpus(bandwidth_Bps: float) -> nx.DiGraph:
    """Two H100s joined by one duplex link of ``bandwidth_Bps`` per direction, no latency
    (the napkin all-reduce of the design's worked examples)."""
    g = nx.DiGraph(name="two-gpus", nvls=False, hosts=1, gpus_per_host=2)
    for rank in (0, 1):
        g.add_node(f"gpu{rank}", kind="gpu", gpu=get_gpu("h100-sxm"), rank=rank, host=0)
    for a, b in (("gpu0", "gpu1"), ("gpu1", "gpu0")):
        g.add_edge(a, b, bandwidth_Bps=bandwidth_Bps, latency_s=0.0, link="nvlink")
    validate(g, "two-gpus")
    return g
