"""Bounded robust nonlinear least squares (Levenberg-Marquardt), in numpy alone.

Minimises ``sum(rho(r_i(x)))`` over a box ``lower <= x <= upper``, where ``r(x)`` is a vector
of residuals from an expensive black box (here: log(simulated / measured) step times) and
``rho`` is the soft-L1 loss ``2 f^2 (sqrt(1 + (r / f)^2) - 1)``: quadratic for residuals well
under ``f``, linear beyond, so that one bad measurement pulls the fit far less than it would
under plain least squares. Each iteration reweights the residuals (iteratively reweighted
least squares: ``w_i = 1 / sqrt(1 + (r_i / f)^2)``), solves the damped normal equations on the
parameters not held at a bound, and accepts the step only if the loss falls (else it raises
the damping). The Jacobian is a forward finite difference (backward at an upper bound).
Everything is deterministic: the same residual function gives the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Residuals = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Solution:
    """Where the fit ended and what it saw there."""

    x: np.ndarray  # the parameters
    residuals: np.ndarray  # r(x)
    jacobian: np.ndarray  # dr/dx at x (finite differences)
    weights: np.ndarray  # robust weights of the residuals at x
    loss: float
    iterations: int
    evaluations: int  # calls of the residual function
    converged: bool

    def covariance(self, keep: Sequence[int] | None = None) -> np.ndarray:
        """Covariance of ``x`` (or of its parameters ``keep``) from the Jacobian at the
        optimum: ``s^2 (J^T W J)^-1`` with ``s^2`` the weighted residual variance over the
        degrees of freedom left (NaN when there are none). A parameter held at a bound gets
        the same linearised figure."""
        j = self.jacobian if keep is None else self.jacobian[:, list(keep)]
        n, k = j.shape
        if n <= k:
            return np.full((k, k), np.nan)
        s2 = float(self.weights @ self.residuals**2) / (n - k)
        return s2 * np.linalg.pinv(j.T @ (self.weights[:, None] * j))

    def pressing(self, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
        """Which parameters sit at a bound that the data push against (the loss would fall
        past it)."""
        g = self.jacobian.T @ (self.weights * self.residuals)
        tiny = 1e-9 * max(1.0, float(np.max(np.abs(g), initial=0.0)))
        return ((self.x <= lower) & (g > tiny)) | ((self.x >= upper) & (g < -tiny))

    def leave_one_out(self, lower: np.ndarray, upper: np.ndarray) -> list[np.ndarray]:
        """For each residual ``i``, the parameters refitted without it: one Gauss-Newton step
        from the optimum on the others (the Jacobian at the optimum, no new evaluations),
        kept inside the bounds."""
        j, w, r = self.jacobian, self.weights, self.residuals
        a = j.T @ (w[:, None] * j)
        g = j.T @ (w * r)
        out = []
        for i in range(len(r)):
            a_i = a - w[i] * np.outer(j[i], j[i])
            g_i = g - w[i] * j[i] * r[i]
            out.append(np.clip(self.x - np.linalg.pinv(a_i) @ g_i, lower, upper))
        return out


def soft_l1(r: np.ndarray, f: float) -> tuple[float, np.ndarray]:
    """The soft-L1 loss of residuals ``r`` at scale ``f`` and the IRLS weights."""
    z = np.sqrt(1.0 + (r / f) ** 2)
    return float(np.sum(2.0 * f * f * (z - 1.0))), 1.0 / z


def jacobian(
    fun: Residuals, x: np.ndarray, r: np.ndarray, lower: np.ndarray, upper: np.ndarray, step: float
) -> np.ndarray:
    """Forward differences of ``fun`` at ``x`` (``r = fun(x)``), one evaluation per parameter;
    backward where a forward step would leave the box."""
    cols = []
    for k in range(len(x)):
        h = step if x[k] + step <= upper[k] else -step
        xk = x.copy()
        xk[k] += h
        cols.append((fun(xk) - r) / h)
    return np.stack(cols, axis=1) if cols else np.zeros((len(r), 0))


def solve(
    fun: Residuals,
    x0: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    f_scale: float = 0.05,
    step: float = 0.01,
    max_iterations: int = 30,
    xtol: float = 1e-3,
    ftol: float = 1e-4,
    gtol: float = 1e-10,
) -> Solution:
    """Minimise the soft-L1 loss of ``fun`` over the box, from ``x0`` (clipped into it).

    Stops when a step moves no parameter by more than ``xtol``, the loss falls by less than
    ``ftol`` of itself, the projected gradient is under ``gtol``, or after ``max_iterations``
    accepted steps (``converged`` False then).
    """
    evaluations = 0

    def evaluate(x: np.ndarray) -> np.ndarray:
        nonlocal evaluations
        evaluations += 1
        return np.asarray(fun(x), dtype=float)

    x = np.clip(np.asarray(x0, dtype=float), lower, upper)
    r = evaluate(x)
    loss, w = soft_l1(r, f_scale)
    j = jacobian(evaluate, x, r, lower, upper, step)
    damping, converged, iterations = 1e-3, False, 0
    while iterations < max_iterations and not converged:
        g = j.T @ (w * r)
        a = j.T @ (w[:, None] * j)
        # a parameter at a bound that the gradient pushes outward stays there this step
        held = ((x <= lower) & (g > 0)) | ((x >= upper) & (g < 0))
        free = ~held
        if loss == 0.0 or not free.any() or np.max(np.abs(g[free])) < gtol:
            converged = True
            break
        af, gf = a[np.ix_(free, free)], g[free]
        scale = np.maximum(np.diag(af), 1e-12 * max(1.0, float(np.max(np.diag(af)))))
        accepted = False
        while damping < 1e10:
            delta = np.linalg.lstsq(af + damping * np.diag(scale), -gf, rcond=None)[0]
            x_new = x.copy()
            x_new[free] += delta
            x_new = np.clip(x_new, lower, upper)
            if np.max(np.abs(x_new - x)) < xtol:
                converged = True
                break
            r_new = evaluate(x_new)
            loss_new, w_new = soft_l1(r_new, f_scale)
            if loss_new < loss:
                converged = loss - loss_new <= ftol * loss
                x, r, loss, w = x_new, r_new, loss_new, w_new
                damping = max(damping / 10.0, 1e-9)
                accepted = True
                break
            damping *= 10.0
        if not accepted:
            converged = True  # no step lowers the loss: a (local) minimum within the box
            break
        iterations += 1
        j = jacobian(evaluate, x, r, lower, upper, step)
    return Solution(x, r, j, w, loss, iterations, evaluations, converged)


__all__ = ["Solution", "jacobian", "soft_l1", "solve"]
