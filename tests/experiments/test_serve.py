"""tpsim serve's pieces: workloads and traces, KV-cache sizing, whole runs and their metrics
(the engine's scheduler: test_serve_scheduler.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tpsim.calibration.scheduler import scheduler
from tpsim.core.config import Options
from tpsim.core.errors import ConfigError
from tpsim.core.step_timer import IterationTimer
from tpsim.experiments.serve.run import ServeSetup, kv_blocks, scheduler_spec, serve
from tpsim.experiments.serve.trace import read_trace
from tpsim.experiments.serve.workload import (
    Lengths,
    arrival_times,
    parse_lengths,
    streams,
    synthetic,
)

MODEL, TOPO = "llama-3.1-8b", "dgx-h100"


# ------------------------------------------------------------------ workloads
def test_lengths_parse() -> None:
    assert parse_lengths("--prompt-len", "4K") == Lengths("fixed", 4096)
    assert parse_lengths("--prompt-len", "uniform:10-20") == Lengths("uniform", 10, 20)
    assert parse_lengths("--prompt-len", "normal:1000,300") == Lengths("normal", 1000, 300)
    assert parse_lengths("--output-len", "lognormal:200,50").kind == "lognormal"


BAD_LENGTHS = ["0", "-5", "uniform:20-10", "uniform:5", "normal:abc,1", "lognormal:100",
               "normal:0,1", "zipf:1,2", "1.5", "nan"]  # fmt: skip


@pytest.mark.parametrize("text", BAD_LENGTHS)
def test_bad_lengths_name_the_flag(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^--prompt-len="):
        parse_lengths("--prompt-len", text)


def test_lengths_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "lengths.txt"
    f.write_text("# prompt lengths\n100\n200\n\n300\n")
    lengths = parse_lengths("--prompt-len", str(f))
    drawn = lengths.draw(np.random.default_rng(0), 1000)
    assert set(drawn.tolist()) == {100, 200, 300}
    f.write_text("100\nten\n")
    with pytest.raises(ConfigError, match="line 2"):
        parse_lengths("--prompt-len", str(f))


def test_distributions_have_their_moments() -> None:
    rng = np.random.default_rng(0)
    for kind in ("normal", "lognormal"):
        x = Lengths(kind, 1000, 300).draw(rng, 200_000)
        assert x.mean() == pytest.approx(1000, rel=0.01)
        assert x.std() == pytest.approx(300, rel=0.02)
    u = Lengths("uniform", 10, 20).draw(rng, 100_000)
    assert u.min() == 10 and u.max() == 20


@pytest.mark.parametrize(("arrivals", "cv"), [("poisson", 1.0), ("gamma", 2.0), ("gamma", 0.5),
                                              ("constant", 0.0)])  # fmt: skip
def test_arrivals_have_their_rate_and_cv(arrivals: str, cv: float) -> None:
    t = arrival_times(np.random.default_rng(3), 5.0, arrivals, cv, requests=100_000)
    gaps = np.diff(t)
    assert t[0] == 0.0
    assert 1 / gaps.mean() == pytest.approx(5.0, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, abs=0.03)


def test_duration_bounds_the_arrivals() -> None:
    t = arrival_times(np.random.default_rng(0), 10.0, "poisson", 1.0, duration_s=60.0)
    assert t.max() < 60.0 and len(t) == pytest.approx(600, rel=0.15)


def test_the_same_seed_draws_the_same_requests() -> None:
    a = synthetic(7, Lengths("uniform", 1, 99), Lengths("normal", 50, 9), count=50,
                  arrival_s=arrival_times(streams(7)[0], 2, "poisson", 1, requests=50))  # fmt: skip
    b = synthetic(7, Lengths("uniform", 1, 99), Lengths("normal", 50, 9), count=50,
                  arrival_s=arrival_times(streams(7)[0], 2, "poisson", 1, requests=50))  # fmt: skip
    assert a == b


def test_azure_trace(tmp_path: Path) -> None:
    f = tmp_path / "azure.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-16 18:15:51.0013000,879,0\n"
    )
    r = read_trace(str(f))
    assert r.prompt == (374, 396, 879) and r.output == (44, 109, 1)
    assert r.arrival_s[0] == 0.0
    assert r.arrival_s[1] == pytest.approx(4.314579, abs=1e-5)
    j = tmp_path / "t.jsonl"
    j.write_text('{"timestamp": 1.5, "prompt_tokens": 10, "output_tokens": 5}\n'
                 '{"timestamp": 2.0, "prompt_tokens": 20, "output_tokens": 6}\n')  # fmt: skip
    assert read_trace(str(j)).arrival_s == (0.0, 0.5)


@pytest.mark.parametrize(("text", "needle"), [
    ("a,b\n1,2\n", "no arrival time column"),
    ("timestamp,prompt_tokens,output_tokens\n2,10,5\n1,10,5\n", "must not decrease"),
    ("timestamp,prompt_tokens,output_tokens\n1,ten,5\n", "not a number"),
    ("timestamp,prompt_tokens,output_tokens\n1,0,5\n", "whole number from 1"),
    ("", "holds no requests"),
])  # fmt: skip
def test_bad_traces(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(ConfigError, match=r"^--trace=") as e:
        read_trace(str(f))
    assert needle in str(e.value)


# ------------------------------------------------------------------ whole runs
def test_kv_cache_sized_after_weights() -> None:
    """Llama-3.1-8B on an H100 (80 GB), vLLM's 0.9: about 72 GB less 16 GB of weights, the
    runtime and a profiling step's activations: 50-60 GB of KV cache, 128 KiB a token."""
    r = serve(ServeSetup(MODEL, TOPO, 1), lengths=(0, Lengths("fixed", 100), Lengths("fixed", 2)),
              concurrency=1, count=1)  # fmt: skip
    assert r.kv.bytes_per_token == 32 * 8 * 128 * 2 * 2
    assert 50e9 < r.kv.blocks * 16 * r.kv.bytes_per_token < 60e9


def test_a_latent_cache_is_sized_by_its_latent_on_every_gpu() -> None:
    """DeepSeek-V3 keeps MLA's latent (512 + 64 per token and layer) whole on every GPU of
    its TP group: 576 x 61 bytes a token in fp8, not its K and V heads' width."""
    fp8 = Options(dtype="fp8", kv_dtype="fp8")  # an fp8 cache (vLLM's own default is bf16)
    it = IterationTimer("deepseek-v3", "hgx-h200", 8, fp8)
    setup = ServeSetup("deepseek-v3", "hgx-h200", 8, options=fp8)
    kv = kv_blocks(it, scheduler_spec(setup, it.plan.gpu.hbm_bytes))
    assert kv.bytes_per_token == 576 * 61
    assert kv.blocks == kv.bytes_per_gpu // (576 * 61 * 16)


def test_a_cache_too_small_preempts_and_stretches_ttft() -> None:
    """64 clients of 1000 + 500 tokens need 96k tokens of cache; at 25 % of the GPU's
    memory it holds about a tenth of that: preemptions, and a TTFT tail the full cache
    does not have."""
    work = (1, Lengths("fixed", 1000), Lengths("fixed", 500))
    big = serve(ServeSetup(MODEL, TOPO, 1), lengths=work, concurrency=64, count=256)
    small = serve(ServeSetup(MODEL, TOPO, 1, overrides=(("gpu_memory_utilization", 0.25),)),
                  lengths=work, concurrency=64, count=256)  # fmt: skip
    assert big.preemptions == 0 and small.preemptions > 0
    assert small.kv.tokens < 96_000
    b, s = big.summary(), small.summary()
    assert s["p99_ttft_ms"] > 3 * b["p99_ttft_ms"]
    assert max(r.preemptions for r in small.requests) >= 1


def test_littles_law_and_closed_loop_throughput() -> None:
    r = serve(ServeSetup(MODEL, TOPO, 1), lengths=(0, Lengths("uniform", 100, 1500),
              Lengths("uniform", 10, 300)), concurrency=16, count=300)  # fmt: skip
    s = r.summary()
    assert s["littles_law_ratio"] == pytest.approx(1.0, abs=0.01)
    assert s["request_throughput"] * s["mean_e2el_ms"] / 1e3 == pytest.approx(16, rel=0.05)


def test_open_loop_littles_law_and_saturation() -> None:
    def run(rate: float) -> dict[str, object]:
        t = arrival_times(streams(0)[0], rate, "poisson", 1.0, requests=400)
        reqs = synthetic(0, Lengths("fixed", 512), Lengths("fixed", 128), count=400, arrival_s=t)
        return serve(ServeSetup(MODEL, TOPO, 1), requests=reqs).summary()

    light, heavy = run(2.0), run(200.0)
    for s in (light, heavy):
        assert s["littles_law_ratio"] == pytest.approx(1.0, abs=0.01)
    assert light["saturated"] is False
    assert heavy["saturated"] is True


def test_every_step_within_the_budget() -> None:
    r = serve(ServeSetup(MODEL, TOPO, 1, overrides=(("max_num_batched_tokens", 512),
              ("max_num_seqs", 8))), lengths=(0, Lengths("uniform", 1, 3000),
              Lengths("uniform", 1, 50)), concurrency=32, count=100)  # fmt: skip
    steps = r.steps[0]
    assert max(s.tokens for s in steps) <= 512
    assert max(s.running for s in steps) <= 8
    assert len(r.requests) == 100


def test_replicas_share_the_load() -> None:
    t = arrival_times(streams(0)[0], 20.0, "poisson", 1.0, requests=200)
    reqs = synthetic(0, Lengths("fixed", 256), Lengths("fixed", 64), count=200, arrival_s=t)
    r = serve(ServeSetup(MODEL, TOPO, 1, dp=2), requests=reqs)
    assert len(r.steps) == 2 and all(len(s) > 0 for s in r.steps)
    assert len(r.requests) == 200


def test_a_request_beyond_the_context_is_refused() -> None:
    with pytest.raises(ConfigError, match="context"):
        serve(ServeSetup(MODEL, TOPO, 1), lengths=(0, Lengths("fixed", 130_000),
              Lengths("fixed", 2000)), concurrency=1, count=1)  # fmt: skip


def test_exact_and_cached_runs_agree() -> None:
    work = (3, Lengths("uniform", 50, 2000), Lengths("uniform", 5, 100))
    cached = serve(ServeSetup(MODEL, TOPO, 1), lengths=work, concurrency=8, count=40).summary()
    exact = serve(ServeSetup(MODEL, TOPO, 1, exact=True), lengths=work, concurrency=8,
                  count=40).summary()  # fmt: skip
    for key in ("mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms"):
        assert cached[key] == pytest.approx(exact[key], rel=0.01)
    _ = json.dumps(cached)


@pytest.mark.parametrize("engine", ["vllm", "vllm-v0", "sglang", "trtllm", "fastertransformer",
                                    "gpt-fast", "tgi-v1"])  # fmt: skip
def test_every_shipped_engine_serves(engine: str) -> None:
    """Each profile's scheduler runs a light load to the end; one request at a time
    (gpt-fast) queues the most."""
    t = arrival_times(streams(0)[0], 2.0, "poisson", 1.0, requests=20)
    reqs = synthetic(0, Lengths("fixed", 512), Lengths("fixed", 128), count=20, arrival_s=t)
    s = serve(ServeSetup(MODEL, TOPO, 1, options=Options(engine=engine)), requests=reqs).summary()
    assert s["completed"] == 20 and s["littles_law_ratio"] == pytest.approx(1.0, abs=0.01)
    assert 3 < s["mean_tpot_ms"] < 30


def test_a_profile_overrides_the_scheduler(tmp_path: Path) -> None:
    """A profile file extending vllm sets scheduler entries; a misspelt one is refused
    naming it."""
    from tpsim.calibration import CalibrationError

    entry = "      value: {v}\n      source: test\n"
    f = tmp_path / "a.yaml"  # profiles are cached by their path: one file each
    f.write_text("name: mine\nabout: x\nextends: vllm\noverrides:\n  scheduler:\n"
                 "    max_num_seqs:\n" + entry.format(v=7))  # fmt: skip
    assert scheduler(str(f), 80 * 2**30).max_num_seqs == 7
    f = tmp_path / "b.yaml"
    f.write_text("name: mine\nabout: x\nextends: vllm\noverrides:\n  scheduler:\n"
                 "    max_num_seq:\n" + entry.format(v=7))  # fmt: skip
    with pytest.raises(CalibrationError, match="max_num_seq"):
        scheduler(str(f), 80 * 2**30)
    f = tmp_path / "c.yaml"
    f.write_text("name: mine\nabout: x\nextends: vllm\noverrides:\n  scheduler:\n"
                 "    prefix_caching:\n" + entry.format(v="false"))  # fmt: skip
    assert scheduler(str(f), 80 * 2**30).prefix_caching is False
    assert scheduler("vllm", 80 * 2**30).prefix_caching is True
