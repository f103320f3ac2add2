"""The ``tpsim`` command line: a thin layer over :mod:`tpsim.core.api`.

Exit codes: 0 success, 2 bad input (one line on stderr naming the value), 1 a bug.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from tpsim import calibration
from tpsim.calibration.bounded import shorten
from tpsim.cli.compare import COMPARE_COMMANDS, add_compare_parser
from tpsim.cli.plan import PLAN_COMMANDS, add_plan_parser
from tpsim.cli.studies import STUDY_COMMANDS, add_study_parsers
from tpsim.cli.types import parse_layers, tokens
from tpsim.core.collectives import ALGORITHMS, OPS
from tpsim.core.config import (
    ALLREDUCE_ALGOS,
    LAUNCH_MODES,
    OVERLAP_MODES,
    PHASES,
    Layout,
    Options,
    Workload,
    check_nodes,
)
from tpsim.core.errors import INPUT_ERRORS, ConfigError
from tpsim.outputs import report

#: The one line ``tpsim --help`` opens with (no markup).
PURPOSE = (
    "tpsim: simulate a tensor-parallel transformer forward pass (GPUs, links, kernels, "
    "collectives, host overhead) and say where the time goes"
)

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str) -> int:
    """Bytes from ``8``, ``8K``, ``1M``, ``16G`` (binary multiples, as nccl-tests reads them)."""
    t = text.strip().upper().removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    number = t[: len(t) - len(unit)]
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (e.g. 8, 64K, 1M, 16G)") from None
    if not 1 <= value <= 1 << 50 or value != int(value):  # also NaN and infinities
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: a whole number of bytes >= 1")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    sizes = [parse_size(s) for s in text.split(",") if s.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError(f"invalid sizes {text!r}: give at least one (e.g. 8K,1M)")
    return sizes


def parse_ranks(text: str) -> list[int]:
    try:
        ranks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid ranks {text!r} (e.g. 0,1,7)") from None
    if not ranks or min(ranks) < 0:
        raise argparse.ArgumentTypeError(f"invalid ranks {text!r}: non-negative integers")
    return ranks


def parse_counts(text: str) -> tuple[int, ...]:
    """``--pp-layers 40,40``: positive integers, comma separated."""
    try:
        out = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: want counts like 40,40") from None
    if any(n < 1 for n in out):
        raise argparse.ArgumentTypeError(f"{text!r}: every stage needs at least one layer")
    return out


def warn(message: str) -> None:
    """One line on stderr that does not stop the command."""
    print(f"tpsim: warning: {message}", file=sys.stderr)


class _Help(argparse.HelpFormatter):
    """Every option's help ends with its default, when it has one worth saying."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in ((), "")
            or not action.option_strings
            or default in (None, False, argparse.SUPPRESS)
            or action.nargs == 0
        ):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message}")


#: Help for flags that several sub-commands share, filled in where a parser gave none.
COMMON_HELP = {
    "model": "catalog name (tpsim list models) or a Hugging Face config.json",
    "topology": "catalog name (tpsim list topologies) or a topology file (.yaml/.json)",
    "nodes": "hosts joined over the network (copies of a catalog node)",
    "tp": "tensor-parallel degree",
    "ranks": "GPUs taking part in the collective",
    "gpus_per_node": "GPUs of the group on each host (0: fill each host first)",
    "batch": "sequences per step",
    "phase": "prefill (one pass over the prompts) or decode (one new token per sequence)",
    "prompt_len": "prefill: tokens per sequence (K = 1024: 2K)",
    "context_len": "decode: keys each new token attends to (K = 1024: 4K)",
    "dtype": "weights and activations (default: the model's)",
    "kv_dtype": "KV cache (default: --dtype)",
    "launch": "eager: one host launch per kernel; graph: CUDA graph replay; compiled: "
    "torch.compile with graphs (fewer, fused kernels)",
    "allreduce_algo": "all-reduce algorithm: auto (the engine decides), nccl, or one by name",
    "op": "the collective",
    "min_bytes": "smallest size; sizes double up to --max-bytes",
    "max_bytes": "largest size",
    "ideal": "first principles: every efficiency 1, every fixed overhead 0",
    "json": "print JSON instead of text",
    "what": "which catalog to list",
    "out": "where to write the outputs",
    "name": "the study to run",
    "engine": "serving engine profile (tpsim list engines) or a profile file .yaml",
    "slo_ttft_ms": "time-to-first-token target (ms): layouts that miss it are marked",
    "slo_tpot_ms": "time-per-output-token target (ms): the batch is cut until it holds",
}


def _fill_help(parser: argparse.ArgumentParser) -> None:
    """Give every flag of every sub-command a help line (COMMON_HELP where it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _fill_help(sub)
        elif not action.help:
            action.help = COMMON_HELP.get(action.dest, action.dest.replace("_", " "))


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tpsim", description=PURPOSE)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="simulate one forward pass")
    run.add_argument("--model", required=True, help="catalog name or path to a config.json")
    run.add_argument("--topology", required=True, help="catalog name or topology file")
    run.add_argument("--nodes", type=int, default=1, help="hosts joined over the network")
    _network_flags(run)
    run.add_argument("--tp", type=int, required=True, help="tensor-parallel degree")
    run.add_argument(
        "--gpus-per-node",
        type=int,
        default=0,
        help="GPUs of the group on each host (default: fill each host first)",
    )
    run.add_argument("--pp", type=int, default=1, help="pipeline stages (one TP group each)")
    run.add_argument("--dp", type=int, default=1, help="data-parallel replicas")
    run.add_argument(
        "--micro-batches", type=int, default=1, help="micro-batches per step (pipeline)"
    )
    run.add_argument("--pp-layers", type=parse_counts, default=(), help="layers per stage: 40,40")
    run.add_argument(
        "--placement",
        metavar="GPU,GPU,...",
        help="the GPU of each rank in (dp, pp, tp) order, e.g. n0.gpu0,n0.gpu2,n0.gpu4,n0.gpu6 "
        "(default: TP inside a host first, then stages, then replicas)",
    )
    run.add_argument("--batch", type=int, default=1)
    run.add_argument("--phase", choices=PHASES, default="decode")
    run.add_argument(
        "--prompt-len",
        type=tokens("--prompt-len"),
        help="prefill: tokens per sequence (2K = 2048)",
    )
    run.add_argument(
        "--context-len",
        type=tokens("--context-len"),
        help="decode: keys each new token attends to (4K = 4096)",
    )
    run.add_argument("--dtype", choices=("bf16", "fp16", "fp8"))
    run.add_argument("--kv-dtype", choices=("bf16", "fp16", "fp8"))
    run.add_argument("--launch", choices=LAUNCH_MODES, default="graph")
    run.add_argument(
        "--overlap",
        choices=OVERLAP_MODES,
        default="none",
        help="chunked: GEMM pieces overlap their collective; microbatch: two "
        "halves of the batch interleaved",
    )
    run.add_argument(
        "--overlap-chunks",
        type=int,
        default=0,
        help="pieces per GEMM with --overlap chunked (default: the TP degree)",
    )
    run.add_argument(
        "--sequence-parallel",
        action="store_true",
        help="reduce-scatter + all-gather instead of each all-reduce",
    )
    run.add_argument(
        "--launch-skew-us",
        type=float,
        default=0.0,
        help="the last rank's host thread starts this much later (us)",
    )
    run.add_argument("--allreduce-algo", choices=ALLREDUCE_ALGOS, default="auto")
    run.add_argument(
        "--engine",
        default=Options.engine,
        help="serving engine: "
        + ", ".join(calibration.engines())
        + " (tpsim list engines), or a profile file .yaml",
    )
    run.add_argument("--allow-oom", action="store_true", help="simulate a layout that does not fit")
    run.add_argument(
        "--fused",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fuse residual add + RMSNorm as vLLM does (default; --no-fused: separate kernels)",
    )
    run.add_argument(
        "--kernel-table",
        metavar="TABLE",
        help="measured kernel times overriding the model: a CSV (tpsim's or Vidur's layout), "
        "a shipped table (vidur-a100, vidur-h100) or a comma-separated list",
    )
    run.add_argument("--ideal", action="store_true", help="efficiencies 1, fixed overheads 0")
    run.add_argument("--gantt", type=Path, help="write a Gantt chart (.png or .svg)")
    run.add_argument(
        "--gantt-ranks",
        type=parse_ranks,
        help="GPUs to draw, e.g. 0,1,7 (default: all up to 8, else 0, 1, last)",
    )
    run.add_argument(
        "--gantt-layers", type=parse_layers, help="layers to zoom on, e.g. 0-1 or 3 (-1: embedding)"
    )
    run.add_argument("--trace", type=Path, help="write a Chrome/Perfetto trace (.json)")
    run.add_argument(
        "--max-records",
        type=int,
        default=Options.max_records,
        help="refuse a run estimated to produce more records than this "
        f"(default {Options.max_records:,}, about 9 GB of memory)",
    )
    run.add_argument("--json", action="store_true", help="print the summary as JSON")

    coll = sub.add_parser("collective", help="nccl-tests-like table of one collective")
    coll.add_argument("--topology", required=True)
    coll.add_argument("--nodes", type=int, default=1)
    _network_flags(coll)
    coll.add_argument("--ranks", type=int, required=True)
    coll.add_argument("--op", choices=OPS, default="all_reduce")
    coll.add_argument(
        "--algo",
        choices=ALGORITHMS,
        default="nccl",
        help="nccl (default): what NCCL itself would run, as nccl-tests measures; "
        "auto: also the custom peer-memory all-reduce kernels of serving engines "
        "(oneshot, twoshot); or one algorithm by name",
    )
    coll.add_argument(
        "--launcher",
        choices=tuple(calibration.default().collectives.launchers),
        default="mpi",
        help="how ranks are started: mpi (one process per GPU), threads "
        "(nccl-tests -g P), torch (torch.distributed)",
    )
    coll.add_argument("--sizes", type=parse_sizes, help="comma list: 8K,1M,1G")
    coll.add_argument("--min-bytes", type=parse_size, default=8)
    coll.add_argument("--max-bytes", type=parse_size, default=128 * 1024**2)
    coll.add_argument("--ideal", action="store_true")
    coll.add_argument("--json", action="store_true")

    ls = sub.add_parser("list", help="list catalog entries")
    ls.add_argument("what", choices=("models", "topologies", "gpus", "engines"))

    add_study_parsers(sub)
    add_compare_parser(sub, run)
    add_plan_parser(sub)
    _fill_help(p)
    return p


def _network_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nic-gbps",
        type=float,
        metavar="G",
        help="bandwidth of one NIC of the multi-host join, Gb/s per direction "
        "(default: the topology's network, else the NIC paired with its GPUs)",
    )
    p.add_argument(
        "--nics-per-node",
        type=int,
        metavar="K",
        help="NICs per host, shared by its GPUs in turn (default: the topology's, else one a GPU)",
    )


def run_topology(a: argparse.Namespace) -> Any:
    """The graph of ``--topology`` on ``--nodes`` hosts, joined over the network that
    ``--nic-gbps`` / ``--nics-per-node`` describe when given (else the topology's own)."""
    from tpsim.topologies.io import get_topology
    from tpsim.topologies.network import Network, check_nic_gbps, check_nics_per_node

    gbps = check_nic_gbps(a.nic_gbps)
    count = check_nics_per_node(a.nics_per_node)
    if gbps is None and count is None:
        return get_topology(a.topology, a.nodes)
    return get_topology(
        a.topology, a.nodes, Network(None if gbps is None else gbps * 1e9 / 8, count)
    )


def check_output(path: Path | None, flag: str, suffixes: tuple[str, ...]) -> None:
    if path is None:
        return
    if path.suffix.lower() not in suffixes:
        raise ConfigError(f"{flag}={path}: must end in {' or '.join(suffixes)}")
    if not path.parent.is_dir():
        raise ConfigError(f"{flag}={path}: folder {path.parent} does not exist")
    # room for the temporary name the atomic write uses beside it (".NAME.<12 hex>.tmp")
    if len(os.fsencode(path.name)) + 18 > _name_max(path.parent):
        raise ConfigError(f"{flag}={str(path)[:60]}...: file name too long")
    if path.is_dir():
        raise ConfigError(f"{flag}={path}: is a folder, not a file")
    if not os.access(path.parent, os.W_OK):
        raise ConfigError(f"{flag}={path}: folder {path.parent} is not writable")


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def run_inputs(a: argparse.Namespace) -> tuple[Layout, Workload, Options]:
    """The layout, workload and options of ``run``'s flags (also ``compare``'s, one
    configuration at a time); bad values are refused here with the field named."""
    ignored = "--prompt-len" if a.phase == "decode" else "--context-len"
    if (a.prompt_len if a.phase == "decode" else a.context_len) is not None:
        uses = "--context-len" if a.phase == "decode" else "--prompt-len"
        warn(f"{ignored} does not apply to {a.phase} (it uses {uses}); ignored")
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
        launch_skew_s=a.launch_skew_us * 1e-6,
        max_records=a.max_records,
        engine=a.engine,
    )
    check_nodes(a.nodes)
    placement = tuple(x.strip() for x in a.placement.split(",")) if a.placement else ()
    layout = Layout(a.tp, a.gpus_per_node, a.pp, a.dp, a.micro_batches, a.pp_layers, placement)
    return layout, workload, options


def _run(a: argparse.Namespace) -> int:
    from tpsim.core.api import simulate

    check_output(a.gantt, "--gantt", (".png", ".svg"))
    check_output(a.trace, "--trace", (".json",))
    layout, workload, options = run_inputs(a)
    if a.gantt_ranks and max(a.gantt_ranks) >= a.tp * a.pp * a.dp:
        last = a.tp * a.pp * a.dp - 1
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
    title = report.title(result.summary)
    if a.gantt and a.gantt_layers:
        lo, hi = a.gantt_layers
        last = result.summary["config"]["model"]["num_layers"]
        if lo > last or hi < -1:
            raise ConfigError(f"--gantt-layers={lo}-{hi}: the model has layers -1 to {last}")
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
            from tpsim.experiments.plots import gantt

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
        from tpsim.experiments.compare import assumptions

        print(report.summary_text(result.summary, assumptions(graph, result.summary)))
        for flag, path in (("gantt", a.gantt), ("trace", a.trace)):
            if path:
                print(f"  wrote {flag:<12}{path}")
    return 0


def _collective(a: argparse.Namespace) -> int:
    from tpsim.core.collective_sweep import collective_sweep

    check_nodes(a.nodes)
    if a.sizes:
        sizes = a.sizes
    else:
        if a.min_bytes > a.max_bytes:
            raise ConfigError(f"--min-bytes={a.min_bytes}: larger than --max-bytes={a.max_bytes}")
        sizes, n = [], a.min_bytes
        while n <= a.max_bytes:
            sizes.append(n)
            n *= 2
    graph = run_topology(a)
    rows = collective_sweep(
        graph,
        a.ranks,
        sizes,
        op=a.op,
        algo=a.algo,
        ideal=a.ideal,
        nodes=a.nodes,
        launcher=a.launcher,
    )
    if a.json:
        print(json.dumps({"results": rows}, indent=2, allow_nan=False))
    else:
        print(report.collective_table(rows, a.op, a.ranks, algo=a.algo, launcher=a.launcher))
    return 0


def _list(a: argparse.Namespace) -> int:
    print(report.catalog_text(a.what))
    return 0


COMMANDS = {
    "run": _run,
    "collective": _collective,
    "list": _list,
    **STUDY_COMMANDS,
    **COMPARE_COMMANDS,
    **PLAN_COMMANDS,
}


#: The longest error line printed (a message quoting a huge value is cut short).
MAX_MESSAGE = 290


def _error(text: str) -> None:
    lines = text.splitlines() or [""]
    print(f"tpsim: error: {shorten(lines[0], MAX_MESSAGE - 14)}", file=sys.stderr)


def _silence_stdout() -> None:
    """Point the stdout file descriptor at /dev/null, so that the interpreter's last flush
    of what could not be written fails no second time (with a traceback) at exit."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):  # no real stdout (captured in a test)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Bad input, an output that cannot be written (stdout included) and
    a file that cannot be read: one line, exit 2; Ctrl-C: one line, exit 130. A command that
    fails leaves none of its output files behind."""
    from tpsim.outputs.export import all_or_nothing

    try:
        with all_or_nothing():
            args: Any = _parser().parse_args(argv)
            rc = COMMANDS[args.command](args)
            sys.stdout.flush()  # a full disk or /dev/full shows here, not at exit
        return rc
    except INPUT_ERRORS as exc:
        _error(str(exc))
        return 2
    except KeyboardInterrupt:
        print("tpsim: interrupted; no output written", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `tpsim list models | head -1`: the reader has what it wanted
        _silence_stdout()
        return 0
    except OSError as exc:  # an output the commands' own checks could not foresee
        if exc.filename is None:
            _error(f"stdout: cannot write ({exc.strerror or exc})")
        else:
            _error(f"{exc.filename}: {exc.strerror or exc}")
        if exc.filename is None:
            _silence_stdout()
        return 2
    except MemoryError:
        _error("out of memory: the input is too large for this machine")
        return 2
    except Exception as exc:  # a study or demo whose points the sweep machinery lost
        from tpsim.experiments.sweep import EXIT_INCOMPLETE, SweepIncomplete

        if not isinstance(exc, SweepIncomplete):
            raise
        _error(f"incomplete: {exc}; run it again")
        return EXIT_INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
