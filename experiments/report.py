"""A design-review report as one self-contained HTML file (``tpsim report``).

The question and its assumptions, the verdict in words, the side-by-side table, the
critical-path breakdown, an interactive Gantt per configuration (zoom, hover for op name,
shape, bytes, start and duration; the critical path drawn solid; one lane per GPU and stream;
host boundaries marked) and, for a sweep results file, its charts. Interactive charts are
plotly figures with plotly.js inlined once, so the file opens with no network. Element ids
are fixed, so the same input gives the same bytes. The figures are drawn in
:mod:`tpsim.experiments.plots.report_gantt` (the Gantts) and
:mod:`tpsim.experiments.plots.report_charts` (the breakdown and the sweep); this module
writes the page: the facts, the tables and the figures in their order.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from tpsim.experiments.compare import (
    Entry,
    assumption_keys,
    assumption_of,
    facts,
    load_note,
    regime_text,
    table_rows,
    verdict,
)
from tpsim.experiments.plots.gantt_view import gantt_view
from tpsim.experiments.plots.plotly_html import figure_div
from tpsim.experiments.plots.report_charts import breakdown_figure, sweep_figure
from tpsim.experiments.plots.report_charts import drawn as drawn_point
from tpsim.experiments.plots.report_gantt import Run, gantt_figure, us
from tpsim.experiments.plots.style import REPORT_CSS as CSS

__all__ = ["Run", "html_report"]


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
        out = figure_div(fig, div, include_plotlyjs=first)
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
        keys = assumption_keys(entries)
        head = "".join(f"<th>{html.escape(e.label)}</th>" for e in entries)
        rows = "".join(
            f"<tr><th>{k}</th>"
            + "".join(f"<td>{html.escape(assumption_of(e, k))}</td>" for e in entries)
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
        fig, drawn, total = gantt_figure(run, us(longest) * 1.02 if len(runs) > 1 else None)
        parts.append(f"<h2>Timeline: {html.escape(run.entry.label)}</h2>")
        which = gantt_view(run.records, critical=run.critical).note  # the ranks it drew
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
        failed = sum(1 for r in sweep_rows if r.get("error"))
        unfit = sum(1 for r in sweep_rows if not r.get("error") and not drawn_point(r))
        parts.append(
            f'<p class="note">{len(sweep_rows):,} points, {failed:,} with errors, {unfit:,} '
            "not fitting in memory (neither drawn).</p>"
        )
        parts.append(fig_html(sweep_figure(sweep_rows), "sweep"))
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(question)}</title><style>{CSS}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )
