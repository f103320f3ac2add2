"""The Python API: ``simulate(model, topology, layout, workload, options) -> Result``.

A pure function of its inputs: no global state, no files. The CLI is a thin layer on top.
One path for every layout: the options resolved once (:func:`tpsim.core.plan.resolve`),
every rank's program lowered, the engine run (one TP group through
:func:`tpsim.core.comm.group.run_programs`, stages and replicas through
:func:`tpsim.core.parallel.run_layout`) and one :class:`~tpsim.core.summary.Summary` built.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from tpsim.core import metrics
from tpsim.core.comm.group import Comms, run_programs
from tpsim.core.config import Layout, Options, Workload
from tpsim.core.engine.jitter import HostJitter
from tpsim.core.lowering.lower import lower
from tpsim.core.lowering.pipeline import lower_layout
from tpsim.core.parallel import labels, placement, run_layout
from tpsim.core.plan import RunPlan, resolve
from tpsim.core.records import Record
from tpsim.core.result import Result, check_records, estimate_records, records_lower_bound
from tpsim.core.summary import (
    Breakdown,
    Communication,
    EngineStats,
    LayoutShape,
    ModelSplit,
    RunConfig,
    Summary,
    layers_of,
)
from tpsim.models.spec import ModelSpec

if TYPE_CHECKING:
    import networkx as nx


def simulate(
    model: ModelSpec | str | os.PathLike[str],
    topology: nx.DiGraph | str | os.PathLike[str],
    layout: Layout | int,
    workload: Workload | None = None,
    options: Options | None = None,
    *,
    nodes: int = 1,
    link_usage: bool = False,
    use_symmetry: bool = True,
) -> Result:
    """Simulate one forward pass of ``model`` split ``layout.tp`` ways on ``topology`` (with
    ``layout.pp`` stages, ``layout.dp`` replicas: :mod:`tpsim.core.parallel`): the arguments
    resolved once (:func:`tpsim.core.plan.resolve`), every rank's program lowered and run, and
    one :class:`~tpsim.core.summary.Summary` built (:func:`summarize`)."""
    plan = resolve(model, topology, layout, workload, options, nodes=nodes)
    spec, layout, workload, options = plan.model, plan.layout, plan.workload, plan.options
    tp, calib = layout.tp, plan.calib
    bound = records_lower_bound(spec, tp, workload, options, layout.micro_batches)
    check_records(bound, options, "at least")  # before a program of that size is built
    if plan.one_group:
        programs = lower(spec, tp, workload, options, plan.hardware, plan.table, plan.experts)
    else:
        programs = lower_layout(spec, tp, plan.stages, layout.dp, workload, options,
                                plan.hardware, plan.table, layout.micro_batches,
                                plan.experts)  # fmt: skip
    check_records(estimate_records(programs, options.collective_algo), options, "up to")
    _ = plan.comms.planner  # collectives are planned before the engine's clock starts
    wall = time.perf_counter()
    log: list[tuple[float, int, float]] | None = [] if link_usage else None
    skew = 0.0 if tp < 2 else options.launch_skew_s / (tp - 1)
    # ranks that wait for each other at every collective: a TP group (with attention data
    # parallelism, the MoE group its all-to-alls span)
    jitter = HostJitter(calib.engine.host_jitter_cv, tp * layout.attention_dp,
                        options.host_jitter_seed)  # fmt: skip
    if isinstance(plan.comms, Comms):
        # One host can stand for all when the hosts are identical and nothing tells them apart.
        ran = run_programs(
            plan.comms,
            programs,
            rank_delay_s=[r * skew for r in range(programs.ranks)],
            comm_sms=calib.collectives.comm_sms,
            link_log=log,
            use_symmetry=use_symmetry,
            host_jitter=jitter,
        )
        rank_labels = plan.comms.group.labels()
    else:
        ran = run_layout(
            plan.comms,
            programs,
            layout,
            plan.gpu,
            skew=skew,
            comm_sms=calib.collectives.comm_sms,
            link_log=log,
            use_symmetry=use_symmetry,
            host_jitter=jitter,
        )
        rank_labels = labels(plan.comms, layout)
    records = ran.records
    wall = time.perf_counter() - wall
    path = metrics.critical_path(records)
    summary = summarize(plan, records, path, EngineStats(ran.events, wall, ran.ranks_simulated))
    fab = plan.comms.fabric
    usage = tuple((t, "->".join(fab.edges[link]), bps) for t, link, bps in log or ())
    return Result(
        tuple(records), summary.to_dict(), tuple(r.id for r in path), rank_labels, usage, summary
    )


def network_of(graph: nx.DiGraph) -> dict[str, float] | None:
    """The network a multi-host graph joins its hosts over, as simulated: NICs per host, one
    NIC's rate (Gb/s; where a host has more NICs than GPUs, each GPU's link pools its share)
    and the NIC-to-NIC latency (us). None for one host."""
    hosts = {d.get("host", 0) for _, d in graph.nodes(data=True) if d.get("kind") == "gpu"}
    nics = [
        n for n, d in graph.nodes(data=True) if d.get("kind") == "nic" and d.get("host", 0) == 0
    ]
    if len(hosts) < 2 or not nics:
        return None
    # the NIC's link into the network: a join's ib_switch, or a topology file's own switch
    out = [
        m for m in graph.successors(nics[0]) if graph.edges[nics[0], m].get("link") == "infiniband"
    ]
    if not out:
        return None
    edge = graph.edges[nics[0], out[0]]
    net = graph.graph.get("network")
    count = (net.nics_per_node if net is not None else None) or len(nics)
    pooled = max(1.0, count / len(nics))  # more NICs than GPUs: a GPU's link pools its share
    return {
        "nics_per_node": count,
        "nic_gbps": float(f"{edge['bandwidth_Bps'] / pooled * 8 / 1e9:.12g}"),
        "latency_us": float(f"{2 * edge['latency_s'] * 1e6:.12g}"),
    }


def summarize(
    plan: RunPlan, records: list[Record], path: list[Record], engine: EngineStats
) -> Summary:
    """The summary of ``records`` (``path`` their critical path) run as ``plan`` says."""
    spec, layout, workload = plan.model, plan.layout, plan.workload
    tp, pp, dp = layout.tp, layout.pp, layout.dp
    if pp > 1:
        stride = tp * layout.attention_dp  # a stage's ranks: its attention-DP groups' TP ranks
        per_replica = stride * pp
        end = path[-1].rank if path else 0
        d = end // per_replica
        first = d * per_replica
        stages = [set(range(first + k * stride, first + (k + 1) * stride)) for k in range(pp)]
        last = stages[-1]
        parts = metrics.pipeline_breakdown(records, path, last)
        fill = metrics.pipeline_tail(path, last)
        # one batch's time in each stage (with micro-batches a stage serves several: no one
        # batch's share, and the pipeline is its own schedule)
        stage_s = tuple(metrics.stage_times(records, stages)) if layout.micro_batches == 1 else None
    else:
        parts = metrics.breakdown(records, path)
        fill = 0
        stage_s = None
    latency = metrics.makespan(records)
    # every attention data-parallel group runs its own batch
    tokens = workload.tokens * layout.attention_dp
    per_s = tokens / latency if latency > 0 else float("inf")
    regime = metrics.regime(parts)
    one = isinstance(plan.comms, Comms)
    routes, gpu_ranks, graph = plan.routes, plan.gpu_ranks, plan.graph
    weights = plan.precision.weights  # the resolved --dtype (fp32 checkpoints run in fp16)
    config = RunConfig(
        model=spec,
        topology=graph.graph.get("name", ""),
        nodes=int(graph.graph.get("hosts", plan.nodes)),
        gpu=plan.gpu.name,
        tp=tp,
        gpus_per_node=layout.gpus_per_node,
        gpus=tuple(routes.node(g) for g in gpu_ranks),
        ring_order=plan.ring,
        layout=LayoutShape(
            tp,
            pp,
            dp,
            layout.micro_batches,
            tuple(len(r) for r in plan.stages),
            layout.ep,
            layout.attention_dp,
            layout.expert_tp,
        ),
        workload=workload,
        options=plan.options,
        dtype=weights,
        kv_dtype=plan.precision.kv,
        launch_effective=plan.launch,
        placement=None if isinstance(plan.comms, Comms) else placement(plan.comms, layout),
        precision_note=plan.precision.note(plan.gpu.name),
        network=network_of(graph),
    )
    split = plan.split
    return Summary(
        config=config,
        latency_s=latency,
        tokens_per_s=per_s * dp,
        tokens_per_s_per_gpu=per_s * dp / len(gpu_ranks),
        regime=regime,
        breakdown=Breakdown.of(parts),
        memory=plan.memory[plan.worst_stage],
        communication=Communication.of(metrics.communication(records)),
        model_split=ModelSplit(split.heads, split.kv_heads, split.kv_replication),
        layers=layers_of(metrics.breakdown_by_layer(path, fill)),
        engine=engine,
        tokens_per_s_per_replica=None if one else per_s,
        memory_stage=None if one else plan.worst_stage,
        memory_per_stage=None if one else plan.memory,
        stage_s=stage_s,
    )
