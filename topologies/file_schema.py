"""Topology files' schema: the field checks every section uses, and the gpus and nodes
sections (ranks and hosts included).

Each check returns the value or raises a one-line TopologyError naming the field path, the
value and the file. The links and p2p_pairs sections are in
:mod:`tpsim.topologies.file_links`; the top level in :mod:`tpsim.topologies.io`.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from tpsim.topologies.errors import did_you_mean as _hint
from tpsim.topologies.errors import field_error as _err
from tpsim.topologies.errors import show
from tpsim.topologies.gpus import GPUS, MIN_POSITIVE, GPUSpec, get_gpu, gpu_from_dict
from tpsim.topologies.graph import NODE_KINDS
from tpsim.topologies.join import MAX_NODES

MAX_FILE_ITEMS = 100_000  # nodes, and links, in one file (a host of a multi-host join)
NODE_FIELDS = ("id", "kind", "type", "rank", "host")


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


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _num(value: Any, field: str, file: str, positive: bool, hi: float) -> float:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and isinstance(value, int) and value.bit_length() > 1000:
        raise _err(field, file, f"implausibly large (limit {hi:g})", value)  # no float holds it
    if not number or not math.isfinite(value) or value < 0 or (positive and value == 0):
        need = "positive" if positive else "non-negative"
        if isinstance(value, str) and _looks_numeric(value):  # YAML 1.1 reads 1e9 as text
            raise _err(field, file, f"must be a {need} finite number, not text (YAML reads "
                       "1e9 as text: write 1.0e9)", value)  # fmt: skip
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
    on_gpus = [i for i, (_, a) in enumerate(out) if a["kind"] == "gpu"]
    bare = [i for i in on_gpus if "host" not in items[i]]
    if bare and len(bare) != len(on_gpus):  # the GPUs without one would be put on host 0
        i = bare[0]
        msg = (
            f"missing on {out[i][0]} while other GPUs give one "
            "(every GPU names its host, or none does)"
        )
        raise _err(f"nodes[{i}].host", file, msg)
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
