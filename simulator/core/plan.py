"""A run's options resolved once: :func:`resolve` turns ``simulate``'s arguments into a frozen
:class:`RunPlan` (calibration, GPU, precision, shard, launch mode, stages, memory, the groups
and their communication), refusing what cannot run before anything is lowered.

A TP-only run is a layout of one group (``pp = dp = micro_batches = 1``, no explicit stages
or placement; :attr:`RunPlan.one_group`): its group is the topology's first ``tp`` GPUs
(:func:`tpsim.core.comm.group.connect`) and it keeps its own refusals and lowering; any
other layout is placed by :func:`tpsim.core.comm.layout.place`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tpsim.calibration.bounded import show
from tpsim.core import deepep_buffers
from tpsim.core.comm.group import Comms, connect
from tpsim.core.comm.layout import LayoutComms, place, stage_layers
from tpsim.core.config import Layout, Options, Workload, tp_problem, valid_tp_degrees
from tpsim.core.errors import ConfigError
from tpsim.core.expert_shapes import engine_experts
from tpsim.core.kernels import kernel_table
from tpsim.core.kernels.costs import Hardware, hardware_for
from tpsim.core.lowering.experts import ExpertSplit, expert_split, read_histogram
from tpsim.core.lowering.pipeline import micro_slices
from tpsim.core.lowering.shard import Shard, shard
from tpsim.core.lowering.step import launch_mode
from tpsim.core.memory import MemoryUse, memory_per_stage, what_fits
from tpsim.core.precision import Precision, run_precision
from tpsim.models.catalog import get_model
from tpsim.models.spec import ModelSpec
from tpsim.topologies.graph import TopologyGraph
from tpsim.topologies.io import get_topology, validate
from tpsim.topologies.routing import Routes

if TYPE_CHECKING:
    import networkx as nx
    from tpsim.calibration import Calibration
    from tpsim.core.kernels.kernel_table import KernelTable
    from tpsim.topologies.gpus import GPUSpec


def one_group(layout: Layout) -> bool:
    """Whether ``layout`` is one group alone: no stages, replicas, micro-batches, explicit
    stage sizes or placement; one TP group, or attention data-parallel groups of one GPU
    each (their MoE group is then the one group, every rank running the same program)."""
    return (
        layout.pp * layout.dp * layout.micro_batches == 1
        and (layout.attention_dp == 1 or layout.tp == 1)
        and not layout.pp_layers
        and not layout.placement
    )


@dataclass(frozen=True)
class RunPlan:
    """Everything a run needs besides its programs, resolved once by :func:`resolve`."""

    model: ModelSpec
    graph: nx.DiGraph
    layout: Layout
    workload: Workload
    options: Options
    nodes: int
    calib: Calibration
    gpu: GPUSpec
    precision: Precision
    hardware: Hardware
    launch: str  # the launch mode in effect (tpsim.core.lowering.step.launch_mode)
    split: Shard
    experts: ExpertSplit  # how the MoE layers are split (tpsim.core.lowering.experts)
    stages: tuple[range, ...]  # the layers of each pipeline stage
    memory: tuple[MemoryUse, ...]  # per stage
    table: KernelTable | None
    #: one group's communication (one_group) or the layout's (every group's)
    comms: Comms | LayoutComms

    @property
    def one_group(self) -> bool:
        return isinstance(self.comms, Comms)

    @property
    def worst_stage(self) -> int:
        """The stage needing the most memory per GPU (the first of equals)."""
        mems = self.memory
        return max(range(len(mems)), key=lambda s: (mems[s].total_bytes_per_gpu, -s))

    @property
    def routes(self) -> Routes:
        c = self.comms
        return c.group.routes if isinstance(c, Comms) else c.routes

    @property
    def gpu_ranks(self) -> tuple[int, ...]:
        """GPU rank of each layout rank."""
        c = self.comms
        return c.group.gpu_ranks if isinstance(c, Comms) else c.gpu_ranks

    @property
    def ring(self) -> tuple[int, ...]:
        """The first group's TP ranks in ring order."""
        c = self.comms
        return (c if isinstance(c, Comms) else c.group_comms[0]).group.ring


def check_tp(model: ModelSpec, tp: int, gpus: int) -> None:
    """ConfigError when ``tp`` does not split ``model``'s heads; names the degrees that do."""
    problem = tp_problem(tp, model.num_heads, model.num_kv_heads)
    if problem:
        valid = ", ".join(
            map(str, valid_tp_degrees(model.num_heads, model.num_kv_heads, max(gpus, tp)))
        )
        raise ConfigError(f"tp={tp} {problem} of {model.name}; valid: {valid}")
    nk = model.linear_key_heads
    if model.linear_layers and nk % tp:  # vLLM's divide() in GatedDeltaNetAttention
        raise ConfigError(
            f"tp={tp} does not divide linear_num_key_heads={nk} of {model.name} (vLLM splits "
            "the linear-attention heads over the TP ranks)"
        )


def check_weight_blocks(spec: ModelSpec, tp: int, moe_tp: int) -> None:
    """Refuse a split of a block-scaled fp8 checkpoint's MLP or experts that leaves a GPU
    part of a block of rows (``weight_block``): vLLM and SGLang refuse to load it (vLLM's
    "output_size ... is not divisible by weight quantization block_n")."""
    if not spec.weight_block:
        return
    rows = spec.weight_block[0]
    parts = []
    if not spec.is_moe or spec.dense_layers:
        parts.append(("tp", tp, "its MLP's width", spec.intermediate_size))
    if spec.is_moe:
        parts.append(("moe_tp", moe_tp, "each expert's width", spec.moe_intermediate_size))
    for field, ways, what, width in parts:
        if ways > 1 and (width % ways or (width // ways) % rows):
            raise ConfigError(
                f"{field}={ways}: {spec.name}'s fp8 weights come in blocks of {rows} rows, and "
                f"{what}, {width}, splits to {width / ways:g} a GPU, not whole blocks: vLLM and "
                "SGLang refuse to load it (split the experts by --ep, or fewer ways)"
            )


def check_context(model: ModelSpec, workload: Workload) -> None:
    """ConfigError when a pass attends over more tokens than the model was built for (its
    ``max_position_embeddings``; a serving engine refuses such a request too)."""
    limit = model.max_position_embeddings
    if limit and workload.kv_len > limit:
        field = "prompt_len" if workload.phase == "prefill" else "context_len"
        raise ConfigError(
            f"{field}={workload.kv_len}: beyond {model.name}'s context of {limit:,} tokens "
            "(max_position_embeddings)"
        )


def _check_types(model: object, topology: object, layout: object, workload: object,
                 options: object) -> None:  # fmt: skip
    """ConfigError naming the argument of ``simulate`` that is not of a type it takes (a
    TP degree given as "4" would otherwise fail deep inside as an AttributeError)."""
    wanted: tuple[tuple[str, object, tuple[type, ...], str], ...] = (
        ("model", model, (str, ModelSpec), "a catalog name, a config.json path or a ModelSpec"),
        ("topology", topology, (str, TopologyGraph), "a catalog name, a file or a graph"),
        ("layout", layout, (int, Layout), "a TP degree (int) or a Layout"),
        ("workload", workload, (Workload, type(None)), "a Workload"),
        ("options", options, (Options, type(None)), "an Options"),
    )
    for name, value, types, what in wanted:
        if not isinstance(value, types) or isinstance(value, bool):
            raise ConfigError(f"{name}={show(value)}: must be {what}")


def _layout_words(layout: Layout) -> str:
    """``tp=4``, ``tp=4 pp=2``, ``tp=1 attention_dp=8 ep=8``: the degrees a refusal names."""
    words = f"tp={layout.tp}"
    if layout.attention_dp > 1 or layout.ep > 1:
        words += f" attention_dp={layout.attention_dp} ep={layout.ep}"
    return words + (f" pp={layout.pp}" if layout.pp > 1 else "")


def _oom_remedy(layout: Layout, gpus: int, oom_flag: bool) -> str:
    """What gives a layout that does not fit more memory: more GPUs in its group while the
    topology has spare ones, else fewer replicas or more hosts."""
    more = "raise --tp" + (" or --pp" if layout.pp > 1 else "")
    used = layout.tp * layout.attention_dp * layout.pp * layout.dp
    if used >= gpus:  # every GPU in use: fewer replicas, or more hosts
        more += " with fewer --dp or more --nodes" if layout.dp > 1 else " on more --nodes"
    return more + (", or --allow-oom" if oom_flag else "")


def resolve(
    model: ModelSpec | str | os.PathLike[str],
    topology: nx.DiGraph | str | os.PathLike[str],
    layout: Layout | int,
    workload: Workload | None = None,
    options: Options | None = None,
    *,
    nodes: int = 1,
    oom_flag: bool = True,
) -> RunPlan:
    """``simulate``'s arguments resolved into a :class:`RunPlan`; ConfigError for a layout
    that does not split the model, does not fit the topology or its memory (the refusal
    names ``--allow-oom`` where ``oom_flag``: the commands that have it)."""
    if isinstance(model, os.PathLike):  # a path to a config.json, as a str would name it
        model = os.fspath(model)
    if isinstance(topology, os.PathLike):
        topology = os.fspath(topology)
    _check_types(model, topology, layout, workload, options)
    spec = get_model(model) if isinstance(model, str) else model
    if isinstance(topology, str):
        graph = get_topology(topology, nodes)
    else:  # a graph built by hand: held to the conventions a loaded one keeps
        validate(topology, "topology")
        graph = topology
        hosts = graph.graph.get("hosts", 1)
        if nodes not in (1, hosts):  # its hosts are its own: nothing joins copies of it
            raise ConfigError(
                f"nodes={show(nodes)}: a graph passed as the topology is used as it is "
                f"({hosts} host{'s' if hosts != 1 else ''}); join hosts by naming a catalog "
                "topology or a file with nodes=, or build the joined graph "
                "(tpsim.topologies.get_topology(name, nodes))"
            )
    layout = Layout(layout) if isinstance(layout, int) else layout
    workload = workload or Workload()
    options = options or Options()
    calib = options.calibration  # an unknown engine or bad profile is refused first
    check_context(spec, workload)
    if layout.micro_batches == 0:  # the engine's split of this step's batch
        per_seq = workload.prompt_len if workload.phase == "prefill" else 1
        split = calib.engine.pipeline_micro_batches(workload.batch, per_seq, layout.pp)
        layout = replace(layout, micro_batches=split)
    gpu_count = sum(1 for _, k in graph.nodes(data="kind") if k == "gpu")
    check_tp(spec, layout.tp, gpu_count)
    tp, pp = layout.tp, layout.pp
    histogram: tuple[tuple[float, ...], ...] = ()
    if layout.moe_tp and not spec.is_moe:  # as --ep and --attention-dp are (expert_split)
        raise ConfigError(
            f"moe_tp={layout.moe_tp}: {spec.name} has no experts (a dense model; use --tp, "
            "--pp and --dp)"
        )
    if options.routing is not None:
        if not spec.is_moe:
            raise ConfigError(f"routing={options.routing}: {spec.name} has no experts to route")
        histogram = read_histogram(
            options.routing, spec.num_experts, spec.num_moe_layers, spec.experts_per_token
        )
    xs = expert_split(spec, tp, layout.attention_dp, layout.ep, layout.expert_tp,
                      options.expert_skew, histogram)  # fmt: skip
    if xs.ep > 1 and xs.moe_tp > 1 and not calib.engine.moe_ep_with_tp:
        raise ConfigError(
            f"ep={layout.ep}: engine {calib.engine.name} splits the experts one way, ep=1 "
            f"(a slice of each on every GPU) or ep={layout.moe_group} (whole experts: its "
            f"--enable-expert-parallel), not ep={layout.ep} with moe_tp {xs.moe_tp}"
        )
    if options.dtype in (None, spec.dtype):  # the checkpoint's own weights, in its blocks
        check_weight_blocks(spec, tp, xs.moe_tp)
    if options.moe_a2a != "nccl" and not xs.dispatch:
        raise ConfigError(
            f"moe_a2a={options.moe_a2a}: the all-to-all kernels of token dispatch run with "
            "attention_dp > 1; without it every rank holds every token and the experts' "
            "outputs are all-reduced"
        )
    if options.moe_a2a == "deepep" and xs.moe_tp > 1:
        raise ConfigError(
            f"moe_a2a=deepep: DeepEP dispatches tokens to whole experts (expert parallelism), "
            f"not to width slices of them: needs ep=tp*attention_dp={layout.moe_group} "
            f"(moe_tp 1), not ep={layout.ep} (moe_tp {xs.moe_tp}), as SGLang and vLLM require"
        )
    if options.moe_a2a == "deepep":
        problem = deepep_buffers.hidden_problem(spec, calib.engine)
        problem = problem or deepep_buffers.ranks_problem(xs.group)
        if problem:
            raise ConfigError(problem)
        ll, ht = (deepep_buffers.hidden_for(spec.hidden_size, calib.engine, low_latency=x)
                  for x in (True, False))  # fmt: skip
        xs = replace(xs, deepep_hidden=(ll, ht))
    if xs.dispatch and options.sequence_parallel:
        raise ConfigError(
            f"attention_dp={layout.attention_dp}: cannot be combined with sequence "
            "parallelism (each attention group keeps its own tokens)"
        )
    stages = stage_layers(spec.num_layers, pp, layout.pp_layers)
    micro_slices(workload, layout.micro_batches)  # refuses more micro-batches than sequences
    if layout.attention_dp > 1 and layout.ranks > gpu_count:
        raise ConfigError(
            f"tp*attention_dp*pp*dp={tp}*{layout.attention_dp}*{pp}*{layout.dp}="
            f"{layout.ranks}: more than the {gpu_count} GPUs of "
            f"{graph.graph.get('name', 'topology')} (add hosts: --nodes)"
        )
    comms: Comms | LayoutComms
    if one_group(layout):
        comms = connect(
            graph,
            layout.moe_group,  # tp, or attention_dp GPUs of TP 1
            per_host=layout.gpus_per_node,
            calib=calib,
            algo=options.collective_algo,
        )
        gpu = comms.group.gpu
    else:
        routes = Routes(graph)
        # an attention data-parallel group's TP groups sit side by side, like replicas
        gpu_ranks = place(routes, tp * layout.attention_dp, pp, layout.dp, layout.gpus_per_node,
                          layout.placement)  # fmt: skip
        comms = LayoutComms(graph, routes, gpu_ranks, tp, calib, options.collective_algo, pp)
        gpus = {graph.nodes[routes.node(g)]["gpu"] for g in gpu_ranks}
        if len(gpus) > 1:
            names = ", ".join(sorted(g.name for g in gpus))
            raise ConfigError(f"tp*pp*dp={len(gpu_ranks)}: the layout mixes GPU types ({names})")
        gpu = gpus.pop()

    table = kernel_table.load(options.kernel_table) if options.kernel_table else None
    if xs.dispatch:  # the hosts the (first) MoE group spans: where DeepEP's tokens cross
        if isinstance(comms, Comms):
            routes_, ranks_ = comms.group.routes, comms.group.gpu_ranks
        else:
            routes_, ranks_ = comms.routes, comms.gpu_ranks[: layout.moe_group]
        xs = replace(xs, nodes=len({routes_.host(g) for g in ranks_}))

    prec = run_precision(options, spec, gpu)
    # the routed experts at the width and hidden size the engine builds them (padded)
    xs = engine_experts(xs, spec, calib.engine, arch=gpu.arch, expert_dtype=prec.experts,
                        phase=workload.phase, a2a=options.moe_a2a)  # fmt: skip
    # and as many of a step's tokens at a time as its fused MoE kernels take
    xs = replace(xs, chunk_tokens=calib.engine.fused_moe_chunk_tokens or 0)

    def memory_of(w: Workload) -> tuple[MemoryUse, ...]:
        return tuple(
            memory_per_stage(spec, tp, w, options, gpu, layers=layers, first=s == 0,
                             last=s == pp - 1, micro_batches=layout.micro_batches,
                             experts=xs)
            for s, layers in enumerate(stages)
        )  # fmt: skip

    mems = memory_of(workload)
    worst = max(range(len(mems)), key=lambda s: (mems[s].total_bytes_per_gpu, -s))
    if not all(m.fits for m in mems) and not options.allow_oom:
        what = _layout_words(layout) + f": {spec.name}" + (f" stage {worst}" if pp > 1 else "")
        remedy = _oom_remedy(layout, gpu_count, oom_flag)
        room = what_fits(lambda w: all(m.fits for m in memory_of(w)), workload,
                         least_batch=layout.micro_batches)  # fmt: skip
        raise ConfigError(mems[worst].refusal(what, gpu.name, f"{room}; {remedy}"))
    return RunPlan(
        model=spec,
        graph=graph,
        layout=layout,
        workload=workload,
        options=options,
        nodes=nodes,
        calib=calib,
        gpu=gpu,
        precision=prec,
        hardware=hardware_for(gpu, prec.math, calib.kernels, kv_dtype=prec.kv),
        launch=launch_mode(workload, options),
        split=shard(spec, tp, xs),
        experts=xs,
        stages=stages,
        memory=mems,
        table=table,
        comms=comms,
    )


__all__ = ["RunPlan", "check_tp", "one_group", "resolve"]
