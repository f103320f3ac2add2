"""Two-shot all-reduce through peer memory: reduce-scatter, then all-gather."""

from __future__ import annotations

from tpsim.core.algorithms import Algorithm, Context
from tpsim.core.algorithms._peer import PEER, why_not
from tpsim.core.engine import Schedule
from tpsim.core.fabric import Fabric
from tpsim.core.program import CollectiveCall
from tpsim.core.schedules import chunk_sizes, send, steps


def twoshot(fab: Fabric, nbytes: int) -> Schedule:
    """Reduce-scatter then all-gather through peer memory: two steps of ``(p-1) n/p``."""
    p = fab.ranks
    proto, hop = PEER, fab.tuning.custom_hop_s
    chunks = chunk_sizes(nbytes, p)
    sends = [
        [
            [send(fab, t, u, chunks[u], proto, hop_s=hop) for u in range(p) if u != t],
            [send(fab, t, u, chunks[t], proto, hop_s=hop) for u in range(p) if u != t],
        ]
        for t in range(p)
    ]
    return Schedule("twoshot", "p2p", fab.tuning.custom_base_s, steps(sends, [[p - 1, p - 1]] * p))


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    return [twoshot(ctx.fab, call.nbytes)]


ALGORITHM = Algorithm(
    name="twoshot",
    order=50,
    about="reduce-scatter then all-gather through peer memory (custom all-reduce, larger sizes)",
    nccl=False,
    ops=("all_reduce",),
    why_not=why_not,
    build=_build,
    max_steps=lambda p: 2,
    auto_max_bytes=lambda fab: fab.tuning.custom_max_bytes,
)
