"""``tpsim calibrate --predict HELD.csv``: the fitted profile's predictions of points the fit
did not see, each with the parameters it rests on that the fitted points left undetermined.

A parameter the fit kept at the base value (no point depended on it, or its effect could not
be told from another's) still prices every point. Where a predicted point depends on it
otherwise than the fitted points do, the prediction rests on the base profile's estimate,
not on the measurements: the typical case is a fit on host-light points (TP 1,
weight-bound) asked for host-bound ones (more GPUs, smaller steps), where the host time per
step or per layer is the estimate. Each kept parameter is moved once (times and scales
x 4, efficiencies halved, a zero time set to the knob's typical size) and every point simulated
again, held out and fitted; a held-out point whose change differs from the fitted points'
(their geometric mean, which the fitted parameters would have absorbed) by more than
:data:`RESTS_ON` names the parameter and both changes.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tpsim import calibration
from tpsim.core.errors import ConfigError
from tpsim.experiments.calibrate.fit import Calibrated
from tpsim.experiments.calibrate.hidden_host import HIDDEN_HOST
from tpsim.experiments.calibrate.knobs import Knob, profile_yaml
from tpsim.experiments.calibrate.measurements import MeasuredPoint
from tpsim.experiments.calibrate.simulate import fits, step_time
from tpsim.outputs.export import write_text

#: A prediction that moves by more than this when a kept parameter moves rests on it.
RESTS_ON = 0.10


@dataclass(frozen=True)
class Reliance:
    """A kept parameter a prediction depends on: how it was moved and what that did."""

    knob: Knob
    kept_because: str  # the fit's reason for keeping it at the base value
    moved: str  # "x 4", "halved" or "set to 20 us"
    change: float  # the prediction moved by this fraction
    fitted_change: float  # the fitted points moved by this fraction (geometric mean)


@dataclass(frozen=True)
class Prediction:
    """One held-out point, its prediction (s) and the kept parameters it rests on."""

    point: MeasuredPoint
    predicted_s: float
    rests_on: tuple[Reliance, ...]
    #: whether its steps fit its GPUs' memory under the fitted profile (one that does not
    #: is priced as stated, but the engine cannot have run it so: the fit leaves such out)
    fits: bool = True

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted_s / self.point.measured_s - 1


#: How far a kept time or scale is moved: a base profile's estimate of host work can be off
#: by this much and more (TGI 1.2's Python per layer: 50 us estimated, 393 fitted).
FACTOR = 4


def _moved(knob: Knob, value: float, at_most: bool = False) -> tuple[float, str]:
    """The knob's value moved once, and how: an efficiency halved (a larger one can pass the
    peak), a time or a scale x :data:`FACTOR`, a zero time set to the knob's typical size;
    a host time taken at the most the points allow divided by :data:`FACTOR` (the host may
    be that much faster; it cannot be slower)."""
    if at_most:
        return value / FACTOR, f"/ {FACTOR}"
    if knob.name.endswith("efficiency_scale"):
        return value / 2, "halved"
    if value <= 0:
        return knob.shift, f"set to {knob.shift:g} {knob.unit}"
    return value * FACTOR, f"x {FACTOR}"


def _time(point: MeasuredPoint, profile: str, source: str) -> float:
    t = step_time(point, profile)
    if isinstance(t, str):  # tpsim refused the point: say which and why
        raise ConfigError(f"{source} row {point.row}: {t}")
    return t


def predict(
    result: Calibrated, profile: Path, held: list[MeasuredPoint], source: str
) -> list[Prediction]:
    """The points of ``held`` (read from ``source``) priced with the fitted profile written at
    ``profile``, each with the kept parameters its prediction rests on."""
    calib = calibration.profile(str(profile))
    kept = [f for f in result.parameters if not f.fitted]
    times = [_time(p, str(profile), source) for p in held]
    moved: list[tuple[Knob, str, str, list[float], float]] = []
    with tempfile.TemporaryDirectory(prefix="tpsim-predict-") as tmp:
        for f in kept:
            value, how = _moved(f.knob, f.knob.base(calib), f.at_most)
            path = Path(tmp) / f"{f.knob.name}.yaml"
            text = profile_yaml(f"{result.base}-{f.knob.name}", f"{f.knob.name} {how}",
                                str(profile), calib, [(f.knob, value, "sensitivity")])  # fmt: skip
            write_text(path, text)
            ratios = [_time(p, str(path), result.source) / t
                      for p, t in zip(result.points, result.predicted_s, strict=True)]  # fmt: skip
            fitted = math.exp(sum(map(math.log, ratios)) / len(ratios)) - 1
            ts = [_time(p, str(path), source) for p in held]
            why = (
                "taken at the most the fitted points allow"
                if f.at_most
                else f"kept at the base value: {f.reason}"
            )
            moved.append((f.knob, why, how, ts, fitted))
    out = []
    for i, (point, t) in enumerate(zip(held, times, strict=True)):
        rests = tuple(
            Reliance(knob, why, how, ts[i] / t - 1, fitted)
            for knob, why, how, ts, fitted in moved
            if abs((ts[i] / t) / (1 + fitted) - 1) > RESTS_ON
        )
        out.append(Prediction(point, t, rests, fits(point, str(profile))))
    return out


def predict_warnings(preds: list[Prediction], path: Path) -> list[str]:
    """What ``--predict``'s file holds that is not read as written: columns that are not
    tpsim's (a misspelt ``bacth`` left at its default), cells a phase does not read."""
    from tpsim.experiments.calibrate.checks import ignored_cells
    from tpsim.experiments.calibrate.measurements import COLUMNS, extra_columns

    columns = extra_columns(path)
    out = (
        [f"{path}: column{'s' if len(columns) > 1 else ''} {', '.join(map(repr, columns))} "
         f"not tpsim's ({', '.join(COLUMNS)}): not read"]
        if columns
        else []
    )  # fmt: skip
    return out + [f"{path} {w}" for w in ignored_cells([p.point for p in preds])]


def predicted_text(preds: list[Prediction], source: str, warnings: Sequence[str] = ()) -> str:
    """The predictions as ``tpsim calibrate`` prints them after its report."""
    lines = ["", f"predicted ({source}, points the fit did not see):"]
    lines += [f"  warning: {w}" for w in warnings]
    lines.append(f"{'row':>6}{'measured ms':>13}{'predicted ms':>14}{'error':>8}  point")
    for p in preds:
        m, t = p.point.measured_s * 1e3, p.predicted_s * 1e3
        lines.append(f"{p.point.row:>6}{m:>13.4g}{t:>14.4g}{p.error:>+8.1%}  {p.point.label}")
        if not p.fits:
            lines.append(f"{'':>8}does not fit in its GPUs' memory: the engine cannot have run "
                         "it as stated (the fit leaves such points out)")  # fmt: skip
        for r in p.rests_on:
            lines.append(f"{'':>8}rests on {r.knob.name} ({r.kept_because}): {r.moved}, it "
                         f"moves this point {r.change:+.0%}, the fitted ones "
                         f"{r.fitted_change:+.0%}")  # fmt: skip
    unsupported = sum(1 for p in preds if p.rests_on)
    if unsupported:
        lines.append(f"{unsupported} of {len(preds)} predictions rest on a parameter these "
                     "measurements did not determine: measure a point that depends on it "
                     "(the reasons say which)")  # fmt: skip
    if any(r.knob.name in HIDDEN_HOST and r.kept_because.startswith("kept")
           for p in preds for r in p.rests_on):  # fmt: skip
        lines.append("--hidden-host most takes the host time these points cannot see at "
                     "the most they allow: an upper bound for the predictions that rest "
                     "on it")  # fmt: skip
    return "\n".join(lines)


def predicted_dict(preds: list[Prediction]) -> list[dict[str, object]]:
    """The predictions as ``--json`` reports them."""
    return [
        {
            "row": p.point.row,
            "point": p.point.label,
            "measured_ms": p.point.measured_ms,
            "predicted_ms": p.predicted_s * 1e3,
            "error": p.error,
            "fits": p.fits,
            "extra": dict(p.point.extra),
            "rests_on": [
                {
                    "parameter": r.knob.name,
                    "kept_because": r.kept_because,
                    "moved": r.moved,
                    "change": r.change,
                    "fitted_change": r.fitted_change,
                }
                for r in p.rests_on
            ],
        }
        for p in preds
    ]


__all__ = ["RESTS_ON", "Prediction", "Reliance", "predict", "predicted_dict", "predicted_text"]
