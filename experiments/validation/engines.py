"""Serving engines end to end against published measurements (``tpsim/calibration/measured``).

    python -m tpsim.experiments.validation.engines --out DIR [--engine-override NAME]

Each measurement is simulated with the engine profile that matches its engine, or the
closest one (said which). They judge the profiles; one constant is fitted to them: the
Python per decoder layer of ``tgi-v1``, to the two host-bound TGI rows at TP 2 (the TGI rows
at TP 1 and TP 4 are predictions).

- ``lmdeploy_a100_static.csv``: LMDeploy v0.1 (TurboMind, a C++ runtime derived from
  FasterTransformer, no CUDA graphs) on A100, fp16: the median decode step (context: the
  prompt plus half the output) at every batch (of the sequences the GPU's memory holds at
  that context, :func:`held`: the benchmark's clients beyond them wait), and the
  first-token latency of batch-1
  prompts (a prefill, which under TurboMind v0.1 ends with a decode step that samples the
  first token: the profile's ``first_token: decode_step``). Profile ``fastertransformer``.
  internlm-20b is not in the catalog and is left out.
- ``e2e_tgi_vllm_2023.csv``, TGI v1.2 rows: CodeLlama-34B per-token latency, one request at
  a time, on 1, 2 and 4 A100s and H100s. Profile ``tgi-v1`` (eager, one shard per GPU fed
  by the router, NCCL only); the prompt length is not stated: context 256 assumed.
- ``e2e_tgi_vllm_2023.csv``, vLLM Dec 2023 rows on A100 (the A30 and T4 rows have no GPU in
  the catalog): batch end-to-end latency of ``benchmark_latency`` (batch 64, 256 tokens in,
  256 out) = one prefill (the first token) + 255 decode steps, priced at their mean context
  (attention is linear in it); profile ``vllm-v0``, with its custom all-reduce or NCCL only.

Prints per file and overall the geometric-mean error, each point, and writes
``engine_calibration.png`` (measured against simulated, log axes, the ±20 % band).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from tpsim import Options, Workload, simulate
from tpsim.calibration import csv_rows, measured
from tpsim.core.memory import largest_batch, memory_per_gpu
from tpsim.experiments.validation.collectives import geomean_error
from tpsim.models.catalog import get_model
from tpsim.topologies.graph import first_gpu
from tpsim.topologies.io import get_topology

#: The acceptance bound of the issue: geometric-mean error per file and overall.
BOUND = 0.20


@dataclass(frozen=True)
class EngineCase:
    """One published number and how to simulate it."""

    file: str
    label: str
    model: str
    topology: str
    tp: int
    engine: str
    measured_s: float
    workload: Workload
    steps: int = 1  # decode steps the number spans (and one prefill before them if > 1)
    prefill: Workload | None = None
    allreduce_algo: str = "auto"


def _rows(name: str) -> list[dict[str, str]]:
    return csv_rows(measured(name))


LMDEPLOY_MODELS = {
    "llama2-7b": "llama-2-7b",
    "llama2-13b": "llama-2-13b",
    "llama2-70b": "llama-2-70b",
}


def held(model: str, topology: str, tp: int, workload: Workload, engine: str) -> int:
    """Sequences the engine runs at once of ``workload``'s batch: all of them, or as many as
    its memory holds at their length (the KV cache's blocks run out; the benchmark's other
    clients wait for a slot, as LMDeploy's batch-64 run of 2,048 in and 2,048 out did for
    190 s before its first token, its step no slower than at batch 32 or 16)."""
    spec = get_model(model)
    gpu = first_gpu(get_topology(topology, 1))
    options = Options(engine=engine)
    return largest_batch(lambda w: memory_per_gpu(spec, tp, w, options, gpu).fits, workload)


def lmdeploy_cases(engine: str = "fastertransformer") -> list[EngineCase]:
    out = []
    for r in _rows("lmdeploy_a100_static.csv"):
        model = LMDEPLOY_MODELS.get(r["model"])
        if model is None:
            continue  # internlm-20b: not in the catalog
        batch, tp = int(r["batch_size"]), int(r["tp"])
        prompt, output = int(r["prompt_tokens"]), int(r["output_tokens"])
        ctx = prompt + output // 2
        tag = f"{r['model']} b{batch} p{prompt} o{output}"
        step = Workload(batch, "decode", context_len=ctx)
        n = held(model, "dgx-a100", tp, step, engine)
        running = f" ({n} held)" if 0 < n < batch else ""
        out.append(EngineCase("lmdeploy", f"{tag} step{running}", model, "dgx-a100", tp, engine,
                        float(r["token_latency_p50_s"]),
                        replace(step, batch=n) if running else step))  # fmt: skip
        if batch == 1 and prompt >= 128:
            out.append(EngineCase("lmdeploy", f"{tag} first token", model, "dgx-a100", tp, engine,
                            float(r["ftl_avg_s"]), Workload(1, "prefill",
                            prompt_len=prompt)))  # fmt: skip
    return out


TGI_GPUS = {"A100-80G": "dgx-a100", "H100": "dgx-h100"}
VLLM_MODELS = {"Llama 70B": "llama-2-70b", "Llama 33B": "llama-33b"}


def e2e_cases(tgi_engine: str = "tgi-v1", vllm_engine: str = "vllm-v0") -> list[EngineCase]:
    out = []
    for r in _rows("e2e_tgi_vllm_2023.csv"):
        tp = int(r["tp"])
        if r["engine"].startswith("TGI") and r["metric"] == "per-token latency avg":
            out.append(EngineCase("tgi", f"TGI {r['gpu']} TP{tp}", "codellama-34b",
                                  TGI_GPUS[r["gpu"]], tp, tgi_engine, float(r["value"]) / 1e3,
                                  Workload(1, "decode", context_len=256)))  # fmt: skip
        elif r["engine"].startswith("vLLM") and r["gpu"] in TGI_GPUS:
            nccl = "NCCL" in r["metric"]
            label = f"vLLM {r['model']} TP{tp} {'NCCL' if nccl else 'custom'}"
            out.append(EngineCase("vllm-2023", label,
                                  VLLM_MODELS[r["model"]], TGI_GPUS[r["gpu"]], tp, vllm_engine,
                                  float(r["value"]), Workload(64, "decode", context_len=256 + 128),
                                  steps=255, prefill=Workload(64, "prefill", prompt_len=256),
                                  allreduce_algo="nccl" if nccl else "auto"))  # fmt: skip
    return out


def simulate_case(case: EngineCase) -> float:
    """Seconds the case's number stands for, simulated."""
    opts = Options(engine=case.engine, allreduce_algo=case.allreduce_algo, allow_oom=True)
    step = simulate(case.model, case.topology, case.tp, case.workload, opts).latency_s
    total = step * case.steps
    if case.prefill is not None:
        total += simulate(case.model, case.topology, case.tp, case.prefill, opts).latency_s
    return total


def run(out: Path | None, cases: list[EngineCase]) -> Iterator[str]:
    results = [(c, simulate_case(c)) for c in cases]
    by_file: dict[str, list[tuple[float, float]]] = {}
    for c, sim in results:
        by_file.setdefault(c.file, []).append((sim, c.measured_s))
    for file, pairs in by_file.items():
        mine = [(c, s) for c, s in results if c.file == file]
        engine = mine[0][0].engine
        yield f"{file} ({len(pairs)} points, engine {engine}):"
        yield f"  {'point':<42} {'measured':>10} {'simulated':>10} {'error':>7}"
        for c, s in mine:
            yield (f"  {c.label:<42} {c.measured_s * 1e3:>9.1f}ms {s * 1e3:>9.1f}ms "
                   f"{s / c.measured_s - 1:>+7.1%}")  # fmt: skip
        err = geomean_error(pairs)
        yield f"  geomean error {err:.1%} ({'within' if err <= BOUND else 'OUTSIDE'} {BOUND:.0%})"
    every = [p for pairs in by_file.values() for p in pairs]
    overall = geomean_error(every)
    yield f"overall: geomean error {overall:.1%} over {len(every)} points"
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        path = out / "engine_calibration.png"
        from tpsim.experiments.plots.validation import engine_calibration_scatter

        errors = {}
        for file in by_file:  # as the plot's points: in ms
            pts = [(c.measured_s * 1e3, s * 1e3) for c, s in results if c.file == file]
            errors[file] = geomean_error([(s, m) for m, s in pts])
        engine_calibration_scatter(
            [(c.file, c.measured_s, s) for c, s in results], errors, BOUND, path
        )
        yield f"wrote {path}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("tpsim-engine-calibration"))
    a = p.parse_args(argv)
    for line in run(a.out, lmdeploy_cases() + e2e_cases()):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
