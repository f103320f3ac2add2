"""What ``compare --gantt`` shows: several runs, one lane each, aligned where their times
can be read side by side.

Runs of different speeds reach a layer at different times, so one shared window or one
shared collapsed stretch shows different layers of each (a TP 8 lane hiding layers 2-78
beside a TP 16 lane hiding 1-55 and drawing 56-79 after the gap). Here each lane is moved
in time before the chart is drawn:

- the default view hides the same layers of every lane (the second to the one before the
  last), each lane's own stretch of time; its last layer and what follows start together
  after the gap, and the ticks there count from that start;
- ``layers=(a, b)`` keeps each lane's layers a..b and starts them together at 0.

``layers="all"`` needs no alignment: every lane on the step's own clock.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from tpsim.core.records import Record
from tpsim.experiments.plots.gantt_view import MIN_COLLAPSED, GanttView, Layers, gantt_view


def align_lanes(
    records: Sequence[Record],
    lanes: Sequence[int],
    layers: Layers,
    runs: Mapping[int, int] | None = None,
) -> tuple[list[Record], GanttView]:
    """The records moved run by run (each record's ``rank`` is its lane; ``runs``: the run
    of each lane, several lanes being one run's GPUs, which move together and keep their
    times relative to each other; default: a run per lane) and the view to draw them in;
    unchanged where the lanes hold different layers (pipeline stages) or too few to
    collapse. Raises ValueError as :func:`gantt_view` does."""
    by_lane: dict[int, list[Record]] = defaultdict(list)
    for r in records:
        by_lane[r.rank].append(r)
    run_of = {lane: (runs or {}).get(lane, lane) for lane in lanes}
    if isinstance(layers, tuple):
        return _from_layer(by_lane, lanes, layers, run_of)
    if layers is None:
        got = _collapsed(by_lane, lanes, run_of)
        if got is not None:
            return got
    return list(records), gantt_view(records, ranks=lanes, layers=layers)


def _shift(r: Record, dt: float) -> Record:
    return r._replace(start_s=r.start_s + dt, end_s=r.end_s + dt)


def _from_layer(
    by_lane: dict[int, list[Record]],
    lanes: Sequence[int],
    layers: tuple[int, int],
    run_of: Mapping[int, int],
) -> tuple[list[Record], GanttView]:
    """Each run's layers a..b, moved to start at 0 (its first GPU record of them, over all
    its lanes: a pipeline's later stage stays where it ran, after the earlier one)."""
    lo, hi = layers
    mine = {lane: [r for r in by_lane.get(lane, []) if lo <= r.layer <= hi] for lane in lanes}
    starts: dict[int, float] = {}
    for lane in lanes:
        recs = mine[lane]
        gpu = [r.start_s for r in recs if r.stream != "cpu"] or [r.start_s for r in recs]
        if gpu:
            run = run_of[lane]
            starts[run] = min(starts.get(run, math.inf), min(gpu))
    out: list[Record] = []
    for lane in lanes:
        if run_of[lane] not in starts:
            raise ValueError(f"gantt: layers={layers} selects no records of configuration {lane}")
        out += [_shift(r, -starts[run_of[lane]]) for r in mine[lane]]
    view = gantt_view(out, ranks=lanes, layers=layers)
    first = "the embedding" if lo < 0 else f"layer {lo}"
    return out, replace(view, axis_note=f"from the start of {first} in each configuration")


def _layer_starts(recs: Sequence[Record]) -> tuple[dict[int, float], set[int]]:
    """Each layer's first compute start (the head's layer apart)."""
    starts: dict[int, float] = {}
    head: set[int] = set()
    for r in recs:
        if r.stream != "compute" or r.layer < 0:
            continue
        starts[r.layer] = min(starts.get(r.layer, math.inf), r.start_s)
        if r.name == "lm_head":
            head.add(r.layer)
    return starts, head


def _collapsed(
    by_lane: dict[int, list[Record]], lanes: Sequence[int], run_of: Mapping[int, int]
) -> tuple[list[Record], GanttView] | None:
    """Every lane's second to last-but-one layers hidden; its last layer moved to start at
    the gap's end. None when the lanes' layers differ or are too few."""
    starts, blocks = {}, []
    for lane in lanes:
        s, head = _layer_starts(by_lane.get(lane, []))
        starts[lane] = s
        blocks.append(sorted(k for k in s if k not in head))
    if not blocks or any(b != blocks[0] for b in blocks) or len(blocks[0]) < MIN_COLLAPSED + 2:
        return None
    second, last = blocks[0][1], blocks[0][-1]
    hidden = set(blocks[0][1:-1])
    g0 = {lane: starts[lane][second] for lane in lanes}
    g1 = {lane: starts[lane][last] for lane in lanes}
    gap = (max(g0.values()), max(g1.values()))
    # one shift per run, its first lane's: its GPUs keep their times relative to each other
    first: dict[int, int] = {}
    for lane in lanes:
        first.setdefault(run_of[lane], lane)
    out: list[Record] = []
    for lane in lanes:
        dt = gap[1] - g1[first[run_of[lane]]]
        for r in by_lane[lane]:
            if r.layer in hidden:
                continue
            # the head's host work that overlaps the layers (vLLM's next-step host, started
            # with the first layers) stays where it ran, as the embedding's does
            early = (r.layer < 0 or r.layer > last) and r.start_s < g1[lane]
            late = not early and (r.layer >= last or r.layer < 0)
            out.append(_shift(r, dt) if late else r)
    t0 = min(r.start_s for r in out)
    t1 = max(r.end_s for r in out)
    view = GanttView(
        tuple(lanes),
        t0,
        t1,
        "",
        gap,
        (second, last - 1),
        hidden_s_by_rank=tuple((lane, g1[lane] - g0[lane]) for lane in lanes),
        axis_note=f"after the gap, from the start of layer {last} in each configuration",
    )
    return out, view


__all__ = ["align_lanes"]
