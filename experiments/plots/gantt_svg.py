"""The Gantt as an SVG with a hover tooltip on every bar (name, detail, bytes, start and
duration), the same bytes for the same chart."""

from __future__ import annotations

import html
import io
import re
from pathlib import Path

from matplotlib import rc_context
from matplotlib.patches import Rectangle
from tpsim.experiments.plots.gantt_draw import GanttChart
from tpsim.outputs.export import write_text

MAX_SVG_TOOLTIPS = 20_000  # bars given a hover tooltip in an SVG at most


def save_svg_with_tooltips(chart: GanttChart, path: str | Path) -> None:
    """SVG with a hover tooltip (``<title>``) on every bar: name, detail, bytes, start and
    duration. Transparent hit boxes carry the ids; their titles are added to the SVG text."""
    fig, ax, height = chart.fig, chart.ax, chart.height
    tips = {}
    for r, y, (x, w) in chart.bars[:MAX_SVG_TOOLTIPS]:
        gid = f"tpsim-rec-{r.id}"
        box = Rectangle((x, y - height / 2), w, height, facecolor="black", alpha=0.0, linewidth=0)
        box.set_gid(gid)
        ax.add_patch(box)
        tips[gid] = (
            f"{r.name}: {r.detail or r.kind}; {r.bytes:,} B; start {r.start_s * 1e6:,.2f} us; "
            f"duration {(r.end_s - r.start_s) * 1e6:,.2f} us"
        )
    buf = io.StringIO()
    with rc_context({"svg.hashsalt": "tpsim", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    fig.clear()
    text = re.sub(
        r'<g id="(tpsim-rec-\d+)">',
        lambda m: f'<g id="{m.group(1)}"><title>{html.escape(tips[m.group(1)])}</title>',
        buf.getvalue(),
    )
    write_text(path, text)
