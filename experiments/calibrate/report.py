"""What ``tpsim calibrate`` prints: the parameters with their uncertainties, the warnings, the
in-sample and leave-one-out errors and the worst points (text, or a dict for ``--json``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpsim.experiments.calibrate.fit import Calibrated

#: Points listed by how far the fit misses them.
WORST = 3


def _num(x: float, digits: int = 4) -> str:
    if math.isnan(x):
        return "-"
    return "0" if abs(x) < 5e-6 else f"{x:.{digits}g}"


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def _worst(c: Calibrated) -> list[int]:
    errors = c.errors()
    return sorted(range(len(errors)), key=lambda i: -abs(errors[i]))[:WORST]


def report_text(c: Calibrated, out: Path | None = None) -> str:
    fitted = [f for f in c.parameters if f.fitted]
    lines = [
        f"tpsim calibrate: {len(c.points)} points of {c.source} against engine {c.base}",
        f"fit: soft-L1 least squares on log(simulated / measured), {len(fitted)} of "
        f"{len(c.parameters)} parameters, {c.iterations} iterations, {c.simulations} simulations",
        "",
        f"{'parameter':<28}{'unit':<6}{'base':>9}{'fitted':>10}{'+/- 1 sd':>10}  bounds",
    ]
    for f in c.parameters:
        bounds = f"{f.lower:.3g} to {f.upper:.3g}" if f.fitted else "not identifiable: kept"
        if f.at_most:
            bounds = "not identifiable: the most the points allow"
        if f.at_bound:
            bounds += " (at a bound)"
        lines.append(
            f"{f.knob.name:<28}{f.knob.unit:<6}{_num(f.base):>9}{_num(f.value):>10}"
            f"{_num(f.sigma, 2):>10}  {bounds}"
        )
    if c.warnings:
        lines += ["", "warnings:", *(f"  {w}" for w in c.warnings)]
    lines += ["", f"{'error, simulated / measured - 1':<34}{'mean |e|':>9}  worst"]
    for label, which in (("in sample", "fitted"), ("leaving each point out", "loo")):
        errors = c.errors(which)
        i = max(range(len(errors)), key=lambda k: abs(errors[k]))
        mean = _mean_abs(errors)
        lines.append(f"  {label:<32}{mean:>9.1%}  {_pct(errors[i])} (row {c.points[i].row})")
    lines += ["", "worst points:", f"  {'row':>4}{'measured ms':>13}{'fitted ms':>11}"
              f"{'error':>8}{'left out':>10}  point"]  # fmt: skip
    fit, loo = c.errors(), c.errors("loo")
    for i in _worst(c):
        p = c.points[i]
        lines.append(
            f"  {p.row:>4}{p.measured_s * 1e3:>13.4g}{c.predicted_s[i] * 1e3:>11.4g}"
            f"{_pct(fit[i]):>8}{_pct(loo[i]):>10}  {p.label}{_extra(p.extra)}"
        )
    if out is not None:
        lines += ["", f"wrote {out}: run it with --engine {out}"]
    return "\n".join(lines)


def report_dict(c: Calibrated, out: Path | None = None) -> dict[str, Any]:
    def number(x: float) -> float | None:
        return None if math.isnan(x) else x

    fit, loo = c.errors(), c.errors("loo")
    return {
        "measurements": c.source,
        "base": c.base,
        "profile": str(out) if out is not None else None,
        "fit": {
            "loss": "soft_l1 on log(simulated / measured)",
            "iterations": c.iterations,
            "simulations": c.simulations,
            "converged": c.converged,
        },
        "parameters": [
            {
                "name": f.knob.name,
                "about": f.knob.about,
                "unit": f.knob.unit,
                "base": f.base,
                "value": f.value,
                "sigma": number(f.sigma),
                "lower": f.lower,
                "upper": f.upper,
                "fitted": f.fitted,
                "held_at_bound": f.at_bound,
                "at_most": f.at_most,
                "reason": f.reason or None,
            }
            for f in c.parameters
        ],
        "warnings": c.warnings,
        "errors": {
            "in_sample": {"mean_abs": _mean_abs(fit), "max_abs": max(map(abs, fit))},
            "leave_one_out": {"mean_abs": _mean_abs(loo), "max_abs": max(map(abs, loo))},
        },
        "points": [
            {
                "row": p.row,
                "point": p.label,
                "measured_ms": p.measured_ms,
                "fitted_ms": c.predicted_s[i] * 1e3,
                "error": fit[i],
                "leave_one_out_ms": c.loo_s[i] * 1e3,
                "leave_one_out_error": loo[i],
                "extra": dict(p.extra),  # the cells of columns that are not tpsim's
            }
            for i, p in enumerate(c.points)
        ],
    }


def _extra(cells: tuple[tuple[str, str], ...]) -> str:
    """A point's cells in columns that are not tpsim's, as the report echoes them."""
    return "".join(f" [{c}: {v}]" for c, v in cells if v)


def _mean_abs(errors: list[float]) -> float:
    return sum(abs(e) for e in errors) / len(errors)


__all__ = ["report_dict", "report_text"]
