"""What the peer-memory all-reduces (one-shot, two-shot) share: when they can run, the
zero-overhead protocol of plain loads and stores through peer memory, the rate at which a
kernel's loads can read a peer, and which of the two the engine runs at a size.

A rank reads its peers with plain 16-byte loads from every thread of the kernel's grid. By
Little's law the bytes a reader has in flight to one peer, over the latency of a remote load,
bound the rate it reads that peer at; the links bound the sum (a one-shot reader's ``p-1``
peers share its NVLink port).
"""

from __future__ import annotations

import math

from tpsim.calibration import Protocol
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import send
from tpsim.core.schedule import Send

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


#: Bytes one thread loads at a time (vLLM's and TensorRT-LLM's packed 16-byte loads).
LOAD_BYTES = 16


def read(fab: Fabric, src: int, dst: int, nbytes: int, latency_s: float, peers: int) -> Send:
    """``dst`` reads ``nbytes`` of ``src``'s buffer, its grid keeping one load in flight per
    thread spread over ``peers`` peers; the step starts after ``latency_s``."""
    kernel = fab.tuning.custom
    load_s = fab.tuning.custom_load_latency_s
    share = 1.0
    if load_s > 0:
        rate = kernel.grid_threads * LOAD_BYTES / load_s / peers
        share = min(1.0, rate / fab.path(src, dst).bandwidth_Bps)
    return send(fab, src, dst, nbytes, PEER, hop_s=latency_s, share=share)


def oneshot_limit(fab: Fabric) -> float | None:
    """Bytes from which the engine's kernels run two-shot on this group (inf: never; None: no
    rule, ``auto`` runs the faster)."""
    return fab.tuning.custom_oneshot_limit(fab.ranks)


def custom_max(fab: Fabric) -> int:
    """Largest message the engine's custom kernels take on this group (its own limit, by
    GPU and group size where the engine has one: vLLM's with symmetric memory on)."""
    return fab.tuning.custom_max(fab.gpu.arch, fab.ranks)


def auto_oneshot_max(fab: Fabric) -> int:
    """Largest message ``auto`` gives the one-shot kernel."""
    limit = oneshot_limit(fab)
    top = custom_max(fab)
    return top if limit is None or math.isinf(limit) else min(top, math.ceil(limit) - 1)


def auto_twoshot_min(fab: Fabric) -> int:
    """Smallest message ``auto`` gives the two-shot kernel."""
    limit = oneshot_limit(fab)
    if limit is None:
        return 0
    return custom_max(fab) + 1 if math.isinf(limit) else math.ceil(limit)


def peer_access(fab: Fabric, a: int, b: int) -> bool:
    """Whether GPU a can read GPU b's memory over NVLink/xGMI: a direct link, or one hop
    through an NVSwitch (GPUs do not forward NVLink traffic for each other)."""
    g = fab.routes.graph
    edges = fab.routes.path(fab.gpu_ranks[a], fab.gpu_ranks[b])
    if fab.path(a, b).link_class != "nvlink" or len(edges) > 2:
        return False
    return len(edges) == 1 or g.nodes[edges[0][1]].get("kind") == "nvswitch"
