"""The ``engines`` study: one model on the ideal engine and on real serving engines across TP.

Llama-3.1-8B and Llama-3.1-70B decode (batch 16, context 2048) on one 8x H100 node at TP 1,
2, 4 and 8 with the ``ideal``, ``vllm-v0`` and ``vllm`` engine profiles. It shows where the
engine, not the GPU, sets the limit: the host work of a step (scheduling, input preparation,
Ray coordination, sampling, output processing) does not shrink with more GPUs, so once the
GPU's share is small, more TP stops paying, or costs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpsim.experiments.studies.base import Study, StudyEntry, points, save, table
from tpsim.experiments.sweep.run import run_points

MODELS = ("llama-3.1-8b", "llama-3.1-70b")
ENGINES = ("ideal", "vllm-v0", "vllm")
TPS = (1, 2, 4, 8)
BATCH, CONTEXT = 16, 2048


def engines(out: Path | None = None, *, jobs: int = 1) -> Study:
    """Decode at TP 1-8 on dgx-h100 under three engines: step time and its host share."""
    grid = {
        "model": list(MODELS),
        "topology": "dgx-h100",
        "tp": list(TPS),
        "batch": BATCH,
        "context_len": CONTEXT,
        "engine": list(ENGINES),
    }
    rows = run_points(points(grid), jobs=jobs)
    ok = {(r["model"], r["engine"], r["tp"]): r for r in rows if r.get("fits") is True}
    summary: dict[str, Any] = {"best_tp": {}, "host_share_at_tp8": {}, "tp8_over_tp4": {}}
    lines = [f"decode batch {BATCH}, context {CONTEXT} on dgx-h100: the engine around the kernels"]
    for m in MODELS:
        for e in ENGINES:
            mine = [ok[m, e, tp] for tp in TPS if (m, e, tp) in ok]
            if not mine:
                continue
            best = min(mine, key=lambda r: r["latency_s"])
            key = f"{m} {e}"
            summary["best_tp"][key] = best["tp"]
            if (m, e, 8) in ok and (m, e, 4) in ok:
                r8, r4 = ok[m, e, 8], ok[m, e, 4]
                summary["tp8_over_tp4"][key] = round(r4["latency_s"] / r8["latency_s"], 4)
                summary["host_share_at_tp8"][key] = round(r8["host_s"] / r8["latency_s"], 4)
    lines += table(
        rows, lambda r: f"{r['model'].removeprefix('llama-3.1-')} {r['engine']} TP{r['tp']}"
    )
    for key, gain in summary["tp8_over_tp4"].items():
        share = summary["host_share_at_tp8"][key]
        verdict = "pays" if gain >= 1.25 else "does not pay" if gain >= 1 else "costs"
        lines.append(
            f"  {key}: TP 4 -> 8 gives {gain:.2f}x ({verdict}); host work {share:.0%} of the "
            "TP 8 step"
        )
    save("engines", out, rows, summary)
    plots: list[Path] = []
    if out is not None:
        plots = [out / "engines.png"]
        from tpsim.experiments.plots.studies import engines_lines

        engines_lines(rows, plots[0], MODELS, ENGINES, TPS, BATCH, CONTEXT)
    return Study("engines", lines, summary, rows, plots)


STUDY = StudyEntry(
    "engines",
    4,
    "one model on the ideal engine and on vLLM V0 and V1 across TP",
    engines,
)
