"""Words for sweep rows: the regime with its margin, the assumptions each distinct
configuration of a sweep or study rests on (``tpsim sweep``, ``tpsim study``), and the
layouts that give the most tokens/s with pipelines kept full.

Rows are the flat dicts of a results file (tpsim.experiments.sweep.results); their breakdown
columns (``compute_s``, ...) give the regime's share as ``run`` prints it. A pipeline kept
full (a row with ``in_flight_*`` figures, :func:`~tpsim.experiments.sweep.rows.kept_full`)
has its regime as ``plan`` prices it: every stage busy with a batch, so no bubble, the
step's other parts in their shares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tpsim.core.config import Options
from tpsim.core.metrics import regime
from tpsim.experiments.compare_assumptions import assumptions
from tpsim.experiments.compare_rows import breakdown_from_row, config_from_row, replica_hosts
from tpsim.experiments.sweep.rows import kept_full, served
from tpsim.outputs.text import NEAR_TIE, is_near_tie, regime_text
from tpsim.outputs.text import regime_margin as report_margin
from tpsim.topologies.io import get_topology

Row = dict[str, Any]


def _summary(row: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a run's summary a regime's share is read from; for a pipeline kept full,
    its step without the bubble the other batches fill (as ``plan`` prices it)."""
    parts = breakdown_from_row(row)
    if not kept_full(row):
        return {"regime": row["regime"], "latency_s": row["latency_s"], "breakdown_s": parts}
    parts.pop("bubble")
    busy = sum(parts.values())
    return {"regime": regime(parts), "latency_s": busy or 1.0, "breakdown_s": parts}


def row_regime(row: Mapping[str, Any]) -> str:
    """A simulated row's regime: its step's, or with its pipeline kept full, without the
    bubble (:func:`_summary`)."""
    return str(_summary(row)["regime"])


def row_regime_text(row: Row) -> str:
    """``memory-bound (53 %; communication 47 %)`` for a simulated row; ``""`` without one."""
    if row.get("error") or not row.get("regime") or not row.get("latency_s"):
        return ""
    return regime_text(_summary(row))


def regime_margin(row: Row) -> tuple[float, str, float]:
    """The regime's share, the runner-up and its share (``""``, 0 without a runner-up)."""
    return report_margin(_summary(row))


def near_tie(row: Row) -> bool:
    """Whether the runner-up regime is within :data:`NEAR_TIE` of the regime."""
    share, _, share2 = regime_margin(row)
    return is_near_tie(share, share2)


def assumption_lines(rows: Sequence[Row]) -> list[str]:
    """One line per distinct set of assumptions of the simulated rows (GPU, links, network,
    engine, launch mode), saying which topologies and placements it covers."""
    seen: dict[tuple[Any, ...], dict[str, str]] = {}
    where: dict[tuple[str, ...], list[str]] = {}
    for r in sorted(rows, key=lambda r: (str(r["topology"]), r["nodes"], r["tp"])):
        if r.get("error") or not r.get("gpu"):
            continue
        hosts = replica_hosts(r)
        crosses = hosts > 1
        config = config_from_row(r)
        ran = config["launch_effective"]
        key = (r["topology"], r["nodes"], r["gpu"], r.get("engine"), r["launch"], ran, crosses)
        if key not in seen:
            graph = get_topology(str(r["topology"]), int(r["nodes"]))
            seen[key] = assumptions(graph, {"config": config})
        text = tuple(f"{k} {v}" for k, v in seen[key].items())
        place = f"{r['topology']}" + (f" x{r['nodes']} nodes" if r["nodes"] > 1 else "")
        if crosses:  # the TP group itself (with its attention-DP groups), or stages, replicas
            alone = int(r.get("hosts") or 1) > 1
            group = "TP x attention-DP group" if (r.get("attention_dp") or 1) > 1 else "TP group"
            spans = f"{group} over several hosts" if alone else f"layout over {hosts} hosts"
            place += f", {spans}"
        where.setdefault(text, [])
        if place not in where[text]:
            where[text].append(place)
    return [f"assumptions ({'; '.join(w)}): {'; '.join(t)}" for t, w in where.items()]


def layout_label(row: Row) -> str:
    """``TP 4``, ``TP 4 x PP 2``, ``TP 1 x ADP 8 EP 8``: a row's degrees above 1 (TP always),
    each expert's width split where the row gives it (``MoE-TP 1``) and an all-to-all other
    than NCCL's (``moe-a2a deepep``), so that two points of one TP and batch are told apart."""
    name = f"TP {row['tp']}"
    for key, short in (("attention_dp", "ADP"), ("pp", "PP"), ("dp", "DP")):
        if (row.get(key) or 1) > 1:
            name += f" x {short} {row[key]}"
    name += f" EP {row['ep']}" if (row.get("ep") or 1) > 1 else ""
    name += f" MoE-TP {row['moe_tp']}" if row.get("moe_tp") else ""
    a2a = row.get("moe_a2a") or Options.moe_a2a
    return name + (f" moe-a2a {a2a}" if a2a != Options.moe_a2a else "")


def _span(shares: Sequence[float]) -> str:
    """``59%-100%``, or ``58%`` where every share rounds alike (one point)."""
    low, high = f"{min(shares):.0%}", f"{max(shares):.0%}"
    return low if low == high else f"{low}-{high}"


def regime_summary(rows: Sequence[Row]) -> str:
    """``regime: memory-bound at 14 points (59-100 %), ...; 2 near ties: TP 16 batch 32
    memory-bound (52%; communication 45%)``: the regimes of a sweep with their shares."""
    done = [r for r in rows if row_regime_text(r)]
    if not done:
        return ""
    by: dict[str, list[float]] = {}
    for r in done:
        by.setdefault(row_regime(r), []).append(regime_margin(r)[0])
    parts = [
        f"{k} at {len(v)} point{'s' * (len(v) > 1)} ({_span(v)} of the path)"
        for k, v in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    ]
    ties = sorted((r for r in done if near_tie(r)), key=lambda r: (r["tp"], r["batch"]))
    text = "regime: " + ", ".join(parts)
    if ties:
        named = "; ".join(
            f"{layout_label(r)} batch {r['batch']} {row_regime_text(r)}" for r in ties[:4]
        )
        more = f"; {len(ties) - 4} more" if len(ties) > 4 else ""
        within = f"runner-up within {NEAR_TIE * 100:.0f} points"
        text += f"; {len(ties)} near tie{'s' * (len(ties) > 1)} ({within}): "
        text += named + more
    if any(kept_full(r) for r in done):
        text += "; pipelines kept full, their bubble filled by the other batches in flight"
    return text


def _rate_text(r: Row, rate: tuple[float, float]) -> str:
    each = f" each, {r['in_flight_batches']} in flight" if kept_full(r) else ""
    return (
        f"{layout_label(r)} batch {r['batch']}{each}: {rate[0]:,.0f} tokens/s "
        f"({rate[1]:,.1f} per GPU)"
    )


def best_summary(rows: Sequence[Row]) -> str:
    """``most tokens/s, pipelines full: TP 8 x PP 2 batch 64 each, 2 in flight: 8,468
    tokens/s (529.2 per GPU); most per GPU: ...``: the points of a sweep with pipelines
    that give the most tokens/s and per GPU, as ``compare`` and ``plan`` rank them (a
    pipeline with a batch in every stage; the file's ``tokens_per_s`` is one batch's step).
    ``""`` for a sweep without a pipeline kept full."""
    rated = [(r, rate) for r in rows if row_regime_text(r) and r.get("fits")
             for rate in [served(r)] if rate is not None]  # fmt: skip
    if not any(kept_full(r) for r, _ in rated):
        return ""
    best = max(rated, key=lambda t: (t[1][0], -t[1][1], t[0]["point_id"]))
    text = f"most tokens/s, pipelines full: {_rate_text(*best)}"
    per_gpu = max(rated, key=lambda t: (t[1][1], t[1][0], t[0]["point_id"]))
    if per_gpu[0] is not best[0]:
        text += f"; most per GPU: {_rate_text(*per_gpu)}"
    unfit = sum(1 for r in rows if kept_full(r) and not r.get("in_flight_fits") and r.get("fits"))
    if unfit:
        text += f"; {unfit} pipeline{'s' * (unfit > 1)} whose batches in flight do not fit left out"
    return text
