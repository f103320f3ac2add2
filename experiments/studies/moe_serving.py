"""The named study ``moe_serving``: a mixture-of-experts model served on one 8-GPU node under
traffic, with its experts tensor-parallel (TP 8), expert-parallel over the TP group (TP 8
EP 8), or under attention data parallelism (ADP 8 EP 8: eight attention groups of one GPU
stepping together, each with its own batch and KV cache; TP 2 x ADP 4 EP 8): the question of
issue #24 ("TP 8 or EP 8 with attention data parallelism on one node?") asked of a request
stream instead of a fixed batch.

Each point is a ``tpsim serve`` run (engine ``vllm``, Poisson arrivals, seed 0) of
:data:`REQUESTS` requests of :data:`PROMPT` tokens in and :data:`OUTPUT` out at the rates of
:data:`RATES`; a layout's sweep stops at its first saturated rate (the queue grows without
bound). Where each saturates is the first such rate; what it sustains, the last before it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpsim.core.config import Options
from tpsim.experiments.serve.run import ServeSetup
from tpsim.experiments.studies.base import Study, StudyEntry
from tpsim.experiments.studies.serving_rates import best_within, record, sweep_rates, write_files

NAME = "moe_serving"
#: (model, topology, dtype)
CASES = (
    ("qwen3-235b-a22b", "dgx-h100", "fp8"),
    ("qwen3-30b-a3b", "dgx-h100", "bf16"),
)
PROMPT, OUTPUT = 1024, 256
REQUESTS = 300
#: Request rates (req/s) on the node.
RATES = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
#: The SLOs the "within_slo" rate is held to: p99 TTFT and mean TPOT, ms.
SLO_TTFT_MS, SLO_TPOT_MS = 1000.0, 50.0
#: (label, tp, attention_dp, ep) on 8 GPUs
LAYOUTS = (
    ("TP 8", 8, 1, 1),
    ("TP 8 EP 8", 8, 1, 8),
    ("ADP 8 EP 8", 1, 8, 8),
    ("TP 2 x ADP 4 EP 8", 2, 4, 8),
)
COLUMNS = ("model", "layout", "rate", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
           "p99_tpot_ms", "request_throughput", "output_throughput", "saturated")  # fmt: skip


def moe_serving(out: Path | None = None, *, jobs: int = 1) -> Study:
    """Each layout's latencies against rate, where it saturates and what meets the SLOs."""
    rows: list[dict[str, Any]] = []
    keys = ("sustains", "saturates_at", "within_slo", "idle_tpot_ms", "best_within_slo")
    summary: dict[str, Any] = {k: {} for k in keys}
    lines = [f"MoE models on one 8-GPU node, {PROMPT} in / {OUTPUT} out, Poisson, {REQUESTS} "
             "requests a rate, engine vllm: p99 TTFT / mean TPOT (ms) against req/s "
             "(SAT: saturated)"]  # fmt: skip
    for model, topology, dtype in CASES:
        lines.append(f"  {model} on {topology} ({dtype}):")
        for label, tp, adp, ep in LAYOUTS:
            setup = ServeSetup(model, topology, tp, options=Options(dtype=dtype), ep=ep,
                               attention_dp=adp)  # fmt: skip
            key = f"{model} {label}"
            rates = [(rate, REQUESTS) for rate in RATES]
            sweep = sweep_rates(setup, rates, PROMPT, OUTPUT, SLO_TTFT_MS, SLO_TPOT_MS)
            for rate, s in sweep.points:
                rows.append({"model": model, "layout": label, "rate": rate,
                             **{c: s[c] for c in COLUMNS[3:]}})  # fmt: skip
            record(summary, key, sweep)
            lines.append(f"    {label:<18} " + "  ".join(sweep.cells))
        lines.append(best_within(summary, model, SLO_TTFT_MS, SLO_TPOT_MS))
    if out is not None:
        write_files(out, NAME, COLUMNS, rows, summary)
    return Study(NAME, lines, summary, [], [])


STUDY = StudyEntry(
    NAME,
    8,
    "MoE models served on one 8-GPU node: TP, TP + EP and attention DP + EP against rate",
    moe_serving,
)
