"""tpsim serve against measured vLLM serving runs (``tpsim validate``'s serving entries).

- ``serving_vllm_h100_llama2_7b.csv`` (BLIS / inference-sim training set): Llama-2-7B on one
  H100 SXM, vLLM with max_num_batched_tokens 2048 and max_num_seqs 128, fp16, constant-rate
  stages of 4-20 req/s. Each stage is simulated with its rate, its mean prompt length and
  the output tokens asked (fixed), constant arrivals (inference-perf's ``constant`` load), for
  :data:`STAGE_S` seconds (its latencies settle within seconds; the stage ran 600-1200 s).
  What the load generator sent (:func:`h100_workload`): inference-perf's ``shared_prefix``
  data generator draws ``n_system_prompts`` x ``users_per_prompt`` prompts (system prompt
  and question) once and sends request ``i`` the prompt ``i mod`` their number; no chat
  context accumulates (every stage's mean prompt is its system prompt and question, about
  5 % longer from re-tokenising random tokens), so each prompt comes back whole and vLLM's
  prefix cache finds all its full blocks. With ``ignore_eos`` vLLM generates the
  ``output_len_cfg`` tokens asked (``max_tokens``); the file's ``output_len_mean`` is
  inference-perf's client-side re-tokenisation of the streamed text (16-24 % fewer), not
  the tokens the engine ran: its ITL column is the stage's (latency - TTFT) over
  2 x ``output_len_cfg`` + 1 streamed chunks (within 0.2 % on every stage).
- ``serving_vllm019_workstation.csv`` (LLMServingSim's validation): Llama-3.1-8B on one RTX
  4090, vLLM 0.19, max_num_seqs 256, max_num_batched_tokens 2048, 300 ShareGPT-like
  requests at 10 req/s Poisson, simulated with the file's mean lengths. The RTX PRO 6000
  rows are left out: tpsim has no entry for that GPU yet.

A stage whose measured run failed requests (or, on the workstation, whose TTFT is minutes) is
*saturated*: its latencies depend on how long the run lasted, not on the engine alone. Issue
#25 bounds TPOT and TTFT where the system is not saturated, so the serving entries compare
the stages the engine kept up with, and the saturated stages' TPOT is an entry of its own
(``serving-saturated-tpot``), reported against the same bound; their TTFT is not compared. TPOT is
vLLM's (latency - TTFT) / (output tokens - 1): the H100 file's own tpot column is
inference-perf's per streamed chunk (it equals its ITL column), so it is derived from the
file's mean latency and TTFT over the ``output_len_cfg`` tokens generated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import numpy as np
from tpsim import calibration
from tpsim.calibration.commented_csv import csv_rows
from tpsim.core.config import Options
from tpsim.experiments.serve.run import ServeSetup, serve
from tpsim.experiments.serve.workload import Lengths, Requests, arrival_times, streams, synthetic

H100 = "serving_vllm_h100_llama2_7b.csv"
WORKSTATION = "serving_vllm019_workstation.csv"
#: Seconds of each constant-rate stage simulated.
STAGE_S = 120.0


@dataclass(frozen=True)
class Stage:
    """One measured stage and what tpsim simulated for it (ms). ``saturated``: the measured
    run failed requests; ``sim_saturated``: the simulated queue grew without bound."""

    label: str
    ttft_ms: float
    tpot_ms: float
    sim_ttft_ms: float
    sim_tpot_ms: float
    saturated: bool
    sim_saturated: bool


def output_tokens(row: dict[str, str]) -> int:
    """The tokens vLLM generated per request: ``max_tokens`` (``output_len_cfg``), which
    ``ignore_eos`` makes exact; ``output_len_mean`` re-tokenises the text client-side."""
    return int(row["output_len_cfg"])


def h100_workload(row: dict[str, str]) -> Requests:
    """The stage's requests as inference-perf sent them: constant arrivals; the prompts are
    ``n_system_prompts`` x ``users_per_prompt`` fixed texts, request ``i`` sends the ``i mod
    N``-th (``SharedPrefixDataGenerator``: ``data_index % len(prompts)``; no chat context
    accumulates), so each is one prefix group of the whole prompt; outputs of
    :func:`output_tokens`."""
    rate = float(row["rate_req_s"])
    duration = min(float(row["stage_duration_s"]), STAGE_S)
    prompt_len = round(float(row["prompt_len_mean"]))
    prompt = Lengths("fixed", prompt_len)
    output = Lengths("fixed", output_tokens(row))
    times = arrival_times(streams(0)[0], rate, "constant", 0.0, duration_s=duration)
    reqs = synthetic(0, prompt, output, count=len(times), arrival_s=times)
    prompts = int(row["n_system_prompts"]) * int(row["users_per_prompt"])
    return replace(reqs, group=tuple(i % prompts for i in range(len(reqs))),
                   shared=(prompt_len,) * len(reqs))  # fmt: skip


def _h100_stage(row: dict[str, str], kernel_table: str | None = None) -> Stage:
    rate = float(row["rate_req_s"])
    reqs = h100_workload(row)
    overrides = (("max_num_batched_tokens", int(row["max_num_batched_tokens"])),
                 ("max_num_seqs", int(row["max_num_seqs"])))  # fmt: skip
    options = Options(dtype="fp16", engine="vllm", kernel_table=kernel_table)
    setup = ServeSetup("llama-2-7b", "dgx-h100", int(row["tp"]), options=options,
                       overrides=overrides)  # fmt: skip
    run = serve(setup, requests=reqs, iterations=_TIMERS.get(setup))
    _TIMERS[setup] = run.timer
    s = run.summary()
    name = row["experiment"].split("-tp1-")[-1]
    # TPOT as vLLM defines it, (latency - TTFT) / (output tokens - 1), from the file's means
    # and the tokens generated: its tpot column is inference-perf's per streamed chunk
    ttft, e2e = float(row["ttft_mean_ms"]), float(row["e2e_mean_ms"])
    tpot = (e2e - ttft) / (output_tokens(row) - 1)
    return Stage(f"{name} stage {row['stage']} at {rate:g} req/s", ttft, tpot,
                 s["mean_ttft_ms"], s["mean_tpot_ms"], int(row["n_fail"]) > 0,
                 bool(s["saturated"]))  # fmt: skip


#: One iteration timer per setup, shared by the stages that run it (its cache carries over).
_TIMERS: dict[ServeSetup, Any] = {}


@cache
def h100_stages(kernel_table: str | None = None) -> tuple[Stage, ...]:
    """The H100 file's stages, the kernels modelled or, with ``kernel_table`` (``vidur-h100``:
    Llama-2-7B's own kernels measured on an H100), priced from measured times."""
    rows = csv_rows(calibration.measured(H100))
    return tuple(_h100_stage(r, kernel_table) for r in rows if r["stage"] != "summary")


def _workstation(rows: list[dict[str, str]]) -> Stage:
    first = rows[0]
    metric = {r["metric"]: float(r["vllm_ms"]) for r in rows}
    n = int(first["num_requests"])
    times = arrival_times(streams(0)[0], 10.0, "poisson", 1.0, requests=n)
    reqs = synthetic(0, Lengths("fixed", round(float(first["mean_input_toks"]))),
                     Lengths("fixed", round(float(first["mean_output_toks"]))), count=n,
                     arrival_s=times)  # fmt: skip
    overrides = (("max_num_batched_tokens", int(first["max_num_batched_tokens"])),
                 ("max_num_seqs", int(first["max_num_seqs"])))  # fmt: skip
    setup = ServeSetup("llama-3.1-8b", "pcie-rtx4090", 1, options=Options(engine="vllm"),
                       overrides=overrides)  # fmt: skip
    s = serve(setup, requests=reqs).summary()
    # the measured TTFT (a minute) grows through the run: the 4090 cannot keep up
    saturated = metric["TTFT Mean"] > 10 * metric["Latency Mean"] / float(first["mean_output_toks"])
    return Stage(f"{first['hardware']} {n} requests at 10 req/s", metric["TTFT Mean"],
                 metric["TPOT Mean"], s["mean_ttft_ms"], s["mean_tpot_ms"], saturated,
                 bool(s["saturated"]))  # fmt: skip


@cache
def workstation_stages() -> tuple[Stage, ...]:
    rows = [r for r in csv_rows(calibration.measured(WORKSTATION)) if r["hardware"] == "RTX4090"]
    return (_workstation(rows),)


def geomean_error(pairs: list[tuple[float, float]]) -> float:
    """exp(mean |log(simulated / measured)|) - 1 over (simulated, measured) pairs."""
    if not pairs:
        return 0.0
    return math.exp(float(np.mean([abs(math.log(s / m)) for s, m in pairs]))) - 1


__all__ = ["H100", "STAGE_S", "WORKSTATION", "Stage", "geomean_error", "h100_stages",
           "h100_workload", "output_tokens", "workstation_stages"]  # fmt: skip
