"""The Python API: ``simulate(model, topology, layout, workload, options) -> Result``.

A pure function of its inputs: no global state, no files. The CLI is a thin layer on top.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import networkx as nx
from tpsim.core import metrics
from tpsim.core.comm import algorithms
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
from tpsim.core.program import Programs
from tpsim.core.records import Record
from tpsim.models.catalog import get_model
from tpsim.models.spec import ModelSpec
from tpsim.topologies.io import get_topology


@dataclass(frozen=True)
class Result:
    """What one simulation produced: the records, the summary (the JSON contract) and the
    critical path (record ids)."""

    records: tuple[Record, ...]
    summary: dict[str, Any]
    critical_path: tuple[int, ...]
    rank_labels: dict[int, str]
    #: (time, "src->dst", bytes/s) each time a link's load changed; only with link_usage=True
    link_usage: tuple[tuple[float, str, float], ...] = ()

    @property
    def latency_s(self) -> float:
        return float(self.summary["latency_s"])


def _check_layout(model: ModelSpec, tp: int, gpus: int) -> None:
    problem = tp_problem(tp, model.num_heads, model.num_kv_heads)
    if problem:
        valid = ", ".join(
            map(str, valid_tp_degrees(model.num_heads, model.num_kv_heads, max(gpus, tp)))
        )
        raise ConfigError(f"tp={tp} {problem} of {model.name}; valid: {valid}")


def simulate(
    model: ModelSpec | str,
    topology: nx.DiGraph | str,
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


#: Bytes one record holds in memory, about (see check_records; tests/cli/test_limits.py measures).
RECORD_BYTES = 450


def estimate_records(programs: Programs, algo: str = "auto") -> int:
    """An upper bound on the records ``programs`` make, known before the run.

    Per rank: the graph replay and the launch-skew record, one record per kernel and p2p
    op, one per host launch and per eager dispatch gap, and per collective its fixed-latency
    record plus its steps: the most steps any algorithm ``algo`` may choose takes (each
    registry entry's bound).
    """
    steps = algorithms.max_steps(algo, programs.ranks)
    per_program: dict[int, int] = {}
    total = 0
    for program in programs:
        n = per_program.get(id(program))
        if n is None:
            n = 2
            for op in program.ops:
                n += (op.launch_s > 0) + (op.dispatch_s > 0)
                n += 1 + steps if op.collective is not None else 1
            per_program[id(program)] = n
        total += n
    return total


def records_lower_bound(spec: ModelSpec, tp: int, workload: Workload, options: Options) -> int:
    """Records the run makes at least, known before lowering (so that an absurd request is
    refused before its program is built): per rank and layer the QKV, attention and
    activation kernels and the two row-parallel GEMMs, each followed by a collective when
    tp > 1, in ``parts`` pieces with ``overlap="chunked"``."""
    parts = 1
    if tp > 1 and options.overlap == "chunked":
        parts = max(1, min(options.overlap_chunks or tp, workload.tokens))
    return tp * spec.num_layers * (3 + 2 * parts * (2 if tp > 1 else 1))


def check_records(records: int, options: Options, bound: str = "up to") -> None:
    """ConfigError when a run would make more than ``options.max_records`` records.

    A record in the result holds about 450 bytes (measured: a 15-field tuple of 160 bytes and
    its list slot, plus its own floats, ints, step name and detail text), so the default of 20
    million is about 9 GB: the run is refused up front rather than left to exhaust memory.
    """
    if records > options.max_records:
        raise ConfigError(
            f"max_records={options.max_records}: this run would make {bound} {records:,} "
            f"records (about {records * RECORD_BYTES / 1e9:,.0f} GB); lower --tp, the layers "
            "or --overlap-chunks, or raise --max-records"
        )
