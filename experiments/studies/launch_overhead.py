"""The named study ``launch_overhead``: eager against CUDA graphs against torch.compile, across
model sizes."""

from __future__ import annotations

from pathlib import Path

from tpsim.experiments.studies.base import Study, StudyEntry, points, save, table
from tpsim.experiments.sweep.run import run_points

LAUNCH_MODELS = ("llama-3.1-8b", "llama-2-13b", "llama-3.1-70b")


def launch_overhead(out: Path | None = None, *, jobs: int = 1) -> Study:
    """Decode batch 1 at TP 8 on dgx-h100 with eager, graph and compiled launches."""
    grid = {
        "model": list(LAUNCH_MODELS),
        "topology": "dgx-h100",
        "tp": 8,
        "context_len": 1024,
        "launch": ["eager", "graph", "compiled"],
    }
    rows = run_points(points(grid), jobs=jobs)
    at = {(r["model"], r["launch"]): r for r in rows}
    ratio = {m: at[m, "eager"]["latency_s"] / at[m, "graph"]["latency_s"] for m in LAUNCH_MODELS}
    summary = {
        "eager_over_graph": ratio,
        "eager_slowest": all(
            at[m, "eager"]["latency_s"]
            > max(at[m, "graph"]["latency_s"], at[m, "compiled"]["latency_s"])
            for m in LAUNCH_MODELS
        ),
        "compiled_fastest": all(
            at[m, "compiled"]["latency_s"] <= at[m, "graph"]["latency_s"] for m in LAUNCH_MODELS
        ),
        "regime": {
            f"{m} {mode}": at[m, mode]["regime"]
            for m in LAUNCH_MODELS
            for mode in ("eager", "graph", "compiled")
        },
    }
    lines = ["decode batch 1, TP 8 on dgx-h100, context 1024: kernel launch modes"]
    lines += table(rows, lambda r: f"{r['model']} {r['launch']}")
    lines += [f"  {m}: eager / graph step time {ratio[m]:.2f}x" for m in LAUNCH_MODELS]
    save("launch_overhead", out, rows, summary)
    plots: list[Path] = []
    if out is not None:
        plots = [out / "launch_overhead.png"]
        from tpsim.experiments.plots.studies import launch_overhead_bars

        launch_overhead_bars(rows, plots[0])
    return Study("launch_overhead", lines, summary, rows, plots)


STUDY = StudyEntry(
    "launch_overhead",
    3,
    "eager against CUDA graphs against torch.compile, across model sizes",
    launch_overhead,
)
