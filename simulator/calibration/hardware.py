"""Published hardware figures: the GPU catalog and the links of the catalog topologies.

Read from ``data/gpus.yaml`` and ``data/links.yaml`` and handed to :mod:`tpsim.topologies`
as plain SI values (this layer knows nothing of graphs or GPU objects).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from tpsim.calibration.entries import CalibrationError, entry, number, read, scale

#: GPU architectures the calibration knows (kernel tiles, per-architecture tables).
ARCHITECTURES: tuple[str, ...] = ("ampere", "ada", "hopper", "blackwell", "cdna3")

GiB = 2**30

#: Fields of a catalog GPU entry (file units) and whether they are required.
_GPU_FIELDS = {
    "arch": True,
    "bf16_tflops": True,
    "fp8_tflops": False,
    "fp4_tflops": False,
    "hbm_TBps": True,
    "hbm_GiB": True,
    "sm_count": True,
    "l2_MB": False,
    "sm_clock_GHz": True,
    "scaleup_GBps": True,
    "scaleup_kind": True,
    "pcie_gen": True,
    "nvlink_bridge": False,
    "stream_TBps": False,
    "best_matmul_tflops": False,
    "source": True,
}


@dataclass(frozen=True)
class GpuDefaults:
    """Figures of a GPU that has no measurement of its own (file units converted to SI)."""

    matmul_efficiency: float
    hbm_efficiency: float
    kernel_overhead_s: float
    sm_count: int
    pcie_gen: int


@cache
def gpu_defaults() -> GpuDefaults:
    d = read("gpus.yaml").get("defaults")
    if not isinstance(d, dict):
        raise CalibrationError("gpus.yaml.defaults: must be a table of entries")
    w = "gpus.yaml.defaults"
    return GpuDefaults(
        matmul_efficiency=number(entry(d, "matmul_efficiency", w), "matmul_efficiency"),
        hbm_efficiency=number(entry(d, "hbm_efficiency", w), "hbm_efficiency"),
        kernel_overhead_s=scale(number(entry(d, "kernel_overhead_us", w), "kernel_overhead"), -6),
        sm_count=int(entry(d, "sm_count", w)),
        pcie_gen=int(entry(d, "pcie_gen", w)),
    )


@cache
def gpu_catalog() -> dict[str, dict[str, Any]]:
    """Catalog GPUs by name, each as the SI fields of ``tpsim.topologies.gpus.GPUSpec``.

    Efficiencies are measured / peak (HBM: the midpoint of the measured STREAM range); a
    GPU without a measurement gets :func:`gpu_defaults`.
    """
    rows = read("gpus.yaml").get("gpus")
    if not isinstance(rows, dict):
        raise CalibrationError("gpus.yaml.gpus: must be a table of GPUs")
    dflt = gpu_defaults()
    out = {}
    for name, row in rows.items():
        w = f"gpus.yaml.gpus.{name}"
        if not isinstance(row, dict):
            raise CalibrationError(f"{w}: must be a table of fields")
        for key in row:
            if key not in _GPU_FIELDS:
                raise CalibrationError(f"{w}.{key}: unknown field")
        for key, required in _GPU_FIELDS.items():
            if required and key not in row:
                raise CalibrationError(f"{w}.{key}: missing")
        bf16 = number(row["bf16_tflops"], f"{w}.bf16_tflops")
        hbm = number(row["hbm_TBps"], f"{w}.hbm_TBps")
        fp8 = row.get("fp8_tflops")
        fp4 = row.get("fp4_tflops")
        matmul = row.get("best_matmul_tflops")
        stream = row.get("stream_TBps")
        if stream is not None:
            lo, hi = (number(x, f"{w}.stream_TBps") for x in stream)
            hbm_eff = (lo + hi) / 2 / hbm
        else:
            hbm_eff = dflt.hbm_efficiency
        out[str(name)] = {
            "name": str(name),
            "arch": str(row["arch"]),
            "bf16_flops": scale(bf16, 12),
            "fp8_flops": None if fp8 is None else scale(number(fp8, f"{w}.fp8_tflops"), 12),
            "fp4_flops": None if fp4 is None else scale(number(fp4, f"{w}.fp4_tflops"), 12),
            "hbm_Bps": scale(hbm, 12),
            "hbm_bytes": int(number(row["hbm_GiB"], f"{w}.hbm_GiB")) * GiB,
            "sm_count": int(row["sm_count"]),
            **(
                {}
                if "l2_MB" not in row
                else {"l2_bytes": round(scale(number(row["l2_MB"], f"{w}.l2_MB"), 6))}
            ),
            "sm_clock_Hz": scale(number(row["sm_clock_GHz"], f"{w}.sm_clock_GHz"), 9),
            "scaleup_Bps": scale(number(row["scaleup_GBps"], f"{w}.scaleup_GBps"), 9),
            "scaleup_kind": str(row["scaleup_kind"]),
            "pcie_gen": int(row["pcie_gen"]),
            "matmul_efficiency": (
                dflt.matmul_efficiency
                if matmul is None
                else number(matmul, f"{w}.best_matmul_tflops") / bf16
            ),
            "hbm_efficiency": hbm_eff,
            "kernel_overhead_s": dflt.kernel_overhead_s,
            # the NVLink generation of its bridge connector ("none": no bridge)
            "nvlink_bridge": str(row.get("nvlink_bridge", "none")),
        }
    return out


@dataclass(frozen=True)
class LinkFigures:
    """Raw link bandwidths (B/s per direction) and one-way latencies (s) of the builders."""

    pcie_x16_Bps: dict[int, float]  # by PCIe generation
    upi_Bps: float
    xgmi_peer_Bps: float
    infiniband_Bps: dict[str, float]  # by NIC generation (hdr, ndr)
    nic: dict[str, str]  # scale-up kind -> NIC generation of its hosts
    nvlink_hop_s: float
    xgmi_hop_s: float
    pcie_hop_s: float
    upi_hop_s: float
    infiniband_hop_s: float
    #: One NVLink bridge, per direction, by the NVLink generation of the cards it joins.
    nvlink_bridge_Bps: dict[str, float] = field(default_factory=dict)
    nvlink_bridges_per_gpu: int = 0  # bridge connectors on a card
    #: Catalog networks of multi-host joins by name: file fields (nic_gbps, nics_per_node,
    #: latency_us), checked by ``tpsim.topologies.network``.
    networks: dict[str, dict[str, Any]] = field(default_factory=dict)


@cache
def link_figures() -> LinkFigures:
    d, w = read("links.yaml"), "links.yaml"
    bw, lat = d.get("bandwidth_GBps"), d.get("latency_us")
    if not isinstance(bw, dict) or not isinstance(lat, dict):
        raise CalibrationError(f"{w}: needs bandwidth_GBps and latency_us tables")

    def gbps(key: str) -> float:
        return scale(number(entry(bw, key, w), f"{w}.{key}"), 9)

    def us(key: str) -> float:
        return scale(number(entry(lat, key, w), f"{w}.{key}"), -6)

    pcie = entry(bw, "pcie_x16", w)
    ib = entry(bw, "infiniband", w)
    return LinkFigures(
        pcie_x16_Bps={int(g): scale(number(v, f"{w}.pcie_x16"), 9) for g, v in pcie.items()},
        upi_Bps=gbps("upi"),
        xgmi_peer_Bps=gbps("xgmi_peer"),
        infiniband_Bps={str(k): scale(number(v, f"{w}.infiniband"), 9) for k, v in ib.items()},
        nic={str(k): str(v) for k, v in entry(d, "nic", w).items()},
        nvlink_hop_s=us("nvlink_hop"),
        xgmi_hop_s=us("xgmi_hop"),
        pcie_hop_s=us("pcie_hop"),
        upi_hop_s=us("upi_hop"),
        infiniband_hop_s=us("infiniband_hop"),
        nvlink_bridge_Bps={
            str(k): scale(number(v, f"{w}.nvlink_bridge"), 9)
            for k, v in entry(bw, "nvlink_bridge", w).items()
        },
        nvlink_bridges_per_gpu=int(number(entry(d, "nvlink_bridges_per_gpu", w), "bridges")),
        networks=_networks(d.get("networks"), w),
    )


def _networks(d: object, w: str) -> dict[str, dict[str, Any]]:
    if d is None:
        return {}
    value = entry({"networks": d}, "networks", w)
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise CalibrationError(f"{w}.networks: must be a table of networks")
    return {str(k): dict(v) for k, v in value.items()}
