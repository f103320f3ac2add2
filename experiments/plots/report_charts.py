"""The charts of ``tpsim report`` beside its Gantts, as plotly figures: the critical path
of each configuration by part, and a sweep's tokens/s per GPU against batch (a pipeline's
kept full, as ``compare`` counts it); and the one way their labels are written
(:func:`plain`)."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from tpsim.experiments.compare import PARTS, Entry
from tpsim.experiments.plots.style import CATEGORY_COLOURS, LINE_COLOURS
from tpsim.experiments.plots.words import row_regime
from tpsim.experiments.sweep.rows import kept_full, served

#: Colours per category: the PNG charts' palette (colour-blind safe).
COLOURS = CATEGORY_COLOURS


def plain(text: object) -> str:
    """Text for a plotly figure, shown as it is: plotly reads a subset of HTML in every
    label (``<a href>`` becomes a link, ``<b>`` bold), so a model or topology name from an
    input file is escaped and can put no link or markup in a report that circulates."""
    return html.escape(str(text), quote=False)


def breakdown_figure(entries: Sequence[Entry]) -> go.Figure:
    """The critical path of each configuration split into its parts, in ms (stacked)."""
    fig = go.Figure()
    labels = [plain(e.label) for e in entries]
    for part in PARTS:
        vals = [e.summary["breakdown_s"].get(part, 0.0) * 1e3 for e in entries]
        if any(v > 0 for v in vals):
            fig.add_trace(
                go.Bar(
                    name=part,
                    orientation="h",
                    y=labels,
                    x=vals,
                    marker={"color": COLOURS[part]},
                    hovertemplate="%{y}: " + part + " %{x:.3f} ms<extra></extra>",
                )
            )
    fig.update_layout(
        barmode="stack",
        height=120 + 50 * len(entries),
        margin={"l": 10, "r": 20, "t": 64, "b": 50},
        xaxis={"title": "critical path (ms)", "rangemode": "tozero", "automargin": True},
        yaxis={"autorange": "reversed", "automargin": True},
        legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
    )
    return fig


#: The fields that name a sweep's series, in the legend's order.
SERIES_FIELDS = ("model", "topology", "nodes", "tp", "pp", "dp", "attention_dp", "ep",
                 "moe_tp", "phase", "prompt_len", "context_len", "dtype", "launch", "engine",
                 "expert_skew", "moe_a2a")  # fmt: skip
#: Values a field takes when it says nothing (left out of the title when shared; moe_tp 0:
#: derived, and an older file's row without the column says nothing either).
_QUIET = {"pp": 1, "dp": 1, "attention_dp": 1, "ep": 1, "moe_tp": 0, "expert_skew": 0,
          "moe_a2a": "nccl"}  # fmt: skip


def _series_label(row: Mapping[str, Any], fields: Sequence[str]) -> str:
    words = {
        "nodes": lambda v: f"x{v}",
        "tp": lambda v: f"TP {v}",
        "pp": lambda v: f"PP {v}",
        "dp": lambda v: f"DP {v}",
        "attention_dp": lambda v: f"ADP {v}",
        "ep": lambda v: f"EP {v}",
        "prompt_len": lambda v: f"prompt {v}",
        "context_len": lambda v: f"context {v}",
        "launch": lambda v: f"launch {v}",
        "expert_skew": lambda v: f"skew {v}",
        "moe_tp": lambda v: f"MoE-TP {v}" if v else "MoE-TP derived",
        "moe_a2a": lambda v: f"moe-a2a {v}",
    }
    return " ".join(words.get(f, str)(row.get(f)) for f in fields if row.get(f) not in (None, ""))


def log_ticks(lo: float, hi: float) -> list[float]:
    """Labelled ticks of a log axis from ``lo`` to ``hi``: 1, 2 and 5 times powers of ten
    (only the powers of ten when that gives more than eight), never every minor digit."""
    if lo <= 0 or hi <= 0:
        return []
    out: list[float] = []
    for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0**k
            if lo / 1.2 <= v <= hi * 1.2:
                out.append(float(f"{v:.6g}"))
    if len(out) > 8:
        out = [v for v in out if f"{v:.6g}".lstrip("0.").startswith("1")]
    return out


def _log_axis(title: str, ticks: Sequence[float], fmt: str) -> dict[str, Any]:
    """A logarithmic axis labelled at ``ticks`` (each written with ``fmt``)."""
    return {
        "title": title,
        "type": "log",
        "tickvals": list(ticks),
        "ticktext": [fmt.format(v) for v in ticks],
        "automargin": True,
    }


_DASHES = ("solid", "dash", "dot", "dashdot")
_SYMBOLS = ("circle", "square", "diamond", "triangle-up")


def _per_gpu(row: Mapping[str, Any]) -> float | None:
    """A row's tokens/s per GPU, a pipeline's kept full (:func:`served`); None where it has
    none, or its batches in flight do not fit."""
    if kept_full(row):
        got = served(row)
        return None if got is None else got[1]
    return float(row.get("tokens_per_s_per_gpu") or 0.0) or None


def _rate(row: Mapping[str, Any]) -> float:
    """:func:`_per_gpu` of a row drawn (one that has it)."""
    return _per_gpu(row) or 0.0


def _regime(row: Mapping[str, Any]) -> str:
    """A row's regime for its hover text, a pipeline's kept full (``""`` without one)."""
    return plain(row_regime(row)) if row.get("regime") else ""


def _step_s(row: Mapping[str, Any]) -> float:
    """Seconds between a sequence's tokens (decode; a pass for prefill): a pipeline's with
    its stages kept full, its TPOT (``in_flight_tpot_s``)."""
    return float(row["in_flight_tpot_s"] if kept_full(row) else row.get("latency_s") or 0.0)


def drawn(row: Mapping[str, Any]) -> bool:
    """Whether the sweep chart draws ``row``: it ran and its step fits the GPUs' memory, a
    pipeline's batches in flight too (the sweep's PNG plots leave the others out too)."""
    if kept_full(row) and not row.get("in_flight_fits"):
        return False
    return not row.get("error") and row.get("fits") is not False


def sweep_figure(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Tokens/s per GPU against batch, one line per configuration of a sweep (log axes), a
    pipeline's with its stages kept full (``in_flight_*``; one whose batches in flight do
    not fit is left out, as is a point that does not fit its GPUs' memory: ``fits`` false).
    The legend names only what differs between the lines; lines with the same points are
    drawn once, named together."""
    ok = [r for r in rows if drawn(r) and _per_gpu(r)]
    full = any(kept_full(r) for r in ok)
    fields = [f for f in SERIES_FIELDS if len({str(r.get(f, "")) for r in ok}) > 1] or ["tp"]
    series: dict[str, list[Mapping[str, Any]]] = {}
    for r in ok:
        series.setdefault(_series_label(r, SERIES_FIELDS), []).append(r)
    # one line per distinct set of points: identical series would hide each other
    lines: dict[tuple[tuple[Any, float], ...], list[str]] = {}
    points: dict[tuple[tuple[Any, float], ...], list[Mapping[str, Any]]] = {}
    for key in sorted(series):
        pts = sorted(series[key], key=lambda r: r["batch"])
        shape = tuple((r["batch"], round(_rate(r), 6)) for r in pts)
        lines.setdefault(shape, []).append(_series_label(pts[0], fields))
        points.setdefault(shape, pts)
    fig = go.Figure()
    for i, (shape, names) in enumerate(lines.items()):
        pts = points[shape]
        name = " = ".join(names) + (" (the same points)" if len(names) > 1 else "")
        fig.add_trace(
            go.Scatter(
                name=plain(name),
                x=[r["batch"] for r in pts],
                y=[_rate(r) for r in pts],
                mode="lines+markers",
                # past the palette's 7 colours, each round of them in its own dash and marker
                line={
                    "color": LINE_COLOURS[i % len(LINE_COLOURS)],
                    "dash": _DASHES[i // len(LINE_COLOURS) % len(_DASHES)],
                },
                marker={"symbol": _SYMBOLS[i // len(LINE_COLOURS) % len(_SYMBOLS)]},
                customdata=[[_regime(r), _step_s(r) * 1e3] for r in pts],
                hovertemplate="batch %{x}: %{y:,.1f} tokens/s per GPU"
                + (" (pipeline full)" if any(kept_full(r) for r in pts) else "")
                + "<br>"
                "%{customdata[0]}, %{customdata[1]:.3f} ms<extra>%{fullData.name}</extra>",
            )
        )
    batches = sorted({float(r["batch"]) for r in ok})
    rates = [_rate(r) for r in ok]
    x_ticks = batches if len(batches) <= 10 else log_ticks(batches[0], batches[-1])
    y_ticks = log_ticks(min(rates, default=1.0), max(rates, default=1.0))
    shared = [
        f"{f} {plain(ok[0].get(f))}"
        for f in SERIES_FIELDS
        if f not in fields
        and ok
        and ok[0].get(f) not in (None, "")
        and (f not in _QUIET or ok[0][f] != _QUIET[f])
    ]
    fig.update_layout(
        height=520,
        title={"text": "; ".join(shared), "font": {"size": 13}, "x": 0, "xanchor": "left"},
        xaxis=_log_axis("batch", x_ticks, "{:g}"),
        yaxis=_log_axis(
            "tokens/s per GPU" + (", pipelines full" if full else ""), y_ticks, "{:,g}"
        ),
        legend={"orientation": "h", "x": 0, "y": -0.18, "yanchor": "top"},
        margin={"l": 70, "r": 20, "t": 50, "b": 60},
    )
    return fig
