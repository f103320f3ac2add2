"""Fit the measured-kernel parameters (``engines/_kernels.yaml``) to Vidur's measurements.

    python -m tpsim.experiments.calibrate.kernel_fit

Each parameter is a mechanism the best-achievable model leaves out (README, "Kernel tables";
:mod:`tpsim.core.kernels.costs`): fixed times per kernel family, GEMMs below the best matmul rate
and
weight reads below STREAM, the decode KV read below STREAM, the prefill kernel's efficiency
and its in-kernel KV append, row-per-CTA kernels' bandwidth share and per-access latency,
activations read back from L2, and Hopper's shorter latencies. The structural facts of the
measured kernels (FlashAttention-2's split-KV kernel, vLLM's two-pass RMSNorm) are set, not
fitted. The loss is the error of :mod:`tpsim.experiments.validation.kernels` (mean absolute log
ratio per family, the families' mean plus their worst), minimised by a deterministic
coordinate search on multiplicative grids. Prints each fitted value (rounded as the profile
writes it) and the per-family errors; the profile holds the printed values.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from tpsim.calibration import Kernels, default
from tpsim.calibration.loader import scale
from tpsim.experiments.calibrate.vidur_cases import EXTRA, FAMILIES, KernelCase, cases, predict

#: name -> (start, how the value enters Kernels); start values are the calibration README's
#: figures or round guesses, the search moves them.
PARAMETERS: dict[str, tuple[float, Callable[[Kernels, float], Kernels]]] = {
    "gemm_fixed_us": (4.0, lambda k, x: replace(k, gemm_fixed_s=scale(x, -6))),
    "matmul_fraction": (0.9, lambda k, x: replace(k, matmul_fraction=x)),
    "gemm_stream_efficiency": (0.95, lambda k, x: replace(k, gemm_stream_efficiency=x)),
    "attention_fixed_us": (15.0, lambda k, x: replace(k, attention_fixed_s=scale(x, -6))),
    "attention_stream_efficiency": (0.9, lambda k, x: replace(k, attention_stream_efficiency=x)),
    "attention_efficiency": (0.6, lambda k, x: replace(k, attention_efficiency=x)),
    "attention_append_efficiency": (0.7, lambda k, x: replace(k, attention_append_efficiency=x)),
    "elementwise_fixed_us": (1.8, lambda k, x: replace(k, elementwise_fixed_s=scale(x, -6))),
    "rowwise_efficiency": (0.6, lambda k, x: replace(k, rowwise_efficiency=x)),
    "rowwise_latency_us": (0.18, lambda k, x: replace(k, rowwise_latency_s=scale(x, -6))),
    "l2_resident_MiB": (30.0, lambda k, x: replace(k, l2_resident_bytes=round(x * 2**20))),
    "l2_gain": (1.6, lambda k, x: replace(k, l2_gain=x)),
    "gather_efficiency": (0.2, lambda k, x: replace(k, gather_efficiency=x)),
    "latency_scale.hopper": (
        0.75,
        lambda k, x: replace(k, latency_scale={**k.latency_scale, "ampere": 1, "hopper": x}),
    ),
}
#: Set from the measured kernels' structure, not fitted.
STRUCTURE: dict[str, object] = {"attention_split_kv": True, "norm_passes": 2}
GRID = (0.5, 0.7, 0.85, 0.93, 1.0, 1.07, 1.18, 1.4, 2.0)


def kernels_of(values: dict[str, float], base: Kernels | None = None) -> Kernels:
    """The shipped kernels with the structure set and ``values`` put in."""
    k = replace(base or default().kernels, **STRUCTURE)  # type: ignore[arg-type]
    for name, x in values.items():
        k = PARAMETERS[name][1](k, x)
    return k


def family_errors(k: Kernels, among: Sequence[KernelCase] | None = None) -> dict[str, float]:
    """Mean absolute log(predicted / measured) per family (geomean error = exp - 1)."""
    group = cases() if among is None else among
    logs: dict[str, list[float]] = {}
    for c, t in zip(group, predict(k, among=group), strict=True):
        logs.setdefault(c.family, []).append(abs(math.log(t / c.measured_s)))
    return {f: sum(v) / len(v) for f, v in logs.items()}


def loss(k: Kernels, among: Sequence[KernelCase]) -> float:
    """The families' mean error plus their worst."""
    e = list(family_errors(k, among).values())
    return sum(e) / len(e) + max(e)


def fit(rounds: int = 6) -> dict[str, float]:
    """The fitted values, by coordinate search from :data:`PARAMETERS`' starts: every
    parameter on the acceptance families, then ``gather_efficiency`` on the embedding (the
    only kernel it prices) with the others held."""
    x = {name: start for name, (start, _) in PARAMETERS.items()}
    names = [n for n in PARAMETERS if n not in GATHER]
    x = _search(x, names, [c for c in cases() if c.family in FAMILIES], rounds)
    return _search(x, list(GATHER), [c for c in cases() if c.family in EXTRA], rounds)


GATHER = ("gather_efficiency",)


def _search(
    x: dict[str, float], names: Sequence[str], among: Sequence[KernelCase], rounds: int
) -> dict[str, float]:
    best = loss(kernels_of(x), among)
    for r in range(rounds):
        improved = False
        for name in names:
            trials = []
            for g in GRID:
                y = {**x, name: x[name] * g ** (1 / (r + 1))}
                trials.append((loss(kernels_of(y), among), name, g, y))
            value, _, _, y = min(trials, key=lambda t: (t[0], t[2]))
            if value < best - 1e-12:
                best, x, improved = value, y, True
        if not improved and r > 2:
            break
    return x


def rounded(values: dict[str, float]) -> dict[str, float]:
    """Values as the profile writes them: three significant digits."""
    return {k: float(f"{v:.3g}") for k, v in values.items()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6, help="coordinate-search rounds")
    a = ap.parse_args(argv)
    values = rounded(fit(a.rounds))
    for name, v in values.items():
        print(f"{name:28s} {v:g}")
    for family, e in family_errors(kernels_of(values)).items():
        print(f"  {family:18s} {100 * math.expm1(e):5.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
