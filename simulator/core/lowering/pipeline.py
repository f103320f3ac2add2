"""Lower a layout (``dp`` replicas of ``pp`` stages of ``attention_dp`` groups of ``tp`` ranks)
to one program per rank.

Each stage runs the Megatron TP split (:mod:`tpsim.core.lowering.lower`) of its consecutive layers,
the embedding on the first stage and the LM head on the last, for ``micro_batches``
micro-batches one after the other (GPipe's forward: a stage takes micro-batch m + 1 as soon
as it has finished m and received m + 1). Between stages, each micro-batch's activations
(the hidden states and the residual ``[T_mb, d]`` each, as vLLM's ``IntermediateTensors``
carry them) move as vLLM's ``send_tensor_dict`` with ``all_gather_group`` and Megatron's
scatter-gather optimisation move them: TP rank t of stage s sends its 1/tp slice of each
to TP rank t of stage s + 1 point to point, and stage s + 1's TP group all-gathers each
tensor whole again (the TP ranks hold identical copies, so a whole copy from every rank
would cross the boundary tp times). Sends run on their own ``p2p`` stream; the receive of
micro-batch m + 1 and its all-gathers are posted on the comm stream after all of m's
collectives, so they never hold up one of them, and m + 1's first kernel waits for them.
Every stage does the engine's pre-step host work; sampling happens on the last. With
attention data parallelism each stage has ``attention_dp`` TP groups, each running its own
sequences through attention and sharing the stage's MoE layers
(:mod:`tpsim.core.lowering.experts`): rank ``((d * pp + s) * attention_dp + a) * tp + t``.
"""

from __future__ import annotations

from dataclasses import replace

from tpsim.core.config import ConfigError, Options, Workload
from tpsim.core.kernels.costs import Hardware
from tpsim.core.kernels.kernel_table import KernelTable
from tpsim.core.lowering import host
from tpsim.core.lowering.experts import ExpertSplit
from tpsim.core.lowering.lower import start_step
from tpsim.core.lowering.step import Slice, passes
from tpsim.core.program import Program, Programs
from tpsim.models.spec import ModelSpec

_NEXT, _PREV = 1, -1  # placeholder peers of a stage program: the next or previous stage


def micro_slices(workload: Workload, micro_batches: int) -> list[Slice]:
    """The batch split into ``micro_batches`` micro-batches of whole sequences (the first
    ``batch % M`` take one more)."""
    b, m = workload.batch, micro_batches
    if m > b:
        raise ConfigError(f"micro_batches={m}: more than batch={b} sequences to split")
    per_seq = workload.tokens // b
    sizes = [b // m + (1 if i < b % m else 0) for i in range(m)]
    return [Slice(i, n, n * per_seq) for i, n in enumerate(sizes)]


def stage_program(
    model: ModelSpec,
    tp: int,
    workload: Workload,
    options: Options,
    hw: Hardware,
    table: KernelTable | None,
    *,
    layers: range,
    first: bool,
    last: bool,
    micro_batches: int,
    group: int,
    experts: ExpertSplit | None = None,
    ep_rank: int = 0,
) -> Program:
    """One TP rank's program of a stage (expert-parallel rank ``ep_rank``); p2p peers are
    the placeholders ``_PREV``/``_NEXT``."""
    engine = options.calibration.engine
    runs = passes(workload, engine)
    lo, build, mode = start_step(model, tp, runs[0], options, hw, table, group, experts, ep_rank)
    act = lo.act_b
    chain = 0  # one chain: micro-batch m + 1 follows m on every stream
    # every (pass, micro-batch) in order, numbered for the tags of its sends
    work = [(run, mb) for run in runs for mb in micro_slices(run, micro_batches)]

    def tensor_bytes(n: int) -> int:
        """One of the two tensors a micro-batch carries across a boundary: [T_mb, d]."""
        return round(work[n][1].tokens * lo.d * act)

    def recv(n: int) -> None:
        each = tensor_bytes(n)
        i = build.p2p(-1 - n, "recv", _PREV, 2 * each // tp, name="pp_recv",
                      layer=layers.start, site="pp", tag=n, deps=())  # fmt: skip
        for _ in range(2):  # each tensor gathered whole again over the stage's TP group
            g = build.collective(-1 - n, "all_gather", "pp", layers.start, each, deps=(i,))
            i = i if g is None else g
        build.after[chain] = (i,)

    if not first:
        recv(0)
    for n, (run, mb) in enumerate(work):
        if run is not lo.w:
            lo = lo.next_pass(run, options)
        one = Slice(chain, mb.batch, mb.tokens)
        if first:
            lo.embedding(one)
        for layer in layers:
            if mode == "eager":
                host.layer_python(build, engine, layer)
            lo.attention_block(one, layer)
            lo.mlp_block(one, layer)
            lo.close_layer(one, layer)
        if last and run is runs[-1]:
            lo.head(one)
        elif not last:
            nbytes = 2 * tensor_bytes(n) // tp  # this rank's 1/tp slice of each tensor
            build.p2p(-(10**6) - n, "send", _NEXT, nbytes, name="pp_send",
                      layer=layers.stop - 1, site="pp", tag=n,
                      deps=build.tail(chain), stream="p2p")  # fmt: skip
        if not first and n + 1 < len(work):
            recv(n + 1)
    if last:
        host.after_step(build, engine, workload.batch, model.num_layers)
    return build.program()


def lower_layout(
    model: ModelSpec,
    tp: int,
    stages: tuple[range, ...],
    replicas: int,
    workload: Workload,
    options: Options,
    hw: Hardware,
    table: KernelTable | None = None,
    micro_batches: int = 1,
    experts: ExpertSplit | None = None,
) -> Programs:
    """The programs of every rank ``((d * pp + s) * attention_dp + a) * tp + t`` of the
    layout (``attention_dp`` from ``experts``; one program per expert-parallel rank where
    their loads differ)."""
    pp = len(stages)
    adp = experts.attention_dp if experts else 1
    distinct = experts is not None and experts.uneven
    ep_ranks = range(experts.ep if experts is not None and distinct else 1)
    per_stage = [
        [stage_program(model, tp, workload, options, hw, table, layers=layers, first=s == 0,
                       last=s == pp - 1, micro_batches=micro_batches, group=s * adp,
                       experts=experts, ep_rank=e) for e in ep_ranks]
        for s, layers in enumerate(stages)
    ]  # fmt: skip
    out: list[Program] = []
    stride = adp * tp  # ranks of one stage
    for d in range(replicas):
        for s, programs in enumerate(per_stage):
            for a in range(adp):
                for t in range(tp):
                    e = experts.ep_rank(a * tp + t) if experts is not None and distinct else 0
                    rank = (d * pp + s) * stride + a * tp + t
                    out.append(_bind(programs[e], rank, stride, d * pp * adp, a))
    return Programs(tuple(out))


def _bind(program: Program, rank: int, stride: int, group_shift: int, member: int = 0) -> Program:
    """``program`` on ``rank``: placeholder peers to ranks (a stage is ``stride`` ranks),
    collectives to its group (TP group ``member`` of its stage's MoE group)."""
    ops = []
    for op in program.ops:
        if op.p2p is not None:
            peer = rank + stride * op.p2p.peer
            op = replace(op, p2p=replace(op.p2p, peer=peer))
        elif op.collective is not None and (group_shift or member):
            call = op.collective
            shift = group_shift + (member if call.span == 1 else 0)
            op = replace(op, collective=replace(call, group=call.group + shift))
        ops.append(op)
    return replace(program, ops=tuple(ops))


__all__ = ["lower_layout", "micro_slices", "stage_program"]
