"""The ring: reduce-scatter and all-gather, ``p - 1`` steps each, over one ring order."""

from __future__ import annotations

from tpsim.core.comm.algorithms import Algorithm, Context
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import ring
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule


def _why_not(fab: Fabric, op: str) -> str | None:
    return None  # any group of two or more ranks that can reach each other


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    return [ring(ctx.fab, call.op, call.nbytes, pr, [list(ctx.order)]) for pr in ctx.protocols]


ALGORITHM = Algorithm(
    name="ring",
    order=10,
    about="one ring in the order derived from the topology (widest bottleneck)",
    nccl=True,
    ops=("all_reduce", "all_gather", "reduce_scatter"),
    why_not=_why_not,
    build=_build,
    max_steps=lambda p: 2 * (p - 1),
)
