"""GPU specifications: the catalog and the full-spec reader used by topology files.

Figures are copied from shared/calibration/gpus.csv (vendor datasheets plus published
measurements); that CSV is not shipped, so each constant carries its source here.
SI units throughout: FLOP/s, bytes/s, bytes, seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from tpsim.topologies.errors import TopologyError, did_you_mean, show

__all__ = ["GPUS", "SCALEUP_KINDS", "GPUSpec", "get_gpu", "gpu_from_dict", "gpu_to_dict"]

SCALEUP_KINDS = ("nvlink3", "nvlink4", "nvlink5", "xgmi", "none")

# Defaults where no measurement is available (documented estimates, not fits).
DEFAULT_MATMUL_EFFICIENCY = 0.75  # typical best dense bf16 GEMM / peak on recent GPUs
DEFAULT_HBM_EFFICIENCY = 0.85  # typical STREAM / peak HBM bandwidth
# Fixed GPU-side cost of one kernel (launch-to-start latency + tail). Estimate: a few µs
# is typical on every current GPU; we use 2 µs everywhere.
DEFAULT_KERNEL_OVERHEAD_S = 2e-6


@dataclass(frozen=True)
class GPUSpec:
    """One GPU model. All figures are dense peaks in SI units."""

    name: str
    bf16_flops: float  # dense peak FLOP/s (bf16/fp16)
    fp8_flops: float | None  # dense fp8 peak, None if no fp8 tensor cores
    hbm_Bps: float  # peak HBM bandwidth B/s
    hbm_bytes: int  # capacity in bytes (vendor GB * 1e9)
    sm_count: int
    scaleup_Bps: float  # scale-up bandwidth per direction per GPU (0 = none)
    scaleup_kind: str  # nvlink3 | nvlink4 | nvlink5 | xgmi | none
    pcie_gen: int
    matmul_efficiency: float  # best achievable dense matmul / peak
    hbm_efficiency: float  # measured STREAM / peak (midpoint of the measured range)
    kernel_overhead_s: float  # fixed GPU-side cost per kernel


#: Memory capacities: the vendors' "80 GB" of HBM is binary, an 80 GB A100 or H100 shows
#: 81920 / 81559 MiB in nvidia-smi, a 141 GB H200 143771 MiB; so catalog capacities are
#: taken in GiB. (Topology files give hbm_GB in decimal GB, as every other file unit.)
GiB = 2**30


def _mid(lo: float, hi: float) -> float:
    return (lo + hi) / 2


GPUS: dict[str, GPUSpec] = {
    # gpus.csv: 312 TFLOP/s, 2.0 TB/s, 80 GB, 108 SMs, NVLink3 300 GB/s/dir, PCIe gen4;
    # STREAM 1.61-1.75 TB/s; best bf16 matmul 271.2 TFLOP/s (ml-engineering MAMF).
    "a100-sxm-80gb": GPUSpec(
        name="a100-sxm-80gb",
        bf16_flops=312e12,
        fp8_flops=None,
        hbm_Bps=2.0e12,
        hbm_bytes=80 * GiB,
        sm_count=108,
        scaleup_Bps=300e9,
        scaleup_kind="nvlink3",
        pcie_gen=4,
        matmul_efficiency=271.2 / 312,
        hbm_efficiency=_mid(1.61, 1.75) / 2.0,
        kernel_overhead_s=DEFAULT_KERNEL_OVERHEAD_S,
    ),
    # gpus.csv: 989/1979 TFLOP/s, 3.35 TB/s, 80 GB, 132 SMs, NVLink4 450 GB/s/dir, gen5;
    # STREAM 2.90-3.18 TB/s; best bf16 matmul 794.5 TFLOP/s.
    "h100-sxm": GPUSpec(
        name="h100-sxm",
        bf16_flops=989e12,
        fp8_flops=1979e12,
        hbm_Bps=3.35e12,
        hbm_bytes=80 * GiB,
        sm_count=132,
        scaleup_Bps=450e9,
        scaleup_kind="nvlink4",
        pcie_gen=5,
        matmul_efficiency=794.5 / 989,
        hbm_efficiency=_mid(2.90, 3.18) / 3.35,
        kernel_overhead_s=DEFAULT_KERNEL_OVERHEAD_S,
    ),
    # Not in gpus.csv. NVIDIA H100 PCIe datasheet: 756 bf16 / 1513 fp8 dense TFLOP/s,
    # 2.0 TB/s, 80 GB, 114 SMs, PCIe gen5; the optional NVLink bridge is ignored (0).
    # Efficiencies unknown: defaults 0.75 (matmul) and 0.85 (HBM).
    "h100-pcie": GPUSpec(
        name="h100-pcie",
        bf16_flops=756e12,
        fp8_flops=1513e12,
        hbm_Bps=2.0e12,
        hbm_bytes=80 * GiB,
        sm_count=114,
        scaleup_Bps=0.0,
        scaleup_kind="none",
        pcie_gen=5,
        matmul_efficiency=DEFAULT_MATMUL_EFFICIENCY,
        hbm_efficiency=DEFAULT_HBM_EFFICIENCY,
        kernel_overhead_s=DEFAULT_KERNEL_OVERHEAD_S,
    ),
    # gpus.csv: 989/1979 TFLOP/s, 4.8 TB/s, 141 GB, 132 SMs, NVLink4 450, gen5;
    # STREAM 4.00-4.48 TB/s; no matmul measurement of its own: the same GH100 compute die as
    # the H100 SXM (989 TFLOP/s, 132 SMs), so the H100's 794.5/989.
    "h200-sxm": GPUSpec(
        name="h200-sxm",
        bf16_flops=989e12,
        fp8_flops=1979e12,
        hbm_Bps=4.8e12,
        hbm_bytes=141 * GiB,
        sm_count=132,
        scaleup_Bps=450e9,
        scaleup_kind="nvlink4",
        pcie_gen=5,
        matmul_efficiency=794.5 / 989,
        hbm_efficiency=_mid(4.00, 4.48) / 4.8,
        kernel_overhead_s=DEFAULT_KERNEL_OVERHEAD_S,
    ),
    # gpus.csv: 2250/4500 TFLOP/s, 8.0 TB/s, 180 GB, 148 SMs, NVLink5 900, gen5;
    # best bf16 matmul 1745 TFLOP/s; no STREAM figure: default 0.85.
    "b200": GPUSpec(
        name="b200",
        bf16_flops=2250e12,
        fp8_flops=4500e12,
        hbm_Bps=8.0e12,
        hbm_bytes=180 * GiB,
        sm_count=148,
        scaleup_Bps=900e9,
        scaleup_kind="nvlink5",
        pcie_gen=5,
        matmul_efficiency=1745 / 2250,
        hbm_efficiency=DEFAULT_HBM_EFFICIENCY,
        kernel_overhead_s=DEFAULT_KERNEL_OVERHEAD_S,
    ),
    # gpus.csv: 362/733 TFLOP/s, 0.864 TB/s, 48 GB, 142 SMs, no NVLink, gen4;
    # no measurements: defaults 0.75 / 0.85.
    "l40s": GPUSpec(
        name="l40s",
        bf16_flops=362e12,
        fp8_flops=733e12,
        hbm_Bps=0.864e12,
        hbm_bytes=48 * GiB,
        sm_count=142,
        scaleup_Bps=0.0,
        scaleup_kind="none",
        pcie_gen=4,
        matmul_efficiency=DEFAULT_MATMUL_EFFICIENCY,
        hbm_efficiency=DEFAULT_HBM_EFFICIENCY,
        kernel_overhead_s=DEFAULT_KERNEL_OVERHEAD_S,
    ),
    # gpus.csv: 165/330 TFLOP/s, 1.008 TB/s (GDDR6X), 24 GB, 128 SMs, no NVLink, gen4;
    # no measurements: defaults 0.75 / 0.85.
    "rtx-4090": GPUSpec(
        name="rtx-4090",
        bf16_flops=165e12,
        fp8_flops=330e12,
        hbm_Bps=1.008e12,
        hbm_bytes=24 * GiB,
        sm_count=128,
        scaleup_Bps=0.0,
        scaleup_kind="none",
        pcie_gen=4,
        matmul_efficiency=DEFAULT_MATMUL_EFFICIENCY,
        hbm_efficiency=DEFAULT_HBM_EFFICIENCY,
        kernel_overhead_s=DEFAULT_KERNEL_OVERHEAD_S,
    ),
    # gpus.csv: 1307/2615 TFLOP/s, 5.3 TB/s, 192 GB, 304 CUs, xGMI 64 GB/s/dir per peer,
    # gen5; best bf16 matmul 668.4 TFLOP/s; no STREAM figure: default 0.85.
    # scaleup_Bps is the per-GPU aggregate, 7 peer links x 64 GB/s = 448 GB/s per direction
    # (the topology builder puts 64 GB/s on each peer link).
    "mi300x": GPUSpec(
        name="mi300x",
        bf16_flops=1307e12,
        fp8_flops=2615e12,
        hbm_Bps=5.3e12,
        hbm_bytes=192 * GiB,
        sm_count=304,
        scaleup_Bps=7 * 64e9,
        scaleup_kind="xgmi",
        pcie_gen=5,
        matmul_efficiency=668.4 / 1307,
        hbm_efficiency=DEFAULT_HBM_EFFICIENCY,
        kernel_overhead_s=DEFAULT_KERNEL_OVERHEAD_S,
    ),
}


def get_gpu(name: str) -> GPUSpec:
    """The catalog GPU called `name` (case-insensitive)."""
    key = name.lower() if isinstance(name, str) else name
    if key not in GPUS:
        raise TopologyError(
            f"gpu={show(name)}: unknown GPU{did_you_mean(str(key), list(GPUS))}; "
            f"known: {', '.join(GPUS)}"
        )
    return GPUS[key]


def scale(x: float, exponent: int) -> float:
    """x * 10**exponent, exact in decimal (0.35 µs -> 0.35e-6 s, like the literal)."""
    return float(Decimal(repr(float(x))).scaleb(exponent))


# Fields of a full GPU spec in a topology file: file name -> (SI field, decimal exponent).
_SCALED = {
    "bf16_tflops": ("bf16_flops", 12),
    "fp8_tflops": ("fp8_flops", 12),
    "hbm_TBps": ("hbm_Bps", 12),
    "hbm_GB": ("hbm_bytes", 9),
    "scaleup_GBps": ("scaleup_Bps", 9),
    "kernel_overhead_us": ("kernel_overhead_s", -6),
}
_REQUIRED = ("bf16_tflops", "hbm_TBps", "hbm_GB")
# Documented defaults of the optional fields (file units).
GPU_FILE_DEFAULTS: dict[str, Any] = {
    "fp8_tflops": None,  # no fp8 tensor cores
    "sm_count": 132,  # H100-class; only used for occupancy-style heuristics
    "scaleup_GBps": 0.0,  # no NVLink/xGMI
    "scaleup_kind": "none",
    "pcie_gen": 5,
    "matmul_efficiency": DEFAULT_MATMUL_EFFICIENCY,
    "hbm_efficiency": DEFAULT_HBM_EFFICIENCY,
    "kernel_overhead_us": DEFAULT_KERNEL_OVERHEAD_S * 1e6,
}
GPU_FILE_FIELDS = ("name", *_REQUIRED, *GPU_FILE_DEFAULTS)


def _split_where(where: str) -> tuple[str, str]:
    prefix, _, file = where.partition(" in ")
    return prefix, (f" in {file}" if file else "")


def _number(value: object, field: str, suffix: str, lo: float, hi: float, lo_ok: bool) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = math.isfinite(v) and (v >= lo if lo_ok else v > lo) and v <= hi
    if not ok:
        bound = ">= " if lo_ok else "> "
        raise TopologyError(
            f"{field}={show(value)}{suffix}: must be a finite number {bound}{lo:g} and <= {hi:g}"
        )
    return float(value)  # type: ignore[arg-type]


def _integer(value: object, field: str, suffix: str, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise TopologyError(f"{field}={show(value)}{suffix}: must be an integer in {lo}..{hi}")
    return value


def gpu_from_dict(d: dict, where: str) -> GPUSpec:
    """A GPUSpec from a full spec in file units (see GPU_FILE_FIELDS / GPU_FILE_DEFAULTS).

    `where` is the field path of the spec, optionally followed by " in FILE"
    (e.g. "gpus.g in ring.yaml"); error messages are built from it.
    """
    prefix, suffix = _split_where(where)
    if not isinstance(d, dict):
        raise TopologyError(f"{prefix}={show(d)}{suffix}: must be a mapping of GPU fields")
    for key in d:
        if key not in GPU_FILE_FIELDS:
            raise TopologyError(
                f"{prefix}.{key if isinstance(key, str) else show(key)}{suffix}: unknown field"
                f"{did_you_mean(str(key), list(GPU_FILE_FIELDS))}"
            )
    for key in _REQUIRED:
        if key not in d:
            raise TopologyError(f"{prefix}.{key}{suffix}: missing field")
    f = {**GPU_FILE_DEFAULTS, **d}
    name = f.get("name", prefix.rsplit(".", 1)[-1] or "custom")
    if not isinstance(name, str) or not name:
        raise TopologyError(f"{prefix}.name={show(name)}{suffix}: must be a non-empty string")
    kind = f["scaleup_kind"]
    if kind not in SCALEUP_KINDS:
        raise TopologyError(
            f"{prefix}.scaleup_kind={show(kind)}{suffix}: must be one of {', '.join(SCALEUP_KINDS)}"
        )
    si: dict[str, Any] = {}
    for key, (field, exponent) in _SCALED.items():
        if key == "fp8_tflops" and f[key] is None:
            si[field] = None
            continue
        lo_ok = key in ("scaleup_GBps", "kernel_overhead_us")
        v = _number(f[key], f"{prefix}.{key}", suffix, 0.0, 1e6, lo_ok)
        si[field] = scale(v, exponent)
    si["hbm_bytes"] = round(si["hbm_bytes"])
    for key in ("matmul_efficiency", "hbm_efficiency"):
        si[key] = _number(f[key], f"{prefix}.{key}", suffix, 0.0, 1.0, False)
    return GPUSpec(
        name=name,
        sm_count=_integer(f["sm_count"], f"{prefix}.sm_count", suffix, 1, 100_000),
        scaleup_kind=kind,
        # the generations whose x16 bandwidth tpsim.topologies.builders knows (NIC links use it)
        pcie_gen=_integer(f["pcie_gen"], f"{prefix}.pcie_gen", suffix, 3, 6),
        **si,
    )


def gpu_to_dict(spec: GPUSpec) -> dict[str, Any]:
    """The full spec in file units; gpu_from_dict(gpu_to_dict(s), ...) == s."""
    d: dict[str, Any] = {"name": spec.name}
    for key, (field, exponent) in _SCALED.items():
        value = getattr(spec, field)
        d[key] = None if value is None else scale(value, -exponent)
    d["sm_count"] = spec.sm_count
    d["scaleup_kind"] = spec.scaleup_kind
    d["pcie_gen"] = spec.pcie_gen
    d["matmul_efficiency"] = spec.matmul_efficiency
    d["hbm_efficiency"] = spec.hbm_efficiency
    return d
