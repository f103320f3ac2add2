"""The Python API: ``simulate(model, topology, layout, workload, options) -> Result``.

A pure function of its inputs: no global state, no files. The CLI is a thin layer on top.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from tpsim.core import metrics
from tpsim.core.comm.group import connect, run_programs
from tpsim.core.config import (
    Layout,
    Options,
    Workload,
    precision,
    tp_problem,
    valid_tp_degrees,
)
from tpsim.core.errors import ConfigError
from tpsim.core.kernels import kernel_table
from tpsim.core.kernels.costs import hardware_for
from tpsim.core.lowering.lower import launch_mode, lower
from tpsim.core.lowering.shard import shard
from tpsim.core.memory import memory_per_gpu
from tpsim.core.result import Result, check_records, estimate_records, records_lower_bound
from tpsim.models.catalog import get_model
from tpsim.models.spec import ModelSpec
from tpsim.topologies.builders import TopologyGraph
from tpsim.topologies.io import get_topology


def _check_layout(model: ModelSpec, tp: int, gpus: int) -> None:
    problem = tp_problem(tp, model.num_heads, model.num_kv_heads)
    if problem:
        valid = ", ".join(
            map(str, valid_tp_degrees(model.num_heads, model.num_kv_heads, max(gpus, tp)))
        )
        raise ConfigError(f"tp={tp} {problem} of {model.name}; valid: {valid}")


def simulate(
    model: ModelSpec | str,
    topology: TopologyGraph | str,
    layout: Layout | int,
    workload: Workload | None = None,
    options: Options | None = None,
    *,
    nodes: int = 1,
    link_usage: bool = False,
    use_symmetry: bool = True,
) -> Result:
    """Simulate one forward pass of ``model`` split ``layout.tp`` ways on ``topology`` (with
    ``layout.pp`` stages, ``layout.dp`` replicas: :mod:`tpsim.core.parallel`)."""
    spec = get_model(model) if isinstance(model, str) else model
    graph = get_topology(topology, nodes) if isinstance(topology, str) else topology
    layout = Layout(layout) if isinstance(layout, int) else layout
    workload = workload or Workload()
    options = options or Options()
    calib = options.calibration  # an unknown engine or bad profile is refused first
    gpu_count = sum(1 for _, k in graph.nodes(data="kind") if k == "gpu")
    _check_layout(spec, layout.tp, gpu_count)
    if layout.pp * layout.dp * layout.micro_batches > 1 or layout.pp_layers or layout.placement:
        from tpsim.core.parallel import simulate_layout  # stages, replicas, micro-batches

        result: Result = simulate_layout(
            spec, graph, layout, workload, options, nodes=nodes, link_usage=link_usage,
            use_symmetry=use_symmetry,
        )  # fmt: skip
        return result
    comms = connect(
        graph,
        layout.tp,
        per_host=layout.gpus_per_node,
        calib=calib,
        algo=options.collective_algo,
    )
    group = comms.group

    table = kernel_table.load(options.kernel_table) if options.kernel_table else None
    mem = memory_per_gpu(spec, layout.tp, workload, options, group.gpu)
    if not mem.fits and not options.allow_oom:
        what = f"tp={layout.tp}: {spec.name}"
        raise ConfigError(mem.refusal(what, group.gpu.name, "raise --tp or pass --allow-oom"))

    check_records(records_lower_bound(spec, layout.tp, workload, options), options, "at least")
    prec = precision(options, spec.dtype, group.gpu.fp8_flops is not None)
    dtype = prec.weights  # the resolved --dtype (fp32 checkpoints run in fp16, as vLLM's auto)
    hw = hardware_for(group.gpu, prec.math, calib.kernels, kv_dtype=prec.kv)
    programs = lower(spec, layout.tp, workload, options, hw, table)
    check_records(estimate_records(programs, options.collective_algo), options, "up to")
    _ = comms.planner  # collectives are planned before the engine's clock starts
    wall = time.perf_counter()
    log: list[tuple[float, int, float]] | None = [] if link_usage else None
    skew = 0.0 if layout.tp < 2 else options.launch_skew_s / (layout.tp - 1)
    # One host can stand for all when the hosts are identical and nothing tells them apart.
    ran = run_programs(
        comms,
        programs,
        rank_delay_s=[r * skew for r in range(layout.tp)],
        comm_sms=calib.collectives.comm_sms,
        link_log=log,
        use_symmetry=use_symmetry,
    )
    records, events, ranks = ran.records, ran.events, ran.ranks_simulated
    wall = time.perf_counter() - wall

    path = metrics.critical_path(records)
    parts = metrics.breakdown(records, path)
    latency = metrics.makespan(records)
    tokens = workload.batch * (workload.prompt_len if workload.phase == "prefill" else 1)
    split = shard(spec, layout.tp)
    summary: dict[str, Any] = {
        "config": {
            "model": asdict(spec),
            "topology": graph.graph.get("name", ""),
            "nodes": int(graph.graph.get("hosts", nodes)),
            "gpu": group.gpu.name,
            "tp": layout.tp,
            "gpus_per_node": layout.gpus_per_node,
            "gpus": [group.routes.node(g) for g in group.gpu_ranks],
            "ring_order": list(group.ring),
            "layout": {
                "tp": layout.tp,
                "pp": 1,
                "dp": 1,
                "micro_batches": 1,
                "pp_layers": [spec.num_layers],
            },
            "workload": asdict(workload),
            "options": asdict(options) | {"dtype": dtype, "kv_dtype": options.kv_dtype or dtype},
            "launch_effective": launch_mode(workload, options),
        },
        "latency_s": latency,
        "tokens_per_s": tokens / latency if latency > 0 else float("inf"),
        "tokens_per_s_per_gpu": tokens / latency / layout.tp if latency > 0 else float("inf"),
        "regime": metrics.regime(parts),
        "breakdown_s": parts,
        "memory": mem.to_dict(),
        **metrics.pass_details(
            records, path, split, {"events": events, "wall_s": wall, "ranks_simulated": ranks}
        ),
    }
    usage = tuple((t, "->".join(comms.fabric.edges[link]), bps) for t, link, bps in log or ())
    return Result(tuple(records), summary, tuple(r.id for r in path), group.labels(), usage)
