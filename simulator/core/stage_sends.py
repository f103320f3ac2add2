"""What a serving iteration adds crossing pipeline stages: the sends between stages.

:class:`StageSends` prices, for a TP group's plan (:class:`~tpsim.core.plan.RunPlan`, the
group of :class:`~tpsim.core.step_timer.IterationTimer`), each stage boundary of a pipeline
of such groups placed as ``tpsim run`` places them (a TP group inside a host first, then the
stages): what ``tpsim serve --pp`` adds to each batch's pass.
"""

from __future__ import annotations

from tpsim.core.comm.fabric import Fabric, build_fabric
from tpsim.core.comm.group import Comms, p2p_seconds, pair_router
from tpsim.core.comm.layout import place
from tpsim.core.comm.schedules import predict
from tpsim.core.plan import RunPlan
from tpsim.core.precision import dtype_bytes
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Router


class StageSends:
    """The sends between the stages of pipelines of ``plan``'s TP group."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        #: (stages, per host) -> the placed ranks' links and the router of their sends
        self._placed: dict[tuple[int, int], tuple[Fabric, Router]] = {}
        #: (tokens, stages, per host) -> the boundaries' times: a pure function of them,
        #: asked for at every serving step (most steps repeat a batch's token count)
        self._memo: dict[tuple[int, int, int], tuple[float, ...]] = {}

    def seconds(self, tokens: int, pp: int, gpus_per_node: int = 0) -> tuple[float, ...]:
        """What a step of ``tokens`` tokens adds at each boundary of ``pp`` stages of this
        TP degree. The hidden states and the residual (2 x [T, d] in the activations' dtype)
        move as vLLM moves them (``send_tensor_dict`` with ``all_gather_group``): each TP
        rank sends its 1/tp slice to its rank of the next stage as NCCL's send/receive over
        the routed path (:func:`~tpsim.core.comm.group.p2p_router`: the P2P kernel's fixed
        latency and protocol, its channels' rate; the slowest rank's), and the next stage's
        TP group all-gathers each of the two tensors (NCCL's all-gather on this group,
        predicted), as the static pipeline does (:mod:`tpsim.core.lowering.pipeline`). One
        time per boundary, none with one stage."""
        if pp < 2:
            return ()
        key = (tokens, pp, gpus_per_node)
        done = self._memo.get(key)
        if done is None:
            done = self._memo[key] = self._seconds(tokens, pp, gpus_per_node)
        return done

    def _seconds(self, tokens: int, pp: int, gpus_per_node: int) -> tuple[float, ...]:
        plan, tp = self.plan, self.plan.layout.tp
        placed = self._placed.get((pp, gpus_per_node))
        if placed is None:  # built once: seconds() is called for every serving step
            ranks = place(plan.routes, tp, pp, 1, gpus_per_node)
            placed = self._placed[(pp, gpus_per_node)] = (
                build_fabric(plan.routes, ranks, plan.gpu, plan.calib),
                pair_router(plan.routes, ranks, plan.gpu, plan.calib, pp),
            )
        fab, route = placed
        nbytes = 2 * tokens * plan.model.hidden_size * dtype_bytes(plan.precision.act)
        gather = 0.0
        if tp > 1 and isinstance(plan.comms, Comms):
            comms = plan.comms
            call = CollectiveCall("all_gather", round(nbytes / 2), 0)  # each tensor apart
            gather = 2 * predict(comms.fabric, comms.planner(call))
        out = []
        for stage in range(pp - 1):
            pairs = [(stage * tp + t, (stage + 1) * tp + t) for t in range(tp)]
            sends = [
                p2p_seconds(route, a, b, round(nbytes / tp), fab.path(a, b).bandwidth_Bps)
                for a, b in pairs
            ]
            out.append(max(sends) + gather)
        return tuple(out)


__all__ = ["StageSends"]
