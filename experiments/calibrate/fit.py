"""``tpsim calibrate``: fit a few physical parameters of an engine profile to measured steps.

The free parameters (:data:`tpsim.experiments.calibrate.knobs.KNOBS`): one scale on the
base's fixed per-kernel floors (every kernel family's fixed time and the row latency, which
do not shrink with TP), one scale on the base engine's host work per step, the host time
per layer of eager steps, a device latency per collective call, and scales on the GPU's
GEMM, attention and HBM efficiencies. The per-collective latency is device time on the
communication stream (the engine's synchronisation around each all-reduce: stream waits, a
custom all-reduce's flag handshake, ranks arriving out of step), so it costs the same
whether a step replays a CUDA graph or launches eagerly.

Points whose steps do not fit their GPUs' memory under the base are left out (named in a
warning): the engine cannot have run them as stated. The fit minimises a soft-L1 loss of
``log(simulated / measured)`` by bounded Levenberg-Marquardt in log-parameter space
(:mod:`tpsim.experiments.calibrate.lsq`). Each residual evaluation simulates every point
once with ``tpsim.simulate``, through a candidate profile file that extends the base exactly
as the written profile will. Before the fit, a parameter the data cannot identify stays at
the base value with a warning: a per-collective latency from points at one TP degree (it
cannot be told from the per-step host time), a per-layer host time from points that all
replay CUDA graphs, a parameter no point depends on (its Jacobian column is about 0) or one
collinear with those screened before it; of the rest, at most one fewer than the points
(the first in screening order). After the fit, a parameter no point depends on at the
optimum goes back to the base when that changes no prediction; one determined no better
than a factor e, or held at a physical bound, goes back to the base and the screen runs
again without it, so that a parameter it shadowed takes its place (a bound is reported only
when none is left). Uncertainties come from the Jacobian at the optimum; leave-one-out
errors from one Gauss-Newton step without each point, then a simulation of that point.

With ``--hidden-host most``, a host time (per step, per layer) the fit kept at the base is
then taken at the most the points allow (:mod:`tpsim.experiments.calibrate.hidden_host`);
it is written into the profile, and a prediction that rests on it is an upper bound, which
``--predict`` says. Not the default: long eager prefills leave room for far more Python per
layer than any engine spends (x 12 the estimate in the guide's example), so a short
prompt's prediction would rest on a bound that says little.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from tpsim import calibration
from tpsim.calibration import Calibration
from tpsim.core.errors import ConfigError
from tpsim.core.lowering.host import step_mode
from tpsim.experiments.calibrate import lsq
from tpsim.experiments.calibrate.checks import checked
from tpsim.experiments.calibrate.hidden_host import AT_MOST_MOVE, take_at_most
from tpsim.experiments.calibrate.knobs import KNOBS, Knob, profile_yaml
from tpsim.experiments.calibrate.measurements import (
    COLUMNS,
    MeasuredPoint,
    extra_columns,
    read_points,
)
from tpsim.experiments.calibrate.simulate import Simulator

#: Largest |d log(step) / d log(parameter)| at which no point is taken to depend on it:
#: doubling the parameter would move no prediction by more than 0.14%.
NEGLIGIBLE = 2e-3
#: A parameter's (normalised) Jacobian column within this distance of the span of those
#: before it (about 6 degrees) is collinear with them.
COLLINEAR = 0.1
#: Scale of the soft-L1 loss: points off by more than about 5% count less than squared.
F_SCALE = 0.05
#: Finite-difference step in log-parameter space (1%: wide enough to see past the kinks of
#: a roofline's max()).
STEP = 0.01
#: Uncertainty (one sd of the fitted log) above which a fitted parameter is reported as
#: poorly determined, and above which (a factor e) it is not taken as determined at all.
POORLY = 0.3
UNDETERMINED = 1.0


@dataclass(frozen=True)
class Fitted:
    """One parameter after the fit (value and uncertainty in its unit)."""

    knob: Knob
    base: float
    value: float
    sigma: float  # one standard deviation, NaN when not fitted or no degrees of freedom
    lower: float
    upper: float
    reason: str = ""  # why it was not fitted ("" when it was)
    at_bound: bool = False  # held at a bound the data push against
    #: not fitted, but taken at the most the points allow (host work they cannot see)
    at_most: bool = False

    @property
    def fitted(self) -> bool:
        return not self.reason

    @property
    def written(self) -> bool:
        """Whether the written profile overrides it (fitted, or taken at the most)."""
        return self.fitted or self.at_most

    def sigma_text(self) -> str:
        """The uncertainty as the profile's source says it: relative for a scale."""
        if math.isnan(self.sigma):
            return ""
        if self.knob.unit == "x":
            return f" (+/- {self.sigma / self.value:.1%})"
        return f" (+/- {self.sigma:.2f} {self.knob.unit})"


@dataclass(frozen=True)
class Calibrated:
    """What ``tpsim calibrate`` found and the profile it writes."""

    source: str  # the measurements file, as given
    base: str
    points: list[MeasuredPoint]
    parameters: list[Fitted]
    warnings: list[str]
    predicted_s: list[float]
    loo_s: list[float]  # each point predicted by the fit without it
    iterations: int
    simulations: int
    converged: bool
    profile: str = ""  # the YAML text

    def errors(self, which: str = "fitted") -> list[float]:
        """simulated / measured - 1 per point, in sample or (``"loo"``) left out."""
        pred = self.predicted_s if which == "fitted" else self.loo_s
        return [p / m.measured_s - 1 for p, m in zip(pred, self.points, strict=True)]


def calibrate(
    csv_path: Path,
    base: str,
    name: str = "calibrated",
    jobs: int = 1,
    folder: Path | None = None,
    hidden_host: str = "base",
) -> Calibrated:
    """Fit the knobs of engine profile ``base`` to the measurements in ``csv_path`` (the
    points simulated in ``jobs`` processes); the result holds the report and the profile
    (named ``name``) to write in ``folder`` (its ``extends:`` a path relative to it when the
    base is a file; absolute without a folder). ``hidden_host`` ``"most"`` takes a host time
    the points cannot determine at the most they allow (``"base"``: kept at the base)."""
    if hidden_host not in ("base", "most"):
        raise ConfigError(f"hidden_host: {hidden_host!r} is not base or most")
    points = read_points(csv_path)
    source = str(csv_path)
    if len(points) < 2:
        raise ConfigError(f"{source}: 1 point; at least 2 are needed (one left out at a time)")
    calibration.profile(base)  # an unknown or malformed base is refused before any work
    points, oom = checked(points, base, source)
    with (
        tempfile.TemporaryDirectory(prefix="tpsim-calibrate-") as tmp,
        Simulator(points, base, Path(tmp), source, jobs) as sim,
    ):
        result = _Fit(sim, hidden_host == "most").run()
    digest = hashlib.sha256(csv_path.read_bytes()).hexdigest()[:12]
    columns = extra_columns(csv_path)
    extra = (
        [
            f"{'columns' if len(columns) > 1 else 'column'} {', '.join(map(repr, columns))} "
            f"{'are' if len(columns) > 1 else 'is'} not tpsim's ({', '.join(COLUMNS)}): not "
            "read, kept with each point in the report"
        ]
        if columns
        else []
    )
    return replace(
        result,
        warnings=[*extra, *oom, *result.warnings],
        profile=_profile(result, sim.calib, name, digest, folder),
    )


class _Fit:
    """One fit: the knobs' bounds in log space, the screen, the solve, the summary."""

    def __init__(self, sim: Simulator, most_host: bool = False) -> None:
        self.sim, calib, points = sim, sim.calib, sim.points
        self.most_host = most_host
        self.measured = np.array([p.measured_s for p in points])
        self.lower = np.array([k.lower(calib, points) for k in KNOBS])
        self.upper = np.array([k.upper(calib, points) for k in KNOBS])
        self.base = np.clip([k.base(calib) for k in KNOBS], self.lower, self.upper)
        self.shift = np.array([k.shift for k in KNOBS])
        self.u_lo, self.u_hi = np.log(self.lower + self.shift), np.log(self.upper + self.shift)
        self.u0 = np.log(self.base + self.shift)

    def values(self, u: np.ndarray, active: Sequence[int]) -> list[float]:
        """Every knob's value: those ``active`` from ``u``, the others at the base."""
        a = list(active)
        v = self.base.copy()
        v[a] = np.clip(np.exp(u) - self.shift[a], self.lower[a], self.upper[a])
        same = np.isclose(v, self.base, rtol=1e-12, atol=1e-12)  # exp(log(x)) may miss x
        return [float(b if eq else x) for x, b, eq in zip(v, self.base, same, strict=True)]

    def residuals(self, active: Sequence[int]) -> Callable[[np.ndarray], np.ndarray]:
        return lambda u: np.log(self.sim.predict(self.values(u, active)) / self.measured)

    def run(self) -> Calibrated:
        sim, points = self.sim, self.sim.points
        dropped = _structural(sim.calib, points)  # reasons that hold whatever the fit finds
        tried = [i for i, k in enumerate(KNOBS) if k.name not in dropped]
        u, lo, hi = self.u0[tried], self.u_lo[tried], self.u_hi[tried]
        r0 = self.residuals(tried)(u)
        jac = lsq.jacobian(self.residuals(tried), u, r0, lo, hi, STEP)
        iterations, start = 0, dict(zip(tried, u, strict=True))
        while True:
            sol, active, reasons, iterations, worst = self.solve(
                self.screen(tried, jac, dropped), start, iterations
            )
            if worst is None:
                held = self.held(sol, active, reasons)
                if held is None:
                    return self.summary(sol, active, reasons, iterations)
                # held at a physical bound: the base is left alone when another knob the
                # screen had shadowed can take its place
                retry = {**dropped, KNOBS[held].name: (
                    f"held at its bound {self.values(sol.x, active)[held]:.4g} by these points "
                    "(beyond what is physical), so left to the parameters after it")}  # fmt: skip
                if not set(self.screen(tried, jac, retry)[0]) - set(active):
                    return self.summary(sol, active, reasons, iterations)
                dropped = retry
                start |= {i: x for i, x in zip(active, sol.x, strict=True) if i != held}
                continue
            # the least determined knob leaves; the screen runs again without it, so that a
            # knob it had shadowed (collinear with it, or past the room) may take its place
            dropped[KNOBS[worst].name] = reasons[KNOBS[worst].name]
            start |= {i: x for i, x in zip(active, sol.x, strict=True) if i != worst}

    def held(self, sol: lsq.Solution, active: list[int], reasons: dict[str, str]) -> int | None:
        """The first fitted knob the data hold against one of its bounds, if any."""
        pressing = sol.pressing(self.u_lo[active], self.u_hi[active])
        for k, i in enumerate(active):
            if pressing[k] and KNOBS[i].name not in reasons:
                return i
        return None

    def screen(
        self, tried: list[int], jac: np.ndarray, dropped: dict[str, str]
    ) -> tuple[list[int], dict[str, str]]:
        """The knobs to fit (of ``tried``, Jacobian columns ``jac`` at the base) and why each
        other stays at the base: ``dropped``, no point depending on it, collinear with those
        before it, or past the room (one point more than parameters)."""
        points = self.sim.points
        cand = [k for k, i in enumerate(tried) if KNOBS[i].name not in dropped]
        reasons = dict(dropped)
        reasons |= _numerical([KNOBS[tried[k]] for k in cand], jac[:, cand])
        active = [i for i, k in enumerate(KNOBS) if k.name not in reasons]
        room = len(points) - 1  # one point more than parameters, for the leave-one-out
        for i in active[room:]:
            reasons[KNOBS[i].name] = (
                f"not fitted: {len(points)} points fit at most {room} "
                f"parameter{'s' if room > 1 else ''}, taken in screening order"
            )
        return active[:room], reasons

    def solve(
        self, screened: tuple[list[int], dict[str, str]], start: dict[int, float], iterations: int
    ) -> tuple[lsq.Solution, list[int], dict[str, str], int, int | None]:
        """Fit the ``screened`` knobs from ``start`` (log values). A knob no point depends on
        at the optimum goes back to the base (when that changes no prediction). Returns the
        solution, the knobs fitted, why the others were not, the iterations so far, and the
        knob to leave out when one is determined no better than a factor e (the least
        determined; None when none is)."""
        active, reasons = screened
        if not active:
            why = "; ".join(f"{k}: {r}" for k, r in reasons.items())
            raise ConfigError(f"{self.sim.source}: the points identify no parameter ({why})")
        x0 = np.array([start[i] for i in active])
        lo, hi = self.u_lo[active], self.u_hi[active]
        sol = lsq.solve(self.residuals(active), x0, lo, hi, f_scale=F_SCALE, step=STEP)
        iterations += sol.iterations
        values = self.values(sol.x, active)
        for k, col in enumerate(sol.jacobian.T):
            if np.max(np.abs(col)) >= NEGLIGIBLE:
                continue
            i, v = active[k], list(values)
            v[i] = float(self.base[i])
            if np.allclose(self.sim.predict(v), self.sim.predict(values), rtol=1e-9, atol=0):
                values = v
                reasons[KNOBS[i].name] = "no point depends on it at the fitted values"
        kept = [k for k, i in enumerate(active) if KNOBS[i].name not in reasons]
        sigma = _sigma(sol, kept)
        if not kept or not np.nanmax(sigma, initial=0.0) > UNDETERMINED:
            return sol, active, reasons, iterations, None
        worst = active[kept[int(np.nanargmax(sigma))]]
        factor = math.exp(min(float(np.nanmax(sigma)), math.log(100)))
        reasons[KNOBS[worst].name] = (
            "no point depends on it near where the fit took it"
            if math.isinf(float(np.nanmax(sigma)))
            else "not determined by these points (uncertain by a factor of "
            f"{'more than 100' if factor >= 100 else f'{factor:.2g}'})"
        )
        return sol, active, reasons, iterations, worst

    def summary(
        self, sol: lsq.Solution, active: list[int], reasons: dict[str, str], iterations: int
    ) -> Calibrated:
        """The fitted values (4 significant digits; times to 0.01 us), their uncertainties,
        the warnings, the in-sample and leave-one-out predictions."""
        sim = self.sim
        values = self.values(sol.x, active)
        for i in active:
            x = round(values[i], 2) if KNOBS[i].unit == "us" else float(f"{values[i]:.4g}")
            values[i] = float(np.clip(x, self.lower[i], self.upper[i]))
            if KNOBS[i].name in reasons:
                values[i] = float(self.base[i])
        kept = [k for k, i in enumerate(active) if KNOBS[i].name not in reasons]
        sigma_u = dict(zip(kept, _sigma(sol, kept), strict=True))
        pressing = sol.pressing(self.u_lo[active], self.u_hi[active])
        at_most = (
            take_at_most(self.sim, values, reasons, (self.lower, self.upper), self.shift)
            if self.most_host
            else {}
        )
        warnings = [
            f"{k}: {why}; " + (at_most[k][1] if k in at_most else "kept at the base value")
            for k, why in reasons.items()
        ]
        parameters = []
        for i, knob in enumerate(KNOBS):
            k = active.index(i) if i in active else -1
            s_u = float(sigma_u.get(k, math.nan))
            held = k in kept and bool(pressing[k])
            f = Fitted(knob, float(self.base[i]), values[i], (values[i] + knob.shift) * s_u,
                       float(self.lower[i]), float(self.upper[i]), reasons.get(knob.name, ""),
                       held, knob.name in at_most)  # fmt: skip
            if s_u > POORLY:
                warnings.append(f"{knob.name}: poorly determined by these points{f.sigma_text()}")
            if held:
                warnings.append(
                    f"{knob.name}: held at its bound {values[i]:g}; the data push it beyond "
                    "what is physical (check the measurements and the base engine)"
                )
            parameters.append(f)
        if not sol.converged:
            warnings.append(f"the fit stopped after {sol.iterations} iterations, not converged")
        loo = []
        for n, u in enumerate(sol.leave_one_out(self.u_lo[active], self.u_hi[active])):
            v = self.values(u, active)
            v = [values[i] if KNOBS[i].name in reasons else v[i] for i in range(len(v))]
            loo.append(float(sim.predict(v, only=[n])[0]))
        predicted = [float(x) for x in sim.predict(values)]
        return Calibrated(sim.source, sim.base, list(sim.points), parameters, warnings,
                          predicted, loo, iterations, sim.simulations, sol.converged)  # fmt: skip


def _sigma(sol: lsq.Solution, kept: Sequence[int]) -> np.ndarray:
    """One sd of each kept parameter (in log space); infinite for one no point depends on
    at the optimum (the linearised covariance would call it exact)."""
    if not kept:
        return np.zeros(0)
    sigma = np.sqrt(np.abs(np.diag(sol.covariance(kept))))
    flat = np.max(np.abs(sol.jacobian[:, list(kept)]), axis=0) < NEGLIGIBLE
    return np.where(flat, np.inf, sigma)


def _structural(calib: Calibration, points: Sequence[MeasuredPoint]) -> dict[str, str]:
    """Parameters these points cannot identify whatever their values."""
    reasons = {}
    tps = sorted({p.tp for p in points})
    if tps == [1]:
        reasons["collective_latency_us"] = "no point has TP > 1, so no collective runs"
    elif len(tps) == 1:
        reasons["collective_latency_us"] = (
            f"every point is at TP {tps[0]}: a latency per collective cannot be told from the "
            "host time per step (give points at two or more TP degrees)"
        )
    if not any(
        step_mode(calib.engine, "graph", p.workload.phase, p.workload.tokens) == "eager"
        for p in points
    ):
        reasons["layer_host_us"] = (
            f"every point replays a CUDA graph under engine {calib.engine.name}, so no Python "
            "runs per layer (give steps it runs eagerly, e.g. prefill)"
        )
    return reasons


def _numerical(knobs: Sequence[Knob], jac: np.ndarray) -> dict[str, str]:
    """Parameters whose Jacobian column at the base is about 0, or collinear with the
    columns of those before them (in :data:`KNOBS` order)."""
    reasons: dict[str, str] = {}
    basis: list[np.ndarray] = []
    kept: list[tuple[str, np.ndarray]] = []
    for knob, col in zip(knobs, jac.T, strict=True):
        if np.max(np.abs(col)) < NEGLIGIBLE:
            reasons[knob.name] = f"no point depends on it: {knob.unused}"
            continue
        c = col / np.linalg.norm(col)
        rest = c - sum((b @ c) * b for b in basis) if basis else c
        if np.linalg.norm(rest) < COLLINEAR:
            names = [n for n, other in kept if abs(other @ c) > 0.2] or [n for n, _ in kept]
            reasons[knob.name] = (
                f"collinear with {', '.join(names)} over these points (their effects cannot be "
                "told apart)"
            )
            continue
        basis.append(rest / np.linalg.norm(rest))
        kept.append((knob.name, c))
    return reasons


def _profile(
    result: Calibrated, calib: Calibration, name: str, digest: str, folder: Path | None
) -> str:
    """The profile to write: every fitted knob, its source naming the data and the fit."""
    where = f"{Path(result.source).name} (sha256 {digest}), {len(result.points)} points"
    entries = []
    for f in result.parameters:
        if not f.written:
            continue
        what = f"{f.value:g} {f.knob.unit}" if f.knob.unit == "us" else f"x {f.value:g}"
        if f.knob.name == "step_host_scale":
            what = f"the step host pieces of {result.base} x {f.value:g}"
        elif f.knob.name == "kernel_floor_scale":
            what = f"the per-kernel fixed times of {result.base} x {f.value:g}"
        source = f"fitted by tpsim calibrate to {where}: {what}{f.sigma_text()}"
        if f.at_most:
            source = (f"an upper bound (tpsim calibrate --hidden-host most) from {where}: "
                      f"{what}, the most they allow (past it, with the host times taken "
                      f"before it, a point moves by more than {AT_MOST_MOVE:.0%} from the "
                      "fit)")  # fmt: skip
        entries.append((f.knob, f.value, source))
    fit, loo = (float(np.mean(np.abs(result.errors(w)))) for w in ("fitted", "loo"))
    fitted = ", ".join(f.knob.name for f in result.parameters if f.fitted)
    most = ", ".join(f.knob.name for f in result.parameters if f.at_most)
    about = (
        f"{result.base} fitted by tpsim calibrate to {where}: {fitted}"
        f"{f'; at the most the points allow: {most}' if most else ''}; mean error {fit:.1%} "
        f"in sample, {loo:.1%} leaving each point out"
    )
    return profile_yaml(name, about, result.base, calib, entries, folder)


__all__ = ["Calibrated", "Fitted", "calibrate"]
