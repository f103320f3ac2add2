"""The raw bandwidth per direction of a link a topology is built of, from the calibration
data (``links.yaml``, each figure with its source): an x16 PCIe link of a generation, the
NIC paired with a GPU, and NVLink bridges between two cards."""

from __future__ import annotations

from tpsim.calibration.hardware import link_figures
from tpsim.topologies.errors import TopologyError, show
from tpsim.topologies.gpus import GPUSpec


def pcie_bandwidth_Bps(gen: int) -> float:
    """Raw x16 PCIe bandwidth per direction of a PCIe generation."""
    pcie = link_figures().pcie_x16_Bps
    if gen not in pcie:
        raise TopologyError(f"pcie_gen={show(gen)}: must be one of {sorted(pcie)}")
    return pcie[gen]


def nic_bandwidth_Bps(spec: GPUSpec) -> float:
    """NIC paired with a GPU: NDR for Hopper/Blackwell/MI300X class, HDR otherwise."""
    links = link_figures()
    return links.infiniband_Bps[links.nic[spec.scaleup_kind]]


def bridge_bandwidth_Bps(spec: GPUSpec, bridges: int) -> float:
    """Raw bandwidth per direction of ``bridges`` NVLink bridges between two ``spec`` cards."""
    links = link_figures()
    if spec.nvlink_bridge not in links.nvlink_bridge_Bps:
        raise TopologyError(f"gpu={show(spec.name)}: has no NVLink bridge connector")
    top = links.nvlink_bridges_per_gpu
    if not isinstance(bridges, int) or isinstance(bridges, bool) or not 1 <= bridges <= top:
        raise TopologyError(f"bridges={show(bridges)}: must be an integer in 1..{top}")
    return bridges * links.nvlink_bridge_Bps[spec.nvlink_bridge]
