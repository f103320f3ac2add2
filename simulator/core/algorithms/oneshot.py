"""One-shot all-reduce through peer memory (vLLM / TensorRT-LLM custom all-reduce)."""

from __future__ import annotations

from tpsim.core.algorithms import Algorithm, Context
from tpsim.core.algorithms._peer import PEER, why_not
from tpsim.core.engine import Schedule
from tpsim.core.fabric import Fabric
from tpsim.core.program import CollectiveCall
from tpsim.core.schedules import send, steps


def oneshot(fab: Fabric, nbytes: int) -> Schedule:
    """Every rank reads the whole buffer of each peer and reduces locally: one step,
    ``(p-1) n`` bytes into each rank."""
    p = fab.ranks
    proto, hop = PEER, fab.tuning.custom_hop_s
    sends = [
        [[send(fab, t, u, nbytes, proto, hop_s=hop) for u in range(p) if u != t]] for t in range(p)
    ]
    return Schedule("oneshot", "p2p", fab.tuning.custom_base_s, steps(sends, [[p - 1]] * p))


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
    auto_max_bytes=lambda fab: fab.tuning.custom_max_bytes,
)
