"""``simulate`` for a layout beyond one TP group: pipeline stages, replicas, micro-batches.

Called by :func:`tpsim.core.api.simulate` when ``pp``, ``dp`` or ``micro_batches`` exceeds
1 (one TP group alone keeps its own path, unchanged). Places the ranks
(:func:`tpsim.core.comm.layout.place`), checks every stage's memory, lowers every rank's program
(:mod:`tpsim.core.lowering.pipeline`) and runs all of them in one engine over the shared fabric.
When
the replicas are provably independent (:func:`tpsim.core.comm.layout.replicas_independent`),
replica 0 runs alone and the others are its copies, rank-shifted.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from tpsim.core import metrics
from tpsim.core.comm import symmetry
from tpsim.core.comm.layout import LayoutComms, place, replicas_independent, stage_layers
from tpsim.core.config import Layout, Options, Workload, precision
from tpsim.core.engine.simulation import run
from tpsim.core.errors import ConfigError
from tpsim.core.kernels import kernel_table
from tpsim.core.kernels.costs import hardware_for
from tpsim.core.lowering.lower import launch_mode
from tpsim.core.lowering.pipeline import lower_layout, micro_slices
from tpsim.core.lowering.shard import shard
from tpsim.core.memory import memory_per_stage
from tpsim.core.result import Result, check_records, estimate_records
from tpsim.models.spec import ModelSpec
from tpsim.topologies.builders import TopologyGraph
from tpsim.topologies.routing import Routes


def simulate_layout(
    spec: ModelSpec,
    graph: TopologyGraph,
    layout: Layout,
    workload: Workload,
    options: Options,
    *,
    nodes: int = 1,
    link_usage: bool = False,
    use_symmetry: bool = True,
) -> Any:
    """One step of ``layout`` (see the module doc); returns a :class:`tpsim.core.result.Result`."""

    calib = options.calibration
    tp, pp, dp = layout.tp, layout.pp, layout.dp
    stages = stage_layers(spec.num_layers, pp, layout.pp_layers)
    micro_slices(workload, layout.micro_batches)  # refuses more micro-batches than sequences
    routes = Routes(graph)
    gpu_ranks = place(routes, tp, pp, dp, layout.gpus_per_node, layout.placement)
    comms = LayoutComms(graph, routes, gpu_ranks, tp, calib, options.collective_algo)
    gpus = {graph.nodes[routes.node(g)]["gpu"] for g in gpu_ranks}
    if len(gpus) > 1:
        names = ", ".join(sorted(g.name for g in gpus))
        raise ConfigError(f"tp*pp*dp={len(gpu_ranks)}: the layout mixes GPU types ({names})")
    gpu = gpus.pop()
    mems = [
        memory_per_stage(spec, tp, workload, options, gpu, layers=layers, first=s == 0,
                         last=s == pp - 1, micro_batches=layout.micro_batches)
        for s, layers in enumerate(stages)
    ]  # fmt: skip
    worst = max(range(pp), key=lambda s: (mems[s].total_bytes_per_gpu, -s))
    if not all(m.fits for m in mems) and not options.allow_oom:
        where = f" stage {worst}" if layout.pp > 1 else ""
        what = f"tp={layout.tp} pp={layout.pp}: {spec.name}{where}"
        remedy = "raise --tp or --pp, or pass --allow-oom"
        raise ConfigError(mems[worst].refusal(what, gpu.name, remedy))

    table = kernel_table.load(options.kernel_table) if options.kernel_table else None
    prec = precision(options, spec.dtype, gpu.fp8_flops is not None)
    hw = hardware_for(gpu, prec.math, calib.kernels, kv_dtype=prec.kv)
    programs = lower_layout(
        spec, tp, stages, dp, workload, options, hw, table, layout.micro_batches
    )
    check_records(estimate_records(programs, options.collective_algo), options, "up to")
    fab = comms.fabric
    wall = time.perf_counter()
    log: list[tuple[float, int, float]] | None = [] if link_usage else None
    skew = 0.0 if tp < 2 else options.launch_skew_s / (tp - 1)
    per_replica = tp * pp
    alone = use_symmetry and not link_usage and replicas_independent(comms, programs, dp)
    ranks = per_replica if alone else programs.ranks
    records, events = run(
        programs.head(ranks),
        comms.planner,
        fab.capacities,
        router=comms.router,
        rank_delay_s=[(r % tp) * skew for r in range(ranks)],
        comm_sms=calib.collectives.comm_sms,
        sm_count=gpu.sm_count,
        link_log=log,
    )
    if alone:
        records = symmetry.canonical(records, {}, dp, per_replica)
    else:
        records = symmetry.canonical(records)
    wall = time.perf_counter() - wall

    path = metrics.critical_path(records)
    if pp > 1:
        end = path[-1].rank if path else 0
        d = end // per_replica
        last = set(range(d * per_replica + (pp - 1) * tp, (d + 1) * per_replica))
        parts = metrics.pipeline_breakdown(records, path, last)
    else:
        parts = metrics.breakdown(records, path)
    latency = metrics.makespan(records)
    tokens = workload.batch * (workload.prompt_len if workload.phase == "prefill" else 1)
    per_s = tokens / latency if latency > 0 else float("inf")
    split = shard(spec, tp)
    regime = metrics.regime(parts)
    if parts.get("bubble", 0.0) > max(parts[c] for c in metrics.CATEGORIES):
        regime = metrics.REGIMES["bubble"]
    mem = mems[worst].to_dict() | {"stage": worst}
    summary: dict[str, Any] = {
        "config": {
            "model": asdict(spec),
            "topology": graph.graph.get("name", ""),
            "nodes": int(graph.graph.get("hosts", nodes)),
            "gpu": gpu.name,
            "tp": tp,
            "gpus_per_node": layout.gpus_per_node,
            "gpus": [routes.node(g) for g in gpu_ranks],
            "ring_order": list(comms.group_comms[0].group.ring),
            "layout": {
                "tp": tp,
                "pp": pp,
                "dp": dp,
                "micro_batches": layout.micro_batches,
                "pp_layers": [len(r) for r in stages],
            },
            "placement": placement(comms, pp),
            "workload": asdict(workload),
            "options": asdict(options)
            | {"dtype": prec.weights, "kv_dtype": options.kv_dtype or prec.weights},
            "launch_effective": launch_mode(workload, options),
        },
        "latency_s": latency,
        "tokens_per_s": per_s * dp,
        "tokens_per_s_per_replica": per_s,
        "tokens_per_s_per_gpu": per_s * dp / len(gpu_ranks),
        "regime": regime,
        "breakdown_s": parts,
        "memory": mem,
        "memory_per_stage": [m.to_dict() for m in mems],
        **metrics.pass_details(
            records, path, split, {"events": events, "wall_s": wall, "ranks_simulated": ranks}
        ),
    }
    usage = tuple((t, "->".join(fab.edges[link]), bps) for t, link, bps in log or ())
    labels = {r: f"{n} {_where(r, tp, pp, dp)}" for r, n in comms.labels().items()}
    return Result(tuple(records), summary, tuple(r.id for r in path), labels, usage)


def _where(rank: int, tp: int, pp: int, dp: int) -> str:
    d, rest = divmod(rank, tp * pp)
    s, t = divmod(rest, tp)
    return (f"dp{d} " if dp > 1 else "") + (f"pp{s} " if pp > 1 else "") + f"tp{t}"


def placement(comms: LayoutComms, pp: int) -> list[dict[str, Any]]:
    """Per rank: its (dp, pp, tp) coordinates and the GPU it runs on."""
    tp = comms.tp
    out = []
    for r, g in enumerate(comms.gpu_ranks):
        d, rest = divmod(r, tp * pp)
        s, t = divmod(rest, tp)
        out.append({"rank": r, "dp": d, "pp": s, "tp": t, "gpu": comms.routes.node(g)})
    return out


__all__ = ["placement", "simulate_layout"]
