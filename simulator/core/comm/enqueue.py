"""NCCL's host side of one collective call: how many channels the operation runs on, and the
host time to enqueue it on one GPU (the calibration's ``host_enqueue`` and
``channel_thresholds``, from NCCL's ``enqueue.cc`` and ``tuning.cc``).

A benchmark that calls a collective back to back (nccl-tests, a torch loop) is host-bound
when its thread needs longer to enqueue one call than the GPUs need to run it: one thread
driving eight GPUs (nccl-tests ``-g 8``) enqueues eight times per iteration. On NCCL of the
Ampere years each channel of the operation cost host time as well, and NCCL gives a small
operation few channels, so that thread's time grows with the size until every channel is
in use.
"""

from __future__ import annotations

from tpsim.calibration import Collectives
from tpsim.calibration.model_collectives import HostEnqueue

#: NCCL's grouped send/receive: channels per peer by its P2P rule, one task per send and
#: per receive (``nccl.yaml`` ``p2p``).
P2P_FAMILY = ("pairwise",)
#: Schedules NCCL's own channel rule applies to (rings and trees); NVLS runs on its own
#: channels, and the peer-memory kernels of serving engines are not NCCL's.
RING_FAMILY = ("ring", "tree", "hierarchical")
NVLS_FAMILY = ("nvls", "nvlstree")


def ring_channels(c: Collectives, arch: str) -> int:
    """The ring channels NCCL builds for a GPU of ``arch`` (the most an operation runs on);
    1 without host tuning (the ideal calibration)."""
    cost = _enqueue_cost(c, arch)
    return cost.ring_channels if cost is not None else 1


def _enqueue_cost(c: Collectives, arch: str) -> HostEnqueue | None:
    """The host enqueue costs of ``arch`` (or the default ones; None: no host costs)."""
    return c.host_enqueue.get(arch) or c.host_enqueue.get("default")


def p2p_channels(
    c: Collectives,
    nbytes: int,
    ranks: int,
    most: int,
    multi_host: bool,
    protocol: str = "Simple",
) -> int:
    """Channels an all-to-all of ``nbytes`` per rank under ``protocol`` occupies: each of
    the ``ranks`` peers (the rank itself included, as nccl-tests sends to itself) on its own
    parts, at most the communicator's P2P channels; 0 without P2P tuning."""
    if c.p2p is None:
        return 0
    per_peer = -(-nbytes // ranks)
    total = c.p2p.total_channels(most)
    return min(total, ranks * c.p2p.channels(per_peer, ranks, most, multi_host, protocol))


def nccl_channels(
    c: Collectives,
    algorithm: str,
    protocol: str,
    nbytes: int,
    ranks: int,
    most: int,
    multi_host: bool = False,
) -> int:
    """Channels NCCL runs an operation of ``nbytes`` on (``enqueue.cc`` getAlgoInfo): from
    ``most``, one fewer while the bytes are under channels x threads x the protocol's
    per-thread threshold (times the ranks for ring LL); NVLS: its own channels; 0 for a
    schedule that is not NCCL's."""
    family = algorithm.split()[0]  # "ring x2": several rings
    if family in P2P_FAMILY:
        return p2p_channels(c, nbytes, ranks, most, multi_host, protocol)
    if family in NVLS_FAMILY:
        return max(1, c.nvls_channels)
    if family not in RING_FAMILY:
        return 0
    rule = c.channel_thresholds.get(protocol)
    if rule is None:
        return most
    per_channel = rule.threads * rule.bytes_per_thread
    if rule.ring_times_ranks and family != "tree":
        per_channel *= ranks
    return max(1, min(most, nbytes // per_channel))


def enqueue_s(
    c: Collectives,
    arch: str,
    algorithm: str,
    protocol: str,
    nbytes: int,
    ranks: int,
    multi_host: bool = False,
) -> float:
    """Host seconds to enqueue one collective on one GPU of architecture ``arch``: the launch
    and NCCL's plan, plus its cost per channel of the operation, plus for a grouped
    send/receive (all-to-all) its cost per task: a send and a receive per rank, itself
    included (0 under a calibration without host costs)."""
    cost = _enqueue_cost(c, arch)
    if cost is None:
        return 0.0
    channels = nccl_channels(c, algorithm, protocol, nbytes, ranks, cost.ring_channels, multi_host)
    tasks = 0.0
    if algorithm.split()[0] in P2P_FAMILY and c.p2p is not None:
        per_task = c.p2p.task_s.get(arch, c.p2p.task_s.get("default", 0.0))
        tasks = per_task * 2 * ranks
    return cost.gpu_s + cost.channel_s * channels + tasks
