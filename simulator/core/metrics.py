"""Statistics computed from the record list alone: critical path, breakdown, regime,
communication per site."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tpsim.core.records import CATEGORIES, COMM_KINDS, Record

REGIMES: dict[str, str] = {
    "compute": "compute-bound",
    "memory": "memory-bound",
    "communication": "communication-bound",
    "launch_overhead": "overhead-bound",
    "host": "overhead-bound",  # engine host work is overhead too; the breakdown tells which
    "bubble": "bubble-bound",  # a pipeline's fill (tpsim.core.parallel); not in CATEGORIES
}


def makespan(records: Sequence[Record]) -> float:
    return max((r.end_s for r in records), default=0.0)


def critical_path(records: Sequence[Record]) -> list[Record]:
    """The chain of records that set the makespan, from t = 0 to the end.

    Starts at the record that ends last (ties: the lowest rank, then the lowest id) and
    follows ``cause`` back. Every record's cause ends no later than it starts, so the path
    and the gaps between its records partition ``[0, makespan]``.
    """
    if not records:
        return []
    last = min(records, key=lambda r: (-r.end_s, r.rank, r.id))
    path = [last]
    while path[-1].cause >= 0:
        path.append(records[path[-1].cause])
    path.reverse()
    return path


def breakdown(records: Sequence[Record], path: Sequence[Record] | None = None) -> dict[str, float]:
    """Seconds of the makespan spent in each category along the critical path, plus
    ``idle`` (gaps on the path). The values sum to the makespan (to rounding)."""
    if path is None:
        path = critical_path(records)
    parts: dict[str, list[float]] = {c: [] for c in CATEGORIES}
    for rec in path:
        parts[rec.category].append(rec.end_s - rec.start_s)
    out = {c: math.fsum(v) for c, v in parts.items()}
    total = makespan(records)
    out["idle"] = _gap(total, math.fsum(out.values()))
    return out


def _gap(total: float, busy: float) -> float:
    """What of ``total`` seconds ``busy`` leaves: 0 when it is the rounding of summing the
    records' times (below a billionth of the total), not a gap on the path."""
    gap = total - busy
    return gap if gap > total * 1e-9 else 0.0


def breakdown_by_layer(path: Sequence[Record], fill: int = 0) -> list[dict[str, Any]]:
    """The critical path cut by layer: per layer (-1 the embedding, ``num_layers`` the
    head) the seconds in each category, the gaps before its records as ``idle``, and the
    regime. A pipeline's first ``fill`` records of the path (the fill before its last stage
    takes over: :func:`pipeline_tail`) and the gaps before them count as ``bubble`` of
    their layers, as :func:`pipeline_breakdown` counts them. The layers' parts add up to
    :func:`breakdown`'s (:func:`pipeline_breakdown`'s)."""
    keys = (*CATEGORIES, "idle", "bubble") if fill else (*CATEGORIES, "idle")
    layers: dict[int, dict[str, float]] = {}
    prev_end = 0.0
    for i, rec in enumerate(path):
        parts = layers.setdefault(rec.layer, dict.fromkeys(keys, 0.0))
        gap, busy = max(0.0, rec.start_s - prev_end), rec.end_s - rec.start_s
        if i < fill:
            parts["bubble"] += gap + busy
        else:
            parts["idle"] += gap
            parts[rec.category] += busy
        prev_end = rec.end_s
    return [
        {"layer": layer, "breakdown_s": parts, "regime": regime(parts)}
        for layer, parts in sorted(layers.items())
    ]


def regime(parts: dict[str, float]) -> str:
    """What bounds the pass: the category with the largest share of the critical path (a
    pipeline's fill, ``bubble``, when it is larger than each)."""
    busiest = max(parts[c] for c in CATEGORIES)
    if parts.get("bubble", 0.0) > busiest:
        return REGIMES["bubble"]
    if busiest <= 0:
        return "idle"
    top = max(CATEGORIES, key=lambda c: (parts[c], -CATEGORIES.index(c)))
    return REGIMES[top]


def communication(records: Sequence[Record], rank: int = 0) -> dict[str, Any]:
    """Communication seen by one GPU: collectives and point-to-point transfers (kinds
    :data:`~tpsim.core.records.COMM_KINDS`), their count, the bytes it sent and their time,
    in total and per site. ``collectives`` counts collective calls; ``p2p`` (present only
    when there are any) counts sends and receives."""
    sites: dict[str, dict[str, Any]] = {}
    spans: dict[int, tuple[str, float, float]] = {}  # op -> (site, first start, last end)
    p2p = 0
    for rec in records:
        if rec.rank != rank or rec.kind not in COMM_KINDS:
            continue
        site = sites.setdefault(rec.site, {"count": 0, "bytes_sent_per_gpu": 0, "time_s": 0.0})
        if rec.op not in spans:
            site["count"] += 1
            p2p += rec.kind == "p2p"
            spans[rec.op] = (rec.site, rec.start_s, rec.end_s)
        else:
            name, start, end = spans[rec.op]
            spans[rec.op] = (name, start, max(end, rec.end_s))
        site["bytes_sent_per_gpu"] += rec.bytes
    for name, start, end in spans.values():
        sites[name]["time_s"] += end - start
    ordered = {k: sites[k] for k in sorted(sites)}
    out: dict[str, Any] = {
        "collectives": sum(s["count"] for s in ordered.values()) - p2p,
        "bytes_sent_per_gpu": sum(s["bytes_sent_per_gpu"] for s in ordered.values()),
        "time_s": math.fsum(s["time_s"] for s in ordered.values()),
        "by_site": ordered,
    }
    if p2p:
        out["p2p"] = p2p
    return out


def pipeline_tail(path: Sequence[Record], last_stage: set[int]) -> int:
    """Where the critical path reaches the last stage's ranks for good: the index of the
    send into them that it crosses by (their receive of it names it as its cause) and
    after which it never leaves them, else of its first record on them after which it
    never does (``len(path)`` when it ends elsewhere). The transfer into the last stage is
    the path's communication, not the fill's."""
    k = len(path)
    while k > 0 and path[k - 1].rank in last_stage:
        k -= 1
    if 0 < k < len(path) and path[k].kind == "p2p" and path[k - 1].kind == "p2p":
        k -= 1  # the receive's cause: the send whose bytes it waited for
    return k


def pipeline_breakdown(
    records: Sequence[Record], path: Sequence[Record], last_stage: set[int]
) -> dict[str, float]:
    """:func:`breakdown` of a pipeline, from its last stage's point of view: ``bubble`` is
    the time before the critical path reaches the last stage's ranks for good, through the
    send into them (:func:`pipeline_tail`: the pipeline filling, while that stage waits);
    the categories and ``idle`` are the rest of the path. The values sum to the
    makespan."""
    tail = path[pipeline_tail(path, last_stage) :]
    bubble = tail[0].start_s if tail else makespan(records)
    parts: dict[str, list[float]] = {c: [] for c in CATEGORIES}
    for rec in tail:
        parts[rec.category].append(rec.end_s - rec.start_s)
    out = {c: math.fsum(v) for c, v in parts.items()}
    total = makespan(records)
    out["idle"] = _gap(total, bubble + math.fsum(out.values()))
    out["bubble"] = bubble
    return out


def pipelined_tpot(latency_s: float, slowest_stage_s: float, in_flight: int) -> float:
    """Seconds between a batch's tokens when ``in_flight`` batches cross a pipeline at once,
    as serving engines run one (vLLM's virtual engines, the micro-batches TensorRT-LLM and
    SGLang keep in flight), from one such batch's step alone: ``latency_s``, of which its
    slowest stage held it ``slowest_stage_s`` (:func:`stage_times`). Each batch crosses the
    stages while the others occupy the rest, so no stage waits for a fill: a batch gets its
    next token after its own pass, or once the slowest stage has served every batch in
    flight, whichever is later."""
    return max(latency_s, in_flight * slowest_stage_s)


def stage_times(records: Sequence[Record], stages: Sequence[set[int]]) -> list[float]:
    """Seconds one batch spends in each pipeline stage (``stages``: each one's ranks): from
    the end of its receive of the previous stage's activations (on the first stage, its
    first kernel: the engine's host work for the step runs while the GPUs serve the other
    batches in flight) to its stage's last record, its send to the next included. What one
    batch in flight occupies the stage for."""
    out = []
    for k, ranks in enumerate(stages):
        mine = [r for r in records if r.rank in ranks]
        recvs = [r.end_s for r in mine if r.name == "pp_recv"]
        if k and recvs:
            start = max(recvs)
        else:  # the first stage (or one that receives nothing): from its first kernel
            start = min((r.start_s for r in mine if r.stream != "cpu"), default=0.0)
        out.append(max((r.end_s for r in mine), default=start) - start)
    return out


def pipeline_batches(batch: int, pp: int) -> tuple[int, int]:
    """``batch`` sequences of a replica in flight through ``pp`` stages: (batches in flight,
    sequences in each) — one batch per stage while there are sequences enough, whole
    sequences each (the remainder of ``batch`` left out)."""
    k = max(1, min(pp, batch))
    return k, max(1, batch // k)
