"""The free parameters of ``tpsim calibrate`` and the profile YAML they are written into.

Each parameter (:class:`Knob`) is one table entry: what it is, the profile entry it
overrides, how it is fitted (``log(value + shift)``: ``shift`` 0 for a scale, a typical size
for a time, so that 0 is reachable), its bounds and what it means when no point depends on
it. Bounds keep it physical: times at or above 0; efficiency scales no higher than what
brings the most efficient GPU among the points to its peak; the per-kernel floors no
shorter than the shortest kernel measured (:data:`MIN_KERNEL_S`) on the points' GPUs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from tpsim.calibration import Calibration
from tpsim.calibration.loader import scale
from tpsim.calibration.profiles import ENGINES, canonical, engines, is_profile_file
from tpsim.experiments.calibrate.measurements import MeasuredPoint


def _same(c: Calibration, value: float) -> object:
    return value


@dataclass(frozen=True)
class Knob:
    """One free parameter: what it is, where it lives in a profile, its bounds."""

    name: str
    about: str
    unit: str  # "x" (a scale) or "us"
    file: str  # the data file of the profile's override
    key: str  # its entry there
    shift: float  # fitted as log(value + shift): 0 for a scale, a typical size for a time
    lower: Callable[[Calibration, Sequence[MeasuredPoint]], float]
    base: Callable[[Calibration], float]  # its value in the base profile
    upper: Callable[[Calibration, Sequence[MeasuredPoint]], float]
    unused: str  # what a zero Jacobian column means
    entry: Callable[[Calibration, float], object] = _same  # the override's value


class _Row(list):  # type: ignore[type-arg]
    """A list written on one line ([base us, us per sequence])."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Row, lambda d, x: d.represent_sequence("tag:yaml.org,2002:seq", x, True))


def _us(seconds: float) -> float:
    return float(f"{scale(seconds, 6):.6g}")


def _step_host(c: Calibration, s: float) -> object:
    """Every piece of the base's host work per step (base and per sequence) times ``s``."""
    return {
        piece: _Row([_us(cost.base_s * s), _us(cost.per_seq_s * s)])
        for piece, cost in c.engine.step_host.items()
    }


def _peak_cap(fraction: Callable[[Calibration, MeasuredPoint], float]) -> Callable[..., float]:
    """The largest scale that keeps every point's GPU at or under its peak."""
    return lambda c, points: 1.0 / max(fraction(c, p) for p in points)


def _limit(x: float) -> Callable[..., float]:
    return lambda c, points: x


#: The shortest fixed time a kernel can have on the GPU (s): the smallest kernels Vidur
#: measured (a 1-token residual add or activation on A100 and H100,
#: measured/vidur_mlp_per_op.csv) take 1 us at the profiler's 1-us resolution, so no less
#: than 0.5 us.
MIN_KERNEL_S = 0.5e-6
#: The most the fitted floors may grow: 5x the measured ones.
MAX_FLOOR_SCALE = 5.0


def _floors(c: Calibration, arch: str) -> list[float]:
    """The fixed times (s) of the base's own kernel families on a GPU of ``arch`` (GEMM,
    attention, elementwise; those it leaves to the GPU's kernel_overhead are not scaled)."""
    k = c.kernels
    fixed = (k.gemm_fixed_s, k.attention_fixed_of(arch), k.elementwise_fixed_s)
    return [f * k.latency_scale_of(arch) for f in fixed if f]


def _floor_lower(c: Calibration, points: Sequence[MeasuredPoint]) -> float:
    """The smallest floor scale that keeps every fixed time of the points' GPUs at or above
    :data:`MIN_KERNEL_S` (1 when the base has none to scale below it)."""
    shortest = [min(f) for f in (_floors(c, p.gpu.arch) for p in points) if f]
    return min(1.0, max((MIN_KERNEL_S / s for s in shortest), default=1.0))


def _latency_scale(c: Calibration, s: float) -> object:
    """The base's per-architecture latency scales, every one (and the default) times ``s``."""
    k = c.kernels
    scales = {**k.latency_scale, "default": k.latency_scale_of("default")}
    return {arch: float(f"{v * s:.4g}") for arch, v in scales.items()}


#: In the order they are screened: a parameter collinear with those before it is left out.
KNOBS: tuple[Knob, ...] = (
    Knob(
        "kernel_floor_scale", "fixed time of every kernel (GEMM, attention, elementwise) and "
        "the row latency, x the base's", "x",
        "kernels", "latency_scale", 0.0, _floor_lower, lambda c: 1.0, _limit(MAX_FLOOR_SCALE),
        "the base engine prices no fixed per-kernel floors of its own, or none is on the "
        "critical path",
        _latency_scale,
    ),
    Knob(
        "hbm_efficiency_scale", "HBM efficiency, x the GPU's measured fraction", "x",
        "kernels", "hbm_efficiency_scale", 0.0, _limit(0.2),
        lambda c: c.kernels.hbm_efficiency_scale,
        _peak_cap(lambda c, p: c.kernels.hbm_efficiency or p.gpu.hbm_efficiency),
        "none is memory-bound",
    ),
    Knob(
        "step_host_scale", "host time per step, x the base's pieces", "x",
        "engine", "step_host_us", 0.0, _limit(0.02), lambda c: 1.0, _limit(50.0),
        "the base engine has no host work per step, or it is off the critical path",
        _step_host,
    ),
    Knob(
        "collective_latency_us", "device latency per collective call", "us",
        "engine", "collective_latency_us", 10.0, _limit(0.0),
        lambda c: scale(c.engine.collective_latency_s, 6), _limit(500.0),
        "collectives are off the critical path everywhere",
    ),
    Knob(
        "layer_host_us", "host time per layer in eager steps", "us",
        "engine", "layer_host_us", 20.0, _limit(0.0),
        lambda c: scale(c.engine.layer_host_s, 6), _limit(2000.0),
        "Python per layer is off the critical path everywhere",
    ),
    Knob(
        "matmul_efficiency_scale", "GEMM efficiency, x the GPU's measured fraction", "x",
        "kernels", "matmul_efficiency_scale", 0.0, _limit(0.1),
        lambda c: c.kernels.matmul_efficiency_scale,
        _peak_cap(lambda c, p: c.kernels.matmul_efficiency or p.gpu.matmul_efficiency),
        "none has compute-bound GEMMs; give prefill or large-batch points",
    ),
    Knob(
        "attention_efficiency_scale", "attention efficiency, x the kernel's fraction", "x",
        "kernels", "attention_efficiency_scale", 0.0, _limit(0.1),
        lambda c: c.kernels.attention_efficiency_scale,
        _peak_cap(
            lambda c, p: max(c.kernels.attention_efficiency, c.kernels.attention_fp8_efficiency)
        ),
        "none has compute-bound attention; give long prefill points",
    ),
)  # fmt: skip


def extends_name(base: str, folder: Path | None) -> str:
    """What a profile written in ``folder`` puts in ``extends:`` for the base ``base``, so
    that it travels: a shipped engine (by name, or a path to its shipped file) by its name;
    a file by its path relative to ``folder`` (moved together, the two still find each
    other; a profile's relative ``extends`` is read against its own folder), or absolute
    when there is no folder."""
    if not is_profile_file(base):
        return canonical(base)
    path = Path(base).resolve()
    shipped = Path(str(resources.files("tpsim.calibration").joinpath(ENGINES))).resolve()
    if path.parent == shipped and path.stem in engines() and path.suffix == ".yaml":
        return path.stem
    if folder is None:
        return str(path)
    relative = os.path.relpath(path, Path(folder).resolve())
    return relative if is_profile_file(relative) else f"./{relative}"


def profile_yaml(
    name: str,
    about: str,
    base: str,
    calib: Calibration,
    entries: Sequence[tuple[Knob, float, str]],
    folder: Path | None = None,
) -> str:
    """An engine profile that ``extends`` ``base`` (calibration ``calib``) and overrides each
    knob of ``entries`` with its value and source. The base is named as
    :func:`extends_name` says: a shipped engine by its name, a file by its path relative to
    ``folder`` (the written profile's folder), or absolute without one."""
    overrides: dict[str, dict[str, Any]] = {}
    for knob, value, source in entries:
        entry = {"value": knob.entry(calib, value), "source": source}
        overrides.setdefault(knob.file, {})[knob.key] = entry
    base = extends_name(base, folder)
    doc = {"name": name, "about": about, "extends": base, "overrides": overrides}
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)


__all__ = ["KNOBS", "Knob", "extends_name", "profile_yaml"]
