"""What a measurements file is checked for before a fit (``tpsim calibrate``): points the
GPUs cannot hold as stated (left out), one point measured twice or more (said, and refused
when it is the only one), cells a phase does not read (said), and times below the least the
step can take (refused)."""

from __future__ import annotations

from collections.abc import Sequence

from tpsim.core.errors import ConfigError
from tpsim.experiments.calibrate.measurements import MeasuredPoint
from tpsim.experiments.calibrate.simulate import fits


def checked(
    points: list[MeasuredPoint], base: str, source: str
) -> tuple[list[MeasuredPoint], list[str]]:
    """The points a fit can use under profile ``base`` and the warnings about the file."""
    points, said = runnable(points, base, source)
    if len({p.same_point for p in points}) < 2:  # of the points that can run as stated
        raise ConfigError(
            f"{source}: rows {', '.join(str(p.row) for p in points)} all measure one point; "
            "at least 2 different points are needed (one left out at a time)"
        )
    check_physical(points, source)
    return points, said + repeated(points) + ignored_cells(points)


def repeated(points: Sequence[MeasuredPoint]) -> list[str]:
    """A warning naming rows that measure the same point: the fit counts each as another
    point, so its uncertainties and leave-one-out errors come out too small."""
    rows: dict[tuple[object, ...], list[int]] = {}
    for p in points:
        rows.setdefault(p.same_point, []).append(p.row)
    same = [r for r in rows.values() if len(r) > 1]
    if not same:
        return []
    listed = "; ".join(", ".join(map(str, r)) for r in same)
    out = [
        f"rows {listed} measure the same point: the fit counts each as another point, so "
        "its uncertainties and leave-one-out errors are too small; put repeated runs of a "
        "point in one row (their mean)"
    ]
    ms = {p.row: p.measured_ms for p in points}
    for r in same:
        lo, hi = min(ms[x] for x in r), max(ms[x] for x in r)
        if hi > CONFLICT * lo:
            out.append(
                f"rows {', '.join(map(str, r))} measure the same point {lo:g} to {hi:g} ms apart "
                f"({hi / lo:.2g}x): a row's configuration is not what ran (a misspelt column "
                "left at its default?)"
            )
    return out


#: Times of one point further apart than this are not one configuration measured twice.
CONFLICT = 1.2


def runnable(
    points: list[MeasuredPoint], base: str, source: str
) -> tuple[list[MeasuredPoint], list[str]]:
    """The points whose steps fit their GPUs' memory under ``base``, and the warning naming
    the others: the engine cannot have run those as stated (it holds back sequences, or
    preempts them, until the cache fits), so their times say nothing about the stated step."""
    rows = [p.row for p in points if not fits(p, base)]
    if not rows:
        return points, []
    listed = ", ".join(map(str, rows))
    kept = [p for p in points if p.row not in rows]
    if len(kept) < 2:
        raise ConfigError(
            f"{source}: rows {listed} do not fit in their GPUs' memory under {base}; "
            f"{len(kept)} point{'s' if len(kept) != 1 else ''} left, at least 2 are needed"
        )
    return kept, [
        f"row{'s' if len(rows) > 1 else ''} {listed}: the weights, KV cache and activations do "
        f"not fit in the GPUs' memory under {base}, so the engine cannot have run "
        f"{'them' if len(rows) > 1 else 'it'} as stated (it holds back or preempts "
        "sequences); left out of the fit"
    ]


def ignored_cells(points: list[MeasuredPoint]) -> list[str]:
    """A warning per row with a cell its phase does not read (``tpsim run`` warns alike)."""
    return [
        f"row {p.row}: {col}={value} does not apply to {p.workload.phase} (it uses "
        f"{instead}); ignored"
        for p in points
        for col, value, instead in p.ignored
    ]


def least_time_s(point: MeasuredPoint) -> float | None:
    """The least time the point can take on its GPUs (``tpsim check-claim``'s bound: its
    weights and KV cache read at peak HBM bandwidth, its FLOPs at the peak, its all-reduces
    at the links' rate); a request, its prefill's and every decode step's. None where the
    bound does not model the model (latent attention)."""
    from tpsim.experiments.claim import lower_bound

    steps = [(point.workload, 1)] + (
        [(point.decode, point.decode_steps)] if point.decode_steps else []
    )
    try:
        return sum(
            n * lower_bound(point.spec, point.graph, point.tp, w, dtype=point.dtype).step_s
            for w, n in steps
        )
    except ConfigError:
        return None


def check_physical(points: list[MeasuredPoint], source: str) -> None:
    """Refuse a row measured faster than its step can possibly run (a time in seconds, a
    wrong model, GPU or TP degree): no profile can fit it."""
    for p in points:
        least = least_time_s(p)
        if least is None or p.measured_s >= least:
            continue
        hint = "; a time in seconds?" if p.measured_s * 1e3 >= least else ""
        raise ConfigError(
            f"{source} row {p.row}, measured_ms={p.measured_ms:g}: below {least * 1e3:.4g} ms, "
            f"the least time its step can take on its GPUs (check-claim's bound){hint}"
        )


__all__ = ["check_physical", "checked", "ignored_cells", "least_time_s", "repeated", "runnable"]
