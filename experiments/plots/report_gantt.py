"""The interactive Gantt of ``tpsim report``: one plotly figure per configuration, a lane
per GPU and stream, one trace per record kind in the PNG Gantt's colours, the critical path
solid and the rest faded, a hover text per bar (op name, shape, bytes, start, duration) and
host boundaries marked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
from tpsim.core.records import Record
from tpsim.experiments.compare import Entry
from tpsim.experiments.plots.gantt_draw import bar_kind
from tpsim.experiments.plots.gantt_view import gantt_view
from tpsim.experiments.plots.report_charts import plain
from tpsim.experiments.plots.style import KIND_COLOURS, OTHER_COLOUR
from tpsim.outputs.export import shown_stream

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


def us(seconds: float) -> float:
    return round(seconds * 1e6, 4)


def _lane(rank: int, stream: str, labels: Mapping[int, str]) -> str:
    return plain(f"{labels.get(rank, f'GPU {rank}')} · {stream}")


def _kind(r: Record) -> str:
    return bar_kind(r)  # the PNG Gantt's kinds: the MoE all-to-all's steps apart too


def _host(label: str) -> str:
    return label.split(".", 1)[0] if "." in label else ""


def gantt_figure(run: Run, x_max_us: float | None = None) -> tuple[go.Figure, int, int]:
    """The interactive Gantt of one run: (figure, bars drawn, records in the run). The time
    axis runs to ``x_max_us`` when given (the configurations of a report share one scale)."""
    view = gantt_view(run.records, critical=run.critical)  # the ranks run --gantt draws
    shown = list(view.ranks)
    keep = set(shown)
    window = sorted((r for r in run.records if r.rank in keep), key=lambda r: (r.start_s, r.id))
    total = len(window)
    if total > MAX_BARS:
        window = window[:MAX_BARS]
    labels = run.rank_labels
    # a pipeline's sends and receives: a lane of their own, as the PNG Gantt draws them
    p2p = any(shown_stream(r) == "p2p" for r in window)
    streams = (*STREAM_ORDER, "p2p") if p2p else STREAM_ORDER
    lanes = [_lane(r, s, labels) for r in shown for s in streams]
    fig = go.Figure()
    kinds = [*KIND_COLOURS, *sorted({_kind(r) for r in window} - KIND_COLOURS.keys())]
    for kind in kinds:  # one trace per kind, in the PNG Gantt's colours
        recs = [r for r in window if _kind(r) == kind]
        if not recs:
            continue
        crit = [r.id in run.critical for r in recs]
        fig.add_trace(
            go.Bar(
                name=plain(kind),
                orientation="h",
                y=[_lane(r.rank, shown_stream(r), labels) for r in recs],
                base=[us(r.start_s) for r in recs],
                x=[max(us(r.end_s) - us(r.start_s), 1e-4) for r in recs],
                marker={
                    "color": KIND_COLOURS.get(kind, OTHER_COLOUR),
                    "opacity": [1.0 if c else OFF_PATH_OPACITY for c in crit],
                    "line": {"width": 0},
                },
                customdata=[
                    [
                        plain(r.name),
                        plain(r.detail or r.kind),
                        f"{r.bytes:,}",
                        "yes" if c else "no",
                        f"{us(r.start_s):,.2f}",
                        f"{us(r.end_s - r.start_s):,.2f}",
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
            y = len(lanes) - 1 - i * len(streams) + 0.5
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
                    "text": plain(f"host {host} below"),
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
            "title": "time (µs)",
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
