"""GPU specifications: the GPUSpec type, the catalog and the full-spec reader of topology files.

The catalog's figures are data (``tpsim/calibration/data/gpus.yaml``, each with its source);
this module turns them into :class:`GPUSpec` objects on first use. SI units throughout:
FLOP/s, bytes/s, bytes, seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tpsim.calibration.hardware import ARCHITECTURES, gpu_catalog, gpu_defaults
from tpsim.calibration.loader import scale
from tpsim.topologies.errors import TopologyError, did_you_mean, show

#: The smallest positive figure a topology or GPU spec may give (GB/s, TFLOP/s, ...): below
#: it no number describes hardware.
MIN_POSITIVE = 1e-9

__all__ = ["GPUS", "SCALEUP_KINDS", "GPUSpec", "get_gpu", "gpu_from_dict", "gpu_to_dict"]

SCALEUP_KINDS = ("nvlink3", "nvlink4", "nvlink5", "xgmi", "none")
#: NVLink generations of bridge connectors (links.yaml nvlink_bridge); "none": no bridge.
BRIDGE_KINDS = ("nvlink3", "nvlink4", "none")
#: GPU architectures the calibration has kernel tiles for; "default" for any other.
ARCHS = (*ARCHITECTURES, "default")


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
    arch: str = "default"  # architecture: picks the GEMM tile (calibration kernels.yaml)
    nvlink_bridge: str = "none"  # NVLink generation of its bridge connector (BRIDGE_KINDS)
    fp4_flops: float | None = None  # dense fp4 (NVFP4) peak, None if no fp4 tensor cores
    #: SM boost clock (Hz); None: not given, NCCL's latencies taken as they are (at the
    #: calibration's reference clock)
    sm_clock_Hz: float | None = None
    #: on-chip last-level cache (bytes); not given: the largest of any catalog GPU (256 MB),
    #: so that nothing is taken to stream from HBM that a cache could hold
    l2_bytes: int = 256_000_000


class _Catalog(Mapping[str, GPUSpec]):
    """The catalog GPUs by name, read from the calibration data on first use."""

    def _specs(self) -> dict[str, GPUSpec]:
        return _catalog()

    def __getitem__(self, name: str) -> GPUSpec:
        return self._specs()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs())

    def __len__(self) -> int:
        return len(self._specs())


def _catalog() -> dict[str, GPUSpec]:
    global _SPECS
    if _SPECS is None:
        _SPECS = {name: GPUSpec(**row) for name, row in gpu_catalog().items()}
    return _SPECS


_SPECS: dict[str, GPUSpec] | None = None
#: Catalog GPUs by name (``tpsim list gpus``).
GPUS: Mapping[str, GPUSpec] = _Catalog()


def get_gpu(name: str) -> GPUSpec:
    """The catalog GPU called `name` (case-insensitive)."""
    key = name.lower() if isinstance(name, str) else name
    if key not in GPUS:
        raise TopologyError(
            f"gpu={show(name)}: unknown GPU{did_you_mean(str(key), list(GPUS))}; "
            f"known: {', '.join(GPUS)}"
        )
    return GPUS[key]


# Fields of a full GPU spec in a topology file: file name -> (SI field, decimal exponent).
_SCALED = {
    "bf16_tflops": ("bf16_flops", 12),
    "fp8_tflops": ("fp8_flops", 12),
    "fp4_tflops": ("fp4_flops", 12),
    "hbm_TBps": ("hbm_Bps", 12),
    "hbm_GB": ("hbm_bytes", 9),
    "scaleup_GBps": ("scaleup_Bps", 9),
    "kernel_overhead_us": ("kernel_overhead_s", -6),
    "sm_clock_GHz": ("sm_clock_Hz", 9),
    "l2_MB": ("l2_bytes", 6),
}
_REQUIRED = ("bf16_tflops", "hbm_TBps", "hbm_GB")
# Defaults of the optional fields (file units), from the calibration's GPU defaults.
_dflt = gpu_defaults()
GPU_FILE_DEFAULTS: dict[str, Any] = {
    "fp8_tflops": None,  # no fp8 tensor cores
    "fp4_tflops": None,  # no fp4 tensor cores
    "sm_count": _dflt.sm_count,  # only used for tile waves
    "scaleup_GBps": 0.0,  # no NVLink/xGMI
    "scaleup_kind": "none",
    "pcie_gen": _dflt.pcie_gen,
    "matmul_efficiency": _dflt.matmul_efficiency,
    "hbm_efficiency": _dflt.hbm_efficiency,
    "kernel_overhead_us": scale(_dflt.kernel_overhead_s, 6),
    "arch": None,  # the catalog GPU's of the same name, else "default"
    "nvlink_bridge": None,  # the catalog GPU's of the same name, else "none"
    "sm_clock_GHz": None,  # the catalog GPU's of the same name, else not given
    "l2_MB": None,  # the catalog GPU's of the same name, else 256 (the largest known)
}
GPU_FILE_FIELDS = ("name", *_REQUIRED, *GPU_FILE_DEFAULTS)


def _split_where(where: str) -> tuple[str, str]:
    prefix, _, file = where.partition(" in ")
    return prefix, (f" in {file}" if file else "")


def _number(value: object, field: str, suffix: str, lo: float, hi: float, lo_ok: bool) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok:
        try:
            v = float(value)  # type: ignore[arg-type]
        except OverflowError:  # an integer too large for a float
            v = math.inf
        ok = math.isfinite(v) and (v >= lo if lo_ok else v > lo) and v <= hi
        ok = ok and not 0 < v < MIN_POSITIVE  # no GPU figure is that small
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
    arch = f["arch"]
    if arch is None:
        arch = GPUS[name].arch if name in GPUS else "default"
    elif arch not in ARCHS:
        raise TopologyError(
            f"{prefix}.arch={show(arch)}{suffix}: must be one of {', '.join(ARCHS)}"
        )
    bridge = f["nvlink_bridge"]
    if bridge is None:
        bridge = GPUS[name].nvlink_bridge if name in GPUS else "none"
    elif bridge not in BRIDGE_KINDS:
        raise TopologyError(
            f"{prefix}.nvlink_bridge={show(bridge)}{suffix}: must be one of "
            f"{', '.join(BRIDGE_KINDS)}"
        )
    if f["sm_clock_GHz"] is None and name in GPUS:
        clock = GPUS[name].sm_clock_Hz
        f["sm_clock_GHz"] = None if clock is None else scale(clock, -9)
    if f["l2_MB"] is None:
        f["l2_MB"] = scale(GPUS[name].l2_bytes if name in GPUS else GPUSpec.l2_bytes, -6)
    si: dict[str, Any] = {}
    for key, (field, exponent) in _SCALED.items():
        if key in ("fp8_tflops", "fp4_tflops", "sm_clock_GHz") and f[key] is None:
            si[field] = None
            continue
        lo_ok = key in ("scaleup_GBps", "kernel_overhead_us")
        hi = 10.0 if key == "sm_clock_GHz" else 1e6  # no GPU clocks past 10 GHz
        v = _number(f[key], f"{prefix}.{key}", suffix, 0.0, hi, lo_ok)
        si[field] = scale(v, exponent)
    si["hbm_bytes"] = round(si["hbm_bytes"])
    si["l2_bytes"] = round(si["l2_bytes"])
    for key in ("matmul_efficiency", "hbm_efficiency"):
        si[key] = _number(f[key], f"{prefix}.{key}", suffix, 0.0, 1.0, False)
    return GPUSpec(
        name=name,
        sm_count=_integer(f["sm_count"], f"{prefix}.sm_count", suffix, 1, 100_000),
        scaleup_kind=kind,
        arch=arch,
        nvlink_bridge=bridge,
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
    d["arch"] = spec.arch
    d["nvlink_bridge"] = spec.nvlink_bridge
    return d
