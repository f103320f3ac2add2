"""``tpsim run``: one forward pass simulated, its summary printed, its Gantt chart and trace
written; its flags are also ``compare``'s (:func:`run_inputs`, :func:`run_topology`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tpsim.cli.paths import check_output
from tpsim.cli.types import (
    check_gantt_layers,
    number,
    parse_counts,
    parse_gantt_layers,
    parse_ranks,
    tokens,
)
from tpsim.core.config import Layout, Options, Workload, check_nodes
from tpsim.core.errors import ConfigError
from tpsim.core.lowering.experts import held_skew
from tpsim.core.run_options import BY_NAME, RUN_OPTIONS, RunOption
from tpsim.outputs import text as report


def warn(message: str) -> None:
    """One line on stderr that does not stop the command."""
    print(f"tpsim: warning: {message}", file=sys.stderr)


def warn_gantt_unused(a: argparse.Namespace) -> None:
    """Warn of a Gantt chart's options given without ``--gantt`` (nothing draws them)."""
    if a.gantt:
        return
    for flag in ("gantt_layers", "gantt_ranks"):
        if getattr(a, flag, None) is not None:
            warn(f"--{flag.replace('_', '-')}: it shapes the --gantt chart, not given: ignored")


def warn_held_skew(skew: float, model: Any) -> None:
    """Warn where ``--expert-skew`` is above what routing allows (N/k: an expert takes each
    token at most once), which the lowering holds it to."""
    held = held_skew(skew, model.num_experts, model.experts_per_token) if model.is_moe else 0.0
    if skew and held and skew > held:
        warn(
            f"--expert-skew={skew:g}: held to {held:g} ({model.num_experts} experts / "
            f"top-{model.experts_per_token}: an expert takes each token at most once)"
        )


def add_option(p: argparse.ArgumentParser, option: RunOption) -> None:
    """``option``'s flag on ``p``, as the table declares it (its type, default and help)."""
    kw: dict[str, Any] = {"help": option.help_text}
    if option.kind == "switch":
        kw["action"] = "store_true"
    elif option.kind == "negatable":
        kw.update(action=argparse.BooleanOptionalAction, default=option.default)
    else:
        if option.required:
            kw["required"] = True
        elif not option.unset:
            kw["default"] = option.default
        if option.kind == "int":
            kw["type"] = int
        elif option.kind == "float":
            low, high, low_open = option.bounds
            kw["type"] = number(low, high, low_open=low_open)
        elif option.kind == "tokens":
            kw["type"] = tokens(option.flag)
        elif option.kind == "counts":
            kw["type"] = parse_counts
        elif option.kind == "choice":
            kw["choices"] = option.choices
        if option.metavar:
            kw["metavar"] = option.metavar
    p.add_argument(option.flag, **kw)


def add_run_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``run`` to the sub-commands ``sub``; its parser (``compare`` reads its flags).

    Its options are :data:`tpsim.core.run_options.RUN_OPTIONS`; the outputs follow."""
    run = sub.add_parser("run", help="simulate one forward pass")
    for option in RUN_OPTIONS:
        add_option(run, option)
    run.add_argument("--gantt", type=Path, help="write a Gantt chart (.png or .svg)")
    run.add_argument(
        "--gantt-ranks",
        type=parse_ranks,
        help="GPUs to draw, e.g. 0,1,7 (default: all up to 8, else 0, 1, last)",
    )
    run.add_argument(
        "--gantt-layers",
        type=parse_gantt_layers,
        help="layers to zoom on, e.g. 0-1, 3 or emb-0 (emb or -1: the embedding; "
        "--gantt-layers=-1-0), or 'all' for the whole step "
        "(default: the whole step with the layers between the first and the last collapsed)",
    )
    run.add_argument(
        "--trace", type=Path, help="write a Chrome/Perfetto trace (.json, or .json.gz compressed)"
    )
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    return run


def network_flags(p: argparse.ArgumentParser) -> None:
    """``--nic-gbps`` and ``--nics-per-node`` (``run`` and ``collective``)."""
    add_option(p, BY_NAME["nic_gbps"])
    add_option(p, BY_NAME["nics_per_node"])


def run_topology(a: argparse.Namespace, warn_unused: bool = True) -> Any:
    """The graph of ``--topology`` on ``--nodes`` hosts, joined over the network that
    ``--nic-gbps`` / ``--nics-per-node`` describe when given (else the topology's own); on
    one host those flags are ignored, with a warning unless ``warn_unused`` is False."""
    from tpsim.topologies.io import get_topology
    from tpsim.topologies.network import Network, check_nic_gbps, check_nics_per_node

    gbps = check_nic_gbps(a.nic_gbps)
    count = check_nics_per_node(a.nics_per_node)
    if gbps is None and count is None:
        return get_topology(a.topology, a.nodes)
    if a.nodes == 1 and warn_unused:
        given = " and ".join(
            f for f, v in (("--nic-gbps", gbps), ("--nics-per-node", count)) if v is not None
        )
        verb = "describe" if " and " in given else "describes"
        warn(
            f"{given} {verb} the network --nodes N > 1 copies of the topology join over; "
            "this run is on --nodes 1 (a topology file's own hosts join by its NIC links): "
            "ignored"
        )
    return get_topology(
        a.topology, a.nodes, Network(None if gbps is None else gbps * 1e9 / 8, count)
    )


def warn_unused_length(a: argparse.Namespace) -> None:
    """A warning when ``a`` gives the length its phase does not use (``--prompt-len`` for a
    decode, ``--context-len`` for a prefill)."""
    ignored = "--prompt-len" if a.phase == "decode" else "--context-len"
    if (a.prompt_len if a.phase == "decode" else a.context_len) is not None:
        uses = "--context-len" if a.phase == "decode" else "--prompt-len"
        warn(f"{ignored} does not apply to {a.phase} (it uses {uses}); ignored")


def run_inputs(a: argparse.Namespace) -> tuple[Layout, Workload, Options]:
    """The layout, workload and options of ``run``'s flags (also ``compare``'s, one
    configuration at a time); bad values are refused here with the field named."""
    warn_unused_length(a)
    defaults = Workload()
    workload = Workload(
        a.batch,
        a.phase,
        defaults.prompt_len if a.prompt_len is None else a.prompt_len,
        defaults.context_len if a.context_len is None else a.context_len,
    )
    options = Options(
        launch=a.launch,
        overlap=a.overlap,
        allreduce_algo=a.allreduce_algo,
        dtype=a.dtype,
        kv_dtype=a.kv_dtype,
        ideal=a.ideal,
        allow_oom=a.allow_oom,
        fused=a.fused,
        kernel_table=a.kernel_table,
        sequence_parallel=a.sequence_parallel,
        overlap_chunks=a.overlap_chunks,
        launch_skew_s=a.launch_skew_us / 1e6,  # 20 us is 2e-05 s, as the API's
        max_records=a.max_records,
        engine=a.engine,
        expert_skew=a.expert_skew,
        routing=a.routing,
        moe_a2a=a.moe_a2a,
    )
    check_nodes(a.nodes)
    placement = tuple(x.strip() for x in a.placement.split(",")) if a.placement else ()
    layout = Layout(a.tp, a.gpus_per_node, a.pp, a.dp, a.micro_batches, a.pp_layers, placement,
                    ep=a.ep, attention_dp=a.attention_dp, moe_tp=a.moe_tp)  # fmt: skip
    return layout, workload, options


def _run(a: argparse.Namespace) -> int:
    from tpsim.core.api import simulate

    check_output(a.gantt, "--gantt", (".png", ".svg"), a)
    check_output(a.trace, "--trace", (".json", ".gz"), a)
    if a.trace is not None and not a.trace.name.lower().endswith((".json", ".json.gz")):
        raise ConfigError(f"--trace={a.trace}: must end in .json or .json.gz")
    layout, workload, options = run_inputs(a)
    if a.gantt_ranks and max(a.gantt_ranks) >= layout.ranks:
        last = layout.ranks - 1
        raise ConfigError(f"--gantt-ranks={max(a.gantt_ranks)}: the group has ranks 0-{last}")
    graph = run_topology(a)
    result = simulate(
        a.model,
        graph,
        layout,
        workload,
        options,
        nodes=a.nodes,
        link_usage=a.trace is not None,
    )
    if a.overlap_chunks and a.overlap != "chunked":
        warn(f"--overlap-chunks {a.overlap_chunks} applies to --overlap chunked only; ignored")
    if a.micro_batches and a.micro_batches > 1 and a.pp == 1:
        warn(
            f"--micro-batches {a.micro_batches} without --pp: one stage runs its micro-batches "
            "one after another (each re-reads the weights); they overlap only across stages"
        )
    stored = str(result.summary["config"]["model"]["dtype"])
    if a.dtype and stored in ("fp8", "fp4", "int4") and a.dtype != stored:
        warn(
            f"--dtype {a.dtype} runs the checkpoint's {stored} linear layers as {a.dtype} "
            "(tpsim's --dtype sets the weights; vLLM's only the activations): leave it out "
            "to run the checkpoint as stored"
        )
    kept = result.typed.config.model.kept
    if a.dtype and kept:
        warn(
            f"--dtype {a.dtype} also runs what the checkpoint keeps 16-bit as {a.dtype} "
            f"({kept.describe()}): leave it out to run the checkpoint as stored"
        )
    if a.kernel_table:
        from tpsim.core.kernels.kernel_table import load

        gpu = str(result.summary["config"]["gpu"])
        known = load(a.kernel_table).gpus
        if gpu.lower() not in known:
            warn(
                f"--kernel-table {a.kernel_table} has no rows for {gpu} (its GPUs: "
                f"{', '.join(sorted(known))}): every kernel is modelled"
            )
    warn_held_skew(a.expert_skew, result.typed.config.model)
    title = report.title(result.summary)
    if a.gantt:
        check_gantt_layers(a.gantt_layers, result.typed.config.model.num_layers)
    warn_gantt_unused(a)
    written: list[Path] = []
    try:
        if a.trace:
            from tpsim.outputs.export import chrome_trace, write_json

            write_json(
                a.trace,
                chrome_trace(
                    result.records,
                    title=title,
                    rank_labels=result.rank_labels,
                    critical=result.critical_path,
                    link_usage=result.link_usage,
                ),
            )
            written.append(a.trace)
        if a.gantt:
            from tpsim.experiments.plots.gantt import gantt

            gantt(
                result.records,
                a.gantt,
                ranks=a.gantt_ranks,
                layers=a.gantt_layers,
                title=report.chart_title(result.summary),
                critical=result.critical_path,
                rank_labels=result.rank_labels,
            )
    except OSError as e:  # disk full, permissions changed meanwhile: bad input, no traceback
        # (main's all_or_nothing removes what was written)
        flag, path = ("--gantt", a.gantt) if written or not a.trace else ("--trace", a.trace)
        raise ConfigError(f"{flag}={path}: cannot write ({e.strerror or e})") from None
    if a.json:
        print(json.dumps(result.summary, indent=2, allow_nan=False))
    else:
        from tpsim.experiments.compare_assumptions import assumptions

        print(report.summary_text(result.typed, assumptions(graph, result.summary)))
        for flag, path in (("gantt", a.gantt), ("trace", a.trace)):
            if path:
                print(f"  wrote {flag:<12}{path}")
    return 0


RUN_COMMANDS = {"run": _run}
