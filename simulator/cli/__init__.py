"""The ``tpsim`` command line: a thin layer over :mod:`tpsim.core.api`.

Exit codes: 0 success, 2 bad input (one line on stderr naming the value), 1 a bug.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from tpsim import calibration
from tpsim.calibration.bounded import shorten
from tpsim.cli import helptext, signals
from tpsim.cli.compare import COMPARE_COMMANDS, add_compare_parser
from tpsim.cli.paths import check_output
from tpsim.cli.plan import PLAN_COMMANDS, add_plan_parser
from tpsim.cli.run import (
    RUN_COMMANDS,
    add_run_parser,
    network_flags,
    run_inputs,
    run_topology,
    warn,
)
from tpsim.cli.serve import SERVE_COMMANDS, add_serve_parser
from tpsim.cli.studies import STUDY_COMMANDS, add_study_parsers
from tpsim.cli.types import parse_counts, parse_ranks, parse_size, parse_sizes
from tpsim.cli.validate import VALIDATE_COMMANDS, add_validate_parser
from tpsim.core.comm.collectives import ALGORITHMS, OPS
from tpsim.core.config import check_nodes
from tpsim.core.errors import INPUT_ERRORS, ConfigError
from tpsim.outputs import text as report

#: The public names of ``tpsim.cli``; some live in its modules (run, paths, types) and are
#: re-exported here, as they were defined here before.
__all__ = [
    "COMMANDS",
    "PURPOSE",
    "check_output",
    "main",
    "parse_counts",
    "parse_ranks",
    "parse_size",
    "parse_sizes",
    "run_inputs",
    "run_topology",
    "warn",
]

#: The one line ``tpsim --help`` opens with (no markup).
PURPOSE = (
    "tpsim: simulate a tensor-parallel transformer forward pass (GPUs, links, kernels, "
    "collectives, host overhead) and say where the time goes"
)


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


def _fill_help(parser: argparse.ArgumentParser) -> None:
    """Give every flag of every sub-command a help line (COMMON_HELP where it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _fill_help(sub)
        elif not action.help:
            action.help = helptext.base(action)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tpsim", description=PURPOSE)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = add_run_parser(sub)

    coll = sub.add_parser("collective", help="nccl-tests-like table of one collective")
    coll.add_argument("--topology", required=True)
    coll.add_argument("--nodes", type=int, default=1)
    network_flags(coll)
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
        "(nccl-tests -g P), torch (torch.distributed), torch-sync (torch.distributed with a "
        "synchronise after every call: host and kernel in series)",
    )
    coll.add_argument("--sizes", type=parse_sizes, help="comma list: 8K,1M,1G")
    coll.add_argument("--min-bytes", type=parse_size, help="the sweep's first size, doubled "
                      "up to --max-bytes (default: 8; not with --sizes)")  # fmt: skip
    coll.add_argument("--max-bytes", type=parse_size, help="the sweep's last size (default: "
                      "128M; not with --sizes)")  # fmt: skip
    coll.add_argument(
        "--engine",
        default="ideal",
        help="calibration to price with: ideal (default: the shipped data), an engine "
        "(its custom all-reduce under --algo auto), or a profile file .yaml, e.g. one "
        "setting your host's NCCL enqueue time (nccl.yaml host_enqueue)",
    )
    coll.add_argument("--ideal", action="store_true")
    coll.add_argument("--json", action="store_true")

    ls = sub.add_parser("list", help="list catalog entries")
    ls.add_argument("what", choices=("models", "topologies", "gpus", "engines"))
    ls.add_argument(
        "name",
        nargs="?",
        help="one entry, described in full (an engine profile: what it models, whole)",
    )

    add_study_parsers(sub)
    add_compare_parser(sub, run)
    add_plan_parser(sub)
    add_serve_parser(sub)
    add_validate_parser(sub)
    _fill_help(p)
    return p


def _collective(a: argparse.Namespace) -> int:
    from tpsim.core.collective_bench import collective_sweep

    check_nodes(a.nodes)
    if a.sizes:
        for flag in ("min_bytes", "max_bytes"):
            if getattr(a, flag) is not None:
                value = getattr(a, flag)
                raise ConfigError(f"--{flag.replace('_', '-')}={value}: give --sizes or a "
                                  "range (--min-bytes, --max-bytes), not both")  # fmt: skip
        sizes = a.sizes
    else:
        a.min_bytes = 8 if a.min_bytes is None else a.min_bytes
        a.max_bytes = 128 * 1024**2 if a.max_bytes is None else a.max_bytes
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
        nodes=a.nodes,
        launcher=a.launcher,
        calib=calibration.for_options(a.ideal, a.engine),
    )
    if a.json:
        print(json.dumps({"results": rows}, indent=2, allow_nan=False))
    else:
        print(report.collective_table(rows, a.op, a.ranks, algo=a.algo, launcher=a.launcher))
    return 0


def _list(a: argparse.Namespace) -> int:
    print(report.catalog_text(a.what) if a.name is None else report.entry_text(a.what, a.name))
    return 0


COMMANDS = {
    **RUN_COMMANDS,
    "collective": _collective,
    "list": _list,
    **STUDY_COMMANDS,
    **COMPARE_COMMANDS,
    **PLAN_COMMANDS,
    **VALIDATE_COMMANDS,
    **SERVE_COMMANDS,
}


#: The longest error line printed (a message quoting a huge value is cut short).
MAX_MESSAGE = 290


def _error(text: str) -> None:
    """One line: control characters escaped (a path holding a newline shows as ``\\n``,
    whole, not cut there), at most :data:`MAX_MESSAGE` characters."""
    print(f"tpsim: error: {shorten(text.strip(), MAX_MESSAGE - 14)}", file=sys.stderr)


def _silence_stdout() -> None:
    """Point the stdout file descriptor at /dev/null, so that the interpreter's last flush
    of what could not be written fails no second time (with a traceback) at exit."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):  # no real stdout (captured in a test)
        pass


class _ReaderMayLeave:
    """``sys.stdout`` while a command runs: a reader that stops early (``| head -3``) ends
    the text, not the command, whose output files (``--gantt``, ``--out``, ``--plots``) are
    still written whole; what it prints after the reader left goes nowhere."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.left = False

    def write(self, text: str) -> int:
        if not self.left:
            try:
                return int(self.inner.write(text))
            except BrokenPipeError:
                self._leave()
        return len(text)

    def flush(self) -> None:
        if not self.left:
            try:
                self.inner.flush()
            except BrokenPipeError:
                self._leave()

    def _leave(self) -> None:
        self.left = True
        _silence_stdout()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, ...: the stream's
        return getattr(self.inner, name)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Bad input, an output that cannot be written (stdout included) and
    a file that cannot be read: one line, exit 2; Ctrl-C: one line, exit 130 (SIGTERM 143,
    SIGHUP 129, handled as Ctrl-C). A command that
    fails leaves none of its output files behind; a reader of stdout that stops early ends
    the text only (:class:`_ReaderMayLeave`)."""
    from tpsim.outputs.export import all_or_nothing

    stdout = sys.stdout = _ReaderMayLeave(sys.stdout)
    try:
        with signals.as_interrupts(), all_or_nothing():
            args: Any = _parser().parse_args(argv)
            rc = COMMANDS[args.command](args)
            sys.stdout.flush()  # a full disk or /dev/full shows here, not at exit
        return rc
    except INPUT_ERRORS as exc:
        _error(str(exc))
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (signals.Terminated)
        signals.ignore_more()  # a second Ctrl-C as the process exits does not kill it by SIGINT
        print(f"tpsim: {signals.described(exc)}; no output written", file=sys.stderr)
        return signals.exit_code(exc)
    except BrokenPipeError:  # a write that went around sys.stdout, to a reader that left
        _silence_stdout()
        return 0
    except OSError as exc:  # an output the commands' own checks could not foresee
        if exc.filename is None:
            _error(f"stdout: cannot write ({exc.strerror or exc})")
        else:
            _error(f"{exc.filename}: cannot write ({exc.strerror or exc})")
        if exc.filename is None:
            _silence_stdout()
        return 2
    except MemoryError:  # not the input's fault as such: a tiny one can meet a full machine
        _error("out of memory: this machine has too little free memory for this command")
        return 2
    except Exception as exc:  # a study or demo whose points the sweep machinery lost
        from tpsim.experiments.sweep.run import EXIT_INCOMPLETE, SweepIncomplete

        if not isinstance(exc, SweepIncomplete):
            raise
        _error(f"incomplete: {exc}; run it again")
        return EXIT_INCOMPLETE
    finally:
        sys.stdout = stdout.inner


if __name__ == "__main__":
    sys.exit(main())
