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
from tpsim.cli.studies import STUDY_COMMANDS, add_study_parsers
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


def parse_layers(text: str) -> tuple[int, int]:
    a, sep, b = text.strip().partition("-") if not text.startswith("-") else (text, "", "")
    try:
        lo = int(a)
        hi = int(b) if sep else lo
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid layers {text!r} (e.g. 0-1 or 3)") from None
    if hi < lo:
        raise argparse.ArgumentTypeError(f"invalid layers {text!r}: empty range")
    return lo, hi


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tpsim", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="simulate one forward pass")
    run.add_argument("--model", required=True, help="catalog name or path to a config.json")
    run.add_argument("--topology", required=True, help="catalog name or topology file")
    run.add_argument("--nodes", type=int, default=1, help="hosts joined over the network")
    run.add_argument("--tp", type=int, required=True, help="tensor-parallel degree")
    run.add_argument(
        "--gpus-per-node",
        type=int,
        default=0,
        help="GPUs of the group on each host (default: fill each host first)",
    )
    run.add_argument("--batch", type=int, default=1)
    run.add_argument("--phase", choices=PHASES, default="decode")
    run.add_argument("--prompt-len", type=int, default=512, help="prefill tokens per sequence")
    run.add_argument("--context-len", type=int, default=1024, help="decode: keys attended")
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
    return p


def _check_output(path: Path | None, flag: str, suffixes: tuple[str, ...]) -> None:
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


def _run(a: argparse.Namespace) -> int:
    from tpsim.core.api import simulate

    _check_output(a.gantt, "--gantt", (".png", ".svg"))
    _check_output(a.trace, "--trace", (".json",))
    workload = Workload(a.batch, a.phase, a.prompt_len, a.context_len)
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
    if a.gantt_ranks and max(a.gantt_ranks) >= a.tp:
        raise ConfigError(f"--gantt-ranks={max(a.gantt_ranks)}: the group has ranks 0-{a.tp - 1}")
    layout = Layout(a.tp, a.gpus_per_node)
    result = simulate(
        a.model,
        a.topology,
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
                title=title,
                critical=result.critical_path,
                rank_labels=result.rank_labels,
            )
    except OSError as e:  # disk full, permissions changed meanwhile: bad input, no traceback
        for path in written:  # a failed run leaves no output behind
            path.unlink(missing_ok=True)
        flag, path = ("--gantt", a.gantt) if written or not a.trace else ("--trace", a.trace)
        raise ConfigError(f"{flag}={path}: cannot write ({e.strerror or e})") from None
    if a.json:
        print(json.dumps(result.summary, indent=2, allow_nan=False))
    else:
        print(report.summary_text(result.summary))
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
    rows = collective_sweep(
        a.topology,
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


COMMANDS = {"run": _run, "collective": _collective, "list": _list, **STUDY_COMMANDS}


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


if __name__ == "__main__":
    sys.exit(main())
