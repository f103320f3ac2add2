"""What a validation entry is: one compared point, a runner's comparison, and the entry itself
(its data files, bound, metric, runner and expected miss). :mod:`.registry` lists the entries,
:mod:`.runners` computes their comparisons."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Point:
    """One compared point: ``error`` is simulated / measured - 1 (for a group of points, as
    the kernel families, that group's geomean error)."""

    label: str
    error: float
    measured: float | None = None
    simulated: float | None = None
    unit: str = ""


@dataclass(frozen=True)
class Comparison:
    """What a runner returns: the points compared, the error held against the bound (the
    geometric-mean error unless the entry's metric says otherwise) and every row."""

    points: int
    error: float
    rows: tuple[Point, ...]

    @property
    def worst(self) -> Point:
        """The row furthest from its measurement (in log ratio)."""
        return max(self.rows, key=lambda p: abs(math.log1p(p.error)))


@dataclass(frozen=True)
class Validation:
    """One comparison with a published measurement file."""

    name: str
    data_files: tuple[str, ...]  # under tpsim/calibration/measured
    bound: float  # geomean error fraction the comparison is held to today
    metric: str  # what is compared, and how
    runner: Callable[[], Comparison] = field(compare=False)
    quick: bool = False  # seconds, not minutes
    target: float | None = None  # the goal, where tighter than the bound
    expected_fail: str = ""  # why tpsim misses the bound today ("" when it should meet it)
    ceiling: float | None = None  # an expected miss beyond this is a failure all the same

    def status(self, error: float) -> str:
        """``pass``, ``FAIL`` or ``expected-miss`` for a run that found ``error``."""
        if error <= self.bound:
            return "pass"
        if self.expected_fail and (self.ceiling is None or error <= self.ceiling):
            return "expected-miss"
        return "FAIL"
