"""What every named study shares: the :class:`Study` it returns, the :class:`StudyEntry` each
study module registers as ``STUDY``, the points of its grids, its table and its files.

A study returns its report lines, a small ``summary`` of facts a reader can check (what the
golden tests assert), its rows (sweep rows, tpsim.experiments.sweep.results) and the plots it
wrote. With ``out``, it writes ``<name>.csv`` (its rows), ``<name>.json`` (its summary) and
its plots there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpsim.experiments.plots.words import row_regime_text
from tpsim.experiments.sweep.grid import GridPoint, expand
from tpsim.experiments.sweep.rows import kept_full, results_text, served
from tpsim.outputs.export import make_folder, write_json, write_text

Row = dict[str, Any]


@dataclass(frozen=True)
class Study:
    name: str
    lines: list[str]
    summary: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)


@dataclass(frozen=True)
class StudyEntry:
    """One named study, as its module registers it (``STUDY = StudyEntry(...)``):
    ``tpsim study NAME`` calls ``run(out, jobs=jobs)``."""

    name: str  # the module's own name
    order: int  # position in listings (``tpsim study --help``, the registry)
    about: str  # one line: what it shows
    run: Callable[..., Study]  # run(out: Path | None = None, *, jobs: int = 1) -> Study


def points(*grids: dict[str, Any]) -> list[GridPoint]:
    """The points of several grids, in order, without duplicates."""
    return list(dict.fromkeys(p for g in grids for p in expand(g, "study grid")))


def good(r: Row) -> bool:
    """The row ran and fits in memory."""
    return not r.get("error") and r.get("fits") is True


def table(rows: Sequence[Row], label: Callable[[Row], str]) -> list[str]:
    """One line per row: step time, tokens/s (total and per GPU) and the regime; a
    pipeline's tokens/s and regime with its stages kept full, as ``compare`` and ``plan``
    count them (a line under the table says so)."""
    lines = [
        f"  {'':<22} {'step (ms)':>10} {'tokens/s':>10} {'per GPU':>9}  regime (share of the path)"
    ]
    for r in rows:
        rate = served(r)
        if r.get("error"):
            lines.append(f"  {label(r):<22} error: {r['error']}")
        elif not r["fits"]:
            lines.append(f"  {label(r):<22} does not fit ({r['total_bytes_per_gpu'] / 1e9:.0f} GB)")
        elif rate is None:  # the pipeline fits, its batches in flight do not
            need = r["in_flight_bytes_per_gpu"] / 1e9
            lines.append(f"  {label(r):<22} does not fit with pipelines full ({need:.0f} GB)")
        else:
            lines.append(
                f"  {label(r):<22} {r['latency_s'] * 1e3:>10.2f} {rate[0]:>10,.0f} "
                f"{rate[1]:>9,.0f}  {row_regime_text(r)}"
            )
    if any(kept_full(r) for r in rows):
        lines.append(
            "  (pipelines full: tokens/s with a batch like the row's in every stage, as compare "
            "and plan count them; step: one batch's)"
        )
    return lines


def save(name: str, out: Path | None, rows: Sequence[Row], summary: dict[str, Any]) -> None:
    """Write ``<name>.csv`` (the rows) and ``<name>.json`` (the summary) under ``out``."""
    if out is None:
        return
    make_folder(out)
    write_text(out / f"{name}.csv", results_text(rows, "csv"))
    write_json(out / f"{name}.json", summary, indent=2)
