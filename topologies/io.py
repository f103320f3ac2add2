"""Topology files (YAML or JSON): loading with strict validation, saving, lookup.

Format (README, "Topology files"): top-level keys name, gpus, nodes, links and the
optional nvls, p2p and p2p_pairs. Bandwidth in GB/s (1e9 B/s) per direction, latency in
µs. Every error is a one-line TopologyError naming the field path, the value and the file.

The public entry point for topology files: the text is read and parsed in
:mod:`~tpsim.topologies.file_syntax`, the gpus and nodes sections are checked in
:mod:`~tpsim.topologies.file_schema`, the links and p2p_pairs in
:mod:`~tpsim.topologies.file_links`; the top level, saving and lookup are here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import networkx as nx
import yaml
from tpsim.topologies.builders import TOPOLOGIES, build
from tpsim.topologies.errors import TopologyError, show
from tpsim.topologies.errors import did_you_mean as _hint
from tpsim.topologies.errors import field_error as _err
from tpsim.topologies.file_links import _links, _p2p_pairs
from tpsim.topologies.file_schema import _fields, _gpus, _nodes, _str
from tpsim.topologies.file_syntax import _parse, _read_text
from tpsim.topologies.gpus import GPUS, GPUSpec, gpu_to_dict, scale
from tpsim.topologies.graph import validate  # part of this module's API
from tpsim.topologies.join import join_hosts
from tpsim.topologies.network import Network, network_from_dict

__all__ = ["get_topology", "load_topology", "save_topology", "validate"]

TOP_FIELDS = ("name", "gpus", "nodes", "links", "nvls", "p2p", "p2p_pairs", "network")
#: GPU architectures with NVLink SHARP (sm90 and later).
NVLS_ARCHS = ("hopper", "blackwell")


# --- loading -----------------------------------------------------------------------------


def _hosts_from_network(nodes: list[tuple[str, dict]], links: list[tuple[str, str, dict]],
                        file: str) -> None:  # fmt: skip
    """A file that names no host: its hosts are the groups of GPUs its links join without
    the network (``infiniband``: NICs to switches), each node put on its group's host in
    the order of the GPUs; a file without network links is one host."""
    network = [(u, v) for u, v, a in links if a["link"] == "infiniband"]
    parts = nx.Graph()
    parts.add_nodes_from(n for n, _ in nodes)
    parts.add_edges_from((u, v) for u, v, a in links if a["link"] != "infiniband")
    whole = parts.copy()
    whole.add_edges_from(network)
    gpus = [n for n, a in nodes if a["kind"] == "gpu"]
    if not network or not gpus or any(not nx.has_path(whole, gpus[0], g) for g in gpus[1:]):
        return  # no network, or GPUs it cannot reach (refused by the reachability check)
    host_of: dict[frozenset[str], int] = {}
    for node, a in nodes:
        if a["kind"] == "gpu":
            host_of.setdefault(frozenset(nx.node_connected_component(parts, node)), len(host_of))
    if len(host_of) < 2:
        return
    sizes = {h: sum(1 for n, a in nodes if a["kind"] == "gpu" and n in c)
             for c, h in host_of.items()}  # fmt: skip
    if len(set(sizes.values())) > 1:
        counts = ", ".join(str(sizes[h]) for h in sorted(sizes))
        msg = (f"its network links split the GPUs into hosts of {counts}: hosts must hold "
               "the same number of GPUs (or give each node its host:)")  # fmt: skip
        raise _err("nodes", file, msg)
    attrs = dict(nodes)
    for c, h in host_of.items():
        for node in c:
            attrs[node]["host"] = h


def _hosts_given(nodes: list[tuple[str, dict]], links: list[tuple[str, str, dict]],
                 explicit: set[str], file: str) -> None:  # fmt: skip
    """A file that names hosts: a node that gives none (a NIC, a switch, a CPU) sits in the
    host of the nearest node giving one that its own links (not the network's) join it to
    (by one breadth-first search from those nodes, in file order), host 0 when none; then
    every link but the network's must stay in one host (a NIC given host 0 but cabled to
    host 1's GPUs had run as if on host 1)."""
    attrs = dict(nodes)
    local: dict[str, list[str]] = {n: [] for n in attrs}
    for u, v, a in links:
        if a["link"] != "infiniband":
            local[u].append(v)
            local[v].append(u)
    frontier = [n for n in attrs if n in explicit]
    seen = set(frontier)
    while frontier:
        nxt = []
        for node in frontier:
            for m in local[node]:
                if m not in seen:
                    seen.add(m)
                    attrs[m]["host"] = attrs[node]["host"]
                    nxt.append(m)
        frontier = nxt
    for node in attrs:
        if node not in seen:
            attrs[node]["host"] = 0

    def said(n: str, h: int) -> str:
        return f"{n} (host {h})" if n in explicit else f"{n} (no host given)"

    for u, v, a in links:
        hu, hv = attrs[u]["host"], attrs[v]["host"]
        if a["link"] != "infiniband" and hu != hv:
            msg = (
                f"{said(u, hu)} and {said(v, hv)} are joined by a {a['link']} link between "
                f"hosts {min(hu, hv)} and {max(hu, hv)}: only infiniband links join hosts "
                "(give each node the host it sits in)"
            )
            raise _err("links", file, msg)


def _check_nvls(nodes: list[tuple[str, dict]], links: list[tuple[str, str, dict]],
                file: str) -> None:  # fmt: skip
    """``nvls: true`` needs every GPU of Hopper or later (NCCL enables NVLS on sm90+ only)
    and on an NVSwitch; a full spec that gives no ``arch`` (``default``) is not refused."""
    need = "NVLink SHARP needs Hopper or later GPUs on an NVSwitch"
    gpus = [(node, a["gpu"]) for node, a in nodes if a["kind"] == "gpu"]
    for node, spec in gpus:
        if spec.arch not in (*NVLS_ARCHS, "default"):
            raise _err("nvls", file, f"{node} ({spec.name}, {spec.arch}): {need}", True)
    kinds = dict(nodes)
    switched = {u for u, v, _ in links if kinds[v]["kind"] == "nvswitch"}
    for node, spec in gpus:
        if node not in switched:
            msg = f"{node} ({spec.name}) has no link to an nvswitch node: {need}"
            raise _err("nvls", file, msg, True)


def _from_data(data: object, file: str) -> nx.DiGraph:
    if not isinstance(data, dict):
        got = "an empty document" if data is None else f"a {type(data).__name__}"
        raise _err("top level", file, f"must be a mapping with name, nodes, links; got {got}")
    d = _fields(data, TOP_FIELDS, ("name", "nodes", "links"), "", file)
    name = _str(d["name"], "name", file)
    nvls = d.get("nvls", False)
    if not isinstance(nvls, bool):
        raise _err("nvls", file, "must be true or false", nvls)
    p2p = d.get("p2p", True)
    if not isinstance(p2p, bool):
        raise _err("p2p", file, "must be true or false", p2p)
    nodes = _nodes(d["nodes"], _gpus(d.get("gpus", {}), file), file)
    links = _links(d["links"], dict(nodes), file)
    given = isinstance(d["nodes"], list) and any(
        isinstance(n, dict) and "host" in n for n in d["nodes"]
    )
    if not given:
        _hosts_from_network(nodes, links, file)
    else:
        explicit = {str(n["id"]) for n in d["nodes"] if isinstance(n, dict) and "host" in n}
        _hosts_given(nodes, links, explicit, file)
    if nvls:
        _check_nvls(nodes, links, file)
    pairs = _p2p_pairs(d.get("p2p_pairs", []), dict(nodes), file)
    hosts = 1 + max(a["host"] for _, a in nodes if a["kind"] == "gpu")
    n_gpus = sum(1 for _, a in nodes if a["kind"] == "gpu")
    g = nx.DiGraph(
        name=name,
        nvls=nvls,
        hosts=hosts,
        gpus_per_host=n_gpus // hosts,
        p2p=p2p,
        p2p_pairs=pairs,
    )
    if "network" in d:  # the network its hosts join over (--nodes)
        if hosts > 1:  # its own hosts join over its own NIC links; it is never copied
            raise _err(
                "network",
                file,
                f"the file has its own {hosts} hosts, joined by its NIC links (set their "
                "bandwidth there); network: describes the join of a one-host file's --nodes "
                "copies",
            )
        g.graph["network"] = network_from_dict(d["network"], file)
    g.add_nodes_from(nodes)
    g.add_edges_from(links)
    return g


def load_topology(path: str | Path) -> nx.DiGraph:
    """Read and validate a topology file (YAML or JSON, by extension or content)."""
    p = Path(path)
    file = str(path)
    g = _from_data(_parse(_read_text(p, file), p, file), file)
    validate(g, file)
    return g


# --- saving and lookup -------------------------------------------------------------------


def _to_data(g: nx.DiGraph) -> dict[str, Any]:
    aliases: dict[GPUSpec, str] = {}
    gpus: dict[str, Any] = {}
    nodes: list[dict[str, Any]] = []
    for node, d in g.nodes(data=True):
        entry: dict[str, Any] = {"id": node, "kind": d["kind"]}
        if d["kind"] == "gpu":
            spec = d["gpu"]
            if spec not in aliases:
                alias, k = spec.name, 1
                while alias in gpus:
                    k += 1
                    alias = f"{spec.name}-{k}"
                aliases[spec] = alias
                gpus[alias] = spec.name if GPUS.get(spec.name) == spec else gpu_to_dict(spec)
            entry["type"] = aliases[spec]
            entry["rank"] = d["rank"]
        if d.get("host", 0) or g.graph.get("hosts", 1) > 1:  # on many hosts every GPU names its
            entry["host"] = d.get("host", 0)  # own (a file that mixes is refused)
        nodes.append(entry)
    links: list[dict[str, Any]] = []
    done: set[tuple[str, str]] = set()
    for a, b, d in g.edges(data=True):
        if (a, b) in done:
            continue
        entry = {"src": a, "dst": b}
        if "bridges" in d:
            entry["bridges"] = d["bridges"]
        else:
            entry["bandwidth_GBps"] = scale(d["bandwidth_Bps"], -9)
        entry["latency_us"] = scale(d["latency_s"], 6)
        entry["link"] = d["link"]
        done.add((a, b))
        if g.has_edge(b, a) and (b, a) not in done and g.edges[b, a] == d:
            entry["duplex"] = True
            done.add((b, a))
        elif d["link"] == "nvlink_bridge":
            entry["duplex"] = False  # a bridge is read as duplex unless told
        links.append(entry)
    out = {"name": g.graph["name"], "nvls": g.graph["nvls"], "p2p": g.graph.get("p2p", True)}
    pairs = g.graph.get("p2p_pairs", {})
    if pairs:
        out["p2p_pairs"] = [{"gpus": list(k), "p2p": v} for k, v in sorted(pairs.items())]
    out["gpus"] = gpus
    net = g.graph.get("network")
    if isinstance(net, Network) and net.to_dict():
        out["network"] = net.to_dict()
    return {**out, "nodes": nodes, "links": links}


def save_topology(g: nx.DiGraph, path: str | Path) -> None:
    """Write `g` as YAML (or JSON for a .json path); load_topology reads back an equal graph."""
    p = Path(path)
    validate(g, str(path))
    data = _to_data(g)
    if p.suffix.lower() == ".json":
        text = json.dumps(data, indent=1) + "\n"
    else:
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as e:
        raise _err("file", str(path), f"cannot write ({e.strerror or e})") from None


def get_topology(name_or_path: str, nodes: int = 1, network: Network | None = None) -> nx.DiGraph:
    """A catalog topology (name case-insensitive) or a topology file, over `nodes` hosts
    (joined over `network` where given: it overrides the topology's own, field by field)."""
    if isinstance(name_or_path, str) and name_or_path.lower() in TOPOLOGIES:
        return build(name_or_path, nodes, network)
    p = Path(name_or_path)
    try:
        exists = p.exists()
    except OSError:  # e.g. a name longer than the file system allows
        exists = False
    if exists or p.suffix.lower() in (".yaml", ".yml", ".json") or len(p.parts) > 1:
        return join_hosts(load_topology(p), nodes, network)
    raise TopologyError(
        f"topology={show(name_or_path)}: neither a catalog name"
        f"{_hint(str(name_or_path).lower(), list(TOPOLOGIES))} nor an existing file; "
        f"known: {', '.join(TOPOLOGIES)}"
    )
