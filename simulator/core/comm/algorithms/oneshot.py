"""One-shot all-reduce through peer memory (vLLM / TensorRT-LLM custom all-reduce)."""

from __future__ import annotations

from tpsim.core.comm.algorithms import Algorithm, Context
from tpsim.core.comm.algorithms._peer import auto_oneshot_max, read, why_not
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import steps
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule


def oneshot(fab: Fabric, nbytes: int) -> Schedule:
    """After the entry barrier (the base), every rank reads the whole buffer of each peer and
    reduces locally: one step, ``(p-1) n`` bytes into each rank, each thread with one load
    per peer in flight (vLLM's ``packed_reduce`` loads every peer before adding)."""
    p = fab.ranks
    first = fab.tuning.custom_load_latency_s
    sends = [[[read(fab, t, u, nbytes, first, 1) for u in range(p) if u != t]] for t in range(p)]
    base = fab.tuning.custom_base_s + fab.tuning.custom_barrier_s(p)
    return Schedule("oneshot", "p2p", base, steps(sends, [[p - 1]] * p))


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    return [oneshot(ctx.fab, call.nbytes)]


ALGORITHM = Algorithm(
    name="oneshot",
    order=40,
    about="every GPU reads each peer's buffer and reduces (serving engines' custom all-reduce)",
    nccl=False,
    ops=("all_reduce",),
    why_not=why_not,
    build=_build,
    max_steps=lambda p: 1,
    auto_max_bytes=auto_oneshot_max,
)
