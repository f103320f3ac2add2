"""The topology graph: its type, its conventions and their check (:func:`validate`).

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
import sys

import networkx as nx
from tpsim.topologies.errors import TopologyError, show
from tpsim.topologies.gpus import MIN_POSITIVE, GPUSpec, gpu_from_dict, gpu_to_dict

#: A topology as every layer passes it around: a directed graph of GPUs, switches and hosts
#: whose edges are links (the conventions of :func:`validate`). Code outside the topologies
#: and the comm layer names the type through this alias and never imports networkx itself.
TopologyGraph = nx.DiGraph

NODE_KINDS = ("gpu", "nvswitch", "switch", "pcie_switch", "cpu", "nic")
LINK_KINDS = ("nvlink", "xgmi", "pcie", "upi", "infiniband", "nvlink_bridge")


def duplex_link(g: nx.DiGraph, a: str, b: str, bw: float, lat: float, link: str) -> None:
    """Both directions of a full-duplex link."""
    g.add_edge(a, b, bandwidth_Bps=bw, latency_s=lat, link=link)
    g.add_edge(b, a, bandwidth_Bps=bw, latency_s=lat, link=link)


def first_gpu(g: nx.DiGraph) -> GPUSpec:
    """The spec of the graph's first GPU (a catalog host holds one kind of GPU)."""
    return next(d["gpu"] for _, d in g.nodes(data=True) if d.get("kind") == "gpu")


#: A link's bounds, in a file's units (topology files and graphs built in code alike).
MAX_BANDWIDTH_GBPS = 1e6
MAX_LATENCY_US = 1e6


def validate(g: nx.DiGraph, where: str) -> None:
    """Check a graph against the conventions of this module; TopologyError if broken."""
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
    checked: set[GPUSpec] = set()
    for node, d in g.nodes(data=True):
        f = f"nodes[{node!r}]"
        if not isinstance(node, str):
            raise _verr("node id", where, "must be a string", node)
        if not node.isprintable() or not node:
            raise _verr("node id", where, "must be printable, without control characters", node)
        if d.get("kind") not in NODE_KINDS:
            raise _verr(
                f"{f}.kind", where, f"must be one of {', '.join(NODE_KINDS)}", d.get("kind")
            )
        if d["kind"] != "gpu":
            continue
        if not isinstance(d.get("gpu"), GPUSpec):
            raise _verr(f"{f}.gpu", where, "must be a GPUSpec", d.get("gpu"))
        spec = d["gpu"]
        if spec not in checked:  # held to a file's bounds (a GPUSpec built by hand too)
            try:
                gpu_from_dict(gpu_to_dict(spec), f"{f}.gpu in {where}")
            except (TypeError, ValueError) as e:
                raise _verr(f"{f}.gpu", where, f"malformed GPUSpec ({e})") from None
            checked.add(spec)
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
        gbps = bw / 1e9  # a file's bounds, in its units (to a rounding of the scale)
        if not MIN_POSITIVE * (1 - 1e-9) <= gbps <= MAX_BANDWIDTH_GBPS * (1 + 1e-9):
            raise _verr(f"{f}.bandwidth_Bps", where, f"must be from {MIN_POSITIVE * 1e9:g} to "
                        f"{MAX_BANDWIDTH_GBPS * 1e9:g} B/s", bw)  # fmt: skip
        if not isinstance(lat, float | int) or isinstance(lat, bool) or not 0 <= lat < math.inf:
            raise _verr(f"{f}.latency_s", where, "must be a non-negative finite number", lat)
        us = lat * 1e6
        if us > MAX_LATENCY_US * (1 + 1e-9) or 0 < us < sys.float_info.min * (1 - 1e-9):
            raise _verr(f"{f}.latency_s", where, f"must be 0 or up to {MAX_LATENCY_US * 1e-6:g} "
                        "s, not denormal", lat)  # fmt: skip
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
