"""tpsim serve on the command line: vllm-bench keys, one line and exit 2 for every bad
value, the same bytes for the same seed, outputs written whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpsim.cli import main
from tpsim.experiments.plots.serve import draw_timeline
from tpsim.experiments.serve.run import ServeSetup, serve
from tpsim.experiments.serve.workload import Lengths

BASE = ["serve", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1"]
SMALL = ["--requests", "40", "--prompt-len", "uniform:100-900", "--output-len", "uniform:5-60"]
KEYS = [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
        for s in ("mean", "median", "p90", "p99")]  # fmt: skip


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_has_the_vllm_bench_keys(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run([*BASE, "--rate", "5", *SMALL, "--json", "--slo-ttft-ms", "200",
                      "--slo-tpot-ms", "20"], capsys)  # fmt: skip
    assert rc == 0
    j = json.loads(out)
    for key in ("request_throughput", "output_throughput", "total_token_throughput",
                "goodput", *KEYS):  # fmt: skip
        assert isinstance(j[key], float), key
    assert j["completed"] == 40 and 0 <= j["goodput"] <= j["request_throughput"]


def test_same_seed_same_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outs = []
    for k in range(2):
        f = tmp_path / f"r{k}.jsonl"
        rc, out, _ = run([*BASE, "--rate", "8", "--arrivals", "gamma", "--burstiness", "2",
                          *SMALL, "--seed", "11", "--out", str(f)], capsys)  # fmt: skip
        assert rc == 0
        outs.append((out.replace(str(f), "F"), f.read_bytes()))
    assert outs[0] == outs[1]
    rows = [json.loads(line) for line in outs[0][1].decode().splitlines()]
    assert [r["id"] for r in rows] == list(range(40))
    rc, other, _ = run([*BASE, "--rate", "8", "--arrivals", "gamma", "--burstiness", "2",
                        *SMALL, "--seed", "12"], capsys)  # fmt: skip
    assert other != outs[0][0]


def test_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run([*BASE, "--concurrency", "4", *SMALL, "--plots", str(tmp_path / "p")],
                     capsys)  # fmt: skip
    assert rc == 0
    for name in ("timeline.png", "latency_cdf.png"):
        assert (tmp_path / "p" / name).read_bytes()[:4] == b"\x89PNG"
        assert f"wrote {tmp_path / 'p' / name}" in out


def test_the_timeline_counts_on_whole_numbers() -> None:
    """Four clients of an engine that runs two sequences at once: two wait at most, and the
    'requests waiting' axis was ticked 0, 0.5, 1, 1.5, 2 (half a request)."""
    setup = ServeSetup("llama-3.1-8b", "dgx-h100", 1, overrides=(("max_num_seqs", 2),))
    work = (0, Lengths("fixed", 16), Lengths("fixed", 20))
    result = serve(setup, lengths=work, concurrency=4, count=8, timer=lambda step: 0.01)
    assert max(s.waiting for steps in result.steps for s in steps) == 2
    fig = draw_timeline(result, "t")
    fig.canvas.draw()  # type: ignore[no-untyped-call]
    for ax in fig.axes[:2]:
        ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
        assert ticks and all(t == int(t) for t in ticks), (ax.get_ylabel(), ticks)


def test_the_timeline_of_disaggregated_pools_names_them_each_against_its_own_cache() -> None:
    """2 prefill workers at TP 1 and a decode worker at TP 2: the legend said 'instance 0..2'
    and the prefill pool's blocks in use were divided by the decode pool's (which holds
    more), under-reading its cache in use."""
    from tpsim.experiments.serve.disagg import Disagg

    setup = ServeSetup("llama-3.1-8b", "dgx-h100", 2, disagg=Disagg(1, 2, 2, 1))
    work = (0, Lengths("fixed", 3000), Lengths("fixed", 4))
    result = serve(setup, lengths=work, concurrency=4, count=8, timer=lambda step: 0.01)
    p_blocks, d_blocks = result.prefill_kv.blocks, result.kv.blocks  # type: ignore[union-attr]
    assert p_blocks < d_blocks
    fig = draw_timeline(result, "t")
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["prefill 0", "prefill 1", "decode 0"]
    used = max(s.blocks_used for s in result.steps[0])
    peak = max(fig.axes[2].get_lines()[0].get_ydata())
    assert used > 0 and peak == pytest.approx(used / p_blocks * 100)


def test_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "t.csv"
    rows = [f"2023-11-16 18:15:{10 + k:02d}.5,{100 + 10 * k},{5 + k}\n" for k in range(20)]
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(rows))
    rc, out, _ = run([*BASE, "--trace", str(f), "--json"], capsys)
    assert rc == 0 and json.loads(out)["completed"] == 20


def test_a_shared_prefix_is_cached(capsys: pytest.CaptureFixture[str]) -> None:
    """900 of 1000 prompt tokens shared by 4 groups: the prefix cache cuts the prefills and
    with them TTFT."""
    ttft = []
    for prefix in ("0", "900"):
        rc, out, _ = run([*BASE, "--rate", "10", "--requests", "100", "--prompt-len", "1000",
                          "--output-len", "50", "--prefix-len", prefix, "--prefix-groups", "4",
                          "--json"], capsys)  # fmt: skip
        assert rc == 0
        ttft.append(json.loads(out)["mean_ttft_ms"])
    assert ttft[1] < 0.5 * ttft[0]


def test_async_scheduling_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's profile schedules one iteration ahead (v0.14's default): in a closed loop every
    request arrives while the engine runs, and waits about one more iteration for its first
    token, its later tokens none; --no-async-scheduling turns it off, and the text says
    which ran. Off, the engine also overlaps less of its host work with the GPU (0.5 of it
    against 0.9, vllm.yaml host_overlap_sync): every step, so every token, a little slower."""
    got = {}
    for flag in ("--async-scheduling", "--no-async-scheduling"):
        argv = ["--concurrency", "8", "--requests", "60", "--prompt-len", "200"]
        rc, out, _ = run([*BASE, *argv, "--output-len", "uniform:20-60", flag, "--json"], capsys)
        assert rc == 0
        got[flag] = json.loads(out)
    ahead, sync = got["--async-scheduling"], got["--no-async-scheduling"]
    step = sync["mean_tpot_ms"]
    assert ahead["mean_ttft_ms"] - sync["mean_ttft_ms"] == pytest.approx(step, rel=0.3)
    assert 0 < step - ahead["mean_tpot_ms"] < 0.05 * step
    rc, out, _ = run([*BASE, "--rate", "2", "--requests", "5"], capsys)
    assert rc == 0 and "vllm, continuous, async scheduling" in out


def test_saturation_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run([*BASE, "--rate", "400", "--requests", "300", "--prompt-len", "2000",
                      "--output-len", "100"], capsys)  # fmt: skip
    assert rc == 0 and "SATURATED" in out


def test_a_long_prompt_overload_is_saturated(capsys: pytest.CaptureFixture[str]) -> None:
    """64K-token prompts at 0.5 req/s on one H100, which completes about 0.28 a second: its
    waiting line averages 13, 20, 29 and 35 over the quarters of 100 arrivals, a growth the
    square root of a Poisson count (11 at 30) had called noise; the batch means of each
    quarter's average say it is not. The queue grows by the arrival rate less what the
    engine completes, under the rate."""
    args = ["serve", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1"]
    args += ["--seed", "1", "--rate", "0.5", "--requests", "100", "--prompt-len", "65536"]
    assert main([*args, "--output-len", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["saturated"]
    assert 0.1 < out["queue_growth_per_s"] < 0.5


def test_expert_parallel(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["serve", "--model", "qwen3-30b-a3b", "--topology", "dgx-h100", "--tp", "2",
                      "--ep", "2", "--rate", "5", "--requests", "20", "--output-len", "20"],
                     capsys)  # fmt: skip
    assert rc == 0 and "tp 2, ep 2, engine vllm" in out


def test_disaggregated(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run([*BASE, "--prefill-tp", "1", "--decode-tp", "2", "--decode-workers", "2",
                      "--rate", "10", *SMALL, "--json"], capsys)  # fmt: skip
    assert rc == 0
    j = json.loads(out)
    assert j["completed"] == 40 and j["kv_transfers"] == 40  # every output is 5-60 tokens
    rc, out, _ = run([*BASE, "--prefill-workers", "1", "--rate", "10", *SMALL], capsys)
    assert rc == 0 and "1P (tp 1) + 1D (tp 1)" in out and "KV transfers" in out


def test_attention_data_parallel_groups_serve(capsys: pytest.CaptureFixture[str]) -> None:
    """A MoE model's attention groups, each with its own batch, stepping together."""
    argv = ["serve", "--model", "qwen3-30b-a3b", "--topology", "dgx-h100", "--tp", "1",
            "--attention-dp", "2", "--ep", "2", "--rate", "10", *SMALL]  # fmt: skip
    rc, out, _ = run(argv, capsys)
    assert rc == 0 and "tp 1 x attention-dp 2, ep 2" in out and "Successful requests:" in out
    assert "KV cache per attention group (tokens):" in out


def test_setup_line_names_the_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    """The line above the figures names the hosts the layout spans, as run's title does:
    TP 8 x PP 2 over two DGX H100s is 16 GPUs, not 'on dgx-h100' (a host of 8)."""
    argv = ["serve", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--nodes", "2",
            "--tp", "8", "--pp", "2", "--rate", "10", *SMALL]  # fmt: skip
    rc, out, _ = run(argv, capsys)
    assert rc == 0 and "llama-3.1-8b on dgx-h100x2, tp 8 x pp 2, engine vllm" in out
    rc, out, _ = run([*BASE, "--rate", "10", *SMALL], capsys)
    assert rc == 0 and "llama-3.1-8b on dgx-h100, tp 1, engine vllm" in out


def test_run_moe_flags_serve(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """serve takes run's --moe-a2a, --moe-tp and --routing: the dispatch kernels and the
    routing move the steps, and a split that does not fill the MoE group is refused."""
    moe = ["serve", "--model", "qwen3-30b-a3b", "--topology", "dgx-h100", "--tp", "1",
           "--attention-dp", "2", "--ep", "2", "--rate", "10", *SMALL, "--json"]  # fmt: skip
    tpot = {}
    for a2a in ("nccl", "deepep"):
        rc, out, _ = run([*moe, "--moe-a2a", a2a], capsys)
        assert rc == 0
        tpot[a2a] = json.loads(out)["mean_tpot_ms"]
    assert tpot["nccl"] != tpot["deepep"]
    # every token's top-8 on experts 0-7 (EP rank 0's): a decode step of a few dozen tokens
    # reads those 8 experts' weights, not the ~100 that uniform routing touches
    hot = tmp_path / "routing.txt"
    hot.write_text(",".join(["1"] * 8 + ["0"] * 120) + "\n")
    rc, out, _ = run([*moe, "--routing", str(hot)], capsys)
    assert rc == 0 and json.loads(out)["mean_tpot_ms"] < 0.95 * tpot["nccl"]
    rc, out, _ = run([*moe[:-1], "--moe-tp", "1", "--moe-a2a", "deepep"], capsys)
    assert rc == 0 and "tp 1 x attention-dp 2, ep 2, moe-a2a deepep, engine vllm" in out
    rc, _, err = run([*moe, "--moe-tp", "2"], capsys)
    assert rc == 2 and "moe_tp=2" in err
    rc, _, err = run([*moe, "--expert-skew", "100"], capsys)  # as run: held to N/k, said
    assert rc == 0 and "warning: --expert-skew=100: held to 16" in err


def test_pipeline_stages_serve(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run([*BASE, "--pp", "2", "--rate", "10", *SMALL], capsys)
    assert rc == 0 and "tp 1 x pp 2" in out and "Successful requests:" in out
    assert "KV cache per virtual engine (tokens):" in out


BAD = [
    (["--rate", "0"], "--rate=0"),
    (["--rate", "nan"], "--rate=nan"),
    (["--rate", "-3"], "--rate=-3"),
    (["--concurrency", "0"], "--concurrency=0"),
    (["--rate", "1", "--concurrency", "2"], "--concurrency and --rate"),
    ([], "workload=none"),
    (["--rate", "1", "--requests", "0"], "--requests=0"),
    (["--rate", "1", "--requests", "5", "--duration", "3"], "--duration=3"),
    (["--concurrency", "1", "--arrivals", "gamma"], "--arrivals=gamma"),
    (["--rate", "1", "--burstiness", "2"], "--burstiness=2"),
    (["--rate", "1", "--burstiness", "inf", "--arrivals", "gamma"], "--burstiness=inf"),
    (["--rate", "1", "--prompt-len", "uniform:9-1"], "--prompt-len=uniform:9-1"),
    (["--rate", "1", "--output-len", "lognormal:x,1"], "--output-len=lognormal:x,1"),
    (["--rate", "1", "--prompt-len", "/no/such/file"], "--prompt-len=/no/such/file"),
    (["--rate", "1", "--prompt-len", "-5"], "--prompt-len=-5: lengths must be whole"),
    (["--trace", "/no/such.csv"], "--trace=/no/such.csv"),
    (["--rate", "1", "--pp", "2", "--attention-dp", "2"], "pp=2"),
    (["--rate", "1", "--pp", "2", "--decode-workers", "2"], "pp=2"),
    (["--rate", "1", "--pp", "16"], "tp*pp*dp"),
    (["--rate", "1", "--dp", "16"], "dp"),
    (["--rate", "1", "--attention-dp", "2"], "attention_dp=2"),  # a dense model
    (["--rate", "1", "--attention-dp", "2", "--prefill-workers", "1"], "attention_dp=2"),
    (["--rate", "1", "--prefill-workers", "0"], "--prefill-workers=0"),
    (["--rate", "1", "--decode-tp", "-2"], "--decode-tp=-2"),
    (["--rate", "1", "--prefill-workers", "2", "--dp", "2"], "dp=2"),
    (["--rate", "1", "--prefill-workers", "5", "--decode-workers", "4"], "prefill_workers=5"),
    (["--rate", "1", "--decode-tp", "2", "--engine", "fastertransformer"], "static"),
    (["--rate", "1", "--ep", "2"], "ep=2"),
    (
        [
            "--rate",
            "1",
            "--model",
            "qwen3-30b-a3b",
            "--tp",
            "2",
            "--prefill-tp",
            "1",
            "--decode-tp",
            "4",
            "--ep",
            "2",
        ],
        "--prefill-tp=1: --ep=2 must divide it",
    ),
    (
        ["--rate", "1", "--tp", "2", "--prefill-tp", "2", "--decode-tp", "2", "--moe-tp", "2"],
        "moe_tp=2: llama-3.1-8b has no experts",
    ),
    (
        [
            *("--rate", "1", "--model", "qwen3-30b-a3b", "--prefill-tp", "2"),
            *("--decode-tp", "4", "--ep", "2", "--moe-tp", "2"),
        ],
        "--prefill-tp=2: moe_tp=2: moe_tp*ep must be",
    ),
    (["--rate", "1", "--ep", "3"], "ep=3"),
    (["--rate", "1", "--max-num-seqs", "0"], "--max-num-seqs=0"),
    (["--rate", "1", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization=1.5"),
    (["--rate", "1", "--gpu-memory-utilization", "0.1"], "KV cache"),
    (["--rate", "1", "--engine", "nosuch"], "nosuch"),
    (["--rate", "1", "--out", "x.csv"], "--out=x.csv"),
    (["--rate", "1", "--prompt-len", "200000"], "context"),
    (["--rate", "1", "--slo-ttft-ms", "-1"], "--slo-ttft-ms=-1"),
    (["--rate", "1", "--seed", "-1"], "--seed=-1"),
    (["--rate", "1", "--prefix-len", "-4"], "--prefix-len=-4"),
    (["--rate", "1", "--prefix-groups", "0"], "--prefix-groups=0"),
    (["--rate", "1", "--requests", "2000000"], "--requests=2000000"),
    (["--rate", "1e6", "--duration", "1e6"], "--duration=1e+06"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[" ".join(a) or "none" for a, _ in BAD])
def test_bad_values_exit_2_with_one_line(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    rc, out, err = run([*BASE, *args], capsys)
    assert rc == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err
    assert list(tmp_path.iterdir()) == []


def test_a_normal_cut_at_one_token_says_its_mean(capsys: pytest.CaptureFixture[str]) -> None:
    """normal:100,200 draws below 1 token a third of the time; cut there its mean is 140,
    which the warning says (and the drawn lengths hold to)."""
    import numpy as np
    from tpsim.experiments.serve.workload import parse_lengths

    lengths = parse_lengths("--prompt-len", "normal:100,200")
    drawn = lengths.draw(np.random.default_rng(0), 200_000)
    assert lengths.clipped_mean == pytest.approx(drawn.mean(), rel=0.01)
    rc, _, err = run([*BASE, "--rate", "1", "--requests", "20", "--prompt-len",
                      "normal:100,200"], capsys)  # fmt: skip
    assert rc == 0 and "mean is 140, not 100" in err
    rc, _, err = run([*BASE, "--rate", "1", "--requests", "20", "--prompt-len",
                      "normal:1000,100"], capsys)  # fmt: skip
    assert rc == 0 and "cut at 1 token" not in err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--rate", "1e-300"], "--rate=1e-300: its arrivals would span"),
        (["--rate", "1", "--max-num-batched-tokens", "16"], "--max-num-batched-tokens=16:"),
        (["--rate", "1", "--block-size", "7"], "--block-size=7: vLLM's CUDA KV cache takes"),
        (["--rate", "1", "--prefix-groups", "3"], "--prefix-groups=3: needs --prefix-len"),
        (["--rate", "1", "--max-num-seqs", "9999999"], "at most 1,048,576"),
    ],
)
def test_settings_vllm_would_refuse_are_refused(
    extra: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = run([*BASE, "--requests", "30", *extra], capsys)
    assert rc == 2 and out == "" and says in err and len(err.strip().splitlines()) == 1


def test_a_trace_header_may_space_its_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`TIMESTAMP, ContextTokens, GeneratedTokens` (a space after each comma, as the serve
    page writes it) and a blank first line read as the plain header."""
    spaced = tmp_path / "spaced.csv"
    spaced.write_text("\nTIMESTAMP, ContextTokens, GeneratedTokens\n0, 100, 10\n1, 200, 20\n")
    rc, out, _ = run([*BASE, "--trace", str(spaced), "--json"], capsys)
    assert rc == 0 and json.loads(out)["completed"] == 2


def test_sglang_deepep_past_its_buffer_is_refused_before_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """SGLang hands a decode step's tokens to DeepEP's low-latency kernels at once (128 a
    GPU): its default max_num_seqs let the batch past that, and serve exited partway, on
    the step that first grew past it, without naming the flag that fixes it."""
    argv = ["serve", "--model", "qwen3-30b-a3b", "--topology", "dgx-h100", "--tp", "1",
            "--attention-dp", "8", "--ep", "8", "--moe-a2a", "deepep", "--engine", "sglang",
            "--rate", "5", "--requests", "20", "--out", str(tmp_path / "r.jsonl")]  # fmt: skip
    rc, out, err = run(argv, capsys)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "max_num_seqs=4096" in err and "--max-num-seqs 128" in err
    assert not (tmp_path / "r.jsonl").exists()
    rc, _, _ = run([*argv, "--max-num-seqs", "128"], capsys)
    assert rc == 0
