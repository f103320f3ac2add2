"""What the peer-memory all-reduces (one-shot, two-shot) share: when they can run, and the
zero-overhead protocol of plain loads and stores through peer memory."""

from __future__ import annotations

from tpsim.calibration import Protocol
from tpsim.core.fabric import Fabric

#: Peer-memory transfers: plain loads and stores, no protocol overhead or cap (the hop
#: latency is the calibration's flag per step).
PEER = Protocol("p2p", {}, {"nvlink": 0.0, "pci": 0.0, "net": 0.0}, 1.0, {})


def why_not(fab: Fabric, op: str) -> str | None:
    """Why a peer-memory all-reduce cannot run on this group (as vLLM's custom all-reduce)."""
    p = fab.ranks
    if fab.multi_host:
        return "works through peer memory inside one host only"
    if p > 8:
        return "supports at most 8 GPUs (as vLLM's custom all-reduce)"
    if not all(peer_access(fab, a, b) for a in range(p) for b in range(p) if a != b):
        return "needs a direct NVLink/xGMI link or one NVSwitch between every pair of GPUs"
    return None


def peer_access(fab: Fabric, a: int, b: int) -> bool:
    """Whether GPU a can read GPU b's memory over NVLink/xGMI: a direct link, or one hop
    through an NVSwitch (GPUs do not forward NVLink traffic for each other)."""
    g = fab.routes.graph
    edges = fab.routes.path(fab.gpu_ranks[a], fab.gpu_ranks[b])
    if fab.path(a, b).link_class != "nvlink" or len(edges) > 2:
        return False
    return len(edges) == 1 or g.nodes[edges[0][1]].get("kind") == "nvswitch"
