"""check-claim: a lower bound on the step time that no implementation (and no simulation)
beats, with numbers derivable by hand."""

from __future__ import annotations

import json

import pytest
from tpsim import Layout, Options, Workload, simulate
from tpsim.cli import main
from tpsim.experiments.claim import check_claim, lower_bound
from tpsim.models.catalog import get_model


def test_70b_on_8_h100_batch_1_is_bound_by_weight_reads() -> None:
    # 69e9 params x 2 B / 8 GPUs = 17.2 GB per GPU (less the embedding table, which a
    # step never reads whole) at 3.35 TB/s: >= 5.1 ms per token, so <= 195 tokens/s.
    b = lower_bound("llama-2-70b", "dgx-h100", 8, Workload(1, "decode", context_len=1024))
    assert b.binding == "memory"
    spec = get_model("llama-2-70b")
    embedding = spec.vocab_size * spec.hidden_size * 2 / 8
    weights = spec.num_params() * 2 / 8 - embedding
    assert b.details["weight_bytes_read_per_gpu"] == pytest.approx(weights, rel=1e-3)
    kv = b.details["kv_bytes_read_per_gpu"]
    assert b.tokens_per_s == pytest.approx(3.35e12 / (weights + kv), rel=1e-4)  # norms: tiny
    assert 190 < b.tokens_per_s < 200
    assert check_claim(5000, b).verdict == "impossible"
    assert check_claim(20, b).verdict == "plausible"
    assert check_claim(5000, b).ratio == pytest.approx(5000 / b.tokens_per_s)


@pytest.mark.parametrize(
    ("model", "topology", "layout", "nodes", "workload"),
    [
        ("llama-3.1-8b", "dgx-h100", 1, 1, Workload(1, "decode", context_len=512)),
        ("llama-3.1-8b", "dgx-h100", 8, 1, Workload(64, "decode", context_len=2048)),
        ("llama-3.1-8b", "dgx-a100", 4, 1, Workload(4, "prefill", prompt_len=1024)),
        ("llama-2-7b", "pcie-l40s", 8, 1, Workload(1, "prefill", prompt_len=2048)),
        ("llama-3.1-8b", "dgx-h100", Layout(8, 4), 2, Workload(16, "decode", context_len=512)),
        # mixture-of-experts (k experts a layer at least) and sliding windows
        ("qwen3-30b-a3b", "dgx-h100", 1, 1, Workload(1, "decode", context_len=8192)),
        ("mixtral-8x7b", "dgx-h100", 8, 1, Workload(64, "decode", context_len=2048)),
        ("gpt-oss-20b", "dgx-h100", 1, 1, Workload(4, "prefill", prompt_len=16384)),
        ("mistral-7b", "dgx-h100", 2, 1, Workload(8, "decode", context_len=16384)),
    ],
)
def test_no_simulation_beats_the_bound(
    model: str, topology: str, layout: Layout | int, nodes: int, workload: Workload
) -> None:
    bound = lower_bound(model, topology, layout, workload, nodes=nodes)
    sim = simulate(model, topology, layout, workload, Options(ideal=True), nodes=nodes)
    assert sim.latency_s >= bound.step_s * (1 - 1e-9)
    assert sim.summary["tokens_per_s"] <= bound.tokens_per_s * (1 + 1e-9)


def test_large_prefill_is_compute_bound_and_tp_1_has_no_communication() -> None:
    b = lower_bound("llama-3.1-8b", "dgx-h100", 1, Workload(8, "prefill", prompt_len=2048))
    assert b.binding == "compute" and b.terms_s["communication"] == 0
    # 2 FLOPs per linear weight per token dominate: 16384 tokens x 2 x ~7e9 / 989e12 ~ 0.23 s
    assert 0.2 < b.step_s < 0.3


def test_cross_node_group_pays_for_the_host_boundary() -> None:
    w = Workload(64, "prefill", prompt_len=512)
    one = lower_bound("llama-3.1-8b", "dgx-h100", 8, w)
    two = lower_bound("llama-3.1-8b", "dgx-h100", Layout(8, 4), w, nodes=2)
    # each host must receive every all-reduce's n bytes through 8 NICs x 50 GB/s
    assert two.details["host_ingress_Bps"] == pytest.approx(8 * 50e9)
    assert two.terms_s["communication"] > one.terms_s["communication"]


def test_a_layout_that_does_not_fit_is_impossible() -> None:
    b = lower_bound("llama-3.1-405b", "dgx-h100", 1, Workload(1, "decode"))
    assert not b.fits and check_claim(0.001, b).verdict == "impossible"


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["check-claim", "--model", "llama-2-70b", "--topology", "dgx-h100", "--tp", "8"]
    assert main([*args, "--tokens-per-s", "5000", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["verdict"] == "impossible" and j["binding"] == "memory"
    assert j["ratio"] == pytest.approx(5000 / j["bound_tokens_per_s"])
    assert main([*args, "--tokens-per-s", "20"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("plausible: 20 tokens/s claimed") and "set by memory" in text
    assert main([*args, "--tokens-per-s", "-1"]) == 2
    assert main([*args[:-1], "3", "--tokens-per-s", "1"]) == 2
    assert "tp=3" in capsys.readouterr().err


def test_a_moe_token_reads_its_k_experts_at_least() -> None:
    """Batch 1 of Qwen3-30B-A3B on one GPU: the bound reads the attention, the routers and,
    per MoE layer, the 8 experts the token picks (of 128), not every expert."""
    spec = get_model("qwen3-30b-a3b")
    b = lower_bound("qwen3-30b-a3b", "dgx-h100", 1, Workload(1, "decode", context_len=2))
    read = b.details["weight_bytes_read_per_gpu"] / 2  # bf16
    active = spec.active_params(embedding=False)  # attention, routers, 8 experts, the head
    assert read == pytest.approx(active, rel=0.01)
    assert read < spec.num_params() / 10


def test_a_window_caps_the_kv_read() -> None:
    """Mistral-7B-v0.1 (window 4096): at 16K of context the cache read is the window's."""
    at = {n: lower_bound("mistral-7b", "dgx-h100", 1, Workload(1, "decode", context_len=n))
          for n in (4097, 16384)}  # fmt: skip
    kv = {n: b.details["kv_bytes_read_per_gpu"] for n, b in at.items()}
    assert kv[16384] == kv[4097] > 0
