"""A design-review report as one self-contained HTML file (``tpsim report``).

The question and its assumptions, the verdict in words, the side-by-side table, the
critical-path breakdown, an interactive Gantt per configuration (zoom, hover for op name,
shape, bytes, start and duration; the critical path drawn solid; one lane per GPU and stream;
host boundaries marked) and, for a sweep results file, its charts. Interactive charts are
plotly figures with plotly.js inlined once, so the file opens with no network. Element ids
are fixed, so the same input gives the same bytes.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from tpsim.core.records import Record
from tpsim.experiments.compare import PARTS, Entry, regime_text, table, verdict
from tpsim.experiments.plots.gantt import gantt_view

#: Bar colours per category (the PNG Gantt's palette, colour-blind safe).
COLOURS = {
    "compute": "#0072B2",
    "memory": "#56B4E9",
    "communication": "#D55E00",
    "launch_overhead": "#999999",
    "host": "#CC79A7",
    "bubble": "#F0E442",
    "idle": "#DDDDDD",
}
STREAM_ORDER = ("cpu", "compute", "comm")
#: Records drawn per Gantt at most (a whole pass of a large model is millions): beyond it,
#: the Gantt shows the first layers and says so.
MAX_BARS = 20_000
#: Records off the critical path are drawn faded; the path stays solid (outlines would
#: turn a whole pass into a black smear at the default zoom).
OFF_PATH_OPACITY = 0.35


@dataclass(frozen=True)
class Run:
    """One configuration of the report: its comparison entry and its records."""

    entry: Entry
    records: Sequence[Record]
    critical: frozenset[int]
    rank_labels: Mapping[int, str]


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 4)


def _lane(rank: int, stream: str, labels: Mapping[int, str]) -> str:
    return f"{labels.get(rank, f'GPU {rank}')} · {stream}"


def _host(label: str) -> str:
    return label.split(".", 1)[0] if "." in label else ""


def gantt_figure(run: Run, x_max_us: float | None = None) -> tuple[go.Figure, int, int]:
    """The interactive Gantt of one run: (figure, bars drawn, records in the run). The time
    axis runs to ``x_max_us`` when given (the configurations of a report share one scale)."""
    view = gantt_view(run.records)
    shown = list(view.ranks)
    keep = set(shown)
    window = sorted((r for r in run.records if r.rank in keep), key=lambda r: (r.start_s, r.id))
    total = len(window)
    if total > MAX_BARS:
        window = window[:MAX_BARS]
    labels = run.rank_labels
    lanes = [_lane(r, s, labels) for r in shown for s in STREAM_ORDER]
    fig = go.Figure()
    for cat in PARTS[:5]:
        recs = [r for r in window if r.category == cat]
        if not recs:
            continue
        crit = [r.id in run.critical for r in recs]
        fig.add_trace(
            go.Bar(
                name=cat,
                orientation="h",
                y=[_lane(r.rank, r.stream, labels) for r in recs],
                base=[_us(r.start_s) for r in recs],
                x=[max(_us(r.end_s) - _us(r.start_s), 1e-4) for r in recs],
                marker={
                    "color": COLOURS[cat],
                    "opacity": [1.0 if c else OFF_PATH_OPACITY for c in crit],
                    "line": {"width": 0},
                },
                customdata=[
                    [
                        r.name,
                        r.detail or r.kind,
                        f"{r.bytes:,}",
                        "yes" if c else "no",
                        f"{_us(r.start_s):,.2f}",
                        f"{_us(r.end_s - r.start_s):,.2f}",
                    ]
                    for r, c in zip(recs, crit, strict=True)
                ],
                hovertemplate="<b>%{customdata[0]}</b><br>%{customdata[1]}<br>"
                "bytes %{customdata[2]}<br>start %{customdata[4]} us<br>"
                "duration %{customdata[5]} us<br>critical path: %{customdata[3]}"
                "<extra>%{fullData.name}</extra>",
            )
        )
    # host boundaries: a line between the lanes of GPUs on different hosts
    shapes, notes = [], []
    previous = None
    for i, rank in enumerate(shown):
        host = _host(labels.get(rank, ""))
        if previous is not None and host != previous:
            y = len(lanes) - 1 - i * len(STREAM_ORDER) + 0.5
            shapes.append(
                {
                    "type": "line",
                    "xref": "paper",
                    "x0": 0,
                    "x1": 1,
                    "yref": "y",
                    "y0": y,
                    "y1": y,
                    "line": {"color": "#000000", "width": 2, "dash": "dash"},
                }
            )
            notes.append(
                {
                    "xref": "paper",
                    "x": 1,
                    "y": y,
                    "yref": "y",
                    "text": f"host {host} below",
                    "showarrow": False,
                    "xanchor": "right",
                    "yanchor": "top",
                }
            )
        previous = host
    fig.update_layout(
        barmode="overlay",
        height=max(320, 26 * len(lanes) + 140),
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
        xaxis={
            "title": "time (us)",
            "rangeslider": {"visible": False},
            **({"range": [0, x_max_us]} if x_max_us else {}),
        },
        yaxis={
            "categoryorder": "array",
            "categoryarray": list(reversed(lanes)),
            "automargin": True,
        },
        legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
        shapes=shapes,
        annotations=notes,
        hoverlabel={"namelength": -1},
        title={"text": view.note, "font": {"size": 12}, "x": 1, "xanchor": "right"}
        if view.note
        else None,
    )
    return fig, len(window), total


def breakdown_figure(entries: Sequence[Entry]) -> go.Figure:
    """The critical path of each configuration split into its parts, in ms (stacked)."""
    fig = go.Figure()
    labels = [e.label for e in entries]
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
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
        xaxis={"title": "critical path (ms)", "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "automargin": True},
        legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
    )
    return fig


def sweep_figure(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Tokens/s per GPU against batch, one line per configuration of a sweep (log axes)."""
    series: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("error") or not r.get("tokens_per_s_per_gpu"):
            continue
        key = f"{r['model']} {r['topology']} x{r['nodes']} TP {r['tp']} {r['phase']}" + (
            f" {r['engine']}" if r.get("engine") else ""
        )
        series.setdefault(key, []).append(r)
    fig = go.Figure()
    for key in sorted(series):
        pts = sorted(series[key], key=lambda r: r["batch"])
        fig.add_trace(
            go.Scatter(
                name=key,
                x=[r["batch"] for r in pts],
                y=[r["tokens_per_s_per_gpu"] for r in pts],
                mode="lines+markers",
                customdata=[[r.get("regime", ""), r.get("latency_s", 0) * 1e3] for r in pts],
                hovertemplate="batch %{x}: %{y:,.1f} tokens/s per GPU<br>"
                "%{customdata[0]}, %{customdata[1]:.3f} ms<extra>%{fullData.name}</extra>",
            )
        )
    fig.update_layout(
        height=480,
        xaxis={"title": "batch", "type": "log"},
        yaxis={"title": "tokens/s per GPU", "type": "log"},
        legend={"orientation": "h", "y": -0.2},
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
    )
    return fig


def _div(fig: go.Figure, div: str, first: bool) -> str:
    return str(
        fig.to_html(
            full_html=False,
            include_plotlyjs=first,
            div_id=div,
            config={"displaylogo": False, "responsive": True},
        )
    )


CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
.verdict { font-size: 1.1em; background: #f3f6fa; border-left: 4px solid #0072B2;
  padding: .8em 1em; }
pre { background: #fafafa; padding: .8em; overflow-x: auto; font-size: .85em; }
table.assume td, table.assume th { padding: .2em .8em; text-align: left;
  border-bottom: 1px solid #ddd; }
.note { color: #666; font-size: .9em; }
"""


def html_report(
    runs: Sequence[Run],
    *,
    question: str,
    sweep_rows: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The whole report as one HTML string (deterministic)."""
    entries = [r.entry for r in runs]
    parts: list[str] = []
    first = True

    def fig_html(fig: go.Figure, div: str) -> str:
        nonlocal first
        out = _div(fig, div, first)
        first = False
        return out

    parts.append(f"<h1>{html.escape(question)}</h1>")
    if len(entries) > 1:
        parts.append(f'<p class="verdict">{html.escape(verdict(entries))}</p>')
    elif entries:
        s = entries[0].summary
        per = "step" if s["config"]["workload"]["phase"] == "decode" else "pass"
        parts.append(
            '<p class="verdict">'
            + html.escape(
                f"{entries[0].label}: {s['latency_s'] * 1e3:.3g} ms per {per}, "
                f"{s['tokens_per_s']:,.0f} tokens/s ({s['tokens_per_s_per_gpu']:,.1f} per GPU), "
                f"{regime_text(s)}."
            )
            + "</p>"
        )
    if entries:
        parts.append("<h2>Assumptions</h2>")
        keys = ("gpu", "links", "network", "engine", "launch")
        head = "".join(f"<th>{html.escape(e.label)}</th>" for e in entries)
        rows = "".join(
            f"<tr><th>{k}</th>"
            + "".join(f"<td>{html.escape(e.assumptions[k])}</td>" for e in entries)
            + "</tr>"
            for k in keys
        )
        parts.append(f'<table class="assume"><tr><th></th>{head}</tr>{rows}</table>')
        parts.append("<h2>Side by side</h2>")
        parts.append(f"<pre>{html.escape(table(entries))}</pre>")
        parts.append("<h2>Critical path</h2>")
        parts.append(fig_html(breakdown_figure(entries), "breakdown"))
    longest = max((r.end_s for run in runs for r in run.records), default=0.0)
    for i, run in enumerate(runs):
        fig, drawn, total = gantt_figure(run, _us(longest) * 1.02 if len(runs) > 1 else None)
        parts.append(f"<h2>Timeline: {html.escape(run.entry.label)}</h2>")
        note = (
            f"{drawn:,} records drawn"
            + (f" (the first {drawn:,} of {total:,})" if drawn < total else "")
            + "; bars on the critical path solid, the others faded; drag to zoom, "
            "double-click to reset, hover a bar for its op"
            + ("; every configuration on the same time scale." if len(runs) > 1 else ".")
        )
        parts.append(f'<p class="note">{html.escape(note)}</p>')
        parts.append(fig_html(fig, f"gantt{i}"))
    if sweep_rows:
        parts.append("<h2>Sweep</h2>")
        ok = [r for r in sweep_rows if not r.get("error")]
        parts.append(
            f'<p class="note">{len(sweep_rows):,} points, {len(sweep_rows) - len(ok):,} '
            "with errors.</p>"
        )
        parts.append(fig_html(sweep_figure(sweep_rows), "sweep"))
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(question)}</title><style>{CSS}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )
