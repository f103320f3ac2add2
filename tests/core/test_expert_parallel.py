"""Expert parallelism and attention data parallelism (tpsim.core.lowering.experts): the split,
the routed load of each rank, memory, the simulated step, and the closed forms behind them
(the all-to-all of dispatched tokens in test_expert_parallel_a2a.py, uneven routing in
test_expert_parallel_routing.py)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from tpsim.core.api import simulate
from tpsim.core.config import ConfigError, Layout, Options, Workload
from tpsim.core.lowering.experts import expected_max, expert_split
from tpsim.core.memory import linear_params_of_layer, memory_per_gpu
from tpsim.models import MODELS
from tpsim.topologies.gpus import GPUS

MIXTRAL = MODELS["mixtral-8x7b"]  # 8 experts, top 2
QWEN = MODELS["qwen3-30b-a3b"]  # 128 experts, top 8


# -- the expected maximum load: the rank that gates each MoE layer ---------------------------


@pytest.mark.parametrize(("trials", "p", "ranks"), [(2, 1 / 8, 8), (64, 1 / 8, 8), (512, 0.25, 4),
                                                    (16, 0.5, 16), (2048, 1 / 64, 64)])  # fmt: skip
def test_expected_max_of_binomials_matches_sampling(trials: int, p: float, ranks: int) -> None:
    rng = np.random.default_rng(7)
    draws = rng.binomial(trials, p, size=(200_000, ranks)).max(axis=1)
    assert expected_max(trials, p, ranks) == pytest.approx(draws.mean(), rel=0.01)


def test_expected_max_of_one_rank_is_the_mean_and_normal_branch_is_continuous() -> None:
    assert expected_max(100, 0.3, 1) == pytest.approx(30.0)
    # exact summation just under the switch to the normal approximation, and just over it
    below = expected_max(4095 * 8, 1 / 8, 8)
    above = expected_max(4097 * 8, 1 / 8, 8)
    assert above - below == pytest.approx(2.0, abs=0.6)


def test_pencil_value_two_pairs_over_eight_ranks() -> None:
    """One token, top 2 of 8 experts on 8 ranks: P(max = 0) = ((7/8)^2)^8, P(max <= 1) =
    (1 - (1/8)^2)^8, so E[max] = 2 - P(max=0) - P(max<=1)."""
    p0 = (7 / 8) ** 16
    p1 = (1 - 1 / 64) ** 8
    assert expected_max(2, 1 / 8, 8) == pytest.approx(2 - p0 - p1, rel=1e-12)


# -- the split and each rank's load ------------------------------------------------------------


def test_tensor_parallel_experts_keep_the_closed_forms() -> None:
    """ep = 1: every rank computes every pair and reads every picked expert."""
    xs = expert_split(MIXTRAL, 8, 1, 1, 8)
    for tokens in (1, 2, 64):
        load = xs.load(tokens, 0, 0)
        assert load.pairs == tokens * 2
        assert load.experts_read == pytest.approx(MIXTRAL.experts_read(tokens))


@pytest.mark.parametrize(
    ("experts", "k", "ep", "tokens"), [(8, 2, 2, 1), (8, 2, 8, 1), (128, 8, 8, 1), (8, 2, 2, 4)]
)
def test_the_busiest_rank_reads_what_sampled_routing_reads(
    experts: int, k: int, ep: int, tokens: int
) -> None:
    """Experts read on the busiest EP rank, against routing drawn at random (each token k
    distinct experts): within 6 % at one token too. Rounding 1.375 pairs to one row had held
    Mixtral's EP 2 at one expert where 1.42 are read."""
    model = dataclasses.replace(MIXTRAL, num_experts=experts, experts_per_token=k)
    xs = expert_split(model, 8, 1, ep, 8 // ep)
    rng = np.random.default_rng(7)
    local = experts // ep
    busiest = []
    for _ in range(20000):
        hit = np.zeros(experts, bool)
        for _t in range(tokens):
            hit[rng.choice(experts, k, replace=False)] = True
        busiest.append(hit.reshape(ep, local).sum(axis=1).max())
    assert xs.load(tokens, 0, 0).experts_read == pytest.approx(np.mean(busiest), rel=0.06)


@pytest.mark.parametrize("skew", [1.0, 1.5, 3.0])
def test_skewed_loads_add_up_to_every_pair(skew: float) -> None:
    xs = expert_split(QWEN, 1, 8, 8, 1, skew)  # 16 experts per rank
    tokens = 4096
    loads = [xs.load(tokens, e, layer=3).pairs for e in range(8)]
    assert sum(loads) == pytest.approx(tokens * 8, abs=8)
    per_expert = tokens * 8 / 128
    hot = per_expert * (skew + 15 * (128 - skew) / 127)
    assert loads[3] == round(hot)  # layer 3: the hot expert on rank 3
    assert all(x <= loads[3] for x in loads)


def test_the_hot_rank_rotates_with_the_layer() -> None:
    xs = expert_split(MIXTRAL, 8, 1, 8, 1, 2.0)
    hot = []
    for layer in range(16):
        pairs = [xs.load(64, e, layer).pairs for e in range(8)]
        hot.append(pairs.index(max(pairs)))
    assert hot == [layer % 8 for layer in range(16)]


def test_layout_checks_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"ep=3: must divide the MoE group of tp\*attention_dp=8"):
        Layout(8, ep=3)
    with pytest.raises(ConfigError, match="moe_tp=2: moe_tp\\*ep must be"):
        Layout(8, ep=8, moe_tp=2)
    with pytest.raises(ConfigError, match=r"ep=16: must divide mixtral-8x7b's 8 routed experts"):
        simulate("mixtral-8x7b", "dgx-h100", Layout(2, attention_dp=8, ep=16), nodes=2)
    with pytest.raises(ConfigError, match=r"attention_dp=2: llama-3\.1-8b has no experts"):
        simulate("llama-3.1-8b", "dgx-h100", Layout(1, attention_dp=2))
    with pytest.raises(ConfigError, match=r"expert_skew=0\.5"):
        Options(expert_skew=0.5)


# -- memory -------------------------------------------------------------------------------------


def test_expert_parallel_ranks_hold_each_expert_once() -> None:
    """EP 8 x attention-DP 8 (TP 1): every rank holds 1 of 8 experts whole; the eight
    ranks together hold every expert exactly once (besides attention, replicated)."""
    layer = 0
    xs = expert_split(MIXTRAL, 1, 8, 8, 1)
    d, im = MIXTRAL.hidden_size, MIXTRAL.moe_intermediate_size
    tp_experts = linear_params_of_layer(MIXTRAL, 8, layer)  # 1/8 of every expert
    ep_experts = linear_params_of_layer(MIXTRAL, 1, layer, xs)
    attention_tp8 = tp_experts - d * 8 - 8 * 3 * d * (im // 8)
    attention_full = ep_experts - d * 8 - 3 * d * im
    assert attention_full == 8 * attention_tp8
    mem = memory_per_gpu(MIXTRAL, 1, Workload(1), Options(), GPUS["h100-sxm"], xs)
    assert mem.weights_bytes_per_gpu / 1e9 == pytest.approx(14.5, rel=0.02)


def test_mla_free_kv_per_rank_under_attention_dp_is_its_own_sequences() -> None:
    """Attention-DP splits sequences, not heads: at TP 1 a rank holds every KV head of
    its own batch."""
    xs = expert_split(MIXTRAL, 1, 8, 8, 1)
    wl = Workload(16, "decode", context_len=2048)
    mem = memory_per_gpu(MIXTRAL, 1, wl, Options(), GPUS["h100-sxm"], xs)
    m = MIXTRAL
    assert mem.kv_cache_bytes_per_gpu == 16 * 2048 * m.num_kv_heads * m.head_dim * 2 * 32 * 2


# -- simulation ---------------------------------------------------------------------------------


def test_attention_dp_dispatches_by_all_to_all_over_the_moe_group() -> None:
    r = simulate("mixtral-8x7b", "dgx-h100", Layout(2, attention_dp=4, ep=8), Workload(64))
    s = r.summary
    assert s["config"]["layout"] | {"pp_layers": None} == {
        "tp": 2, "pp": 1, "dp": 1, "micro_batches": 1, "pp_layers": None,
        "ep": 8, "attention_dp": 4, "moe_tp": 1,
    }  # fmt: skip
    sites = s["communication"]["by_site"]
    assert sites["moe_dispatch"]["count"] == 32 and sites["moe_combine"]["count"] == 32
    assert "moe_out" in sites  # the all-gather back to the attention group
    a2a = next(rec for rec in r.records if "moe_dispatch" in rec.name)
    assert "over 8 ranks" in a2a.detail
    # four attention groups of 64 sequences each
    assert s["tokens_per_s"] == pytest.approx(4 * 64 / s["latency_s"])
    assert {p["attention_dp"] for p in s["config"]["placement"]} == {0, 1, 2, 3}


def test_dispatched_bytes_per_rank_closed_form() -> None:
    """Each rank sends its T/tp tokens' k pairs (d values each, bf16) to the MoE group
    (Mixtral's 8 experts on 8 ranks: a token's two experts are two ranks)."""
    batch, tp = 64, 2
    r = simulate("mixtral-8x7b", "dgx-h100", Layout(tp, attention_dp=4, ep=8), Workload(batch))
    op = next(rec for rec in r.records if "moe_dispatch" in rec.name)
    assert f"all_to_all {batch // tp * 2 * 4096 * 2} B" in op.detail


def test_a_token_goes_once_to_each_rank_holding_some_of_its_experts() -> None:
    """Through NCCL a token travels once to each rank holding some of its experts (the
    rank sums its experts' outputs before the combine): with every expert split over the
    8 ranks (EP 1) that is every rank once, as vLLM's and SGLang's gather of the tokens,
    not once per expert (8 times for Qwen3's top 8); with 16 experts a rank (EP 8), the
    expected distinct ranks of 8 picks of 128, 8 (1 - C(112, 8) / C(128, 8)) = 5.3."""
    batch = 64
    tp1 = simulate("qwen3-30b-a3b", "dgx-h100", Layout(1, attention_dp=8), Workload(batch))
    op = next(rec for rec in tp1.records if "moe_dispatch" in rec.name)
    assert f"all_to_all {batch * 8 * 2048 * 2} B" in op.detail
    ep8 = simulate("qwen3-30b-a3b", "dgx-h100", Layout(1, attention_dp=8, ep=8), Workload(batch))
    op = next(rec for rec in ep8.records if "moe_dispatch" in rec.name)
    hit = 8 * (1 - math.comb(112, 8) / math.comb(128, 8))
    assert f"all_to_all {round(batch * hit) * 2048 * 2} B" in op.detail
    # DeepEP's kernels send per token-expert pair (its low-latency buffer is per expert)
    deep = simulate("qwen3-30b-a3b", "dgx-h100", Layout(1, attention_dp=8, ep=8),
                    Workload(batch), Options(moe_a2a="deepep"))  # fmt: skip
    op = next(rec for rec in deep.records if "moe_dispatch" in rec.name)
    assert f"all_to_all {batch * 8 * (2048 + 4 * 16 + 16)} B" in op.detail


def test_replicated_tokens_with_ep_all_reduce_like_tp_experts() -> None:
    tp8 = simulate("mixtral-8x7b", "dgx-h100", Layout(8), Workload(256))
    ep8 = simulate("mixtral-8x7b", "dgx-h100", Layout(8, ep=8), Workload(256))
    a = {k: x["count"] for k, x in tp8.summary["communication"]["by_site"].items()}
    b = {k: x["count"] for k, x in ep8.summary["communication"]["by_site"].items()}
    assert a == b  # one all-reduce per MoE layer either way
    # batch 256: every expert is read either way, and the pairs split evenly in expectation
    assert ep8.summary["latency_s"] == pytest.approx(tp8.summary["latency_s"], rel=0.1)


def test_ep_at_batch_one_waits_for_the_loaded_rank() -> None:
    """One token picks 2 of 8 experts: with EP 8 the two ranks holding them read a whole
    expert each while TP experts read 1/8 of two: EP decode at batch 1 is slower."""
    tp8 = simulate("mixtral-8x7b", "dgx-h100", Layout(8), Workload(1))
    ep8 = simulate("mixtral-8x7b", "dgx-h100", Layout(8, ep=8), Workload(1))
    assert ep8.summary["latency_s"] > 1.3 * tp8.summary["latency_s"]


def test_the_hottest_rank_gates_the_step_by_its_extra_compute() -> None:
    """Ideal, one host: with skew S the hot rank of each MoE layer computes longer and
    every other rank waits for it at the layer's all-reduce; the step grows by exactly the
    hot rank's extra MoE compute, summed over the layers."""
    opts = dict(ideal=True)
    wl = Workload(256, "prefill", prompt_len=64)
    lay = Layout(8, ep=8)
    even = simulate("mixtral-8x7b", "dgx-h100", lay, wl, Options(**opts, expert_skew=1.0))
    hot = simulate("mixtral-8x7b", "dgx-h100", lay, wl, Options(**opts, expert_skew=4.0))
    moe = ("experts_up", "experts_act", "experts_down", "moe_sum")

    def busy(result: object, rank_of_layer: object) -> float:
        return sum(
            rec.duration_s
            for rec in result.records  # type: ignore[attr-defined]
            if rec.name in moe and rec.rank == rank_of_layer(rec.layer)  # type: ignore[operator]
        )

    extra = busy(hot, lambda layer: layer % 8) - busy(even, lambda layer: 0)
    assert extra > 0
    delta = hot.summary["latency_s"] - even.summary["latency_s"]
    assert delta == pytest.approx(extra, rel=1e-9)


def test_skew_makes_ranks_differ_and_the_run_is_deterministic() -> None:
    lay, wl = Layout(2, attention_dp=4, ep=8), Workload(32)
    a = simulate("mixtral-8x7b", "dgx-h100", lay, wl, Options(expert_skew=2.0))
    b = simulate("mixtral-8x7b", "dgx-h100", lay, wl, Options(expert_skew=2.0))
    assert a.records == b.records and a.summary["latency_s"] == b.summary["latency_s"]
    up = {rec.rank: rec.duration_s for rec in a.records
          if rec.name == "experts_up" and rec.layer == 0}  # fmt: skip
    assert max(up, key=up.__getitem__) == 0  # layer 0: the hot expert on EP rank 0


def test_pipeline_stages_with_attention_dp() -> None:
    r = simulate("mixtral-8x7b", "dgx-h100", Layout(1, pp=2, attention_dp=4, ep=4), Workload(8))
    s = r.summary
    assert s["config"]["layout"]["pp"] == 2 and len(s["config"]["placement"]) == 8
    sites = set(s["communication"]["by_site"])
    assert {"moe_dispatch", "moe_combine", "pp"} <= sites


def test_small_batch_experts_read_their_weights_without_padding_to_wgmma_rows() -> None:
    """A token or two an expert run the fused MoE's 16-row block (vLLM's fused_moe
    default below as many tokens as experts), not Hopper's 64-row wgmma tiles: gpt-oss-120b
    at TP 2 on an H100 is memory-bound from batch 1, and each sequence more costs about
    the same (odd batches added 0.48 ms and even ones 0.01, from tiles over 132 SMs)."""
    steps = [
        simulate("gpt-oss-120b", "dgx-h100", Layout(2), Workload(b)).latency_s for b in range(2, 9)
    ]
    steps_up = [b - a for a, b in itertools.pairwise(steps)]
    assert min(steps_up) > 0.5 * max(steps_up)
    run = simulate("gpt-oss-120b", "dgx-h100", Layout(2), Workload(3))
    up = next(r for r in run.records if r.name == "experts_up")
    assert up.category == "memory"
