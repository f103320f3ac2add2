"""What the serving studies share (``serving_capacity``, ``moe_serving``): one layout's
``tpsim serve`` runs at rising request rates until it saturates, and the study's files.

Each point is a run (engine of the setup, Poisson arrivals, seed 0) of its own number of
requests of fixed prompt and output lengths; the sweep stops at the first saturated rate
(the queue grows without bound: every higher rate saturates too). The timer of the first
run carries over to the next (each iteration shape simulated once).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpsim.core.errors import ConfigError
from tpsim.experiments.serve.run import ServeSetup, serve
from tpsim.experiments.serve.workload import arrival_times, parse_lengths, streams, synthetic


@dataclass
class RateSweep:
    """One layout's runs: each (rate, its summary), the text cell of each, the last rate
    before saturation, the first saturated one (None: none), the highest within the SLOs."""

    points: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    cells: list[str] = field(default_factory=list)
    sustains: float = 0.0
    saturates_at: float | None = None
    within_slo: float = 0.0


def sweep_rates(
    setup: ServeSetup,
    rates: Sequence[tuple[float, int]],
    prompt: int,
    output: int,
    slo_ttft_ms: float,
    slo_tpot_ms: float,
) -> RateSweep:
    """``setup`` at each (rate, requests) of ``rates`` in turn, until one saturates (a
    layout the setup refuses ends the sweep with its reason in the cells); within the SLOs:
    p99 TTFT and mean TPOT."""
    p, o = parse_lengths("--prompt-len", str(prompt)), parse_lengths("--output-len", str(output))
    out, timer = RateSweep(), None
    for rate, n in rates:
        times = arrival_times(streams(0)[0], rate, "poisson", 1.0, requests=n)
        reqs = synthetic(0, p, o, count=n, arrival_s=times)
        try:
            r = serve(setup, requests=reqs, iterations=timer)
        except ConfigError as e:
            out.cells.append(f"refused: {e}")
            break
        timer = r.timer
        s = r.summary()
        out.points.append((rate, s))
        mark = " SAT" if s["saturated"] else ""
        out.cells.append(f"{rate:g}: {s['p99_ttft_ms']:.0f}/{s['mean_tpot_ms']:.1f}{mark}")
        if s["saturated"]:
            out.saturates_at = rate
            break
        out.sustains = rate
        if s["p99_ttft_ms"] <= slo_ttft_ms and s["mean_tpot_ms"] <= slo_tpot_ms:
            out.within_slo = max(out.within_slo, rate)
    return out


def record(summary: dict[str, Any], key: str, sweep: RateSweep) -> None:
    """``sweep``'s rates in the study's summary under ``key``: what it sustains, where it
    saturates, the most within the SLOs, and its TPOT at the first (lowest) rate."""
    summary["sustains"][key] = sweep.sustains
    summary["saturates_at"][key] = sweep.saturates_at
    summary["within_slo"][key] = sweep.within_slo
    if sweep.points:
        summary["idle_tpot_ms"][key] = round(sweep.points[0][1]["mean_tpot_ms"], 2)


def best_within(summary: dict[str, Any], group: str, slo_ttft_ms: float,
                slo_tpot_ms: float) -> str:  # fmt: skip
    """The layouts of ``group`` (keys ``"GROUP LAYOUT"``) with the most rate within the SLOs,
    kept as the summary's ``best_within_slo[group]``; the line that says so."""
    slo = {k: v for k, v in summary["within_slo"].items() if k.startswith(f"{group} ")}
    most = max(slo.values())
    tops = [k.split(" ", 1)[1] for k, v in slo.items() if v == most]
    summary["best_within_slo"][group] = tops
    return (f"    the most within p99 TTFT {slo_ttft_ms:g} ms and mean TPOT {slo_tpot_ms:g} "
            f"ms: {' and '.join(tops)} ({most:g} req/s)")  # fmt: skip


def write_files(
    out: Path, name: str, columns: Sequence[str], rows: list[dict[str, Any]], summary: Any
) -> None:
    """The study's rows as ``NAME.csv`` and its summary as ``NAME.json`` in ``out``."""
    from tpsim.outputs.export import make_folder, write_json, write_text

    make_folder(out)
    buf = io.StringIO()
    w = csv.DictWriter(buf, list(columns), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    write_text(out / f"{name}.csv", buf.getvalue())
    write_json(out / f"{name}.json", summary, indent=2)


__all__ = ["RateSweep", "best_within", "record", "sweep_rates", "write_files"]
