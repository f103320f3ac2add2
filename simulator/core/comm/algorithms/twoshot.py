"""Two-shot all-reduce through peer memory: reduce-scatter, then all-gather."""

from __future__ import annotations

from tpsim.core.comm.algorithms import Algorithm, Context
from tpsim.core.comm.algorithms._peer import auto_twoshot_min, custom_max, read, why_not
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import chunk_sizes, steps
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule


def twoshot(fab: Fabric, nbytes: int) -> Schedule:
    """Reduce-scatter then all-gather through peer memory: two steps of ``(p-1) n/p`` into
    each rank. The reduce-scatter loads every peer's part at once; after a barrier (a flag
    per peer) the all-gather copies each peer's reduced part: with ``serial_gather`` one
    load in flight per thread, so its first data waits a load per peer."""
    p = fab.ranks
    tuning = fab.tuning
    load = tuning.custom_load_latency_s
    serial = tuning.custom.serial_gather
    barrier = tuning.custom_hop_s + tuning.custom_barrier_s(p)
    gather_first = barrier + load * ((p - 1) if serial else 1)
    gather_peers = p - 1 if serial else 1
    chunks = chunk_sizes(nbytes, p)
    sends = [
        [
            [read(fab, t, u, chunks[u], load, 1) for u in range(p) if u != t],
            [read(fab, t, u, chunks[t], gather_first, gather_peers) for u in range(p) if u != t],
        ]
        for t in range(p)
    ]
    base = tuning.custom_base_s + tuning.custom_barrier_s(p)
    return Schedule("twoshot", "p2p", base, steps(sends, [[p - 1, p - 1]] * p))


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
    auto_max_bytes=custom_max,
    auto_min_bytes=auto_twoshot_min,
)
