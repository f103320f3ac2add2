"""Catalog topologies: one-host builders and the multi-host join.

Graph conventions (every builder and the file loader produce exactly this), nx.DiGraph:
  graph attrs: name, nvls (in-switch reduction), hosts, gpus_per_host; optional p2p
               (PCIe peer-to-peer between GPUs allowed; absent: True) and p2p_pairs
               ({(gpu a, gpu b) sorted: bool}, exceptions to p2p for single pairs)
  node attrs:  kind in NODE_KINDS, host; gpu nodes also gpu (GPUSpec) and rank (host-major)
  edge attrs:  bandwidth_Bps (per direction), latency_s, link in LINK_KINDS; an
               nvlink_bridge edge may carry bridges (how many bridges it stands for)
Edges carry raw hardware figures; the simulator applies achievable-fraction efficiencies.
Without P2P a pair's traffic goes through host memory (tpsim.topologies.routing).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import networkx as nx
from tpsim.calibration.hardware import LinkFigures, link_figures
from tpsim.topologies.errors import TopologyError, did_you_mean, show
from tpsim.topologies.gpus import GPUSpec, get_gpu
from tpsim.topologies.network import Network, network_named

__all__ = [
    "DESCRIPTIONS",
    "LINK_KINDS",
    "NODE_KINDS",
    "TOPOLOGIES",
    "bridge_bandwidth_Bps",
    "build",
    "join_hosts",
    "nic_bandwidth_Bps",
    "pcie_bandwidth_Bps",
    "two_gpus",
    "validate",
]

#: A topology as every layer passes it around: a directed graph of GPUs, switches and hosts
#: whose edges are links (the conventions of :func:`validate`). Code outside the topologies
#: and the comm layer names the type through this alias and never imports networkx itself.
TopologyGraph = nx.DiGraph

NODE_KINDS = ("gpu", "nvswitch", "switch", "pcie_switch", "cpu", "nic")
LINK_KINDS = ("nvlink", "xgmi", "pcie", "upi", "infiniband", "nvlink_bridge")
MAX_NODES = 1024
#: Nodes plus links of a multi-host join (1024 DGX H100 hosts make about 67,000).
MAX_JOINED_ITEMS = 1_000_000


# Raw link bandwidths and latencies: calibration data (links.yaml), each with its source.
def _links() -> LinkFigures:
    return link_figures()


def pcie_bandwidth_Bps(gen: int) -> float:
    """Raw x16 PCIe bandwidth per direction of a PCIe generation."""
    pcie = _links().pcie_x16_Bps
    if gen not in pcie:
        raise TopologyError(f"pcie_gen={show(gen)}: must be one of {sorted(pcie)}")
    return pcie[gen]


def nic_bandwidth_Bps(spec: GPUSpec) -> float:
    """NIC paired with a GPU: NDR for Hopper/Blackwell/MI300X class, HDR otherwise."""
    links = _links()
    return links.infiniband_Bps[links.nic[spec.scaleup_kind]]


def bridge_bandwidth_Bps(spec: GPUSpec, bridges: int) -> float:
    """Raw bandwidth per direction of ``bridges`` NVLink bridges between two ``spec`` cards."""
    links = _links()
    if spec.nvlink_bridge not in links.nvlink_bridge_Bps:
        raise TopologyError(f"gpu={show(spec.name)}: has no NVLink bridge connector")
    top = links.nvlink_bridges_per_gpu
    if not isinstance(bridges, int) or isinstance(bridges, bool) or not 1 <= bridges <= top:
        raise TopologyError(f"bridges={show(bridges)}: must be an integer in 1..{top}")
    return bridges * links.nvlink_bridge_Bps[spec.nvlink_bridge]


def _graph(name: str, nvls: bool, gpus: int, p2p: bool = True) -> nx.DiGraph:
    return nx.DiGraph(name=name, nvls=nvls, hosts=1, gpus_per_host=gpus, p2p=p2p, p2p_pairs={})


def _link(g: nx.DiGraph, a: str, b: str, bw: float, lat: float, link: str) -> None:
    """Both directions of a full-duplex link."""
    g.add_edge(a, b, bandwidth_Bps=bw, latency_s=lat, link=link)
    g.add_edge(b, a, bandwidth_Bps=bw, latency_s=lat, link=link)


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
        _link(g, node, "nvswitch", spec.scaleup_Bps, _links().nvlink_hop_s, "nvlink")
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
    links = _links()
    g = _graph(name, False, 8, p2p=p2p)
    gpus = _add_gpus(g, spec, 8)
    for cpu in ("cpu0", "cpu1"):
        g.add_node(cpu, kind="cpu", host=0)
    _link(g, "cpu0", "cpu1", links.upi_Bps, links.upi_hop_s, "upi")
    for i in range(4):
        cpu = f"cpu{i // 2}"
        members = gpus[2 * i : 2 * i + 2]
        sw = f"psw{i}"
        g.add_node(sw, kind="pcie_switch", host=0)
        _link(g, sw, cpu, bw, links.pcie_hop_s, "pcie")
        for node in members:
            _link(g, node, sw, bw, links.pcie_hop_s, "pcie")
        if bridges:
            a, b = members
            _link(g, a, b, bridge_bandwidth_Bps(spec, bridges), links.nvlink_hop_s, "nvlink_bridge")
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
    links = _links()
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            _link(g, a, b, links.xgmi_peer_Bps, links.xgmi_hop_s, "xgmi")
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


def join_hosts(host: nx.DiGraph, nodes: int, network: Network | None = None) -> nx.DiGraph:
    """`nodes` copies of a one-host graph, their NICs all on one "ib_switch".

    The network is `network` over the host's own (graph attribute ``network``, from its
    file) over the catalog join's: one NIC per GPU of the generation paired with its GPU
    (``links.yaml`` ``nic``), InfiniBand's hop latency on each side. With K NICs per host
    GPU i of g uses NIC ``i * K // g`` (its PCIe link to the NIC is its own); with more NICs
    than GPUs each GPU's K/g NICs are one link of K/g times the bandwidth.
    Node ids get the prefix "n{h}."; ranks are host-major. nodes=1 returns `host` itself.
    """
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= MAX_NODES:
        raise TopologyError(f"nodes={show(nodes)}: must be an integer in 1..{MAX_NODES}")
    if nodes == 1:
        return host
    if host.graph.get("hosts", 1) != 1:
        raise TopologyError(
            f"hosts={show(host.graph.get('hosts'))} in {host.graph.get('name')!r}: "
            "only a one-host topology can be replicated over nodes"
        )
    per_host = sum(1 for _, d in host.nodes(data=True) if d["kind"] == "gpu")
    size = nodes * (host.number_of_nodes() + host.number_of_edges() + 5 * per_host)
    if size > MAX_JOINED_ITEMS:
        raise TopologyError(
            f"nodes={nodes}: {nodes} copies of {host.graph.get('name')!r} make {size} nodes and "
            f"links, more than {MAX_JOINED_ITEMS}; use fewer nodes or a smaller host"
        )
    g = nx.DiGraph(
        name=f"{host.graph['name']}x{nodes}",
        nvls=host.graph.get("nvls", False),
        hosts=nodes,
        gpus_per_host=per_host,
        p2p=host.graph.get("p2p", True),
        p2p_pairs={
            (f"n{h}.{a}", f"n{h}.{b}"): ok
            for h in range(nodes)
            for (a, b), ok in host.graph.get("p2p_pairs", {}).items()
        },
    )
    g.add_node("ib_switch", kind="switch", host=0)
    links = _links()
    net = network.over(host.graph.get("network")) if network else host.graph.get("network")
    nics = (net.nics_per_node if net else None) or per_host
    nic_lat = links.infiniband_hop_s if net is None or net.latency_s is None else net.latency_s / 2
    for h in range(nodes):
        prefix = f"n{h}."
        for node, data in host.nodes(data=True):
            attrs = {**data, "host": h}
            if data["kind"] == "gpu":
                attrs["rank"] = h * per_host + data["rank"]
            g.add_node(prefix + node, **attrs)
        for a, b, data in host.edges(data=True):
            g.add_edge(prefix + a, prefix + b, **data)
        for node, data in host.nodes(data=True):
            if data["kind"] != "gpu":
                continue
            spec: GPUSpec = data["gpu"]
            nic = f"{prefix}nic{data['rank'] * nics // per_host}"
            first = nic not in g
            if first:
                g.add_node(nic, kind="nic", host=h)
            _link(
                g, prefix + node, nic, pcie_bandwidth_Bps(spec.pcie_gen), links.pcie_hop_s, "pcie"
            )
            if first:  # more NICs than GPUs: each GPU's share of them pooled on one link
                bw = nic_bandwidth_Bps(spec) if net is None or net.nic_Bps is None else net.nic_Bps
                _link(g, nic, "ib_switch", bw * max(1.0, nics / per_host), nic_lat, "infiniband")
    if net is not None:
        g.graph["network"] = net
    return g


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


# --- graph conventions (used by the file loader and the tests) ------------------------


def validate(g: nx.DiGraph, where: str) -> None:
    """Check a graph against the conventions of builders.py; TopologyError if broken."""
    if not isinstance(g, nx.DiGraph):
        raise _verr("graph", where, "must be a networkx.DiGraph", type(g).__name__)
    attrs = g.graph
    for key, typ in (("name", str), ("nvls", bool)):
        if not isinstance(attrs.get(key), typ):
            raise _verr(f"graph.{key}", where, f"must be a {typ.__name__}", attrs.get(key))
    for key in ("hosts", "gpus_per_host"):
        value = attrs.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _verr(f"graph.{key}", where, "must be a positive integer", value)
    ranks: list[int] = []
    for node, d in g.nodes(data=True):
        f = f"nodes[{node!r}]"
        if not isinstance(node, str):
            raise _verr("node id", where, "must be a string", node)
        if d.get("kind") not in NODE_KINDS:
            raise _verr(
                f"{f}.kind", where, f"must be one of {', '.join(NODE_KINDS)}", d.get("kind")
            )
        if d["kind"] != "gpu":
            continue
        if not isinstance(d.get("gpu"), GPUSpec):
            raise _verr(f"{f}.gpu", where, "must be a GPUSpec", d.get("gpu"))
        for key in ("rank", "host"):
            if not isinstance(d.get(key), int) or isinstance(d.get(key), bool) or d[key] < 0:
                raise _verr(f"{f}.{key}", where, "must be a non-negative integer", d.get(key))
        if d["host"] >= attrs["hosts"]:
            raise _verr(
                f"{f}.host", where, f"must be below graph.hosts={attrs['hosts']}", d["host"]
            )
        ranks.append(d["rank"])
    if not ranks:
        raise _verr("nodes", where, "no GPU nodes (kind: gpu)")
    if sorted(ranks) != list(range(len(ranks))):
        raise _verr("ranks", where, f"must be a permutation of 0..{len(ranks) - 1}")
    if len(ranks) != attrs["hosts"] * attrs["gpus_per_host"]:
        msg = f"hosts * gpus_per_host != {len(ranks)} GPUs"
        raise _verr("graph.gpus_per_host", where, msg, attrs["gpus_per_host"])
    for a, b, d in g.edges(data=True):
        f = f"edges[{a!r} -> {b!r}]"
        if a == b:
            raise _verr(f, where, "self-loop")
        bw, lat = d.get("bandwidth_Bps"), d.get("latency_s")
        if not isinstance(bw, float | int) or isinstance(bw, bool) or not 0 < bw < math.inf:
            raise _verr(f"{f}.bandwidth_Bps", where, "must be a positive finite number", bw)
        if not isinstance(lat, float | int) or isinstance(lat, bool) or not 0 <= lat < math.inf:
            raise _verr(f"{f}.latency_s", where, "must be a non-negative finite number", lat)
        if d.get("link") not in LINK_KINDS:
            raise _verr(
                f"{f}.link", where, f"must be one of {', '.join(LINK_KINDS)}", d.get("link")
            )
        if d["link"] == "nvlink_bridge":
            _check_bridge(g, a, b, f, where)
    _check_p2p(g, where)
    _check_reachable(g, where)


def _check_bridge(g: nx.DiGraph, a: str, b: str, f: str, where: str) -> None:
    """An NVLink bridge joins two GPUs of one bridge generation."""
    for node in (a, b):
        d = g.nodes[node]
        if d["kind"] != "gpu":
            raise _verr(f, where, f"an nvlink_bridge joins two GPUs; {node} is a {d['kind']}")
        if d["gpu"].nvlink_bridge == "none":
            msg = f"{node} ({d['gpu'].name}) has no NVLink bridge connector"
            raise _verr(f, where, msg)
    if g.nodes[a]["gpu"].nvlink_bridge != g.nodes[b]["gpu"].nvlink_bridge:
        raise _verr(f, where, "an nvlink_bridge joins GPUs of the same NVLink generation")


def _check_p2p(g: nx.DiGraph, where: str) -> None:
    """graph.p2p is a bool; graph.p2p_pairs maps sorted pairs of GPUs of one host to bools;
    if any pair may lack P2P, each GPU has a CPU on its host for host-memory copies."""
    p2p = g.graph.get("p2p", True)
    if not isinstance(p2p, bool):
        raise _verr("graph.p2p", where, "must be a bool", p2p)
    pairs = g.graph.get("p2p_pairs", {})
    if not isinstance(pairs, dict):
        raise _verr("graph.p2p_pairs", where, "must be a dict of GPU pairs", pairs)
    for key, ok in pairs.items():
        f = f"graph.p2p_pairs[{key!r}]"
        if not (isinstance(key, tuple) and len(key) == 2 and list(key) == sorted(set(key))):
            raise _verr(f, where, "keys must be sorted pairs of two GPU ids")
        if not all(g.nodes.get(n, {}).get("kind") == "gpu" for n in key):
            raise _verr(f, where, "keys must name GPU nodes")
        if g.nodes[key[0]]["host"] != g.nodes[key[1]]["host"]:
            raise _verr(f, where, "the GPUs must be on one host")
        if not isinstance(ok, bool):
            raise _verr(f, where, "must be a bool", ok)
    if p2p and all(pairs.values()):
        return
    hosts_with_cpu = {d.get("host", 0) for _, d in g.nodes(data=True) if d["kind"] == "cpu"}
    for node, d in g.nodes(data=True):
        if d["kind"] == "gpu" and d["host"] not in hosts_with_cpu:
            msg = f"{node} has no cpu node on its host; without P2P copies go through host memory"
            raise _verr("p2p", where, msg, p2p) if not p2p else _verr("p2p_pairs", where, msg)


def _check_reachable(g: nx.DiGraph, where: str) -> None:
    """All GPUs mutually reachable <=> all GPUs in one strongly connected component."""
    by_rank = sorted((d["rank"], n) for n, d in g.nodes(data=True) if d["kind"] == "gpu")
    gpus = [n for _, n in by_rank]
    comp = next(c for c in nx.strongly_connected_components(g) if gpus[0] in c)
    stray = next((n for n in gpus if n not in comp), None)
    if stray is None:
        return
    if stray in nx.descendants(g, gpus[0]):
        raise TopologyError(f"{stray} cannot reach {gpus[0]} in {where}: check links")
    raise TopologyError(f"{gpus[0]} cannot reach {stray} in {where}: check links")


_NO_VALUE = object()


def _verr(field: str, where: str, msg: str, value: object = _NO_VALUE) -> TopologyError:
    shown = "" if value is _NO_VALUE else f"={show(value)}"
    return TopologyError(f"{field}{shown} in {where}: {msg}")
