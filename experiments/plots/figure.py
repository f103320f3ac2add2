"""What every sweep figure shares (sweep_plots.py, sweep_regime_map.py): the font size,
which rows are drawn, the names of layouts, a bare ``Figure`` with a canvas, compact tick
labels and a legend outside the axes.

Rows are the flat dicts of a results file (tpsim.experiments.sweep.results).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.text import Text
from tpsim.core.config import Options
from tpsim.core.errors import INPUT_ERRORS
from tpsim.experiments.sweep.rows import kept_full, served

Row = dict[str, Any]

FONT = 11  # readable on a slide


def ok(row: Row) -> bool:
    """A row with a simulated result that fits in memory."""
    return not row.get("error") and row.get("fits") is True and bool(row.get("latency_s"))


def rated(row: Row) -> bool:
    """A row drawn with its tokens/s (:func:`~tpsim.experiments.sweep.rows.served`): it fits,
    and a pipeline's batches in flight fit too."""
    return ok(row) and served(row) is not None


def rate(row: Row) -> tuple[float, float]:
    """A :func:`rated` row's tokens/s and tokens/s per GPU, pipelines kept full."""
    got = served(row)
    assert got is not None, row["point_id"]
    return got


#: How a figure says its pipelines' tokens/s are counted, as ``compare`` words it.
PIPELINES_FULL = "pipelines full"


def rate_words(rows: Sequence[Row]) -> str:
    """``", pipelines full"`` where a row drawn is a pipeline kept full, else ``""``."""
    return f", {PIPELINES_FULL}" if any(kept_full(r) for r in rows if rated(r)) else ""


def pipeline_note(rows: Sequence[Row]) -> str:
    """What a figure's title adds about its pipelines: how their tokens/s are counted, and
    those whose batches in flight do not fit, or that a file from before these figures
    gives as one batch crossing the stages (``""`` without a pipeline)."""
    notes = []
    if any(kept_full(r) for r in rows if rated(r)):
        notes.append("pipelines full: a batch in every stage, as compare and plan count them")
    unfit = sum(1 for r in rows if ok(r) and kept_full(r) and served(r) is None)
    if unfit:
        notes.append(f"{unfit} pipeline{'s' * (unfit > 1)} whose batches in flight do not fit")
    older = sum(1 for r in rows if ok(r) and unfilled(r))
    if older:
        notes.append(
            f"{older} pipeline{'s' * (older > 1)} from a file without in_flight columns: "
            "one batch crossing the stages"
        )
    return "\n" + "; ".join(notes) if notes else ""


def unfilled(row: Row) -> bool:
    """A pipeline's decode of one micro-batch, on an engine that keeps a batch per stage in
    flight, without the figures of it kept full: a row of a file written before them."""
    if kept_full(row) or (row.get("pp") or 1) <= 1 or (row.get("micro_batches") or 1) != 1:
        return False
    return row.get("phase") == "decode" and not _splits(str(row.get("engine") or Options.engine))


@lru_cache(maxsize=16)
def _splits(engine: str) -> bool:
    """Whether an engine splits each batch into micro-batches itself (FasterTransformer),
    running one batch through its stages at a time (unknown engines: as if it did)."""
    try:
        return Options(engine=engine).calibration.engine.pipeline_split_tokens is not None
    except INPUT_ERRORS:
        return True


def outcome(row: Row) -> int:
    """0: a result that fits; 1: a result that does not fit; 2: an error. Where several rows
    fall in one cell of a figure (placements of a layout), the lowest is drawn."""
    if row.get("error"):
        return 2
    return 0 if ok(row) else 1


Layout = tuple[int, int, int, int, int, int, int]
#: The layout of one TP group, and what a layout's parts beyond TP are then.
PLAIN: tuple[int, ...] = (1, 1, 1, 1, 1, 0)


def layout_of(r: Row) -> Layout:
    """(tp, pp, dp, micro_batches, ep, attention_dp, moe_tp) of a results row (older rows:
    one TP group; moe_tp 0: derived, as the sweep's axis gives it)."""
    return (r["tp"], r.get("pp") or 1, r.get("dp") or 1, r.get("micro_batches") or 1,
            r.get("ep") or 1, r.get("attention_dp") or 1, r.get("moe_tp") or 0)  # fmt: skip


def layout_name(key: Layout) -> str:
    """``TP 4``, ``TP 4 x PP 2 (4 mb)``, ``TP 2 x DP 2``, ``TP 1 x ADP 8 EP 8``, and where
    the row gave each expert's width split, ``TP 1 x ADP 8 EP 8 MoE-TP 1``."""
    return " ".join(_layout_parts(key))


def _layout_parts(key: Layout) -> list[str]:
    tp, pp, dp, mb, ep, adp, moe_tp = key
    parts = [f"TP {tp}"] + [
        f"x {k} {v}" for k, v in (("ADP", adp), ("PP", pp), ("DP", dp)) if v > 1
    ]
    parts += [f"EP {ep}"] if ep > 1 else []
    parts += [f"MoE-TP {moe_tp}"] if moe_tp else []
    return parts + ([f"({mb} mb)"] if mb > 1 else [])


def layout_lines(key: Layout, width: int) -> str:
    """:func:`layout_name` in lines of at most ``width`` characters where it can, broken
    between its parts (``TP 1 x ADP 8 EP 8`` / ``MoE-TP 1``), never inside one."""
    lines: list[str] = []
    for part in _layout_parts(key):
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += " " + part
        else:
            lines.append(part)
    return "\n".join(lines)


def fewest_hosts(rows: list[Row] | tuple[Row, ...]) -> dict[tuple[Any, Layout], int]:
    """(batch, layout) -> the fewest hosts any row of it spans: a sweep over
    ``--gpus-per-node`` places one layout more ways than one (TP 8 in one host, or 4 + 4
    over two)."""
    out: dict[tuple[Any, Layout], int] = {}
    for r in rows:
        key = (r["batch"], layout_of(r))
        out[key] = min(out.get(key, 1 << 30), r.get("hosts") or 1)
    return out


def spread_over(r: Row, fewest: dict[tuple[Any, Layout], int]) -> int:
    """The hosts a row's layout is spread over beyond the fewest its sweep placed it in
    (0: the fewest), which the figures draw apart ("split over 2 hosts")."""
    hosts = r.get("hosts") or 1
    return hosts if hosts > fewest.get((r["batch"], layout_of(r)), hosts) else 0


def bare_figure(width: float, height: float) -> Figure:
    """A ``Figure`` of ``width`` x ``height`` inches on an Agg canvas (no pyplot)."""
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)  # a canvas, so text extents can be measured before saving
    return fig


def suptitle_inside(fig: Figure, text: str, *, fontsize: float, x: float = 0.5) -> Text:
    """``fig.suptitle(text)`` centred at ``x`` (a fraction of the figure's width), each line
    wrapped at word boundaries, as Agg measures it, to stay inside the figure: a one-panel
    figure is narrower than its title, which ran off both edges."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    font = FontProperties(size=fontsize)
    room = 2 * min(x, 1 - x) * fig.bbox.width * 0.98

    def width(line: str) -> float:
        return float(renderer.get_text_width_height_descent(line, font, ismath=False)[0])

    lines: list[str] = []
    for line in text.split("\n"):
        cur = ""
        for word in line.split(" "):
            cand = f"{cur} {word}" if cur else word
            if cur and width(cand) > room:
                lines.append(cur)
                cur = word
            else:
                cur = cand
        lines.append(cur)
    return fig.suptitle("\n".join(lines), fontsize=fontsize, x=x)


def compact(x: float, _pos: object = None) -> str:
    """``15k``, ``1.2M``, ``0.5``: a tick label read at a glance."""
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def legend_outside(ax: Any, **kw: Any) -> None:
    """The legend of ``ax`` to the right of its axes, top-aligned."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, **kw)
