"""The per-GPU Gantt chart to a file: one run (:func:`gantt`, ``run --gantt``) or several
runs' timelines one above the other (:func:`gantt_compare`, ``compare --gantt``): each run's
GPU 0 and the GPUs its critical path runs longest on (a later pipeline stage's).

The drawing is :mod:`.gantt_draw`'s (its words :mod:`.gantt_text`'s, its time axis
:mod:`.gantt_axis`'s, what it shows :mod:`.gantt_view`'s); an SVG gets hover tooltips
(:mod:`.gantt_svg`), a PNG is written by :func:`.save.save_figure`. Files are written
atomically; the same records give the same PNG/SVG bytes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from tpsim.core.records import Record
from tpsim.experiments.plots.gantt_draw import GanttChart, gantt_figure
from tpsim.experiments.plots.gantt_lanes import align_lanes
from tpsim.experiments.plots.gantt_svg import save_svg_with_tooltips
from tpsim.experiments.plots.gantt_view import Layers, with_critical
from tpsim.experiments.plots.save import figure_format, save_figure


def gantt(
    records: Sequence[Record],
    path: str | Path,
    *,
    title: str = "",
    ranks: Sequence[int] | None = None,
    layers: Layers = None,
    critical: Collection[int] = (),
    rank_labels: Mapping[int, str] | None = None,
) -> None:
    """Draw a per-GPU Gantt chart (CPU launch, compute and comm rows per rank) to PNG or SVG.

    By default the step is shown with the layers between the first and the last collapsed
    into one marked gap (the embedding, the first layer, "… layers 1–78 …", the last layer
    and the head); ``layers="all"`` draws the whole step; ``layers=(a, b)`` zooms the time
    axis to the compute/comm records of layers a..b inclusive (their launches only when the
    layers have no GPU records);
    ``ranks`` picks the ranks drawn (default: all up to 8, else 0, 1 and the last, with
    those the critical path runs longest on; zoomed, only those holding the layers);
    records whose id is in ``critical`` are underlined by a black rail; op names are
    written on bars wide enough to hold them, and an SVG gives every bar a hover tooltip
    (name, detail, bytes, start, duration). The figure is sized for a slide (12 inches wide,
    no text under 9 pt). The file is written atomically; the same input gives the same bytes.
    """
    figure_format(path)  # refuse a bad suffix before drawing
    chart = gantt_figure(
        records, title=title, ranks=ranks, layers=layers, critical=critical, rank_labels=rank_labels
    )
    if figure_format(path) == "svg":
        save_svg_with_tooltips(chart, path)
    else:
        save_figure(chart.fig, path)


def gantt_compare(
    runs: Sequence[tuple[str, Sequence[Record], Collection[int]]],
    path: str | Path,
    *,
    title: str = "",
    layers: Layers = None,
) -> None:
    """Several runs' timelines one above the other on one time axis (``compare --gantt``):
    each run is (label, records, critical path ids). A run gets a lane for its GPU 0 and
    one for each GPU its critical path runs longest on, up to 8 (:func:`compare_ranks`: a
    pipeline's later stages); a lane is named by the run's label, and by its GPU unless it
    is the run's GPU 0 alone. The lanes are aligned (:func:`.gantt_lanes.align_lanes`): by
    default each hides the same layers, its last layer starting after the gap with the
    others'; ``layers=(a, b)`` starts each one's layer a at 0 (raises ValueError where a
    run has none of them)."""
    figure_format(path)
    chart = compare_figure(runs, title=title, layers=layers)
    if figure_format(path) == "svg":
        save_svg_with_tooltips(chart, path)
    else:
        save_figure(chart.fig, path)


def compare_figure(
    runs: Sequence[tuple[str, Sequence[Record], Collection[int]]],
    *,
    title: str = "",
    layers: Layers = None,
) -> GanttChart:
    """The chart of :func:`gantt_compare`, drawn but not saved."""
    merged: list[Record] = []
    critical: set[int] = set()
    titles: dict[int, str] = {}
    run_of: dict[int, int] = {}  # lane -> its run: a run's lanes move together
    stride = 1 + max((r.id for _, recs, _ in runs for r in recs), default=0)
    for i, (label, recs, crit) in enumerate(runs):
        if isinstance(layers, tuple) and not any(layers[0] <= r.layer <= layers[1] for r in recs):
            raise ValueError(f"gantt: layers={layers} selects no records of configuration {i}")
        ranks = compare_ranks(recs, crit, layers)
        alone = ranks == [min(r.rank for r in recs)]  # GPU 0 alone: the label says it all
        lane = {rank: len(titles) + k for k, rank in enumerate(ranks)}
        for rank, k in lane.items():
            titles[k] = label if alone else f"{label} · GPU {rank}"
            run_of[k] = i
        for r in recs:
            if r.rank in lane:
                cause = r.cause + i * stride if r.cause >= 0 else -1
                merged.append(r._replace(id=r.id + i * stride, rank=lane[r.rank], cause=cause))
        critical.update(c + i * stride for c in crit)
    lanes = list(titles)
    aligned, view = align_lanes(merged, lanes, layers, run_of)
    return gantt_figure(
        aligned,
        title=title,
        ranks=lanes,
        layers=layers,
        critical=critical,
        lane_titles=titles,
        view=view,
        runs=run_of,
    )


def compare_ranks(
    records: Sequence[Record], critical: Collection[int], layers: Layers = None
) -> list[int]:
    """The GPUs of one run that ``compare --gantt`` draws: its first (GPU 0) and those its
    critical path runs longest on, as ``run --gantt`` adds them
    (:func:`.gantt_view.with_critical`): a pipeline's later stages, whose work GPU 0 alone
    never shows. Zoomed on ``layers=(a, b)``, only those holding records of them (where
    none does, the first GPU that does)."""
    first = min(r.rank for r in records)
    ranks = with_critical(records, [first], critical)
    if isinstance(layers, tuple):
        lo, hi = layers
        held = {r.rank for r in records if lo <= r.layer <= hi}
        ranks = [k for k in ranks if k in held] or [min(held, default=first)]
    return ranks
