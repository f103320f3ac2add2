"""Topology files (YAML or JSON): loading with strict validation, saving, lookup.

Format (README, "Topology files"): top-level keys name, gpus, nodes, links and the
optional nvls, p2p and p2p_pairs. Bandwidth in GB/s (1e9 B/s) per direction, latency in
µs. Every error is a one-line TopologyError naming the field path, the value and the file.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import networkx as nx
import yaml
from tpsim.calibration.bounded import ReadRefused, read_text, yaml_load
from tpsim.calibration.hardware import link_figures
from tpsim.topologies.builders import (
    LINK_KINDS,
    MAX_NODES,
    NODE_KINDS,
    TOPOLOGIES,
    bridge_bandwidth_Bps,
    build,
    join_hosts,
    validate,  # part of this module's API
)
from tpsim.topologies.errors import TopologyError, show
from tpsim.topologies.errors import did_you_mean as _hint
from tpsim.topologies.gpus import (
    GPUS,
    MIN_POSITIVE,
    GPUSpec,
    get_gpu,
    gpu_from_dict,
    gpu_to_dict,
    scale,
)
from tpsim.topologies.network import Network, network_from_dict

__all__ = ["get_topology", "load_topology", "save_topology", "validate"]

MAX_FILE_BYTES = 10 * 10**6
MAX_DEPTH = 50
MAX_BANDWIDTH_GBPS = 1e6
MAX_LATENCY_US = 1e6
MAX_FILE_ITEMS = 100_000  # nodes, and links, in one file (a host of a multi-host join)
TOP_FIELDS = ("name", "gpus", "nodes", "links", "nvls", "p2p", "p2p_pairs", "network")
NODE_FIELDS = ("id", "kind", "type", "rank", "host")
LINK_FIELDS = ("src", "dst", "bandwidth_GBps", "latency_us", "duplex", "link", "bridges")
P2P_PAIR_FIELDS = ("gpus", "p2p")
_MISSING = object()


def _err(field: str, file: str, msg: str, value: object = _MISSING) -> TopologyError:
    shown = "" if value is _MISSING else f"={show(value)}"
    return TopologyError(f"{field}{shown} in {file}: {msg}")


# --- reading and parsing -----------------------------------------------------------------


def _read_text(path: Path, file: str) -> str:
    try:
        return read_text(path, MAX_FILE_BYTES)
    except ReadRefused as e:
        raise TopologyError(f"topology file {file}: {e}") from None


_JSON_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def _parse_json(text: str, file: str) -> Any:
    depth = 0
    for m in _BRACKETS.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_DEPTH:
            raise _err("file", file, f"nested deeper than {MAX_DEPTH} levels")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise _err(f"key {key!r}", file, "duplicate key in a JSON object")
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as e:
        raise TopologyError(
            f"JSON syntax error in {file} at line {e.lineno}, column {e.colno}: {e.msg}"
        ) from None
    except TopologyError:
        raise
    except ValueError as e:  # an integer literal past Python's 4300-digit limit
        raise _err("file", file, f"unreadable number ({show(str(e))})") from None


def _yaml_error(e: yaml.YAMLError, file: str) -> TopologyError:
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(e, "problem", None) or str(e)
    return TopologyError(f"YAML syntax error in {file}{where}: {' '.join(problem.split())}")


def _scan_yaml(text: str, file: str) -> None:
    """Walk the event stream (no tree is built): limit nesting, reject duplicate keys."""
    stack: list[list[Any]] = []  # [is_mapping, expecting_key, seen keys]

    def finished(key: object, line: int) -> None:
        if stack and stack[-1][0]:
            frame = stack[-1]
            if frame[1] and key is not None:
                if key in frame[2]:
                    raise _err(f"key {key!r}", file, f"duplicate key at line {line + 1}")
                frame[2].add(key)
            frame[1] = not frame[1]

    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            stack.append([isinstance(ev, yaml.MappingStartEvent), True, set()])
            if len(stack) > MAX_DEPTH:
                raise _err("file", file, f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(ev, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            stack.pop()
            finished(None, ev.start_mark.line)
        elif isinstance(ev, yaml.ScalarEvent | yaml.AliasEvent):
            finished(getattr(ev, "value", None), ev.start_mark.line)


def _parse(text: str, path: Path, file: str) -> Any:
    suffix = path.suffix.lower()
    looks_json = text.strip()[:1] in ("{", "[")
    if suffix == ".json" or (suffix not in (".yaml", ".yml") and looks_json):
        return _parse_json(text, file)
    try:
        _scan_yaml(text, file)  # before building any tree
        return yaml_load(text, max_depth=MAX_DEPTH)  # safe: no tag is ever evaluated
    except ReadRefused as e:
        raise _err("file", file, str(e)) from None
    except yaml.YAMLError as e:
        raise _yaml_error(e, file) from None
    except TopologyError:
        raise
    except ValueError as e:  # an integer literal past Python's 4300-digit limit
        raise _err("file", file, f"unreadable number ({show(str(e))})") from None


# --- schema ------------------------------------------------------------------------------


def _fields(d: object, allowed: tuple, required: tuple, prefix: str, file: str) -> dict:
    if not isinstance(d, dict):
        raise _err(prefix, file, f"must be a mapping with fields {', '.join(allowed)}", d)
    dot = f"{prefix}." if prefix else ""
    for key in d:
        if key not in allowed:
            raise _err(
                f"{dot}{key if isinstance(key, str) else show(key)}",
                file,
                "unknown field" + _hint(key, list(allowed)),
            )
    for key in required:
        if key not in d:
            raise _err(f"{dot}{key}", file, "missing field")
    return d


def _str(value: object, field: str, file: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _err(field, file, "must be a non-empty string", value)
    if not value.isprintable():  # ids and names end up in reports, traces and terminals
        raise _err(field, file, "must not contain control characters or line breaks", value)
    return value


def _int(value: object, field: str, file: str, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= hi:
        raise _err(field, file, f"must be an integer in 0..{hi}", value)
    return value


def _num(value: Any, field: str, file: str, positive: bool, hi: float) -> float:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and isinstance(value, int) and value.bit_length() > 1000:
        raise _err(field, file, f"implausibly large (limit {hi:g})", value)  # no float holds it
    if not number or not math.isfinite(value) or value < 0 or (positive and value == 0):
        need = "positive" if positive else "non-negative"
        raise _err(field, file, f"must be a {need} finite number", value)
    if value > hi:
        raise _err(field, file, f"implausibly large (limit {hi:g})", value)
    if positive and value < MIN_POSITIVE:  # a denormal, or a link of bytes per year
        raise _err(field, file, f"implausibly small (at least {MIN_POSITIVE:g})", value)
    if 0 < value < sys.float_info.min:  # a denormal latency: not a number any clock measures
        raise _err(field, file, "a denormal number (0, or a normal float)", value)
    return float(value)


def _choice(value: Any, choices: tuple[str, ...], field: str, file: str) -> str:
    if value not in choices:
        msg = f"unknown value{_hint(value, list(choices))}; valid: {', '.join(choices)}"
        raise _err(field, file, msg, value)
    return value


def _gpus(d: object, file: str) -> dict[str, GPUSpec]:
    if not isinstance(d, dict):
        raise _err("gpus", file, "must be a mapping of alias -> GPU name or spec", d)
    out: dict[str, GPUSpec] = {}
    for alias, value in d.items():
        field = f"gpus.{_str(alias, 'gpus key', file)}"
        if isinstance(value, str):
            if value.lower() not in GPUS:
                raise _err(field, file, "unknown GPU" + _hint(value.lower(), list(GPUS)), value)
            out[alias] = get_gpu(value)
        elif isinstance(value, dict):
            out[alias] = gpu_from_dict({"name": alias, **value}, f"{field} in {file}")
        else:
            raise _err(field, file, "must be a catalog GPU name or a spec mapping", value)
    return out


def _nodes(items: object, gpus: dict[str, GPUSpec], file: str) -> list[tuple[str, dict]]:
    if not isinstance(items, list) or not items:
        raise _err("nodes", file, "must be a non-empty list", items)
    if len(items) > MAX_FILE_ITEMS:
        raise _err("nodes", file, f"{len(items)} entries: at most {MAX_FILE_ITEMS}")
    out: list[tuple[str, dict]] = []
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        f = f"nodes[{i}]"
        d = _fields(item, NODE_FIELDS, ("id", "kind"), f, file)
        node = _str(d["id"], f"{f}.id", file)
        if node in first:
            raise _err(f"{f}.id", file, f"duplicate id (first at nodes[{first[node]}])", node)
        first[node] = i
        kind = _choice(d["kind"], NODE_KINDS, f"{f}.kind", file)
        attrs: dict[str, Any] = {
            "kind": kind,
            "host": _int(d.get("host", 0), f"{f}.host", file, MAX_NODES),
        }
        if kind == "gpu":
            if "type" not in d:
                raise _err(f"{f}.type", file, "missing field (gpu nodes need a GPU type)")
            t = _str(d["type"], f"{f}.type", file)
            if t not in gpus and t.lower() not in GPUS:
                hint = _hint(t, [*gpus, *GPUS])
                raise _err(f"{f}.type", file, f"not an alias from gpus nor a catalog GPU{hint}", t)
            attrs["gpu"] = gpus[t] if t in gpus else get_gpu(t)
            if "rank" in d:
                attrs["rank"] = _int(d["rank"], f"{f}.rank", file, 10**6)
        else:
            for key in ("type", "rank"):
                if key in d:
                    raise _err(f"{f}.{key}", file, f"only gpu nodes have a {key}", d[key])
        out.append((node, attrs))
    _ranks_and_hosts(out, file)
    return out


def _ranks_and_hosts(nodes: list[tuple[str, dict]], file: str) -> None:
    gpus = [(i, a) for i, (_, a) in enumerate(nodes) if a["kind"] == "gpu"]
    if not gpus:
        raise _err("nodes", file, "no GPU nodes (kind: gpu)")
    given = [i for i, a in gpus if "rank" in a]
    if given and len(given) != len(gpus):
        i = next(i for i, a in gpus if "rank" not in a)
        raise _err(f"nodes[{i}].rank", file, "missing (give a rank to every GPU or to none)")
    seen: set[int] = set()
    for k, (i, a) in enumerate(gpus):
        rank = a.setdefault("rank", k)
        if rank >= len(gpus) or rank in seen:
            msg = f"ranks must be a permutation of 0..{len(gpus) - 1}"
            raise _err(f"nodes[{i}].rank", file, msg, rank)
        seen.add(rank)
    counts: dict[int, int] = {}
    for _, a in gpus:
        counts[a["host"]] = counts.get(a["host"], 0) + 1
    if sorted(counts) != list(range(len(counts))) or len(set(counts.values())) != 1:
        i, a = next(
            (i, a) for i, a in gpus if a["host"] >= len(counts) or counts[a["host"]] != counts[0]
        )
        msg = "GPU hosts must be numbered 0..H-1 with the same number of GPUs on each"
        raise _err(f"nodes[{i}].host", file, msg, a["host"])


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
        both_gpu = nodes[src]["kind"] == nodes[dst]["kind"] == "gpu"
        link = _choice(
            d.get("link", "nvlink" if both_gpu else "pcie"), LINK_KINDS, f"{f}.link", file
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
        if d.get("host", 0):
            entry["host"] = d["host"]
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
