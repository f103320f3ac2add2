"""The named study ``serving_capacity``: TTFT and TPOT against request rate for Llama-3.1-70B
served on 8 H100s (one DGX) and on 2 x 8 H100s, in four layouts of the same GPUs: TP 8
instances, TP 4 x DP 2 (per 8 GPUs), TP 2 x DP 4, and disaggregated prefill and decode
(one prefill and one decode worker: TP 4 each in one node; TP 8 each, a node apiece, the
KV cache crossing the NIC, on two).

Each point is a ``tpsim serve`` run (engine ``vllm``, Poisson arrivals, seed 0) of
:data:`REQUESTS` requests of :data:`PROMPT` tokens in and :data:`OUTPUT` out, at rates per
8 GPUs of :data:`RATES` (both doubled on 16 GPUs, so each instance sees the same run); a
layout's sweep stops at its first saturated rate (the queue grows without bound: every
higher rate saturates too). Where each
saturates is the first such rate; what it sustains, the last rate before it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpsim.experiments.serve.disagg import Disagg
from tpsim.experiments.serve.run import ServeSetup
from tpsim.experiments.studies.base import Study, StudyEntry
from tpsim.experiments.studies.serving_rates import best_within, record, sweep_rates, write_files

NAME = "serving_capacity"
MODEL = "llama-3.1-70b"
PROMPT, OUTPUT = 1024, 256
#: Requests per run, per 8 GPUs (doubled on 16: each instance sees as many).
REQUESTS = 400
#: Request rates per 8 GPUs (req/s).
RATES = (1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0)
#: The SLOs the "within_slo" rate is held to: p99 TTFT and mean TPOT, ms.
SLO_TTFT_MS, SLO_TPOT_MS = 500.0, 50.0
#: (label, tp, dp per 8 GPUs, disaggregated)
LAYOUTS = (
    ("TP 8", 8, 1, False),
    ("TP 4 x DP 2", 4, 2, False),
    ("TP 2 x DP 4", 2, 4, False),
    ("1P+1D", 0, 0, True),
)
COLUMNS = ("gpus", "layout", "rate", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
           "p99_tpot_ms", "request_throughput", "preemptions", "saturated")  # fmt: skip


def _setup(nodes: int, tp: int, dp: int, disagg: bool) -> ServeSetup:
    if disagg:
        t = 4 * nodes  # TP 4 + TP 4 in a node; TP 8 + TP 8 over two
        return ServeSetup(MODEL, "dgx-h100", t, nodes=nodes, disagg=Disagg(t, 1, t, 1))
    return ServeSetup(MODEL, "dgx-h100", tp, dp * nodes, nodes=nodes)


def serving_capacity(out: Path | None = None, *, jobs: int = 1) -> Study:
    """Each layout's latencies against rate on 8 and 16 H100s, and where it saturates."""
    rows: list[dict[str, Any]] = []
    keys = ("sustains", "saturates_at", "within_slo", "idle_ttft_ms", "idle_tpot_ms",
            "best_within_slo")  # fmt: skip
    summary: dict[str, Any] = {k: {} for k in keys}
    lines = [f"{MODEL}, {PROMPT} in / {OUTPUT} out, Poisson, {REQUESTS} requests per 8 GPUs "
             "a rate, engine vllm: p99 TTFT / mean TPOT (ms) against req/s "
             "(SAT: saturated)"]  # fmt: skip
    for nodes in (1, 2):
        gpus = 8 * nodes
        lines.append(f"  {gpus} H100 ({nodes} node{'s' if nodes > 1 else ''}):")
        for label, tp, dp, dis in LAYOUTS:
            setup = _setup(nodes, tp, dp, dis)
            name = label if not dis else f"1P+1D (TP {setup.tp} each)"
            if not dis and nodes > 1:
                name = f"TP {tp} x DP {dp * nodes}"
            key = f"{gpus} {name}"
            rates = [(base * nodes, REQUESTS * nodes) for base in RATES]
            sweep = sweep_rates(setup, rates, PROMPT, OUTPUT, SLO_TTFT_MS, SLO_TPOT_MS)
            for rate, s in sweep.points:
                rows.append({"gpus": gpus, "layout": name, "rate": rate,
                             **{c: s[c] for c in COLUMNS[3:]}})  # fmt: skip
            if sweep.points:
                summary["idle_ttft_ms"][key] = round(sweep.points[0][1]["mean_ttft_ms"], 1)
            record(summary, key, sweep)
            lines.append(f"    {name:<22} " + "  ".join(sweep.cells))
        lines.append(best_within(summary, str(gpus), SLO_TTFT_MS, SLO_TPOT_MS))
    if out is not None:
        write_files(out, NAME, COLUMNS, rows, summary)
    # its rows are serving runs, not sweep rows: in its CSV, not in Study.rows (whose
    # assumption lines read sweep rows)
    return Study(NAME, lines, summary, [], [])


STUDY = StudyEntry(
    NAME,
    7,
    "Llama-3.1-70B served on 8 and 16 H100s: TTFT and TPOT against request rate, four layouts",
    serving_capacity,
)
