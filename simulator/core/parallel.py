"""The engine run of a layout beyond one TP group: pipeline stages, replicas, micro-batches.

:func:`tpsim.core.api.simulate` resolves every layout the same way
(:func:`tpsim.core.plan.resolve`: the ranks placed by :func:`tpsim.core.comm.layout.place`,
every stage's memory checked) and lowers every rank's program
(:mod:`tpsim.core.lowering.pipeline`); :func:`run_layout` runs all of them in one engine over
the shared fabric. When the replicas are provably independent
(:func:`tpsim.core.comm.layout.replicas_independent`), replica 0 runs alone and the others
are its copies, rank-shifted.
"""

from __future__ import annotations

from tpsim.core.comm import symmetry
from tpsim.core.comm.group import Ran
from tpsim.core.comm.layout import LayoutComms, replicas_independent
from tpsim.core.config import Layout
from tpsim.core.engine.jitter import HostJitter
from tpsim.core.engine.simulation import run
from tpsim.core.program import Programs
from tpsim.core.summary import Placed
from tpsim.topologies.gpus import GPUSpec


def run_layout(
    comms: LayoutComms,
    programs: Programs,
    layout: Layout,
    gpu: GPUSpec,
    *,
    skew: float = 0.0,
    comm_sms: int = 0,
    link_log: list[tuple[float, int, float]] | None = None,
    use_symmetry: bool = True,
    host_jitter: HostJitter | None = None,
) -> Ran:
    """Run ``programs`` (one per layout rank) on ``comms``; TP rank t starts ``t * skew``
    late; ``host_jitter`` scales each rank's host work (its groups are the TP groups, every
    one with the same order statistics, so replicas stay alike). Replica 0 stands for all
    when :func:`replicas_independent` says it may."""
    tp, pp, dp = layout.tp, layout.pp, layout.dp
    per_replica = tp * layout.attention_dp * pp
    alone = use_symmetry and link_log is None and replicas_independent(comms, programs, dp)
    ranks = per_replica if alone else programs.ranks
    records, events = run(
        programs.head(ranks),
        comms.planner,
        comms.fabric.capacities,
        router=comms.router,
        rank_delay_s=[(r % tp) * skew for r in range(ranks)],
        comm_sms=comm_sms,
        sm_count=gpu.sm_count,
        link_log=link_log,
        host_jitter=host_jitter,
    )
    if alone:
        records = symmetry.canonical(records, {}, dp, per_replica)
    else:
        records = symmetry.canonical(records)
    return Ran(records, events, ranks)


def labels(comms: LayoutComms, layout: Layout) -> dict[int, str]:
    """Per rank: its GPU and its (dp, pp, attention_dp, tp) coordinates, e.g.
    ``gpu3 pp1 tp1`` or ``gpu5 adp2 tp1``."""
    return {r: f"{n} {_where(r, layout)}" for r, n in comms.labels().items()}


def _coordinates(rank: int, layout: Layout) -> tuple[int, int, int, int]:
    """(dp, pp, attention_dp, tp) of layout rank ``rank``."""
    tp, adp = layout.tp, layout.attention_dp
    d, rest = divmod(rank, tp * adp * layout.pp)
    s, rest = divmod(rest, tp * adp)
    a, t = divmod(rest, tp)
    return d, s, a, t


def _where(rank: int, layout: Layout) -> str:
    d, s, a, t = _coordinates(rank, layout)
    return (
        (f"dp{d} " if layout.dp > 1 else "")
        + (f"pp{s} " if layout.pp > 1 else "")
        + (f"adp{a} " if layout.attention_dp > 1 else "")
        + f"tp{t}"
    )


def placement(comms: LayoutComms, layout: Layout) -> tuple[Placed, ...]:
    """Per rank: its (dp, pp, attention_dp, tp) coordinates and the GPU it runs on."""
    out = []
    for r, g in enumerate(comms.gpu_ranks):
        d, s, a, t = _coordinates(r, layout)
        out.append(Placed(r, d, s, t, comms.routes.node(g), a))
    return tuple(out)


__all__ = ["labels", "placement", "run_layout"]
