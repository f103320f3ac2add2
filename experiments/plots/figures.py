"""Which figures a table of sweep rows gets, and where they go: ``tpsim plot RESULTS``.

Rows are grouped into series: everything but the layout (``tp``, ``pp``, ``dp``, the MoE
split: ``ep``, ``attention_dp``, ``moe_tp``), ``batch`` and the placement (``nodes``,
``gpus_per_node``) equal; a MoE model's all-to-all (``moe_a2a``) is its series'. Each series
gets throughput against TP, a breakdown, a regime map, and, when its groups span different
numbers of hosts, in-node against cross-node curves;
several series are also drawn on shared axes (``compare_series.png``). Gantt charts are
drawn for chosen points (by ``point_id``; default: the fastest fitting point of each
series, a pipeline's tokens/s counted kept full as ``compare`` counts it), re-simulated from
their rows. ``index.html`` lists every figure with its caption.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tpsim.calibration.bounded import shorten
from tpsim.core.api import simulate
from tpsim.core.config import Options
from tpsim.core.errors import ConfigError
from tpsim.experiments.compare_rows import launch_ran
from tpsim.experiments.plots import sweep as sweep_plots
from tpsim.experiments.plots.figure import outcome, rate, rated
from tpsim.experiments.plots.gantt import gantt
from tpsim.experiments.sweep.grid import point_from_row
from tpsim.experiments.sweep.rows import kept_full
from tpsim.outputs.export import make_folder, write_text
from tpsim.outputs.text import title as run_title
from tpsim.topologies.io import get_topology

Row = dict[str, Any]
MAX_SERIES = 50  # figures are drawn per series: more is a mistake, not a report
SERIES = (
    "model",
    "topology",
    "phase",
    "prompt_len",
    "context_len",
    "dtype",
    "kv_dtype",
    "launch",
    "overlap",
    "allreduce_algo",
    "sequence_parallel",
    "ideal",
    "engine",
    "expert_skew",
    "moe_a2a",
)
GANTT_LAYERS = (0, 1)
#: One point of a figure: a TP degree, a layout beyond it (stages, replicas, experts split
#: over the GPUs and each one's width, attention data-parallel groups) and a batch.
POINT = ("tp", "pp", "dp", "micro_batches", "ep", "attention_dp", "moe_tp", "batch")


def _key(row: Row) -> tuple[Any, ...]:
    return tuple(row.get(k) for k in SERIES)


def _order(row: Row) -> tuple[Any, ...]:
    """Prefer, for a (tp, batch), a point that ran and fits over one that does not fit over
    one that failed (TP 16 fails on one host and runs on two: the cell is the run), then the
    simplest placement: fewest hosts, then nodes."""
    hosts = row.get("hosts") or 0
    return (outcome(row), hosts, row["nodes"], row["gpus_per_node"], row["point_id"])


def _one_per(rows: Iterable[Row], fields: Sequence[str]) -> list[Row]:
    best: dict[tuple[Any, ...], Row] = {}
    for r in sorted(rows, key=_order):
        best.setdefault(tuple(r.get(f) for f in fields), r)
    return sorted(best.values(), key=lambda r: (r["batch"], r["tp"], _order(r)))


def launch_words(rows: Sequence[Row]) -> str:
    """The launch mode a series' steps ran in, as ``tpsim run`` says it: ``launch graph``,
    or eager where the engine has no CUDA graph for the step (vLLM's prefill of more than
    512 tokens), the title had said ``launch graph`` of an 8K prefill run eagerly."""
    asked = str(rows[0]["launch"])
    ran = {launch_ran(r) for r in rows}
    if ran == {asked}:
        return f"launch {asked}"
    if len(ran) == 1:
        return f"launch {ran.pop()} (no CUDA graph for this step in the engine)"
    return f"launch {asked}, eager where the engine has no CUDA graph for the step"


def series_title(row: Row, group: Sequence[Row] = (), varying: Sequence[str] = ()) -> str:
    """A series' title from its first ``row`` (the launch mode from every row of ``group``).
    A setting at its default is left out, unless it is among the columns ``varying`` that
    tell the series of one plot apart (a sweep over --moe-a2a nccl,deepep titled its nccl
    series as if no all-to-all had been chosen)."""
    lengths = (
        f"prompt {row['prompt_len']}"
        if row["phase"] == "prefill"
        else f"context {row['context_len']}"
    )
    named = set(varying)
    extras = [launch_words(group or [row])]
    for k, unset in (("dtype", "of the model"), ("kv_dtype", "of the engine")):
        extras += [f"{k} {row.get(k) or unset}"] if row.get(k) or k in named else []
    extras += (
        [f"overlap {row['overlap']}"] if row["overlap"] != "none" or "overlap" in named else []
    )
    if row.get("sequence_parallel") or "sequence_parallel" in named:
        extras.append(
            "sequence parallel" if row.get("sequence_parallel") else "no sequence parallel"
        )
    if row.get("ideal") or "ideal" in named:
        extras.append("ideal" if row.get("ideal") else "calibrated")
    extras += [f"engine {row['engine']}"] if row.get("engine") else []
    if row.get("expert_skew") or "expert_skew" in named:
        skew = row.get("expert_skew")
        extras.append(f"expert skew {skew:g}" if skew else "uniform routing")
    a2a = row.get("moe_a2a") or Options.moe_a2a
    extras += [f"moe-a2a {a2a}"] if a2a != Options.moe_a2a or "moe_a2a" in named else []
    return f"{row['model']} {row['phase']} on {row['topology']} ({lengths}, {', '.join(extras)})"


def _slug(row: Row, varying: Sequence[str]) -> str:
    short = {"prompt_len": "prompt", "context_len": "ctx", "kv_dtype": "kv", "moe_a2a": "a2a-"}
    parts = []
    for k in varying:
        v = row.get(k)
        if isinstance(v, bool):
            parts += [k] if v else []
        elif v is not None:
            parts.append(f"{short.get(k, '')}{v}")
    text = "_".join(parts)
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") + "_"


def plot_results(
    rows: Sequence[Row], out: str | Path, *, gantt_ids: Sequence[str] | None = None
) -> list[Path]:
    """Write the figures of ``rows`` under ``out`` and return their paths."""
    out = Path(out)
    if not rows:
        raise ConfigError("plot: the results file has no rows")
    by_id = {r["point_id"]: r for r in rows}
    for pid in gantt_ids or ():  # before any figure is drawn (a large sweep's take minutes)
        if pid not in by_id:
            raise ConfigError(f"--gantt={pid}: no row with that point_id in the results")
        if by_id[pid].get("error"):  # its own error, named as the row's, not as --gantt's
            why = shorten(str(by_id[pid]["error"]), 150)
            raise ConfigError(f"--gantt={pid}: that point failed, no timeline to draw ({why})")
    make_folder(out)
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for r in sorted(rows, key=lambda r: (tuple(map(str, _key(r))), _order(r))):
        groups.setdefault(_key(r), []).append(r)
    if len(groups) > MAX_SERIES:
        raise ConfigError(
            f"plot: the rows form {len(groups)} series (every column but the layout, batch "
            f"and the placement equal); at most {MAX_SERIES} are drawn: plot a smaller "
            "results file"
        )
    varying = [k for i, k in enumerate(SERIES) if len({g[i] for g in groups}) > 1]
    written: list[Path] = []
    captions: dict[Path, str] = {}
    if len(groups) > 1:
        named = {_slug(g[0], varying).rstrip("_"): _one_per(g, POINT) for g in groups.values()}
        path = out / "compare_series.png"
        sweep_plots.series_comparison(named, path, title="tokens/s of every series")
        written.append(path)
        captions[path] = "every series on shared axes: tokens/s against TP, a panel per batch"
    for group in groups.values():
        head = series_title(group[0], group, varying)
        prefix = _slug(group[0], varying) if len(groups) > 1 else ""
        # a point placed over more hosts than its fewest (--gpus-per-node) is drawn apart
        # ("split over 2 hosts"); the regime map shows the fewest and counts the others
        placed = _one_per(group, (*POINT, "hosts"))
        piped = any(kept_full(r) for r in group)
        plots = [
            ("throughput_vs_tp", sweep_plots.throughput_vs_tp, placed, head),
            ("breakdown", sweep_plots.breakdown_bars, placed, head),
            ("regime_map", sweep_plots.regime_map, placed, f"{head}: regime and tokens/s"),
        ]
        if len({r["hosts"] for r in placed if sweep_plots.ok(r)}) > 1:
            plots.append(("in_node_vs_cross_node", sweep_plots.in_node_vs_cross_node, placed, head))
        for name, draw, data, title in plots:
            path = out / f"{prefix}{name}.png"
            draw(data, path, title=title)
            written.append(path)
            full = FULL if name in RATED and piped else ""
            captions[path] = f"{head}: {CAPTIONS[name]}{full}"
        if gantt_ids is None:
            fitting = [r for r in group if rated(r)]
            if fitting:
                best = max(fitting, key=lambda r: (rate(r)[0], r["point_id"]))
                written.append(draw_gantt(best, out / f"{prefix}gantt_best.png"))
                full = FULL if piped else ""
                captions[written[-1]] = f"{head}: {CAPTIONS['gantt_best']}{full}"
    for pid in gantt_ids or ():
        written.append(draw_gantt(by_id[pid], out / f"gantt_{pid}.png"))
        captions[written[-1]] = f"point {pid}: timeline of layers 0-1"
    index = out / "index.html"
    write_text(index, index_html(captions, out))
    return [*written, index]


CAPTIONS = {
    "throughput_vs_tp": "tokens/s and tokens/s per GPU against TP, a line per batch",
    "breakdown": "the critical path of each point by part, a panel per batch",
    "regime_map": "regime and tokens/s of each point, with the regime's share",
    "in_node_vs_cross_node": "tokens/s against TP by hosts spanned, with cross-host ratios",
    "gantt_best": "timeline (layers 0-1) of the fastest point that fits",
}
#: What a caption adds where its series has pipelines kept full (``compare``'s words).
FULL = " (pipelines full: a batch like the row's in every stage)"
#: The figures whose tokens/s count a pipeline kept full.
RATED = ("throughput_vs_tp", "regime_map", "gantt_best")


def index_html(captions: dict[Path, str], out: Path) -> str:
    """One page listing every figure (relative links) with its caption."""
    items = "".join(
        f'<figure><img src="{html.escape(p.relative_to(out).as_posix())}" alt="" '
        f'style="max-width:100%"><figcaption>{html.escape(p.name)}: '
        f"{html.escape(c)}</figcaption></figure>\n"
        for p, c in captions.items()
    )
    return (
        '<!doctype html>\n<html><head><meta charset="utf-8"><title>tpsim plots</title></head>'
        f"<body>\n<h1>tpsim plots ({len(captions)} figures)</h1>\n{items}</body></html>\n"
    )


def draw_gantt(row: Row, path: Path) -> Path:
    """Re-simulate a row's point and draw layers 0-1 of its timeline."""
    p = point_from_row(row)
    graph = get_topology(p.topology, p.nodes)
    r = simulate(p.model, graph, p.layout(), p.workload(), p.options(), nodes=p.nodes)
    gantt(
        r.records,
        path,
        title=f"{run_title(r.summary)} (layers {GANTT_LAYERS[0]}-{GANTT_LAYERS[1]})",
        layers=GANTT_LAYERS,
        critical=r.critical_path,
        rank_labels=r.rank_labels,
    )
    return path
