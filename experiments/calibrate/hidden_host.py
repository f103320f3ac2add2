"""``tpsim calibrate --hidden-host most``: a host time the points cannot determine, taken at
the most they allow.

At a GPU-bound point the host launches ahead of the GPU, so its time per step and per layer
hides under the GPU's: such points do not determine it, they bound it from above. With
``most`` the host times the fit kept at the base (:data:`HIDDEN_HOST`) are raised in turn,
each to the largest value at which, with those before it raised, no point's prediction has
moved by more than :data:`AT_MOST_MOVE` from the fit's (found by bisection in
``log(value + shift)``, the fit's own space): together they move none by more. The profile
writes them as upper bounds and ``--predict`` names the predictions that rest on them. The
leave-one-out errors keep the bounds found with every point (a point that sets a bound is
predicted with it: optimistic for that point).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from tpsim.experiments.calibrate.knobs import KNOBS
from tpsim.experiments.calibrate.simulate import Simulator

#: Host work the points cannot determine, in the order it takes the allowance: the Python
#: per layer first, the host work that hides (launches run ahead of the GPU), then the
#: pieces per step (scheduling, inputs, sampling, outputs), which run between steps and
#: mostly show. The slowest host the measurements admit decides the steps of more GPUs
#: (TP 1, weight-bound, fitted; TP 4, host-bound, predicted).
HIDDEN_HOST = ("layer_host_us", "step_host_scale")
#: The most that moves no point's prediction by more than this (below the spread of repeated
#: measurements of one point: TGI's mean and median steps differ by 1-2%).
AT_MOST_MOVE = 0.01
#: Bisection steps for that bound: its range halved this many times (about 0.3% of the value
#: over a factor of 30).
AT_MOST_STEPS = 10


def take_at_most(
    sim: Simulator,
    values: list[float],
    reasons: dict[str, str],
    bounds: tuple[np.ndarray, np.ndarray],
    shift: np.ndarray,
) -> dict[str, tuple[float, str]]:
    """Take each host time of :data:`HIDDEN_HOST` kept at the base (named in ``reasons``) at
    the most the points allow, in ``values`` (in place; every knob's value, ``bounds`` the
    knobs' lower and upper bounds, ``shift`` their log shifts); returns each so taken, with
    its value and what the warnings say of it. Every bound is taken against the fitted
    predictions, the second with the first raised, so that together they move no point by
    more than :data:`AT_MOST_MOVE`."""
    out = {}
    ref = sim.predict(values)
    for name in HIDDEN_HOST:
        if name not in reasons:
            continue
        i = next(k for k, knob in enumerate(KNOBS) if knob.name == name)
        x = most(sim, values, i, bounds, shift, ref)
        if x is None or x <= values[i]:
            continue
        knob = KNOBS[i]
        what = f"{x:g} {knob.unit}" if knob.unit == "us" else f"x {x:g}"
        values[i] = x
        out[name] = (x, (
            f"taken at the most these points allow, {what} (past it, with the host times "
            f"taken before it, a point moves by more than {AT_MOST_MOVE:.0%} from the fit): "
            "the host work hides under the GPU's here, so predictions that rest on it are "
            "upper bounds"))  # fmt: skip
    return out


def most(
    sim: Simulator,
    values: Sequence[float],
    i: int,
    bounds: tuple[np.ndarray, np.ndarray],
    shift: np.ndarray,
    ref: np.ndarray | None = None,
) -> float | None:
    """The largest value of knob ``i`` (the others at ``values``) that moves no point's
    prediction by more than :data:`AT_MOST_MOVE` from ``ref`` (default: the predictions at
    ``values``), rounded down: 0.01 us, or 4 significant digits; None when its upper bound
    moves none so much (the points do not bound it)."""
    lower, upper = bounds
    if ref is None:
        ref = sim.predict(values)

    def moves(u: float) -> bool:
        v = list(values)
        v[i] = float(np.clip(math.exp(u) - shift[i], lower[i], upper[i]))
        return bool(np.max(np.abs(sim.predict(v) / ref - 1)) > AT_MOST_MOVE)

    lo, hi = math.log(values[i] + shift[i]), math.log(upper[i] + shift[i])
    if hi <= lo or not moves(hi):
        return None
    for _ in range(AT_MOST_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if moves(mid) else (mid, hi)
    x = math.exp(lo) - shift[i]
    if KNOBS[i].unit == "us":
        return math.floor(x * 100) / 100
    digits = 3 - math.floor(math.log10(x))
    return math.floor(x * 10**digits) / 10**digits


__all__ = ["AT_MOST_MOVE", "HIDDEN_HOST", "most", "take_at_most"]
