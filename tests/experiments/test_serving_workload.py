"""The H100 serving stages' workload (``experiments/validation/serving.py``): what
inference-perf sent vLLM, read from the measurement file."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tpsim import calibration
from tpsim.calibration.commented_csv import csv_rows
from tpsim.experiments.serve.engine import EngineInstance
from tpsim.experiments.serve.run import ServeSetup, scheduler_spec
from tpsim.experiments.validation import serving as srv

ROWS = [r for r in csv_rows(calibration.measured(srv.H100)) if r["stage"] != "summary"]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['experiment'][-8:]}-{r['stage']}")
def test_the_engine_generated_the_tokens_asked(row: dict[str, str]) -> None:
    """With ignore_eos vLLM generates max_tokens (output_len_cfg) tokens: the file's ITL is
    the stage's (latency - TTFT) over 2 x output_len_cfg + 1 streamed chunks on every
    stage, where output_len_mean (the text re-tokenised client-side, 16-24 % fewer) is
    20 % off."""
    decode_ms = float(row["e2e_mean_ms"]) - float(row["ttft_mean_ms"])
    chunks = 2 * srv.output_tokens(row) + 1
    assert float(row["itl_mean_ms"]) == pytest.approx(decode_ms / chunks, rel=0.002)
    assert float(row["output_len_mean"]) < 0.85 * srv.output_tokens(row)


def test_each_prompt_comes_back_whole_and_is_found_cached() -> None:
    """inference-perf's shared_prefix sends request i the (i mod N)-th of N = system prompts x
    users fixed prompts: after the first N requests, vLLM's prefix cache holds every full
    block of each prompt, and a request computes only its last partial block."""
    (row,) = [r for r in ROWS if r["stage"] == "1" and "general" in r["experiment"]]
    reqs = srv.h100_workload(row)
    n = int(row["n_system_prompts"]) * int(row["users_per_prompt"])
    assert n == 45
    assert reqs.group[:n] == tuple(range(n)) and reqs.group[n] == 0
    assert set(reqs.shared) == {reqs.prompt[0]} == {576}
    assert set(reqs.output) == {248}
    spec = replace(
        scheduler_spec(ServeSetup("llama-2-7b", "dgx-h100", 1), 80e9), async_scheduling=False
    )  # each request in the next plan

    def lookup(i: int) -> tuple[int, int, int, int]:
        return reqs.prompt[i], 2, reqs.group[i], reqs.shared[i]

    engine = EngineInstance(spec, 10_000, lambda step: 0.01, lookup)
    computed = []
    for i in (0, n):  # the first request of prompt 0, and the next one of that prompt
        engine.admit(i, 0.0)
        engine.step(0.0)
        computed.append(sum(k for r, k in engine.plan if r.id == i))
        engine.finish(0.0)
    assert computed == [576, 576 - 35 * 16]
