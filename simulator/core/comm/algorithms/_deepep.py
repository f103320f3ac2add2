"""What DeepEP's two kernel modes share: the flows of one rank to its peers, capped so that
together they reach the mode's share of the GPU's NVLink port and of its NIC, and the mode
of the calibration (``deepep.yaml``; none under the ideal one: plain flows).

DeepEP's kernels are no NCCL collectives: each warp writes token messages straight into
peers' buffers (NVLink stores, or RDMA writes the GPU posts itself, IBGDA), with no NCCL
protocol, channels or chunks.
"""

from __future__ import annotations

from dataclasses import replace

from tpsim.calibration import Protocol
from tpsim.calibration.model_collectives import DeepEPMode
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import exchange_blocks, many_to_many, send
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Send

#: Stores and RDMA writes of DeepEP's warps: no protocol overhead, no protocol cap.
DIRECT = Protocol("direct", {}, {"nvlink": 0.0, "pci": 0.0, "net": 0.0}, 1.0, {})


def mode(fab: Fabric, low_latency: bool) -> DeepEPMode | None:
    """The calibration's DeepEP mode (None: the ideal calibration)."""
    ep = fab.tuning.deepep
    if ep is None:
        return None
    return ep.low_latency if low_latency else ep.normal


def why_not(fab: Fabric, op: str) -> str | None:
    """DeepEP needs NVLink between the GPUs of a node (its intranode buffers are NVLink
    peer memory) and, across nodes, RDMA (NVSHMEM)."""
    if not fab.gpu.scaleup_kind.startswith("nvlink"):
        return "needs NVLink between the GPUs of a node (DeepEP's buffers are peer memory)"
    return None


def block(call: CollectiveCall, ranks: int) -> list[list[int]]:
    """Bytes each rank sends to each rank (its own included): uniform, or as the call's
    uneven routing shares them (:func:`~tpsim.core.comm.schedules.exchange_blocks`)."""
    return exchange_blocks(call, ranks)


def flow(
    fab: Fabric,
    m: DeepEPMode | None,
    src: int,
    dst: int,
    nbytes: int,
    peers: int,
    after_s: float = 0.0,
    issue_Bps: float = 0.0,
    phase: str = "",
) -> Send:
    """``src``'s flow of ``nbytes`` to ``dst``, one of ``peers`` flows sharing its NVLink
    port (or its NIC across hosts): capped at the mode's efficiency of the path over
    ``peers``, and at ``issue_Bps`` (what the kernel's SMs feed this flow; 0: no limit);
    its first byte after ``after_s`` more (an earlier stage's latency); ``phase`` picks the
    kernel's NVLink efficiency (dispatch or combine)."""
    net = fab.path(src, dst).link_class == "net"
    if m is None:
        snd = send(fab, src, dst, nbytes, DIRECT, hop_s=0.0)
    else:
        eff = m.rdma_efficiency if net else m.nvlink_efficiency(phase)
        hop = m.rdma_post_s if net else fab.tuning.custom_hop_s
        snd = send(fab, src, dst, nbytes, DIRECT, hop_s=hop, share=eff / max(1, peers))
    if issue_Bps > 0:
        snd = replace(snd, cap_Bps=min(snd.cap_Bps, issue_Bps))
    if after_s:
        snd = replace(snd, latency_s=snd.latency_s + after_s)
    return many_to_many(fab, snd, peers)  # the switch port's share for flows to several peers


def dispatch_issue(fab: Fabric, m: DeepEPMode | None, call: CollectiveCall) -> float:
    """B/s of messages the low-latency dispatch grid feeds each of the ``p-1`` peers (its
    SMs' quantize-and-send rate over them); 0: no limit (combine, experts not known, or the
    ideal calibration)."""
    if m is None or m.dispatch_sm_Bps <= 0 or call.phase == "combine":
        return 0.0
    sms = m.grid_sms(call.experts, fab.gpu.sm_count)
    return sms * m.dispatch_sm_Bps / max(1, fab.ranks - 1) if sms else 0.0
