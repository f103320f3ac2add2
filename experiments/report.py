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
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from tpsim.core.engine.simulation import NET_STEP
from tpsim.core.records import Record
from tpsim.experiments.compare import (
    PARTS,
    Entry,
    facts,
    load_note,
    regime_text,
    table_rows,
    verdict,
)
from tpsim.experiments.plots.gantt_draw import NET_KIND
from tpsim.experiments.plots.gantt_view import gantt_view
from tpsim.experiments.plots.style import (
    CATEGORY_COLOURS,
    KIND_COLOURS,
    LINE_COLOURS,
    OTHER_COLOUR,
)
from tpsim.experiments.plots.style import REPORT_CSS as CSS

#: Colours per category and per record kind: the PNG charts' palette (colour-blind safe).
COLOURS = CATEGORY_COLOURS
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


def _plain(text: object) -> str:
    """Text for a plotly figure, shown as it is: plotly reads a subset of HTML in every
    label (``<a href>`` becomes a link, ``<b>`` bold), so a model or topology name from an
    input file is escaped and can put no link or markup in a report that circulates."""
    return html.escape(str(text), quote=False)


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 4)


def _lane(rank: int, stream: str, labels: Mapping[int, str]) -> str:
    return _plain(f"{labels.get(rank, f'GPU {rank}')} · {stream}")


def _kind(r: Record) -> str:
    return NET_KIND if r.kind == "collective" and r.detail.endswith(NET_STEP) else r.kind


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
    kinds = [*KIND_COLOURS, *sorted({_kind(r) for r in window} - KIND_COLOURS.keys())]
    for kind in kinds:  # one trace per kind, in the PNG Gantt's colours
        recs = [r for r in window if _kind(r) == kind]
        if not recs:
            continue
        crit = [r.id in run.critical for r in recs]
        fig.add_trace(
            go.Bar(
                name=_plain(kind),
                orientation="h",
                y=[_lane(r.rank, r.stream, labels) for r in recs],
                base=[_us(r.start_s) for r in recs],
                x=[max(_us(r.end_s) - _us(r.start_s), 1e-4) for r in recs],
                marker={
                    "color": KIND_COLOURS.get(kind, OTHER_COLOUR),
                    "opacity": [1.0 if c else OFF_PATH_OPACITY for c in crit],
                    "line": {"width": 0},
                },
                customdata=[
                    [
                        _plain(r.name),
                        _plain(r.detail or r.kind),
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
                    "text": _plain(f"host {host} below"),
                    "showarrow": False,
                    "xanchor": "right",
                    "yanchor": "top",
                }
            )
        previous = host
    fig.update_layout(
        barmode="overlay",
        height=max(320, 26 * len(lanes) + 140),
        margin={"l": 10, "r": 10, "t": 64, "b": 40},
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
        title=None,  # the note (which GPUs) is in the text above the chart, clear of the toolbar
    )
    return fig, len(window), total


def breakdown_figure(entries: Sequence[Entry]) -> go.Figure:
    """The critical path of each configuration split into its parts, in ms (stacked)."""
    fig = go.Figure()
    labels = [_plain(e.label) for e in entries]
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
SERIES_FIELDS = ("model", "topology", "nodes", "tp", "phase", "engine")


def _series_label(row: Mapping[str, Any], fields: Sequence[str]) -> str:
    words = {
        "nodes": lambda v: f"x{v}",
        "tp": lambda v: f"TP {v}",
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


def sweep_figure(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Tokens/s per GPU against batch, one line per configuration of a sweep (log axes).
    The legend names only what differs between the lines; lines with the same points are
    drawn once, named together."""
    ok = [r for r in rows if not r.get("error") and r.get("tokens_per_s_per_gpu")]
    fields = [f for f in SERIES_FIELDS if len({str(r.get(f, "")) for r in ok}) > 1] or ["tp"]
    series: dict[str, list[Mapping[str, Any]]] = {}
    for r in ok:
        series.setdefault(_series_label(r, SERIES_FIELDS), []).append(r)
    # one line per distinct set of points: identical series would hide each other
    lines: dict[tuple[tuple[Any, float], ...], list[str]] = {}
    points: dict[tuple[tuple[Any, float], ...], list[Mapping[str, Any]]] = {}
    for key in sorted(series):
        pts = sorted(series[key], key=lambda r: r["batch"])
        shape = tuple((r["batch"], round(float(r["tokens_per_s_per_gpu"]), 6)) for r in pts)
        lines.setdefault(shape, []).append(_series_label(pts[0], fields))
        points.setdefault(shape, pts)
    fig = go.Figure()
    for i, (shape, names) in enumerate(lines.items()):
        pts = points[shape]
        name = " = ".join(names) + (" (the same points)" if len(names) > 1 else "")
        fig.add_trace(
            go.Scatter(
                name=_plain(name),
                x=[r["batch"] for r in pts],
                y=[r["tokens_per_s_per_gpu"] for r in pts],
                mode="lines+markers",
                line={"color": LINE_COLOURS[i % len(LINE_COLOURS)]},
                customdata=[
                    [_plain(r.get("regime", "")), r.get("latency_s", 0) * 1e3] for r in pts
                ],
                hovertemplate="batch %{x}: %{y:,.1f} tokens/s per GPU<br>"
                "%{customdata[0]}, %{customdata[1]:.3f} ms<extra>%{fullData.name}</extra>",
            )
        )
    batches = sorted({float(r["batch"]) for r in ok})
    rates = [float(r["tokens_per_s_per_gpu"]) for r in ok]
    x_ticks = batches if len(batches) <= 10 else log_ticks(batches[0], batches[-1])
    y_ticks = log_ticks(min(rates, default=1.0), max(rates, default=1.0))
    shared = [
        f"{f} {_plain(ok[0].get(f))}"
        for f in SERIES_FIELDS
        if f not in fields and ok and ok[0].get(f) not in (None, "")
    ]
    fig.update_layout(
        height=520,
        title={"text": "; ".join(shared), "font": {"size": 13}, "x": 0, "xanchor": "left"},
        xaxis={
            "title": "batch",
            "type": "log",
            "tickvals": x_ticks,
            "ticktext": [f"{v:g}" for v in x_ticks],
            "automargin": True,
        },
        yaxis={
            "title": "tokens/s per GPU",
            "type": "log",
            "tickvals": y_ticks,
            "ticktext": [f"{v:,g}" for v in y_ticks],
            "automargin": True,
        },
        legend={"orientation": "h", "x": 0, "y": -0.18, "yanchor": "top"},
        margin={"l": 70, "r": 20, "t": 50, "b": 60},
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


#: The facts the report states before anything else, with their row names.
FACT_NAMES = {
    "model": "model",
    "topology": "topology",
    "phase": "phase",
    "batch": "batch",
    "prompt": "prompt length",
    "context": "context length",
    "dtype": "dtype",
    "engine": "engine",
}


def _row_facts(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The facts of a sweep's rows: each field's values, comma-separated."""
    out = {}
    for key, field in (
        *((k, k) for k in FACT_NAMES if k not in ("prompt", "context")),
        ("prompt", "prompt_len"),
        ("context", "context_len"),
    ):
        found = {r[field] for r in rows if r.get(field) not in (None, "")}
        values = [str(v) for v in sorted(found, key=lambda v: (isinstance(v, str), v))]
        if values:
            out[key] = ", ".join(values)
    return out


def _facts_table(
    entries: Sequence[Entry],
    command: str,
    version: str,
    sweep_rows: Sequence[Mapping[str, Any]] = (),
) -> str:
    """What the report is about and how it was made: model, topology, phase, batch, prompt
    and context length, dtype and engine, the command line and the tpsim version."""
    f = facts(entries) if entries else _row_facts(sweep_rows)
    rows = [(FACT_NAMES[k], html.escape(v)) for k, v in f.items()]
    if command:
        rows.append(("command", f"<code>{html.escape(command)}</code>"))
    rows.append(("tpsim version", html.escape(version or "unknown")))
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<div class="scroll"><table class="facts" id="facts">{body}</table></div>'


def _side_table(entries: Sequence[Entry]) -> str:
    """The side-by-side table (:func:`tpsim.experiments.compare.table_rows`) as HTML."""
    (_, labels), *rows = table_rows(entries)
    head = "<tr><th></th>" + "".join(f'<th scope="col">{html.escape(x)}</th>' for x in labels)
    out = [f"<thead>{head}</tr></thead><tbody>"]
    for name, cells in rows:
        if not cells:
            span = len(labels) + 1
            out.append(
                f'<tr class="section"><th colspan="{span}">'
                f"{html.escape(name.strip().rstrip(':'))}</th></tr>"
            )
            continue
        sub = ' class="sub"' if name.startswith(" ") else ""
        out.append(
            f'<tr><th scope="row"{sub}>{html.escape(name.strip())}</th>'
            + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
            + "</tr>"
        )
    out.append("</tbody>")
    return f'<div class="scroll"><table class="side" id="side-by-side">{"".join(out)}</table></div>'


def html_report(
    runs: Sequence[Run],
    *,
    question: str,
    sweep_rows: Sequence[Mapping[str, Any]] = (),
    command: str = "",
    version: str = "",
) -> str:
    """The whole report as one HTML string (deterministic: no timestamp; ``command`` and
    ``version`` say how it was made, and are the only text that is not the input's)."""
    entries = [r.entry for r in runs]
    parts: list[str] = []
    first = True

    def fig_html(fig: go.Figure, div: str) -> str:
        nonlocal first
        out = _div(fig, div, first)
        first = False
        return out

    parts.append(f"<h1>{html.escape(question)}</h1>")
    parts.append(_facts_table(entries, command, version, sweep_rows))
    if len(entries) > 1:
        note = load_note(entries)  # configurations that carry different loads say so first
        if note:
            parts.append(f'<p class="verdict">{html.escape(note)}</p>')
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
        parts.append(
            '<div class="scroll"><table class="assume">'
            f"<tr><th></th>{head}</tr>{rows}</table></div>"
        )
        parts.append("<h2>Side by side</h2>")
        parts.append(_side_table(entries))
        parts.append("<h2>Critical path</h2>")
        parts.append(fig_html(breakdown_figure(entries), "breakdown"))
    longest = max((r.end_s for run in runs for r in run.records), default=0.0)
    for i, run in enumerate(runs):
        fig, drawn, total = gantt_figure(run, _us(longest) * 1.02 if len(runs) > 1 else None)
        parts.append(f"<h2>Timeline: {html.escape(run.entry.label)}</h2>")
        which = gantt_view(run.records).note
        note = (
            (f"{which[0].upper()}{which[1:]}; " if which else "")
            + f"{drawn:,} records drawn"
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
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(question)}</title><style>{CSS}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )
