"""The study sub-commands of ``tpsim``: demo, sweep, plot, check-claim, study, bench,
calibrate.

Thin: each parses its flags and calls experiments/, which imports matplotlib only there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tpsim.calibration.bounded import shorten
from tpsim.cli import paths, signals
from tpsim.cli.types import number, tokens
from tpsim.core.config import COMPUTE_DTYPES, KV_DTYPES, PHASES, Layout, Workload, check_nodes
from tpsim.core.errors import ConfigError
from tpsim.core.run_options import RUN_OPTIONS, RunOption, sweepable

#: The named studies, in the registry's order (tpsim.experiments.studies.STUDIES, discovered
#: from its modules; kept here so that --help imports nothing heavy, and checked against it by
#: tests/experiments/test_studies.py).
STUDY_NAMES = (
    "worked_examples",
    "tp_batch_sweep",
    "in_node_vs_cross_node",
    "launch_overhead",
    "engines",
    "tp_vs_pp_vs_dp",
    "moe_tp_vs_ep",
    "serving_capacity",
    "moe_serving",
)


def _axis_help(option: RunOption) -> str:
    """A sweep axis: what the option means (as run says it), its default, and that it takes
    a comma-separated list."""
    text = option.help_text or option.name.replace("_", " ")
    if option.kind in ("switch", "negatable"):
        return f"{text}; alone: true; or a list: false,true"
    if option.default not in (None, (), "") and "default" not in text:
        text += f" (default: {option.default})"
    return text + "; a comma-separated list"


def add_axis_flags(p: argparse.ArgumentParser, table: Iterable[RunOption] = RUN_OPTIONS) -> None:
    """The sweep's grid flags: one per sweepable run option, each a comma-separated list
    (a flag alone, as ``--ideal``, means true)."""
    for option in sweepable(table):
        if option.kind in ("switch", "negatable"):
            p.add_argument(option.flag, nargs="?", const="true", help=_axis_help(option))
        else:
            p.add_argument(option.flag, help=_axis_help(option))


def add_study_parsers(sub: Any) -> None:
    """Sub-commands of experiments/: demo, sweep, plot, check-claim, study, bench,
    calibrate."""
    demo = sub.add_parser("demo", help="run the headline study and write its plots")
    demo.add_argument("--out", type=Path, default=Path("tpsim-demo"))

    sw = sub.add_parser("sweep", help="simulate a grid of points, one row each, to CSV/JSONL")
    sw.add_argument("--grid", type=Path, help="YAML grid file (instead of the grid flags)")
    add_axis_flags(sw)
    sw.add_argument("--out", type=Path, required=True, help="results file (.csv or .jsonl)")
    sw.add_argument("--resume", action="store_true", help="skip the points already in --out")
    sw.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    sw.add_argument("--jobs", type=int, help="worker processes (default: CPUs, at most 8)")
    sw.add_argument("--scheduler", help="run on a Dask cluster: tcp://HOST:PORT")
    sw.add_argument(
        "--wait-workers",
        type=number(0, 86400),
        default=30.0,
        metavar="SECONDS",
        help="Dask: stop when the cluster has had no workers this long (default 30)",
    )
    sw.add_argument("--plots", type=Path, help="also write the plots to this folder")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")

    pl = sub.add_parser("plot", help="plots of a sweep results file")
    pl.add_argument("results", type=Path, help="results file of tpsim sweep (.csv or .jsonl)")
    pl.add_argument("--out", type=Path, default=Path("tpsim-plots"), help="folder for the PNGs")
    pl.add_argument("--gantt", help="point_ids to draw Gantt charts of (default: the fastest)")

    cc = sub.add_parser("check-claim", help="is a claimed tokens/s possible? (a lower bound)")
    cc.add_argument("--model", required=True)
    cc.add_argument("--topology", required=True)
    cc.add_argument("--nodes", type=int, default=1)
    cc.add_argument("--tp", type=int, required=True)
    cc.add_argument("--gpus-per-node", type=int, default=0)
    cc.add_argument("--batch", type=int, default=1)
    cc.add_argument("--phase", choices=PHASES, default="decode")
    cc.add_argument("--prompt-len", type=tokens("--prompt-len"),
                    help=f"prefill: tokens per sequence (default: "
                    f"{Workload.prompt_len})")  # fmt: skip
    cc.add_argument("--context-len", type=tokens("--context-len"),
                    help=f"decode: keys each new token attends to (default: "
                    f"{Workload.context_len})")  # fmt: skip
    cc.add_argument("--dtype", choices=COMPUTE_DTYPES)
    cc.add_argument("--kv-dtype", choices=KV_DTYPES,
                    help="KV cache (default: the smallest any engine keeps, so the bound "
                    "holds for all: fp8 with --dtype fp8, and with fp4 where the GPU has fp8 "
                    "tensor cores; else 16-bit)")  # fmt: skip
    cc.add_argument(
        "--tokens-per-s", type=number(0, 1e12), required=True, help="the claimed throughput"
    )
    cc.add_argument("--json", action="store_true")

    st = sub.add_parser("study", help="run a named study of experiments/")
    st.add_argument("name", choices=STUDY_NAMES)
    st.add_argument("--out", type=Path, help="folder for its rows (CSV) and plots")
    st.add_argument("--jobs", type=int, help="worker processes (default: CPUs, at most 8)")
    st.add_argument("--json", action="store_true", help="print the summary as JSON")

    be = sub.add_parser("bench", help="how fast tpsim simulates, against bare SimPy")
    be.add_argument("--out", type=Path, default=Path("tpsim-bench"))
    be.add_argument("--quick", action="store_true", help="skip the scaling runs")

    ca = sub.add_parser("calibrate", help="fit an engine profile to measured step times")
    ca.add_argument(
        "measurements",
        type=Path,
        help="CSV: model,topology,nodes,tp,batch,phase,prompt_len,context_len,dtype,measured_ms",
    )
    ca.add_argument("--engine", required=True, help="the profile to fit: a name or a .yaml")
    ca.add_argument("--out", type=Path, required=True, help="the fitted profile to write (.yaml)")
    ca.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --out that no earlier fit wrote (a hand-written profile)",
    )
    ca.add_argument("--jobs", type=int, help="worker processes (default: CPUs, at most 8)")
    ca.add_argument("--json", action="store_true", help="print the report as JSON")
    ca.add_argument(
        "--predict",
        type=Path,
        help="CSV of points the fit does not see (same columns): predicted with the fitted "
        "profile, each naming the parameters it rests on that the fit left undetermined",
    )
    ca.add_argument(
        "--hidden-host",
        choices=("base", "most"),
        default="base",
        help="a host time per step or per layer the points cannot determine (hidden under "
        "the GPU's): kept at the base profile's estimate (base), or taken at the most the "
        "points allow (most: predictions that rest on it are upper bounds)",
    )


def check_folder(path: Path, flag: str) -> None:
    """An output folder: it exists and is writable, or its parent does and is."""
    shown = shorten(str(path), 120)
    try:
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{flag}={shown}: is a file, not a folder")
        where = path if path.is_dir() else path.parent
        if not where.is_dir():
            raise ConfigError(f"{flag}={shown}: folder {shorten(str(where), 80)} does not exist")
    except OSError as e:  # a name too long for the file system
        raise ConfigError(f"{flag}={shown}: {e.strerror or e}") from None
    if not os.access(where, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag}={shown}: folder {shorten(str(where), 80)} is not writable")


def _demo(a: argparse.Namespace) -> int:
    from tpsim.experiments.demo import run_demo

    check_folder(a.out, "--out")
    for line in run_demo(a.out):
        print(line)
    return 0


def _sweep(a: argparse.Namespace) -> int:
    from tpsim.experiments.sweep.grid import AXES, describe, grid_from_flags, grid_from_yaml
    from tpsim.experiments.sweep.reading import check_resumable, read_rows
    from tpsim.experiments.sweep.results import check_output
    from tpsim.experiments.sweep.run import EXIT_INCOMPLETE, quiet_dask, run_sweep

    flags = {key: getattr(a, key) for key in AXES}
    if a.grid:
        given = [k for k, v in flags.items() if v is not None]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise ConfigError(f"{flag}: give the grid in --grid={a.grid} or as flags, not both")
        points = grid_from_yaml(a.grid)
    else:
        points = grid_from_flags(flags)
    paths.check_not_an_input(a.out, "--out", a)
    check_output(a.out, resume=a.resume, overwrite=a.overwrite)
    if a.resume and a.out.exists():  # a damaged or older file: refused before the banner
        check_resumable(a.out)
        read_rows(a.out)
    if a.plots:
        check_folder(a.plots, "--plots")
    if a.jobs is not None and not 1 <= a.jobs <= 1024:  # refused before the banner
        raise ConfigError(f"--jobs={a.jobs}: must be between 1 and 1024")
    if not 0 < a.wait_workers <= 86_400:
        raise ConfigError(f"--wait-workers={a.wait_workers:g}: must be in (0, 86400] seconds")
    print(f"tpsim sweep: {describe(points)} -> {a.out}", file=sys.stderr)
    if a.scheduler:  # a lost scheduler or worker is reported here, in one line, not logged
        quiet_dask()
    try:
        done = run_sweep(
            points,
            a.out,
            jobs=a.jobs,
            scheduler=a.scheduler,
            resume=a.resume,
            overwrite=a.overwrite,
            progress=not a.quiet,
            wait_workers_s=a.wait_workers,
        )
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM or SIGHUP
        print(
            f"tpsim: sweep {signals.described(exc)}; the rows so far are in {a.out}; "
            "rerun with --resume to finish",
            file=sys.stderr,
        )
        return signals.exit_code(exc)
    print(
        f"{done.ran} points simulated ({done.skipped} already in the file), {done.errors} "
        f"errors, {done.not_fitting} not fitting in memory: {done.path}"
    )
    _words(done.path)
    if done.remaining:
        print(
            f"tpsim: sweep incomplete: {done.remaining} points not done ({done.why}); "
            f"rerun with --resume to run them",
            file=sys.stderr,
        )
        return EXIT_INCOMPLETE
    if a.plots:
        _plot_files(done.path, a.plots, None)
    return 0


def _words(results: Path) -> None:
    """The assumptions of a sweep's configurations, its regimes with their shares and, with
    pipelines, the points that give the most tokens/s with them kept full."""
    from tpsim.experiments.plots.words import assumption_lines, best_summary, regime_summary
    from tpsim.experiments.sweep.reading import read_rows

    rows = read_rows(results)
    for line in assumption_lines(rows):
        print(line)
    for summary in (regime_summary(rows), best_summary(rows)):
        if summary:
            print(summary)


def _plot_files(results: Path, out: Path, gantt: str | None) -> None:
    from tpsim.experiments.plots.figures import plot_results
    from tpsim.experiments.sweep.reading import read_rows

    ids = [x.strip() for x in gantt.split(",") if x.strip()] if gantt is not None else None
    for path in plot_results(read_rows(results), out, gantt_ids=ids):
        print(f"wrote {path}")


def _plot(a: argparse.Namespace) -> int:
    check_folder(a.out, "--out")
    _plot_files(a.results, a.out, a.gantt)
    return 0


def _check_claim(a: argparse.Namespace) -> int:
    from tpsim.cli.run import warn_unused_length
    from tpsim.experiments.claim import check_claim, lower_bound, verdict_text

    check_nodes(a.nodes)
    warn_unused_length(a)
    prompt = Workload.prompt_len if a.prompt_len is None else a.prompt_len
    context = Workload.context_len if a.context_len is None else a.context_len
    workload = Workload(a.batch, a.phase, prompt, context)
    bound = lower_bound(
        a.model,
        a.topology,
        Layout(a.tp, a.gpus_per_node),
        workload,
        dtype=a.dtype,
        kv_dtype=a.kv_dtype,
        nodes=a.nodes,
    )
    verdict = check_claim(a.tokens_per_s, bound)  # refuses inf, NaN and denormals
    if a.json:
        print(json.dumps(verdict.to_dict(), indent=2, allow_nan=False))
    else:
        print(verdict_text(verdict))
    return 0


def _study(a: argparse.Namespace) -> int:
    from tpsim.experiments.studies import STUDIES
    from tpsim.experiments.sweep.run import default_jobs

    if a.jobs is not None and not 1 <= a.jobs <= 1024:
        raise ConfigError(f"--jobs={a.jobs}: must be between 1 and 1024")
    if a.out:
        check_folder(a.out, "--out")
    study = STUDIES[a.name].run(a.out, jobs=a.jobs or default_jobs())
    if a.json:
        plots = [str(p) for p in study.plots]
        print(
            json.dumps(
                {"study": study.name, "summary": study.summary, "plots": plots},
                indent=2,
                allow_nan=False,
            )
        )
    else:
        from tpsim.experiments.plots.words import assumption_lines

        print("\n".join(study.lines))
        for line in assumption_lines(study.rows):
            print(line)
        for path in study.plots:
            print(f"wrote {path}")
    return 0


def _bench(a: argparse.Namespace) -> int:
    from tpsim.experiments.bench import run

    check_folder(a.out, "--out")
    for line in run(a.out, a.quick):
        print(line, flush=True)
    return 0


def _calibrate(a: argparse.Namespace) -> int:
    from tpsim.experiments.calibrate.fit import calibrate
    from tpsim.experiments.calibrate.report import report_dict, report_text
    from tpsim.experiments.sweep.run import default_jobs
    from tpsim.outputs.export import write_text

    out: Path = a.out
    if a.jobs is not None and not 1 <= a.jobs <= 64:
        raise ConfigError(f"--jobs={a.jobs}: must be between 1 and 64")
    paths.check_output(out, "--out", (".yaml", ".yml"), a)  # an engine profile
    # nor any model or topology file the measurements name
    from tpsim.experiments.calibrate.checks import check_physical
    from tpsim.experiments.calibrate.measurements import read_points
    from tpsim.experiments.calibrate.simulate import fits

    held = read_points(a.predict) if a.predict is not None else []  # refused before the fit
    # as the fit's own: of the points that can run as stated (the others are priced, said)
    check_physical([p for p in held if fits(p, a.engine)], str(a.predict))
    named = {(p.model, p.topology) for p in [*read_points(Path(a.measurements)), *held]}
    paths.check_not_an_input(
        out,
        "--out",
        argparse.Namespace(model=[m for m, _ in named], topology=[t for _, t in named]),
    )
    _check_profile_out(out, a.engine, a.overwrite)
    result = calibrate(
        a.measurements, a.engine, out.stem, a.jobs or default_jobs(), out.parent, a.hidden_host
    )
    preds = _predictions(result, out, held, str(a.predict)) if held else []
    try:
        write_text(out, result.profile)
    except OSError as e:
        raise ConfigError(f"--out={out}: cannot write ({e.strerror or e})") from None
    if a.json:
        doc = report_dict(result, out)
        if a.predict is not None:
            from tpsim.experiments.calibrate.predict import predict_warnings, predicted_dict

            doc["predicted"] = predicted_dict(preds)
            doc["predict_warnings"] = predict_warnings(preds, a.predict)
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        print(report_text(result, out))
        if a.predict is not None:
            from tpsim.experiments.calibrate.predict import predict_warnings, predicted_text

            print(predicted_text(preds, str(a.predict), predict_warnings(preds, a.predict)))
    return 0


def _check_profile_out(out: Path, engine: str, overwrite: bool) -> None:
    """Refuse an ``--out`` that is a profile the base extends (written, the chain would
    extend itself), or an existing file that no earlier fit wrote unless ``--overwrite`` (a
    hand-written profile); a fit's own output is replaced, as a fit is re-run."""
    from tpsim.calibration.profiles import chain_files, is_profile_file

    if not out.exists():
        return
    chain = chain_files(engine) if is_profile_file(engine) else []
    for f in chain:
        try:
            same = os.path.samefile(out, f)
        except OSError:
            same = False
        if same:
            raise ConfigError(
                f"--out={out}: is a profile --engine {engine} extends (its chain: "
                f"{' -> '.join(p.name for p in reversed(chain))}); write it elsewhere"
            )
    if not overwrite and not _fitted_before(out):
        raise ConfigError(
            f"--out={out}: exists and is not a profile tpsim calibrate wrote; give "
            "--overwrite to replace it"
        )


def _fitted_before(path: Path) -> bool:
    """Whether ``path`` is a profile an earlier ``tpsim calibrate`` wrote (its ``about``)."""
    try:
        head = path.read_bytes()[:4096].decode("utf-8", "replace")
    except OSError:
        return False
    return any(
        line.startswith("about:") and "fitted by tpsim calibrate" in line
        for line in head.splitlines()
    )


def _predictions(result: Any, out: Path, held: list[Any], source: str) -> list[Any]:
    """``--predict``'s points priced with the fitted profile, before it is written (a point
    tpsim refuses exits 2 with no profile left behind): the profile goes to a file of its
    own beside ``--out`` (its ``extends`` is relative to that folder), removed after."""
    import tempfile

    from tpsim.experiments.calibrate.predict import predict

    with tempfile.NamedTemporaryFile(
        "w", suffix=".yaml", prefix=".tpsim-predict-", dir=out.parent, delete=False
    ) as f:
        f.write(result.profile)
    try:
        return predict(result, Path(f.name), held, source)
    finally:
        Path(f.name).unlink(missing_ok=True)


STUDY_COMMANDS = {
    "demo": _demo,
    "sweep": _sweep,
    "plot": _plot,
    "check-claim": _check_claim,
    "study": _study,
    "bench": _bench,
    "calibrate": _calibrate,
}
