"""Topology files' links and p2p_pairs sections: how the nodes connect and which GPU
pairs talk peer to peer.

A link is one direction (or both, ``duplex``) with its kind, bandwidth in GB/s (1e9 B/s)
per direction and latency in µs; an ``nvlink_bridge`` joins two GPUs with bridge
connectors and takes its bandwidth from ``bridges`` (links.yaml). ``p2p_pairs`` are per-pair
exceptions to the file's ``p2p``. Field checks come from :mod:`tpsim.topologies.file_schema`.
"""

from __future__ import annotations

from typing import Any

from tpsim.calibration.hardware import link_figures
from tpsim.topologies.errors import TopologyError, show
from tpsim.topologies.errors import did_you_mean as _hint
from tpsim.topologies.errors import field_error as _err
from tpsim.topologies.file_schema import MAX_FILE_ITEMS, _choice, _fields, _num, _str
from tpsim.topologies.gpus import scale
from tpsim.topologies.graph import LINK_KINDS, MAX_BANDWIDTH_GBPS, MAX_LATENCY_US
from tpsim.topologies.link_bandwidths import bridge_bandwidth_Bps

LINK_FIELDS = ("src", "dst", "bandwidth_GBps", "latency_us", "duplex", "link", "bridges")
P2P_PAIR_FIELDS = ("gpus", "p2p")


def _links(items: object, nodes: dict[str, dict], file: str) -> list[tuple[str, str, dict]]:
    if not isinstance(items, list):
        raise _err("links", file, "must be a list", items)
    if len(items) > MAX_FILE_ITEMS:
        raise _err("links", file, f"{len(items)} entries: at most {MAX_FILE_ITEMS}")
    out: list[tuple[str, str, dict]] = []
    first: dict[tuple[str, str], int] = {}
    bridged: dict[frozenset[str], int] = {}  # bridges per GPU pair, to count connectors
    for i, item in enumerate(items):
        f = f"links[{i}]"
        d = _fields(item, LINK_FIELDS, ("src", "dst"), f, file)
        ends = []
        for key in ("src", "dst"):
            node = _str(d[key], f"{f}.{key}", file)
            if node not in nodes:
                raise _err(f"{f}.{key}", file, "unknown node" + _hint(node, list(nodes)), node)
            ends.append(node)
        src, dst = ends
        if src == dst:
            raise _err(f"{f}.dst", file, "same as src (self-loop)", dst)
        # GPUs join each other, and an NVSwitch, by NVLink unless told
        kinds = {nodes[src]["kind"], nodes[dst]["kind"]}
        scaleup = kinds <= {"gpu", "nvswitch"}
        link = _choice(
            d.get("link", "nvlink" if scaleup else "pcie"), LINK_KINDS, f"{f}.link", file
        )
        bridge = link == "nvlink_bridge"
        duplex = d.get("duplex", bridge)  # a bridge carries both directions unless told
        if not isinstance(duplex, bool):
            raise _err(f"{f}.duplex", file, "must be true or false", duplex)
        attrs: dict[str, Any]
        if bridge:
            attrs = _bridge(d, nodes[src], nodes[dst], bridged, (src, dst), f, file)
        else:
            if "bridges" in d:
                raise _err(f"{f}.bridges", file, "only nvlink_bridge links have bridges")
            for key in ("bandwidth_GBps", "latency_us"):
                if key not in d:
                    raise _err(f"{f}.{key}", file, "missing field")
            attrs = {}
        if "bridges" not in attrs:
            bw = _num(d["bandwidth_GBps"], f"{f}.bandwidth_GBps", file, True, MAX_BANDWIDTH_GBPS)
            attrs["bandwidth_Bps"] = scale(bw, 9)
        if "latency_us" in d or not bridge:
            lat = _num(d["latency_us"], f"{f}.latency_us", file, False, MAX_LATENCY_US)
            attrs["latency_s"] = scale(lat, -6)
        attrs["link"] = link
        for a, b in [(src, dst), (dst, src)] if duplex else [(src, dst)]:
            if (a, b) in first:
                raise _err(f, file, f"duplicate link {a} -> {b} (first at links[{first[a, b]}])")
            first[a, b] = i
            out.append((a, b, attrs))
    return out


def _bridge(
    d: dict,
    a: dict,
    b: dict,
    bridged: dict[frozenset[str], int],
    ends: tuple[str, str],
    f: str,
    file: str,
) -> dict[str, Any]:
    """Attributes of an nvlink_bridge link: between two GPUs with bridge connectors of one
    NVLink generation; ``bridges: N`` gives N bridges' bandwidth (links.yaml), or an explicit
    bandwidth_GBps; latency_us defaults to one NVLink traversal."""
    for end, node in zip(ends, (a, b), strict=True):
        if node["kind"] != "gpu":
            msg = f"an nvlink_bridge joins two GPUs; {end} is a {node['kind']}"
            raise _err(f"{f}.link", file, msg, "nvlink_bridge")
        if node["gpu"].nvlink_bridge == "none":
            msg = f"{end} ({node['gpu'].name}) has no NVLink bridge connector"
            raise _err(f"{f}.link", file, msg, "nvlink_bridge")
    if a["gpu"].nvlink_bridge != b["gpu"].nvlink_bridge:
        msg = f"{ends[0]} and {ends[1]} have bridges of different NVLink generations"
        raise _err(f"{f}.link", file, msg, "nvlink_bridge")
    attrs: dict[str, Any] = {"latency_s": link_figures().nvlink_hop_s}
    if "bridges" in d:
        if "bandwidth_GBps" in d:
            msg = "give bridges or bandwidth_GBps, not both (bridges sets the bandwidth)"
            raise _err(f"{f}.bandwidth_GBps", file, msg, d["bandwidth_GBps"])
        n = d["bridges"]
        try:
            attrs["bandwidth_Bps"] = bridge_bandwidth_Bps(a["gpu"], n)
        except TopologyError:
            top = link_figures().nvlink_bridges_per_gpu
            raise _err(f"{f}.bridges", file, f"must be an integer in 1..{top}", n) from None
        attrs["bridges"] = n
        pair = frozenset(ends)
        bridged[pair] = max(bridged.get(pair, 0), n)
        top = link_figures().nvlink_bridges_per_gpu
        for end in ends:
            used = sum(k for p, k in bridged.items() if end in p)
            if used > top:
                msg = f"{end} would have {used} bridges; a card has {top} connectors"
                raise _err(f"{f}.bridges", file, msg, n)
    elif "bandwidth_GBps" not in d:
        raise _err(f"{f}.bridges", file, "missing field (or give bandwidth_GBps)")
    return attrs


def _p2p_pairs(items: object, nodes: dict[str, dict], file: str) -> dict[tuple[str, str], bool]:
    """Per-pair exceptions to the file's p2p: [{gpus: [a, b], p2p: true|false}, ...]."""
    if not isinstance(items, list):
        raise _err("p2p_pairs", file, "must be a list of {gpus: [a, b], p2p: true|false}", items)
    out: dict[tuple[str, str], bool] = {}
    first: dict[tuple[str, str], int] = {}
    for i, item in enumerate(items):
        f = f"p2p_pairs[{i}]"
        d = _fields(item, P2P_PAIR_FIELDS, P2P_PAIR_FIELDS, f, file)
        pair = d["gpus"]
        if not (isinstance(pair, list) and len(pair) == 2):
            raise _err(f"{f}.gpus", file, "must be a list of two GPU node ids", pair)
        for node in pair:
            if not isinstance(node, str) or node not in nodes:
                hint = _hint(node, list(nodes)) if isinstance(node, str) else ""
                raise _err(f"{f}.gpus", file, f"unknown node {show(node)}{hint}", pair)
            if nodes[node]["kind"] != "gpu":
                raise _err(f"{f}.gpus", file, f"{node} is a {nodes[node]['kind']}, not a gpu", pair)
        a, b = sorted(pair)
        if a == b:
            raise _err(f"{f}.gpus", file, "names one GPU twice", pair)
        if nodes[a]["host"] != nodes[b]["host"]:
            raise _err(f"{f}.gpus", file, "GPUs of different hosts talk over the network", pair)
        if (a, b) in first:
            msg = f"duplicate pair (first at p2p_pairs[{first[a, b]}])"
            raise _err(f"{f}.gpus", file, msg, pair)
        if not isinstance(d["p2p"], bool):
            raise _err(f"{f}.p2p", file, "must be true or false", d["p2p"])
        first[a, b] = i
        out[a, b] = d["p2p"]
    return out
