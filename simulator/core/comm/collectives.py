"""Choosing and planning collectives: which algorithms fit a group, and the fastest one.

``auto`` predicts every feasible (algorithm, protocol) pair and runs the fastest, as NCCL
does: by NCCL's own tuning model (:func:`~tpsim.core.comm.schedules.model_time`, which
leaves out what a ring costs beyond that model), so a size where NCCL's model misjudges
two protocols runs the one NCCL picks; ``nccl`` restricts the choice to NCCL's own
algorithms (ring, multi-ring channels, tree, NVLS), leaving out the peer-memory
all-reduces that serving engines add for small messages. Neither chooses an algorithm
marked ``explicit_only`` (DeepEP's MoE kernels): that runs when named, by ``algo`` or by a
call's own ``algo`` (:class:`~tpsim.core.program.CollectiveCall`), which overrides the
group's choice. The algorithms are the entries of
:data:`tpsim.core.comm.algorithms.REGISTRY`; nothing here names one, except the ring, which
runs every collective an algorithm does not (the all-to-all's is ``pairwise``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tpsim.calibration import Protocol
from tpsim.core.comm import algorithms
from tpsim.core.comm.algorithms import REGISTRY, Algorithm, Context
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import model_time, predict
from tpsim.core.errors import ConfigError
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Planner, Schedule

OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
#: ``--algo`` / ``--allreduce-algo`` choices: auto, nccl, then every algorithm.
ALGORITHMS: tuple[str, ...] = algorithms.CHOICES
NCCL_ALGORITHMS: tuple[str, ...] = tuple(a.name for a in REGISTRY.values() if a.nccl)


def ring_all_reduce_time(nbytes: float, ranks: int, alpha_s: float, bandwidth_Bps: float) -> float:
    """Closed form of the ring all-reduce: ``2(p-1)(alpha + n / (p B))``."""
    return 2 * (ranks - 1) * (alpha_s + nbytes / (ranks * bandwidth_Bps))


def why_not(fab: Fabric, algo: str, op: str) -> str | None:
    """Why ``algo`` cannot run ``op`` on this group, or None if it can."""
    if algo not in REGISTRY:
        raise ConfigError(f"algo={algo!r}: must be one of {', '.join(ALGORITHMS)}")
    entry = REGISTRY[algo]
    if op not in entry.ops:
        return f"{algo} runs only {', '.join(entry.ops)}; {op} uses ring"
    return entry.why_not(fab, op)


def _fallback(op: str) -> Algorithm:
    """The algorithm that runs ``op`` when the named one does not: the ring for the
    collectives it runs, else the first in listing order that runs it."""
    return next(a for a in REGISTRY.values() if op in a.ops)


def _protocols(fab: Fabric, order: Sequence[int]) -> list[Protocol]:
    """The protocols NCCL may use on the group (LL128 only where the GPUs of a host talk
    over NVLink), less those the network's NCCL configuration leaves out
    (``nccl_protocols`` of a multi-host join); the ideal calibration's one."""
    protocols = fab.tuning.protocols_over(fab.nvlink_within_hosts(order))
    net = fab.routes.graph.graph.get("network")
    allowed = getattr(net, "protocols", None) if fab.multi_host else None
    kept = [p for p in protocols if allowed is None or p.name in allowed]
    return kept or protocols


def first_that_applies(
    fab: Fabric, call: CollectiveCall, allowed: list[Algorithm]
) -> list[Algorithm]:
    """An engine whose communicator takes the first all-reduce that applies, not the fastest
    (vLLM's ``CudaCommunicator.all_reduce``): its custom kernels where they take the size,
    else its symmetric-memory multimem kernel below that tier's limit, else NCCL's own
    choice (``allowed``: the algorithms the size admits, the engine's kernels by their own
    limits)."""
    custom = [a for a in allowed if not a.nccl]
    if custom:
        return custom
    symm = fab.tuning.symm_mem
    multimem = REGISTRY["multimem"]
    below = symm.multimem_below(fab.gpu.arch, fab.ranks) if symm else 0
    if call.nbytes < below and multimem.why_not(fab, call.op) is None:
        return [multimem]
    return [a for a in allowed if a.nccl]


def make_planner(fab: Fabric, order: Sequence[int], *, algo: str = "auto") -> Planner:
    """A planner for collectives over the fabric's group along ring ``order`` (TP ranks).

    ``algo``: one of :data:`ALGORITHMS`. The protocols are the calibration's (the ideal one
    has a single protocol with no latency and no overhead bytes).
    """
    if algo not in ALGORITHMS:
        raise ConfigError(f"algo={algo!r}: must be one of {', '.join(ALGORITHMS)}")
    if fab.ranks > 1 and algo not in ("auto", "nccl"):
        ops = REGISTRY[algo].ops  # checked on the all-reduce, or on its own collective
        problem = why_not(fab, algo, "all_reduce" if "all_reduce" in ops else ops[0])
        if problem:
            raise ConfigError(f"algo={algo}: {problem}")
    choosing = algo in ("auto", "nccl")
    ctx = Context(fab, order, _protocols(fab, order), choosing)
    ref = fab.at_reference()  # NCCL's table as written, by which it ranks its algorithms
    rctx = ctx if ref is fab else Context(ref, order, _protocols(ref, order), choosing)
    pool = algorithms.candidates(algo)
    cache: dict[CollectiveCall, Schedule] = {}

    def entries(call: CollectiveCall) -> list[Algorithm]:
        """The algorithms that may run ``call``, in listing order."""
        if choosing:
            names = [a for a in pool if call.op in a.ops and not a.explicit_only]
        else:  # the named algorithm, or the first that runs a collective it does not (ring)
            names = [pool[0] if call.op in pool[0].ops else _fallback(call.op)]
        out = []
        for entry in names:
            if entry.why_not(fab, call.op):
                continue
            limit = entry.auto_max_bytes
            if algo == "auto" and limit is not None and call.nbytes > limit(fab):
                continue  # a serving engine hands large messages to NCCL
            low = entry.auto_min_bytes
            if algo == "auto" and low is not None and call.nbytes < low(fab):
                continue  # the engine's kernels run one-shot at this size
            if algo == "auto" and entry.composed and not fab.tuning.auto_composed:
                continue  # a serving engine calls NCCL, which does not compose it
            out.append(entry)
        if algo == "auto" and fab.tuning.symm_mem is not None and call.op == "all_reduce":
            return first_that_applies(fab, call, out)
        return out

    def fastest(call: CollectiveCall) -> Schedule | None:
        """The schedule of ``call`` that runs fastest (the first in listing order of those
        that tie), or None if no algorithm runs it: NCCL's own algorithms ranked as NCCL
        ranks them (:func:`model_time`), and the one NCCL picks then against the engine's
        or tpsim's own kernels by the time each takes (:func:`predict`), as a caller
        choosing between NCCL and its own kernels sees them. An algorithm with a lower
        bound on its model time (:attr:`Algorithm.bounded`, NCCL's) builds only the
        schedules whose bound is below the best of NCCL's others: one above it cannot be
        NCCL's pick, nor tie."""
        found = entries(call)
        # NCCL's own algorithms are ranked on its table as written (one for every GPU),
        # then the one it picks is built at this GPU's clock, as it runs
        nccl = [k for k, entry in enumerate(found) if entry.nccl]
        built: dict[int, list[tuple[int, Schedule, float]]] = {}  # (variant, schedule, time)
        for k, entry in enumerate(found):
            if entry.bounded is None:
                c, f = (rctx, ref) if k in nccl else (ctx, fab)
                built[k] = [(j, s, model_time(f, s)) for j, s in enumerate(entry.build(c, call))]
        best = min((t for k in nccl if k in built for _, _, t in built[k]), default=math.inf)
        for k, entry in enumerate(found):
            if entry.bounded is not None:
                c, f = (rctx, ref) if k in nccl else (ctx, fab)
                runs = []
                for j, (bound, make) in enumerate(entry.bounded(c, call)):
                    if bound <= best:
                        sched = make()
                        runs.append((j, sched, model_time(f, sched)))
                        best = min(best, runs[-1][2])
                built[k] = runs
        picks = [(k, j, s, t) for k in sorted(built) if k in nccl for j, s, t in built[k]]
        ranked = []
        if picks:
            k, j, s, t = min(picks, key=lambda run: run[3])
            if ref is not fab:  # NCCL's pick as it runs on this GPU
                entry = found[k]
                s = (entry.build(ctx, call)[j] if entry.bounded is None
                     else list(entry.bounded(ctx, call))[j][1]())  # fmt: skip
            ranked.append((k, s, t))
        ranked += [(k, s, t) for k in sorted(built) if k not in nccl for _, s, t in built[k]]
        if len(ranked) == 1:
            return ranked[0][1]
        # the time each takes (a schedule outside NCCL is its own model: model_time is it)
        timed = [(predict(fab, s) if k in nccl else t, k, s) for k, s, t in ranked]
        return min(timed, key=lambda run: (run[0], run[1]))[2] if timed else None

    def _named(call: CollectiveCall) -> list[Schedule]:
        """The call's own algorithm (an engine profile's choice for its MoE layers)."""
        entry = REGISTRY.get(call.algo)
        if entry is None:
            raise ConfigError(f"algo={call.algo!r}: must be one of {', '.join(REGISTRY)}")
        problem = why_not(fab, call.algo, call.op)
        if problem:
            # DeepEP's kernels for a MoE dispatch are Options.moe_a2a's choice: name it
            deepep = call.algo.startswith("deepep") and call.op == "all_to_all"
            what = f"moe_a2a=deepep ({call.algo})" if deepep else f"algo={call.algo}"
            raise ConfigError(f"{what}: {problem}")
        return entry.build(ctx, call)

    def plan(call: CollectiveCall) -> Schedule:
        sched = cache.get(call)
        if sched is None:
            named = _named(call) if call.algo else []
            sched = min(named, key=lambda s: model_time(fab, s)) if named else fastest(call)
            if sched is None:
                raise ConfigError(f"algo={algo}: cannot run {call.op} on this group")
            cache[call] = sched
        return sched

    return plan
