"""Host jitter: each rank's host thread runs its work slower or faster than the profile's mean.

A serving engine with one process per GPU (vLLM's workers, TGI's shards, TensorRT-LLM's MPI
ranks) runs the same host work on every rank, but not in the same time: garbage collection,
the OS scheduling P busy processes on shared cores, CPU frequency and cache interference
make one rank's step slower than another's. A collective starts when its last rank has
launched it, so a host-bound step waits for the slowest of P host threads, and the expected
maximum of P host times grows with P (order statistics): the host-bound plateau of eager
engines at large TP.

The model. A rank's host time in a *segment* (the host work between two points where the
thread waits for its GPU, in a decode step the whole step: the sampler waits for the logits)
is the profile's time times a factor ``m``, lognormal with mean 1 and coefficient of
variation ``cv`` (the engine profile's ``host_jitter_cv``); one factor covers every host op
and kernel launch of the segment, since what slows a process (a GC pause, a descheduled
core, a slower clock) lasts milliseconds, not one op. A CUDA graph's replay is one driver
call and keeps its time.

One run is one step, and a single random draw of P factors would make it one sample of a
noisy quantity (a TP sweep would zig-zag with the draw). The factors a group's P ranks get
in a segment are therefore the *expected order statistics* of P draws,
``E[m_(1:P)] <= ... <= E[m_(P:P)]`` (their mean is 1, the slowest is ``E[max of P]``), handed
to the ranks in an order drawn from a seeded generator (the seed, the group and the segment:
same input, same output). So every collective of a host-bound step waits ``E[max of P]``
times the host work before it, which is what a long run averages to; ``P = 1`` gets 1.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache

from tpsim.core.program import Programs

#: Quadrature of the order statistics: a grid over the standard normal, +-GRID_Z wide.
GRID_Z = 8.0
GRID_POINTS = 1601


@lru_cache(maxsize=256)
def expected_order_statistics(p: int, cv: float) -> tuple[float, ...]:
    """``E[m_(k:p)]`` for k = 1..p: the expected k-th smallest of ``p`` independent lognormal
    factors of mean 1 and coefficient of variation ``cv`` (numerical quadrature of the
    order-statistic density ``p!/((k-1)!(p-k)!) F^(k-1) (1-F)^(p-k) f``). Their mean is 1."""
    if p < 1:
        raise ValueError(f"p={p}: at least one rank")
    if cv <= 0 or p == 1:
        return (1.0,) * p
    sigma = math.sqrt(math.log1p(cv * cv))
    h = 2 * GRID_Z / (GRID_POINTS - 1)
    zs = [-GRID_Z + i * h for i in range(GRID_POINTS)]
    phi = [math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) for z in zs]
    cdf = [0.5 * math.erfc(-z / math.sqrt(2)) for z in zs]
    x = [math.exp(sigma * z - 0.5 * sigma * sigma) for z in zs]
    out = []
    for k in range(1, p + 1):
        log_c = math.lgamma(p + 1) - math.lgamma(k) - math.lgamma(p - k + 1)
        total = norm = 0.0
        for xi, fi, ci in zip(x, phi, cdf, strict=True):
            if fi == 0.0:
                continue
            lo = (k - 1) * math.log(ci) if ci > 0 else (0.0 if k == 1 else -math.inf)
            hi = (p - k) * math.log1p(-ci) if ci < 1 else (0.0 if k == p else -math.inf)
            w = math.exp(log_c + lo + hi) * fi if lo > -math.inf and hi > -math.inf else 0.0
            total += w * xi
            norm += w
        out.append(total / norm)  # norm is 1 up to the quadrature; dividing removes its error
    mean = sum(out) / p
    return tuple(v / mean for v in out)


@dataclass(frozen=True)
class HostJitter:
    """Per rank and segment, the factor on its host time (see the module's docstring).

    ``group``: ranks ``[g * group, (g + 1) * group)`` synchronise with each other (a TP
    group: the innermost coordinate of every layout) and share one set of order statistics.
    """

    cv: float
    group: int
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.cv <= 2:
            raise ValueError(f"cv={self.cv}: must be between 0 and 2")
        if self.group < 1:
            raise ValueError(f"group={self.group}: at least one rank")

    @property
    def active(self) -> bool:
        """Whether any rank's host time changes (a group of one rank, or no spread, leaves
        every factor at 1)."""
        return self.cv > 0 and self.group > 1

    def touches(self, programs: Programs) -> bool:
        """Whether the factors change anything in ``programs``: active, and some rank's own
        thread spends time (a kernel launch, host work that is not the driver's). A step
        replayed from a CUDA graph has neither, so it runs as without jitter (and one host
        of a symmetric group may still stand for all)."""
        if not self.active:
            return False
        unique = {id(p): p for p in programs}.values()
        return any(
            op.launch_s > 0 or (op.stream == "cpu" and not op.driver and op.seconds > 0)
            for p in unique
            for op in p.ops
        )

    def factor(self, rank: int, segment: int) -> float:
        """The factor on rank ``rank``'s host time in its ``segment``-th segment."""
        return _factors(self.cv, self.group, self.seed, rank // self.group, segment)[
            rank % self.group
        ]


@lru_cache(maxsize=4096)
def _factors(cv: float, group: int, seed: int, which: int, segment: int) -> tuple[float, ...]:
    """The group's factors in one segment: its expected order statistics in a seeded order."""
    stats = list(expected_order_statistics(group, cv))
    random.Random(f"host-jitter/{seed}/{which}/{segment}").shuffle(stats)
    return tuple(stats)


__all__ = ["HostJitter", "expected_order_statistics"]
