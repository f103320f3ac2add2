"""``tpsim bench``: how fast tpsim simulates, against SimPy's own floor.

    python -m tpsim.experiments.bench --out DIR [--quick]

Measures, on this machine, in one run:

- bare SimPy's rate of timeout events (one process yielding timeouts);
- tpsim on fixed cases, each in a fresh process (so peak memory is that case's): wall time,
  SimPy events processed, events per second, and events represented per second (when
  identical hosts are simulated once and copied, one event stands for that many hosts'
  events: :mod:`tpsim.core.comm.symmetry`), records, and peak resident memory;
- the sweep throughput (points per second) on the standard 576-point grid (4 models x
  TP 1, 2, 4, 8 x 9 batch sizes x 2 phases x 2 machines) with ``--jobs 2``;
- scaling: wall time and memory against layers, TP degree and overlap chunks (a plot).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tpsim import Layout, Options, Workload, simulate
from tpsim.core.engine.baseline import bare_simpy_rate
from tpsim.models.catalog import get_model
from tpsim.outputs.export import make_folder, write_json

CASES: dict[str, dict[str, Any]] = {
    "70b-tp8-decode": dict(model="llama-3.1-70b", topology="dgx-h100", tp=8, nodes=1,
                           workload=dict(batch=16, phase="decode", context_len=2048),
                           options=dict(engine="ideal")),
    "405b-tp64-8nodes-decode-ring": dict(model="llama-3.1-405b", topology="dgx-h100", tp=64,
                                         nodes=8,
                                         workload=dict(batch=16, phase="decode",
                                                       context_len=2048),
                                         options=dict(allreduce_algo="ring", engine="ideal")),
    "70b-tp8-prefill-chunked": dict(model="llama-3.1-70b", topology="dgx-h100", tp=8, nodes=1,
                                    workload=dict(batch=4, phase="prefill", prompt_len=2048),
                                    options=dict(overlap="chunked", engine="ideal")),
    # mixture of experts (issue 24's targets: under 1 s and under 10 s on two cores)
    "dsv3-adp8-ep8-decode": dict(model="deepseek-v3", topology="hgx-h200", tp=1, nodes=1,
                                 layout=dict(attention_dp=8, ep=8),
                                 workload=dict(batch=256, phase="decode", context_len=2048),
                                 options=dict(engine="ideal", dtype="fp8")),
    "dsv3-adp64-ep64-8nodes-decode": dict(model="deepseek-v3", topology="dgx-h100", tp=1,
                                          nodes=8, layout=dict(attention_dp=64, ep=64),
                                          workload=dict(batch=256, phase="decode",
                                                        context_len=2048),
                                          options=dict(engine="ideal", dtype="fp8")),
}  # fmt: skip
# The cases and the grid run the ideal engine, so that figures compare across versions: the
# benchmark measures the simulator, not an engine profile.


#: The standard sweep: 4 models x TP 1, 2, 4, 8 x 9 batch sizes x 2 phases x 2 machines.
STANDARD_GRID: dict[str, Any] = {
    "model": ["llama-2-7b", "llama-3.1-8b", "llama-2-70b", "llama-3.1-70b"],
    "topology": ["dgx-a100", "dgx-h100"],
    "tp": [1, 2, 4, 8],
    "batch": [1, 2, 4, 8, 16, 32, 64, 128, 256],
    "phase": ["decode", "prefill"],
    "engine": "ideal",
}


def run_case(name: str, layers: int | None = None, tp: int | None = None,
             chunks: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Simulate one case here and measure it (call in a fresh process for memory)."""
    c = CASES[name]
    model = get_model(c["model"])
    if layers:
        model = dataclasses.replace(model, num_layers=layers)
    opts = dict(c["options"])
    if chunks:
        opts["overlap_chunks"] = chunks
    tp_ = tp or c["tp"]
    layout = Layout(tp_, **c.get("layout", {}))
    nodes = max(c["nodes"], -(-layout.ranks // 8))
    t = time.perf_counter()
    r = simulate(model, c["topology"], layout, Workload(**c["workload"]), Options(**opts),
                 nodes=nodes)  # fmt: skip
    wall = time.perf_counter() - t
    e = r.typed.engine
    factor = layout.ranks / e.ranks_simulated
    return {
        "case": name, "layers": model.num_layers, "tp": tp_, "ranks": layout.ranks,
        "chunks": chunks or 0,
        "wall_s": wall, "engine_wall_s": e.wall_s, "events": e.events,
        "events_per_s": e.events / e.wall_s,
        "events_represented_per_s": e.events * factor / e.wall_s,
        "ranks_simulated": e.ranks_simulated, "records": len(r.records),
        "peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "latency_s": r.latency_s,
    }  # fmt: skip


def _in_child(name: str, **kw: Any) -> dict[str, Any]:
    args = [sys.executable, "-m", "tpsim.experiments.bench", "--child", name]
    for k, v in kw.items():
        if v:
            args += [f"--{k}", str(v)]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def sweep_rate(jobs: int = 2) -> dict[str, Any]:
    """Points per second of the standard 576-point grid with ``jobs`` workers."""
    from tpsim.experiments.sweep.grid import expand
    from tpsim.experiments.sweep.run import run_sweep

    points = expand(STANDARD_GRID)
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        report = run_sweep(points, Path(d) / "bench.csv", jobs=jobs, progress=False)
        wall = time.perf_counter() - t
    return {"points": report.points, "jobs": jobs, "wall_s": wall,
            "points_per_s": report.points / wall}  # fmt: skip


def run(out: Path, quick: bool = False) -> Iterator[str]:
    make_folder(out)
    bare = bare_simpy_rate()
    yield f"bare SimPy: {bare:,.0f} timeout events/s"
    results = []
    for name in CASES:
        r = _in_child(name)
        results.append(r)
        yield (f"{name}: {r['wall_s']:.2f} s, {r['events']:,} events at {r['events_per_s']:,.0f}"
               f"/s ({r['events_per_s'] / bare:.2f}x SimPy); represented "
               f"{r['events_represented_per_s']:,.0f}/s "
               f"({r['events_represented_per_s'] / bare:.2f}x, {r['ranks']} ranks simulated as "
               f"{r['ranks_simulated']}); {r['records']:,} records; peak {r['peak_rss_MB']:.0f} "
               f"MB")  # fmt: skip
    s = sweep_rate()
    yield (f"sweep: {s['points']} points in {s['wall_s']:.1f} s with --jobs {s['jobs']}: "
           f"{s['points_per_s']:.1f} points/s")  # fmt: skip
    scaling = [] if quick else list(_scaling())
    for r in scaling:
        yield (f"scaling {r['axis']}={r['value']}: {r['wall_s']:.2f} s, "
               f"{r['peak_rss_MB']:.0f} MB, {r['records']:,} records")  # fmt: skip
    report = {"bare_simpy_events_per_s": bare, "cases": results, "sweep": s,
              "scaling": scaling}  # fmt: skip
    write_json(out / "bench.json", report, indent=2)  # atomic; NaN refused
    yield f"wrote {out / 'bench.json'}"
    if scaling:
        from tpsim.experiments.plots.bench import scaling_plot

        scaling_plot(scaling, out / "scaling.png")
        yield f"wrote {out / 'scaling.png'}"


def _scaling() -> Iterator[dict[str, Any]]:
    base = "405b-tp64-8nodes-decode-ring"
    for layers in (16, 32, 63, 126):
        yield {"axis": "layers", "value": layers, **_in_child(base, layers=layers)}
    for tp in (8, 16, 32, 64):
        yield {"axis": "tp", "value": tp, **_in_child(base, layers=32, tp=tp)}
    for chunks in (1, 2, 4, 8, 16):
        yield {"axis": "chunks", "value": chunks,
               **_in_child("70b-tp8-prefill-chunked", chunks=chunks)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("tpsim-bench"))
    p.add_argument("--quick", action="store_true", help="skip the scaling runs")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--layers", type=int, help=argparse.SUPPRESS)
    p.add_argument("--tp", type=int, help=argparse.SUPPRESS)
    p.add_argument("--chunks", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(run_case(a.child, a.layers, a.tp, a.chunks), allow_nan=False))
        return 0
    os.environ.setdefault("PYTHONHASHSEED", "0")
    for line in run(a.out, a.quick):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
