"""The Gantt's time axis: seconds to axis units in µs or ms, with one collapsed stretch
squeezed into a narrow gap, and round-time ticks in each visible stretch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.ticker import MaxNLocator


def time_unit(span_s: float) -> tuple[float, str]:
    """(scale, unit) for a span: µs below 2 ms, else ms."""
    return (1e6, "µs") if span_s < 2e-3 else (1e3, "ms")


@dataclass(frozen=True)
class GanttTimeAxis:
    """Time (seconds) to the x axis: scaled to the unit, the collapsed stretch squeezed into
    a gap of ``gap_w`` axis units."""

    t0: float
    scale: float
    gap: tuple[float, float] | None
    gap_w: float

    def x(self, t: float) -> float:
        if self.gap is None or t <= self.gap[0]:
            return (t - self.t0) * self.scale
        g0, g1 = self.gap
        if t >= g1:
            return (g0 - self.t0) * self.scale + self.gap_w + (t - g1) * self.scale
        return (g0 - self.t0) * self.scale + self.gap_w * (t - g0) / (g1 - g0)

    def pieces(self, s: float, e: float) -> list[tuple[float, float]]:
        """The visible parts of [s, e] as (x, width): none inside the gap."""
        if self.gap is None:
            return [(self.x(s), max(e - s, 0.0) * self.scale)]
        g0, g1 = self.gap
        out = []
        if s < g0 or (s == e == g0):
            out.append((self.x(s), (min(e, g0) - s) * self.scale))
        if e > g1:
            lo = max(s, g1)
            out.append((self.x(lo), (e - lo) * self.scale))
        return out


def round_ticks(segments: Sequence[tuple[float, float]], total: float) -> list[float]:
    """Tick positions (axis units) at round times inside each visible segment (unit times)."""
    out: list[float] = []
    for lo, hi in segments:
        n = max(2, round(8 * (hi - lo) / total))
        for v in MaxNLocator(nbins=n, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi):
            if lo - 1e-9 * abs(hi) <= v <= hi + 1e-9 * abs(hi):
                out.append(float(v))
    return out


def tick_text(v: float) -> str:
    """A tick's label: at most six decimals, no trailing zeros."""
    return f"{round(v, 6):g}"
