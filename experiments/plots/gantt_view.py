"""What a Gantt chart shows, chosen from the record list before anything is drawn (pure, no
matplotlib): which ranks, which time window, and the stretch between the first layer and the
last that the default view collapses into one marked gap."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from tpsim.core.records import Record

MAX_DEFAULT_RANKS = 8  # draw every rank up to this many, else ranks 0, 1 and the last
#: The default view collapses the layers between the first and the last when it would hide
#: at least this many.
MIN_COLLAPSED = 3
ALL = "all"  # ``layers=ALL``: the whole step, every layer

#: What :func:`gantt_view` takes as ``layers``: None (the readable default: the first and
#: the last layer with those between collapsed), ``"all"`` (the whole step) or (a, b).
Layers = tuple[int, int] | Literal["all"] | None


@dataclass(frozen=True)
class GanttView:
    """What a Gantt chart shows: which ranks, which time window (seconds), a title note,
    and the stretch of time collapsed out of the window (with the layers it hides)."""

    ranks: tuple[int, ...]
    t0_s: float
    t1_s: float
    note: str  # "" or e.g. "showing 3 of 64 GPUs"
    gap_s: tuple[float, float] | None = None  # (start, end) of the collapsed stretch
    gap_layers: tuple[int, int] | None = None  # the layers it hides, first and last
    #: where the rows' runs differ in speed (compare's lanes): each rank's own hidden layers
    gap_layers_by_rank: tuple[tuple[int, int, int], ...] = ()
    #: lanes moved in time to hide the same layers (:mod:`.gantt_lanes`): each one's hidden
    #: seconds; the ticks after the gap then count from its end
    hidden_s_by_rank: tuple[tuple[int, float], ...] = ()
    #: what the time axis counts from, where not the step's start ("" for the step's clock)
    axis_note: str = ""


def gantt_view(
    records: Sequence[Record],
    *,
    ranks: Sequence[int] | None = None,
    layers: Layers = None,
    critical: Collection[int] = (),
) -> GanttView:
    """Choose ranks and time window as :func:`gantt` does (pure; raises ValueError).

    ``layers=None`` (the default) shows the whole step but collapses the layers between the
    first and the last into one marked gap when there are enough of them (a whole step of a
    deep model is a barcode); ``layers="all"`` shows the whole step uncollapsed;
    ``layers=(a, b)`` zooms on layers a..b."""
    all_ranks = sorted({r.rank for r in records})
    if not all_ranks:
        raise ValueError("gantt: no records to plot")
    if isinstance(layers, str) and layers != ALL:
        raise ValueError(f"gantt: layers={layers!r}: give (first, last), 'all' or None")
    identical = ranks is None and len(all_ranks) > 1 and _identical_ranks(records)
    if identical:
        shown = [all_ranks[0]]  # every rank runs the same timeline: one row group says it all
    elif ranks is None:
        shown = (
            all_ranks if len(all_ranks) <= MAX_DEFAULT_RANKS else [*all_ranks[:2], all_ranks[-1]]
        )
        shown = with_critical(records, shown, critical)
        if isinstance(layers, tuple):  # zoomed: the GPUs holding those layers, as compare's
            held = {r.rank for r in records if layers[0] <= r.layer <= layers[1]}
            shown = [k for k in shown if k in held] or sorted(held)[:1] or shown
    else:
        missing = sorted(set(ranks) - set(all_ranks))
        if missing:
            raise ValueError(f"gantt: ranks={list(ranks)} includes {missing}, not in the records")
        shown = sorted(set(ranks))
    if not shown:
        raise ValueError("gantt: ranks=[] selects nothing")
    shown_set = set(shown)
    window = [r for r in records if r.rank in shown_set]
    if isinstance(layers, tuple):
        lo, hi = layers
        window = [r for r in window if lo <= r.layer <= hi]
        if not window:
            raise ValueError(f"gantt: layers={layers} selects no records on ranks {shown}")
        # The CPU may launch far ahead of the GPU; frame the layers' kernels, not launches.
        window = [r for r in window if r.stream != "cpu"] or window
    t0 = min(r.start_s for r in window)
    t1 = max(r.end_s for r in window)
    note = f"showing {len(shown)} of {len(all_ranks)} GPUs" if len(shown) < len(all_ranks) else ""
    if identical:
        note = f"all {len(all_ranks)} GPUs run this same timeline"
    gap, hidden, by_rank = _collapse(window, shown) if layers is None else (None, None, ())
    return GanttView(tuple(shown), t0, t1, note, gap, hidden, by_rank)


def with_critical(
    records: Sequence[Record], shown: list[int], critical: Collection[int]
) -> list[int]:
    """``shown`` and the ranks the critical path (record ids ``critical``) runs longest on
    that it leaves out (a later pipeline stage's, say), up to :data:`MAX_DEFAULT_RANKS`
    ranks: the rail must not stop where the drawn ranks do."""
    if not critical:
        return shown
    crit = frozenset(critical)
    time: dict[int, float] = {}
    for r in records:
        if r.id in crit and r.rank not in shown:
            time[r.rank] = time.get(r.rank, 0.0) + r.end_s - r.start_s
    extra = sorted(time, key=lambda k: (-time[k], k))[: max(0, MAX_DEFAULT_RANKS - len(shown))]
    return sorted({*shown, *extra})


def _collapse(
    window: Sequence[Record], shown: Sequence[int]
) -> tuple[tuple[float, float] | None, tuple[int, int] | None, tuple[tuple[int, int, int], ...]]:
    """The stretch of time between the first layer and the last that the default view
    collapses, the layers it hides, and, where the ranks' runs differ in speed (compare's
    lanes), each rank's own hidden layers; (None, None, ()) when there is nothing worth
    hiding (few layers, or ranks holding different layers, as pipeline stages do)."""
    starts: dict[int, dict[int, float]] = defaultdict(dict)  # rank -> layer -> first start
    ends: dict[int, dict[int, float]] = defaultdict(dict)
    head: set[int] = set()
    for r in window:
        if r.stream != "compute" or r.layer < 0:
            continue
        s, e = starts[r.rank], ends[r.rank]
        s[r.layer] = min(s.get(r.layer, math.inf), r.start_s)
        e[r.layer] = max(e.get(r.layer, -math.inf), r.end_s)
        if r.name == "lm_head":
            head.add(r.layer)
    if set(starts) != set(shown):
        return None, None, ()
    blocks = [sorted(k for k in starts[rank] if k not in head) for rank in shown]
    if any(b != blocks[0] for b in blocks) or len(blocks[0]) < MIN_COLLAPSED + 2:
        return None, None, ()  # pipeline stages, or too few layers to be worth it
    first, second, last = blocks[0][0], blocks[0][1], blocks[0][-1]
    g0 = max(starts[rank][second] for rank in shown)
    g1 = min(starts[rank][last] for rank in shown)
    inside = [
        k for k in blocks[0] if all(g0 <= starts[rank][k] and ends[rank][k] <= g1 for rank in shown)
    ]
    if g1 <= g0 or len(inside) < MIN_COLLAPSED or first >= second:
        return None, None, ()
    own = {  # each rank's layers mostly inside the stretch (their middle in it): a layer
        # begun a microsecond before the stretch is hidden all but that sliver
        rank: [k for k in blocks[0] if g0 <= (starts[rank][k] + ends[rank][k]) / 2 <= g1]
        for rank in shown
    }
    ranges = {rank: (min(ks), max(ks)) for rank, ks in own.items()}
    if len(set(ranges.values())) == 1:
        return (g0, g1), ranges[shown[0]], ()
    return (g0, g1), (min(inside), max(inside)), tuple((r, *ranges[r]) for r in shown)


def _identical_ranks(records: Sequence[Record]) -> bool:
    """Whether every rank has the same records at the same times (a symmetric run)."""
    by_rank: dict[int, list[tuple[str, str, float, float]]] = defaultdict(list)
    for r in records:
        by_rank[r.rank].append((r.stream, r.name, r.start_s, r.end_s))
    first, *rest = (sorted(v) for v in by_rank.values())
    return all(
        len(v) == len(first)
        and all(
            a[:2] == b[:2]
            and math.isclose(a[2], b[2], rel_tol=1e-9, abs_tol=1e-12)
            and math.isclose(a[3], b[3], rel_tol=1e-9, abs_tol=1e-12)
            for a, b in zip(first, v, strict=True)
        )
        for v in rest
    )
