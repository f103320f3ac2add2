"""Expert parallelism and attention data parallelism (tpsim.core.lowering.experts): the split,
the routed load of each rank, the all-to-all of dispatched tokens, memory, and the closed
forms behind them."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re

import numpy as np
import pytest
from tpsim.core.api import simulate
from tpsim.core.config import ConfigError, Layout, Options, Workload
from tpsim.core.lowering.experts import expected_max, expert_split, read_histogram
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


# -- routing histograms ----------------------------------------------------------------------


def test_a_histogram_gives_each_rank_its_experts_share(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "hist.csv"
    path.write_text("# tokens per expert\n40, 10, 10, 10, 10, 10, 5, 5\n")
    hist = read_histogram(str(path), 8, 32)
    assert hist == ((0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05),)
    xs = expert_split(MIXTRAL, 8, 1, 8, 1, histogram=hist)
    tokens = 1000
    loads = [xs.load(tokens, e, 0) for e in range(8)]
    assert [x.pairs for x in loads] == [800, 200, 200, 200, 200, 200, 100, 100]
    # expert 0 is picked by a token with probability k * 0.4 = 0.8
    assert xs.load(1, 0, 0).experts_read == pytest.approx(0.8)
    # the hot rank gates every layer: the step is slower than balanced routing
    lay, wl = Layout(8, ep=8), Workload(256, "prefill", prompt_len=64)
    even = simulate("mixtral-8x7b", "dgx-h100", lay, wl, Options(expert_skew=1.0))
    hot = simulate("mixtral-8x7b", "dgx-h100", lay, wl, Options(routing=str(path)))
    assert hot.summary["latency_s"] > 1.3 * even.summary["latency_s"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1,2,3\n", "3 values, the model has 8 experts"),
        ("1,2,3,4,5,6,7,x\n", "not a list of numbers"),
        ("0,0,0,0,0,0,0,0\n", "every count is 0"),
        ("1,1,1,1,1,1,1,-1\n", "expert 7's count is -1; needs non-negative"),
        ("1,nan,1,1,1,1,1,1\n", "expert 1's count is nan"),
        ("# nothing\n", "no histogram in it"),
        ("1,1,1,1,1,1,1,1\n" * 3, "3 lines; give one, or one per MoE layer (32)"),
    ],
)
def test_bad_histograms_are_refused_naming_the_line(tmp_path: object, text: str, says: str) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "h.txt"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(says)):
        simulate("mixtral-8x7b", "dgx-h100", Layout(8, ep=8), options=Options(routing=str(path)))


def test_a_histogram_top_k_routing_cannot_make_is_refused(tmp_path: object) -> None:
    """Top-2: a token picks an expert at most once, so no expert takes over half the pairs
    (one hot expert alone would read one expert's weights, under the step's floor)."""
    from pathlib import Path

    path = Path(str(tmp_path)) / "one.txt"
    path.write_text("100,0,0,0,0,0,0,0\n")
    with pytest.raises(ConfigError, match=r"line 1: expert 0 takes 100.0% .* at most 50.0%"):
        read_histogram(str(path), 8, 32, top_k=2)
    path.write_text("50,50,0,0,0,0,0,0\n")
    assert read_histogram(str(path), 8, 32, top_k=2) == ((0.5, 0.5, 0, 0, 0, 0, 0, 0),)


def test_one_histogram_line_per_moe_layer_skips_the_dense_ones(tmp_path: object) -> None:
    from dataclasses import replace
    from pathlib import Path

    model = replace(MIXTRAL, dense_layers=(0,))
    rows = [[1] * 8 for _ in range(31)]
    rows[0] = [8, 0, 0, 0, 0, 0, 0, 0]  # the first MoE layer (layer 1): all on expert 0
    path = Path(str(tmp_path)) / "h.txt"
    path.write_text("\n".join(",".join(map(str, r)) for r in rows) + "\n")
    xs = expert_split(model, 8, 1, 8, 1, histogram=read_histogram(str(path), 8, 31))
    assert xs.load(64, 0, 1).pairs == 128 and xs.load(64, 1, 1).pairs == 0
    assert xs.load(64, 0, 2).pairs == 16


# -- the all-to-all kernels of dispatched tokens -----------------------------------------------


def test_grouped_routing_bounds_the_hosts_a_token_reaches() -> None:
    """DeepSeek-V3: 256 experts in 8 groups, each token within 4 groups. Over 8 hosts (a
    group per host) a token reaches 8 (1 - C(7,4)/C(8,4)) = 4 hosts: half its 8 pairs cross
    to a host another of its pairs already crosses to."""
    from dataclasses import replace

    xs = replace(expert_split(MODELS["deepseek-v3"], 1, 64, 64, 1), nodes=8)
    assert xs.nodes_hit() == pytest.approx(4.0)
    assert xs.node_dedup() == pytest.approx(0.5)
    plain = replace(expert_split(QWEN, 1, 16, 16, 1), nodes=2)  # 128 experts, top 8, 2 hosts
    miss = 1 - math.comb(64, 8) / math.comb(128, 8)
    assert plain.nodes_hit() == pytest.approx(2 * miss)


@pytest.mark.parametrize(("phase", "algo"), [("decode", "deepep_ll"), ("prefill", "deepep_normal")])
def test_deepep_dispatches_fp8_and_combines_bf16(phase: str, algo: str) -> None:
    wl = Workload(8, phase, prompt_len=64)
    r = simulate("deepseek-v3", "hgx-h200", Layout(1, attention_dp=8, ep=8), wl,
                 Options(dtype="fp8", moe_a2a="deepep"))  # fmt: skip
    ops = {
        rec.name.split(".")[0]: rec
        for rec in r.records
        if rec.site in ("moe_dispatch", "moe_combine")
    }
    pairs = wl.tokens * 8  # TP 1: each GPU dispatches its own tokens' 8 pairs
    assert f"all_to_all {pairs * (7168 + 4 * 56 + 16)} B" in ops["moe_dispatch"].detail
    assert f"all_to_all {pairs * 2 * 7168} B" in ops["moe_combine"].detail
    assert algo in ops["moe_dispatch"].detail


def test_attention_dp_over_two_hosts_says_so_in_the_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tpsim.cli import main

    argv = ["run", "--model", "mixtral-8x7b", "--topology", "dgx-h100", "--nodes", "2",
            "--tp", "1", "--attention-dp", "16", "--ep", "8", "--batch", "8",
            "--engine", "sglang"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "TP 1 x attention-DP 16, EP 8 x MoE-TP 2" in out
    assert "engine sglang" in out
    assert "network 8 NICs per host" in out
    assert "dp 0 pp 0: n0.gpu0-7, n1.gpu0-7" in out
    assert "per replica" not in out
    assert "1 of 8 routed experts per GPU, 1/2 of each one's width" in out
    assert "tokens dispatched by all-to-all (NCCL, --moe-a2a nccl)" in out  # which kernels


# -- uneven routing moves uneven traffic ------------------------------------------------------


def test_rank_shares_follow_the_load() -> None:
    """Each rank's share of the dispatched bytes is its experts' share of the pairs (over
    its width slices); uniform routing has none (every rank alike)."""
    assert expert_split(QWEN, 1, 8, 8, 1).rank_shares(0) == ()
    xs = expert_split(QWEN, 1, 8, 8, 1, 16.0)
    shares = xs.rank_shares(3)
    assert math.fsum(shares) == pytest.approx(1.0)
    tokens = 4096
    for r in range(8):  # the loads of the compute side, as the shares of the traffic
        assert xs.load(tokens, r, 3).pairs == pytest.approx(tokens * 8 * shares[r], abs=1)
    assert max(range(8), key=lambda r: shares[r]) == 3  # the hot rank rotates with the layer
    halves = expert_split(QWEN, 2, 4, 4, 2, 16.0).rank_shares(1)  # two width slices each
    assert halves[2] == halves[3] == pytest.approx(max(halves)) and len(halves) == 8


@pytest.mark.parametrize("a2a", ["nccl", "deepep"])
def test_a_hot_rank_receives_every_rank_s_tokens(tmp_path: object, a2a: str) -> None:
    """All of a layer's pairs to the last GPU's 16 experts (each a sixteenth, under the
    eighth top-8 routing allows): every rank sends its whole dispatch to the last GPU, whose
    port takes 7 ranks' bytes, and the combine sends them all back from it; the exchange is
    slower than under uniform routing, by about that port's load."""
    from pathlib import Path

    path = Path(str(tmp_path)) / "hot.txt"
    path.write_text(",".join(["0"] * 112 + ["1"] * 16) + "\n")
    lay, wl = Layout(1, attention_dp=8, ep=8), Workload(64)
    opts = {"moe_a2a": a2a}
    even = simulate("qwen3-30b-a3b", "dgx-h100", lay, wl, Options(**opts))
    hot = simulate("qwen3-30b-a3b", "dgx-h100", lay, wl, Options(**opts, routing=str(path)))

    def sent(r: object, site: str) -> dict[int, int]:
        out: dict[int, int] = {}
        for rec in r.records:  # type: ignore[attr-defined]
            if rec.site == site and rec.layer == 0:
                out[rec.rank] = out.get(rec.rank, 0) + rec.bytes
        return out

    dispatch = sent(hot, "moe_dispatch")
    assert dispatch[7] == 0 and len({dispatch[r] for r in range(7)}) == 1  # all to GPU 7
    combine = sent(hot, "moe_combine")
    d = 2048  # DeepEP: fp8 out (a scale per 128 values, a header), bf16 back
    back = 2 * d / (d + 4 * (d // 128) + 16) if a2a == "deepep" else 1.0
    assert combine[7] == pytest.approx(7 * dispatch[0] * back, rel=1e-3)  # GPU 7 returns all
    assert all(combine[r] == 0 for r in range(7))
    t_even = even.summary["communication"]["by_site"]["moe_dispatch"]["time_s"]
    t_hot = hot.summary["communication"]["by_site"]["moe_dispatch"]["time_s"]
    assert t_hot > 2 * t_even


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


def test_deepep_without_attention_dp_is_refused_naming_it() -> None:
    """--moe-a2a picks the dispatch kernels of attention DP; without it there is no
    dispatch, and the choice ran as a silent no-op."""
    with pytest.raises(ConfigError, match=r"^moe_a2a=deepep: .*attention_dp > 1"):
        simulate("qwen3-30b-a3b", "dgx-h100", Layout(8, ep=8), Workload(4),
                 Options(moe_a2a="deepep"))  # fmt: skip
