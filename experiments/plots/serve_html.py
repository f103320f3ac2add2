"""``tpsim report --serve``: serving runs (``tpsim serve --out requests.jsonl``) as one
self-contained HTML page: the runs' vllm-bench figures side by side, the CDFs of TTFT and
TPOT, and each request's TTFT against its arrival time (a queue that keeps up stays flat;
one that does not climbs). plotly.js is inlined once and element ids are fixed, so the same
files give the same bytes."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from tpsim.experiments.plots.plotly_html import figure_div
from tpsim.experiments.plots.style import LINE_COLOURS, REPORT_CSS
from tpsim.experiments.serve.requests_file import ServedRequest, stats

#: The table's rows: (label, key, format).
ROWS = (
    ("requests", "completed", "{:.0f}"),
    ("duration (s)", "duration_s", "{:.2f}"),
    ("request throughput (req/s)", "request_throughput", "{:.2f}"),
    ("output throughput (tok/s)", "output_throughput", "{:,.1f}"),
    ("total token throughput (tok/s)", "total_token_throughput", "{:,.1f}"),
    *(
        (f"{s} {m.upper()} (ms)", f"{s.lower()}_{m}_ms", "{:.2f}")
        for m in ("ttft", "tpot", "e2el")
        for s in ("mean", "median", "P90", "P99")
    ),
)


def _cdf(runs: Sequence[tuple[str, list[ServedRequest]]]) -> go.Figure:
    fig = go.Figure()
    for k, (label, reqs) in enumerate(runs):
        colour = LINE_COLOURS[k % len(LINE_COLOURS)]
        for metric, dash in (("ttft", "solid"), ("tpot", "dot")):
            vals = [r.ttft_s if metric == "ttft" else r.tpot_s for r in reqs]
            xs = np.sort(np.asarray([v for v in vals if v is not None]) * 1e3)
            if not len(xs):
                continue
            ys = np.arange(1, len(xs) + 1) / len(xs)
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    name=f"{label} {metric.upper()}",
                    line={"color": colour, "dash": dash},
                )
            )
    fig.update_layout(
        title="TTFT (solid) and TPOT (dotted): share of requests at most x",
        xaxis={"title": "ms", "type": "log"},
        yaxis={"title": "share", "range": [0, 1]},
        template="simple_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return fig


def _over_time(runs: Sequence[tuple[str, list[ServedRequest]]]) -> go.Figure:
    fig = go.Figure()
    for k, (label, reqs) in enumerate(runs):
        fig.add_trace(
            go.Scatter(
                x=[r.arrival_s for r in reqs],
                y=[r.ttft_s * 1e3 for r in reqs],
                mode="markers",
                name=label,
                marker={"size": 4, "color": LINE_COLOURS[k % len(LINE_COLOURS)]},
            )
        )
    fig.update_layout(
        title="Each request's TTFT against when it arrived",
        xaxis={"title": "arrival (s)"},
        yaxis={"title": "TTFT (ms)"},
        template="simple_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return fig


def serve_report(
    runs: Sequence[tuple[str, list[ServedRequest]]], *, command: str = "", version: str = ""
) -> str:
    """The page of ``runs`` (label, requests)."""
    figures = [stats(reqs) for _, reqs in runs]
    title = (
        ("Serving run: " + runs[0][0])
        if len(runs) == 1
        else ("Serving runs: " + " against ".join(label for label, _ in runs))
    )
    head = "".join(f'<th scope="col">{html.escape(label)}</th>' for label, _ in runs)
    body = "".join(
        f'<tr><th scope="row">{html.escape(name)}</th>'
        + "".join(f"<td>{fmt.format(f[key])}</td>" for f in figures)
        + "</tr>"
        for name, key, fmt in ROWS
    )
    table = (
        f'<div class="scroll"><table class="side" id="serve-table"><thead><tr><th></th>'
        f"{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )
    note = (
        "Definitions as vllm bench serve: TTFT from arrival to the first token, TPOT "
        "(latency - TTFT) / (output tokens - 1); throughputs from the first arrival to the "
        "last completion. ITL needs every token's time, which the lines do not keep."
    )
    made = []
    if command:
        made.append(f"<tr><th>command</th><td><code>{html.escape(command)}</code></td></tr>")
    made.append(f"<tr><th>tpsim version</th><td>{html.escape(version or 'unknown')}</td></tr>")
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f'<div class="scroll"><table class="facts" id="facts">{"".join(made)}</table></div>',
        "<h2>Side by side</h2>",
        table,
        f'<p class="note">{html.escape(note)}</p>',
        "<h2>Latency distributions</h2>",
        figure_div(_cdf(runs), "cdf", include_plotlyjs=True),
        "<h2>Over the run</h2>",
        figure_div(_over_time(runs), "over-time", include_plotlyjs=False),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{REPORT_CSS}</style></head>\n"
        "<body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


__all__ = ["serve_report"]
