"""``tpsim compare``: ``run``'s flags with comma lists on the axes that differ, zipped into
configurations (``--tp 8,16 --nodes 1,2`` is TP 8 on one node against TP 16 on two).

Thin: the flags are ``run``'s own (read from its parser, so the two never drift apart);
each configuration is parsed by ``run``'s parser, simulated, and handed to
:mod:`tpsim.experiments.compare` for the table and the verdict.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tpsim.calibration.bounded import shorten
from tpsim.cli import helptext
from tpsim.cli.types import check_gantt_layers, parse_gantt_layers
from tpsim.core.errors import ConfigError

#: run's flags whose one value is itself a comma list: configurations are separated by
#: ";" on these (``--pp-layers "40,40;30,50"``).
LIST_VALUED = ("pp_layers", "placement")

#: run's flags that do not apply to a comparison (outputs of one run).
NOT_COMPARED = ("help", "gantt", "gantt_ranks", "gantt_layers", "trace", "json")

#: How a differing flag reads in a configuration's label.
LABELS = {
    "tp": lambda v: f"TP {v}",
    "pp": lambda v: f"PP {v}",
    "dp": lambda v: f"DP {v}",
    "ep": lambda v: f"EP {v}",
    "attention_dp": lambda v: f"attention-DP {v}",
    "nodes": lambda v: f"{v} node" + ("" if v == "1" else "s"),
    "batch": lambda v: f"batch {v}",
    "engine": lambda v: f"engine {v}",
    "launch": lambda v: f"{v} launch",
}


#: Differing flags in a label, in this order (then run's order).
LABEL_ORDER = ("model", "topology", "tp", "pp", "dp", "nodes", "gpus_per_node", "batch", "phase")


def _is_flag(action: argparse.Action) -> bool:
    """A flag that takes no value (``--ideal``, ``--fused/--no-fused``): one for all."""
    return action.nargs == 0


def _add_run_lists(
    p: argparse.ArgumentParser, run: argparse.ArgumentParser, required: bool
) -> None:
    """``run``'s flags on ``p``, each taking a comma list (flags without a value as they are)."""
    for action in run._actions:
        if action.dest in NOT_COMPARED:
            continue
        if _is_flag(action):
            p._add_action(action)
            continue
        p.add_argument(
            *action.option_strings,
            dest=action.dest,
            required=action.required and required,
            metavar="V[,V...]",
            help=helptext.described(action)
            + (
                " (';' between configurations, or one for all)"
                if action.dest in LIST_VALUED
                else " (comma list: one value per configuration, or one for all)"
            ),
        )
    p.set_defaults(_run_parser=run)


def _add_load(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--load",
        type=int,
        metavar="N",
        help="compare at equal load: N sequences per step in every configuration, split over "
        "its replicas (each gets N / DP; instead of --batch, which is per replica)",
    )


def add_compare_parser(sub: Any, run: argparse.ArgumentParser) -> None:
    """The ``compare`` and ``report`` sub-commands, their flags copied from ``run``'s."""
    cmp = sub.add_parser(
        "compare",
        help="two or more configurations side by side, with the verdict in words",
        description="Simulate configurations that differ on one or more of run's flags "
        "(comma lists, zipped: --tp 8,16 --nodes 1,2 compares TP 8 on 1 node with TP 16 on "
        "2) and print them side by side with ratios, the assumptions and one sentence "
        "saying which wins, by how much and why.",
    )
    _add_run_lists(cmp, run, required=False)
    _add_load(cmp)
    cmp.add_argument(
        "--results",
        type=Path,
        help="compare rows of a sweep results file instead of simulating (with --rows)",
    )
    cmp.add_argument("--rows", help="point_ids of --results to compare: ID,ID[,ID...]")
    cmp.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmp.add_argument(
        "--gantt",
        type=Path,
        help="also draw the configurations' timelines one above the other on one time axis "
        "(.png or .svg): GPU 0 of each, with the GPUs its critical path runs longest on (a "
        "GPU of each pipeline stage)",
    )
    cmp.add_argument(
        "--gantt-layers",
        type=parse_gantt_layers,
        help="layers to zoom on, e.g. 0-1 or 3 (-1: embedding), or 'all' for the whole step "
        "(default: the whole step with the layers between the first and the last collapsed)",
    )

    rep = sub.add_parser(
        "report",
        help="a self-contained HTML report for a design review",
        description="Write one HTML file (no network needed to open it): the question and "
        "assumptions, the verdict, the side-by-side table, the critical-path breakdown, an "
        "interactive Gantt per configuration and, given a sweep results file, its charts. "
        "Configurations as in compare (one, or comma lists).",
    )
    rep.add_argument("results", nargs="?", type=Path, help="a sweep results file (.csv or .jsonl)")
    _add_run_lists(rep, run, required=False)
    _add_load(rep)
    rep.add_argument("--serve", help="serving runs instead: the per-request files of "
                     "tpsim serve --out (.jsonl), comma-separated to compare them")  # fmt: skip
    rep.add_argument("--out", type=Path, required=True, help="the HTML file to write")


def configurations(a: argparse.Namespace, minimum: int = 2) -> list[tuple[str, argparse.Namespace]]:
    """Each configuration's label and its ``run`` namespace (parsed by ``run``'s parser)."""
    run: argparse.ArgumentParser = a._run_parser
    lists: dict[str, tuple[str, list[str]]] = {}
    flags: list[str] = []
    for action in run._actions:
        if action.dest in NOT_COMPARED:
            continue
        value = getattr(a, action.dest, None)
        flag = action.option_strings[0]
        if _is_flag(action):
            if value != action.default:
                flags.append(next(s for s in action.option_strings if value or "no-" in s))
            continue
        if value is None:
            continue
        sep = ";" if action.dest in LIST_VALUED else ","
        items = [v.strip() for v in str(value).split(sep)]
        if not all(items):
            raise ConfigError(f"{flag}={value!r}: an empty value in the list")
        lists[action.dest] = (flag, items)
    longest = max(lists.values(), key=lambda fi: len(fi[1]), default=("", [""]))
    n = len(longest[1])
    for flag, items in lists.values():
        if len(items) not in (1, n):
            raise ConfigError(
                f"{flag}={','.join(items)}: {len(items)} values, but {longest[0]} has {n} "
                "(give one value for all, or one per configuration)"
            )
    if n < minimum:
        raise ConfigError(
            "compare: give two or more values on at least one flag (e.g. --tp 8,16 --nodes 1,2)"
        )
    differing = sorted(
        (dest for dest, (_, items) in lists.items() if len(items) > 1),
        key=lambda d: LABEL_ORDER.index(d) if d in LABEL_ORDER else len(LABEL_ORDER),
    )
    load = getattr(a, "load", None)
    if load is not None:
        if "batch" in lists:
            raise ConfigError("--load: give the load or --batch (per replica), not both")
        if not 1 <= load <= 10**6:
            raise ConfigError(f"--load={load}: must be between 1 and 1000000 sequences")
    out = []
    for i in range(n):
        argv = list(flags)
        for flag, items in lists.values():
            argv += [flag, items[i] if len(items) > 1 else items[0]]
        try:
            ns = run.parse_args(argv)
        except ConfigError as exc:  # run's parser names itself: the command was compare
            raise ConfigError(str(exc).replace(f"{run.prog}:", "tpsim compare:", 1)) from None
        if load is not None:  # the same sequences per step everywhere, split over replicas
            groups = ns.dp * ns.attention_dp  # replicas and attention data-parallel groups
            if load % groups:
                what = (
                    "replicas (--dp)" if ns.attention_dp == 1 else "batches (--dp x --attention-dp)"
                )
                raise ConfigError(
                    f"--load={load}: configuration {i + 1} has {groups} {what}, which "
                    f"do not split {load} sequences evenly; give a multiple of {groups}"
                )
            ns.batch = load // groups
        label = (
            ", ".join(
                LABELS.get(dest, lambda v, d=dest: f"{d.replace('_', '-')} {v}")(lists[dest][1][i])
                for dest in differing
            )
            or f"TP {ns.tp}"
        )
        out.append((label, ns))
    if len({label for label, _ in out}) < n:
        raise ConfigError("compare: two configurations are the same")
    return out


def _simulate(a: argparse.Namespace, minimum: int) -> list[Any]:
    """Simulate each configuration: (entry, result) pairs."""
    from tpsim.cli.run import run_inputs, run_topology
    from tpsim.core.api import simulate
    from tpsim.experiments.compare import Entry

    out = []
    entries = configurations(a, minimum)
    joined = any(ns.nodes > 1 for _, ns in entries)  # the network flags apply to those
    for label, ns in entries:
        layout, workload, options = run_inputs(ns)
        graph = run_topology(ns, warn_unused=not joined)
        result = simulate(ns.model, graph, layout, workload, options, nodes=ns.nodes)
        out.append((Entry.of(label, graph, result.summary), result))
    return out


def _missing_required(a: argparse.Namespace) -> list[str]:
    """``run``'s required flags the command line left out (read from run's parser)."""
    return [
        x.option_strings[0]
        for x in a._run_parser._actions
        if x.required and getattr(a, x.dest, None) is None
    ]


def _run_flags_given(a: argparse.Namespace) -> list[str]:
    """``run``'s flags given on the command line (as written: ``--model``, ``--ideal``)."""
    given = []
    for action in a._run_parser._actions:
        if action.dest in NOT_COMPARED or not action.option_strings:
            continue
        value = getattr(a, action.dest, None)
        if value is not None and (not _is_flag(action) or value != action.default):
            given.append(action.option_strings[0])
    return given


def _entries_from_rows(a: argparse.Namespace) -> list[Any]:
    """Comparison entries from rows of a sweep results file (``--results F --rows ID,ID``)."""
    from tpsim.experiments.compare import Entry
    from tpsim.experiments.compare_rows import summary_from_row
    from tpsim.experiments.plots.words import layout_label
    from tpsim.experiments.sweep.reading import stream_rows
    from tpsim.topologies.io import get_topology

    if a.results is None or not a.rows:
        raise ConfigError(
            "compare: --results and --rows go together (--results s.csv --rows ID,ID)"
        )
    simulated = _run_flags_given(a)
    if simulated:
        raise ConfigError(
            f"compare: {simulated[0]} simulates, --results compares rows of a file; "
            "give one or the other"
        )
    ids = [i.strip() for i in a.rows.split(",") if i.strip()]
    if len(ids) < 2 or len(set(ids)) < len(ids):
        raise ConfigError(f"--rows={shorten(a.rows)}: give two or more different point_ids")
    by_id: dict[str, dict[str, Any]] = {}
    lines: dict[str, int] = {}
    wanted = set(ids)
    for number, row in stream_rows(a.results):  # only the rows named are kept
        i = row["point_id"]
        if i not in wanted:
            continue
        if i in by_id:
            raise ConfigError(
                f"--results={shorten(str(a.results))}: point_id={shorten(i, 40)!r} is on lines "
                f"{lines[i]} and {number}; which one to compare is ambiguous"
            )
        by_id[i], lines[i] = row, number
    entries = []
    for i in ids:
        if i not in by_id:
            raise ConfigError(
                f"--rows: point_id={shorten(i, 40)!r} is not in {shorten(str(a.results))}"
            )
        try:
            summary = summary_from_row(by_id[i])
        except ValueError as e:
            raise ConfigError(f"--rows: {e}") from None
        graph = get_topology(str(by_id[i]["topology"]), int(by_id[i]["nodes"]))
        r = by_id[i]
        nodes = f"{r['nodes']} node{'s' if r['nodes'] > 1 else ''}"
        label = f"{i[:8]}: {layout_label(r)}, {nodes}, batch {r['batch']}"
        entries.append(Entry.of(label, graph, summary))
    return entries


def _compare(a: argparse.Namespace) -> int:
    from tpsim.cli.paths import check_output
    from tpsim.cli.run import warn_gantt_unused
    from tpsim.experiments.compare import (
        common_title,
        comparison,
        gantt_title,
        load_note,
        table,
        verdict,
    )

    check_output(a.gantt, "--gantt", (".png", ".svg"), a)
    if a.results is not None or a.rows is not None:
        entries = _entries_from_rows(a)
        ran = []
    else:
        missing = _missing_required(a)
        if missing:
            raise ConfigError(
                f"compare: needs {', '.join(missing)} (or --results FILE --rows ID,ID)"
            )
        ran = _simulate(a, 2)
        entries = [entry for entry, _ in ran]
    if a.gantt and not ran:
        raise ConfigError("--gantt: needs simulated configurations, not --results rows")
    warn_gantt_unused(a)
    if a.gantt:
        from tpsim.experiments.plots.gantt import gantt_compare

        for _, r in ran:
            check_gantt_layers(a.gantt_layers, r.typed.config.model.num_layers)

        gantt_compare(
            [(e.label, r.records, r.critical_path) for e, r in ran],
            a.gantt,
            title=gantt_title(entries),
            layers=a.gantt_layers,
        )
    if a.json:
        print(json.dumps(comparison(entries), indent=2, allow_nan=False))
        return 0
    print(f"# compare: {common_title(entries)}")
    print(table(entries))
    print()
    note = load_note(entries)
    if note:
        print(note)
    print(verdict(entries))
    if a.gantt:
        print(f"wrote {a.gantt}")
    return 0


def command_line(a: argparse.Namespace) -> str:
    """The ``tpsim report`` command that gives these arguments, flags in run's order (the
    report says how it was made; the same arguments give the same line)."""
    import shlex

    argv = ["tpsim", "report"]
    if a.results is not None:
        argv.append(str(a.results))
    for action in a._run_parser._actions:
        if action.dest in NOT_COMPARED:
            continue
        value = getattr(a, action.dest, None)
        if _is_flag(action):
            if value != action.default:
                argv.append(next(s for s in action.option_strings if value or "no-" in s))
        elif value is not None:
            argv += [action.option_strings[0], str(value)]
    argv += ["--out", str(a.out)]
    return shlex.join(argv)


def tpsim_version() -> str:
    """The installed tpsim's version (``importlib.metadata``), or "unknown"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tpsim")
    except PackageNotFoundError:
        return "unknown"


def _report(a: argparse.Namespace) -> int:
    from tpsim.cli.paths import check_output
    from tpsim.experiments.report import Run, html_report
    from tpsim.experiments.sweep.reading import read_rows
    from tpsim.outputs import text as report
    from tpsim.outputs.export import write_text

    check_output(a.out, "--out", (".html", ".htm"), a)
    if a.serve is not None:
        return _report_serve(a)
    if a.results is None and a.model is None:
        raise ConfigError("report: give a results file, or run's flags (--model, --topology, --tp)")
    rows = read_rows(a.results) if a.results is not None else []
    if a.results is not None and not rows:
        raise ConfigError(f"report: the results file {a.results} has no rows")  # as plot says
    runs = []
    if a.model is not None:
        for entry, result in _simulate(a, 1):
            runs.append(
                Run(entry, result.records, frozenset(result.critical_path), result.rank_labels)
            )
    if runs:
        question = report.title(runs[0].entry.summary)
        if len(runs) > 1:
            question = "Which is better: " + " or ".join(r.entry.label for r in runs) + "?"
    else:
        question = f"Sweep {a.results.name}: {len(rows):,} points"
    write_text(
        a.out,
        html_report(
            runs,
            question=question,
            sweep_rows=rows,
            command=command_line(a),
            version=tpsim_version(),
        ),
    )
    print(f"wrote {a.out}")
    return 0


def _report_serve(a: argparse.Namespace) -> int:
    """``tpsim report --serve A.jsonl[,B.jsonl]``: serving runs on one page."""
    import shlex

    from tpsim.experiments.plots.serve_html import serve_report
    from tpsim.experiments.serve.requests_file import read_requests
    from tpsim.outputs.export import write_text

    if a.results is not None or a.model is not None:
        what = str(a.results) if a.results is not None else f"--model={a.model}"
        raise ConfigError(f"--serve={a.serve}: serving runs are reported alone ({what} given)")
    files = [f.strip() for f in str(a.serve).split(",")]
    if not all(files):
        raise ConfigError(f"--serve={a.serve!r}: an empty file name in the list")
    if len(files) > 8:
        raise ConfigError(f"--serve={a.serve}: {len(files)} runs, at most 8")
    runs = [(Path(f).stem, read_requests(f)) for f in files]
    command = shlex.join(["tpsim", "report", "--serve", str(a.serve), "--out", str(a.out)])
    write_text(a.out, serve_report(runs, command=command, version=tpsim_version()))
    print(f"wrote {a.out}")
    return 0


COMPARE_COMMANDS = {"compare": _compare, "report": _report}
