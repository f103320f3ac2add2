"""The Gantt's words: text measured as Agg draws it, titles wrapped to fit, op names written
on the bars that hold them, and the layer labels along the top."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.font_manager import FontProperties
from matplotlib.transforms import blended_transform_factory, offset_copy
from tpsim.core.records import Record
from tpsim.experiments.plots.gantt_axis import GanttTimeAxis
from tpsim.experiments.plots.gantt_view import GanttView
from tpsim.experiments.plots.style import BAR_NAME_PT, DARK_KINDS, LABEL_PT

DPI = 150  # the Gantt's resolution, at which its text is measured
MAX_LAYER_LINES = 40  # draw layer boundaries only when fewer layers are visible
LABEL_GAP_PX = 22  # layer labels closer than this to the previous one are left out
MAX_BAR_NAMES = 600  # op names written on bars at most (the rest: zoom in, or the SVG's tooltips)


@lru_cache(maxsize=4096)
def text_px(text: str, size_pt: float, dpi: float = DPI) -> float:
    """Width in pixels of ``text`` at ``size_pt`` as Agg draws it (deterministic)."""
    renderer = RendererAgg(1, 1, dpi)
    width, _, _ = renderer.get_text_width_height_descent(
        text, FontProperties(size=size_pt), ismath=False
    )
    return float(width)


def wrap(text: str, size_pt: float, width_px: float) -> str:
    """``text``'s lines wrapped to fit ``width_px``: after a comma where one fits (a title's
    ``context 1024`` and ``engine vllm`` kept whole: it had broken them between name and
    value), else at a word boundary."""
    out = []
    for line in text.split("\n"):
        cur = ""
        for clause in line.split(", "):
            cand = f"{cur}, {clause}" if cur else clause
            if not cur or text_px(cand, size_pt) <= width_px:
                cur = cand
                continue
            out.extend(_words(cur + ",", size_pt, width_px))
            cur = clause
        out.extend(_words(cur, size_pt, width_px))
    return "\n".join(out)


def _words(line: str, size_pt: float, width_px: float) -> list[str]:
    """``line`` cut at word boundaries into lines of at most ``width_px``."""
    out, cur = [], ""
    for w in line.split(" "):
        cand = f"{cur} {w}" if cur else w
        if cur and text_px(cand, size_pt) > width_px:
            out.append(cur)
            cur = w
        else:
            cur = cand
    return [*out, cur]


def bar_names(
    ax: Any,
    shown: Sequence[tuple[Record, int, tuple[float, float]]],
    per_px: float,
    height: float,
    visible: tuple[float, float] = (-math.inf, math.inf),
) -> None:
    """Write each op's name inside the ``visible`` part of its bar (the axes' x range: a bar
    that starts before the window is named in what shows of it) where that holds it, as Agg
    measures it; a collective none of whose bars holds its step's name
    ("moe_combine.all_to_all[0]", after its fixed latency's bar) is named by its site
    ("moe_combine") across its bars where that fits."""
    labels: list[tuple[float, float, int, str, str]] = []  # x, width, row, text, kind
    steps: dict[tuple[int, int, int], list[tuple[float, float, Record]]] = {}
    named: set[tuple[int, int, int]] = set()  # collectives with a step named in full
    for r, y, (x0, w0) in shown:
        x = max(x0, visible[0])
        w = min(x0 + w0, visible[1]) - x
        if r.kind in ("launch", "dispatch") or w <= 0:
            continue
        key = (r.rank, y, r.op)
        if w / per_px >= text_px(r.name, BAR_NAME_PT) + 4:
            labels.append((x, w, y, r.name, r.kind))
            named.add(key)
        elif r.site and r.name.startswith(f"{r.site}."):
            steps.setdefault(key, []).append((x, w, r))
    for key, bars in steps.items():
        lo = min(x for x, _, _ in bars)
        width = max(x + w for x, w, _ in bars) - lo
        busy = sum(w for _, w, _ in bars)  # back to back, not split by the collapsed gap
        r = bars[0][2]
        if key in named or busy < 0.9 * width:
            continue
        if width / per_px >= text_px(r.site, BAR_NAME_PT) + 4:
            labels.append((lo, width, key[1], r.site, r.kind))
    for x, w, y, text, kind in labels[:MAX_BAR_NAMES]:
        ax.text(
            x + w / 2,
            y,
            text,
            fontsize=BAR_NAME_PT,
            color="white" if kind in DARK_KINDS else "black",
            ha="center",
            va="center",
            clip_on=True,
        )


def layer_starts(
    records: Sequence[Record], ranks: Sequence[int], t0: float, t1: float
) -> dict[int, float]:
    """Earliest start of each layer's compute records inside [t0, t1], on the first of
    ``ranks`` that runs the layer: the first rank's layers at its times, and a later
    pipeline stage's (which the first rank never runs) at that stage's."""
    per_rank: dict[int, dict[int, float]] = {rank: {} for rank in ranks}
    for r in records:
        starts = per_rank.get(r.rank)
        if starts is not None and r.stream == "compute" and r.start_s < starts.get(r.layer, 1e300):
            starts[r.layer] = r.start_s
    out: dict[int, float] = {}
    for rank in ranks:
        for layer, t in per_rank[rank].items():
            out.setdefault(layer, t)
    return {layer: t for layer, t in sorted(out.items()) if t0 <= t <= t1}


def layer_labels(
    ax: Any,
    records: Sequence[Record],
    view: GanttView,
    axis: GanttTimeAxis,
    per_px: float,
    *,
    comparison: bool,
) -> None:
    """A dotted line at the start of each visible layer (outside the collapsed gap) and its
    label above the axes ("emb", "L3", "head") where it clears the next label; none when
    too many layers are visible, nor in a ``comparison`` (each run has its own layer times).
    A layer starts where rank 0 (else the first rank drawn) starts it, or, one it does not
    run (a later pipeline stage's), where the first drawn rank that runs it does."""
    t0, t1, gap = view.t0_s, view.t1_s, view.gap_s
    first = 0 if 0 in view.ranks else view.ranks[0]
    ranks = [first, *(k for k in view.ranks if k != first)]
    boundaries = layer_starts(records, ranks, t0, t1)
    if gap is not None:
        boundaries = {k: t for k, t in boundaries.items() if not gap[0] <= t < gap[1]}
    if comparison:  # a comparison: each run has its own layer times, mark none
        boundaries = {}
    heads = {r.layer for r in records if r.name == "lm_head"}
    if 0 < len(boundaries) < MAX_LAYER_LINES:
        # a fixed 2 points above the axes: a fraction of the axes' height (1.01) rose into
        # the title over a tall chart (8 GPUs' rows: 20 px, the labels over its last line)
        top = offset_copy(
            blended_transform_factory(ax.transData, ax.transAxes), ax.figure, y=2, units="points"
        )
        # Right to left, so a layer's label wins over the embedding's just before it.
        next_label = math.inf
        for layer, t in sorted(boundaries.items(), reverse=True):
            x = axis.x(t)
            ax.axvline(x, color="#888888", linewidth=0.6, linestyle=":", zorder=0)
            text = "emb" if layer < 0 else "head" if layer in heads else f"L{layer}"
            width = max(LABEL_GAP_PX, text_px(text, LABEL_PT) + 8)
            if (next_label - x) / per_px < width:
                continue  # it would touch the label after it: the line alone marks it
            next_label = x
            ax.text(
                x,
                1.0,
                text,
                transform=top,
                fontsize=LABEL_PT,
                color="#555555",
                ha="left",
                va="bottom",
            )
