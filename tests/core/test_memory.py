"""The memory model: weights, KV cache and activations per GPU against usable HBM."""

from __future__ import annotations

import pytest
from tpsim import ConfigError, Layout, Options, Workload, simulate
from tpsim.calibration import default as default_calibration
from tpsim.cli import main
from tpsim.core.memory import activation_elements, linear_params_of_layer, memory_per_gpu
from tpsim.models.catalog import get_model
from tpsim.topologies.gpus import get_gpu


def test_llama_3_1_8b_at_tp2_by_hand() -> None:
    # d = 4096, 32 layers, 32 heads -> 16 per GPU, 8 KV heads -> 4, head_dim 128,
    # I = 14336 -> 7168 per GPU, vocab 128256 -> 64128 per GPU; bf16 (2 bytes).
    # Linear weights per layer: QKV 4096 x (16 + 2*4) * 128 = 12,582,912
    #   + O 16*128 x 4096 = 8,388,608 + gate/up/down 3 x 4096 x 7168 = 88,080,384
    #   = 109,051,904; x 32 layers = 3,489,660,928
    # Other: norms 2 x 4096 x 32 = 262,144; embedding and LM head 64128 x 4096 each
    #   = 2 x 262,668,288; final norm 4096; total 525,602,816
    # Weights: (3,489,660,928 + 525,602,816) x 2 B = 8,030,527,488
    # KV cache: batch 4 x context 1024 x 4 KV heads x 128 x 2 (K, V) x 32 layers x 2 B
    #   = 268,435,456
    # Activations: T = 4 tokens; attention 3*4096 + 24*128 + 16*128 = 17,408 wide,
    #   MLP 2*4096 + 3*7168 = 29,696 wide (the peak): 4 x 29,696 x 2 B = 237,568,
    #   plus fp32 logits 4 x 128,256 x 4 B = 2,052,096 -> 2,289,664
    # Capacity: 90% of 80 GiB less 1 GiB of runtime = 77,309,411,328 - 1,073,741,824
    mem = memory_per_gpu(
        get_model("llama-3.1-8b"),
        2,
        Workload(4, "decode", context_len=1024),
        Options(),
        get_gpu("h100-sxm"),
    )
    assert mem.weights_bytes_per_gpu == 8_030_527_488
    assert mem.kv_cache_bytes_per_gpu == 268_435_456
    assert mem.activation_bytes_per_gpu == 2_289_664
    assert mem.total_bytes_per_gpu == 8_030_527_488 + 268_435_456 + 2_289_664
    assert (
        mem.capacity_bytes_per_gpu
        == 77_309_411_328 - 1_073_741_824
        == (int(80 * 2**30 * 0.9) - default_calibration().memory.runtime_bytes)
    )
    assert mem.fits


def test_fp8_halves_the_linear_weights_only() -> None:
    model, wl = get_model("llama-3.1-8b"), Workload(4, "decode", context_len=1024)
    h100 = get_gpu("h100-sxm")
    bf16 = memory_per_gpu(model, 2, wl, Options(), h100)
    fp8 = memory_per_gpu(model, 2, wl, Options(dtype="fp8"), h100)
    assert fp8.weights_bytes_per_gpu == 3_489_660_928 * 1 + 525_602_816 * 2
    # vLLM (the default engine) keeps the cache bf16; TensorRT-LLM's ModelOpt checkpoint fp8
    assert fp8.kv_cache_bytes_per_gpu == bf16.kv_cache_bytes_per_gpu
    trt = memory_per_gpu(model, 2, wl, Options(dtype="fp8", engine="trtllm"), h100)
    assert trt.kv_cache_bytes_per_gpu == bf16.kv_cache_bytes_per_gpu // 2
    kv8 = memory_per_gpu(model, 2, wl, Options(dtype="fp8", kv_dtype="fp8"), h100)
    assert kv8.kv_cache_bytes_per_gpu == bf16.kv_cache_bytes_per_gpu // 2


def test_prefill_activations_grow_linearly_with_the_prompt() -> None:
    # FlashAttention keeps no [S, S] scores: doubling the prompt doubles the workspace
    model = get_model("llama-3.1-8b")
    one = activation_elements(model, 1, Workload(1, "prefill", prompt_len=16384))
    two = activation_elements(model, 1, Workload(1, "prefill", prompt_len=32768))
    assert two == 2 * one == 2 * 16384 * (2 * 4096 + 3 * 14336)


def test_405b_on_one_h100_is_refused_and_allow_oom_reports_it(capsys) -> None:  # type: ignore[no-untyped-def]
    wl = Workload(1, "decode", context_len=1024)
    with pytest.raises(ConfigError, match=r"does not fit on h100-sxm: needs 812\.\d GB"):
        simulate("llama-3.1-405b", "dgx-h100", 1, wl)
    r = simulate("llama-3.1-405b", "dgx-h100", 1, wl, Options(allow_oom=True))
    assert r.summary["memory"]["fits"] is False
    assert r.summary["memory"]["total_bytes_per_gpu"] > 800e9
    args = ["run", "--model", "llama-3.1-405b", "--topology", "dgx-h100", "--tp", "1"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "available" in err and "--allow-oom" in err


def test_shard_sizes_by_hand() -> None:
    # Llama-3.1-70B: 64 query heads, 8 KV heads, MLP 28672, vocab 128256; TP 16 gives
    # 64/16 = 4 heads, 8 KV heads over 16 ranks = 1 each held by 2, 28672/16, 128256/16.
    from tpsim.core.lowering.shard import Shard, shard

    assert shard(get_model("llama-3.1-70b"), 16) == Shard(16, 4, 1, 2, 1792, 8016)
    # vocab 32000 over 3 ranks pads to 10667 rows each; MLP 11008 / 3 to 3670
    assert shard(get_model("llama-2-7b"), 1).vocab == 32000
    spec = get_model("llama-2-7b")
    assert (shard(spec, 3).vocab, shard(spec, 3).mlp_width) == (10667, 3670)


def test_a_refusal_says_the_largest_batch_and_length_that_fit() -> None:
    """Issue #27: an OOM refusal names what a planner needs next. At TP 2, batch 64 of
    llama-3.1-70b at context 8192 does not fit; the message gives the largest batch at 8192
    and the longest context at batch 64, and each of them does fit (one more does not)."""
    import re

    from tpsim import Layout, Workload, simulate

    with pytest.raises(ConfigError) as info:
        simulate("llama-3.1-70b", "dgx-h100", Layout(2), Workload(64, context_len=8192))
    text = str(info.value)
    found = re.search(r"at most batch (\d+) at context 8192, or context (\d+) at batch 64", text)
    assert found, text
    batch, context = map(int, found.groups())

    def fits(b: int, c: int) -> bool:
        try:
            simulate("llama-3.1-70b", "dgx-h100", Layout(2), Workload(b, context_len=c))
        except ConfigError:
            return False
        return True

    assert fits(batch, 8192) and not fits(batch + 1, 8192)
    assert fits(64, context) and not fits(64, context + 1)


def test_weights_that_alone_do_not_fit_say_so() -> None:
    from tpsim import Layout, Workload, simulate

    with pytest.raises(ConfigError, match="no context length fits at batch 1: the weights"):
        simulate("llama-3.1-70b", "dgx-h100", Layout(1), Workload(1))


def test_a_context_beyond_the_model_is_refused() -> None:
    """Issue #27: --context-len 200k on a 128K-context model ran without a word."""
    from tpsim import Layout, Workload, simulate

    with pytest.raises(ConfigError, match=r"context_len=204800: beyond llama-3.1-70b's context"):
        simulate("llama-3.1-70b", "dgx-h100", Layout(8), Workload(1, context_len=204800))
    with pytest.raises(ConfigError, match=r"prompt_len=204800: beyond"):
        simulate("llama-3.1-8b", "dgx-h100", Layout(8), Workload(1, "prefill", 204800))


def test_deepep_reserves_its_buffers_by_hand() -> None:
    """DeepEP's buffers, made once and held whatever the batch: DeepSeek-V3 (hidden 7168,
    256 experts) at EP 16 over two hosts. Low latency, 128 tokens a rank: combine messages of
    56 x 4 + 7168 x 2 = 14,560 B, send and receive buffers of 256 x 128 of them, twice, and
    256-int signals twice, plus DeepEP's 128-byte round-up. Normal, the 16-rank configs (288
    tokens a channel's queue): NVLink 10 channels x 8 peers x (7 ints + 288 tokens of 14,336
    + 2,056 B); RDMA 10 channels x 2 RDMA ranks x 140 tokens (128 rounded up to the 20 or 28
    sent) x 16,408 B, twice, + 1 MiB, smaller than the low-latency buffer that SGLang's one
    RDMA buffer also holds."""
    from tpsim import Layout
    from tpsim.core.deepep_buffers import reserved_bytes
    from tpsim.core.lowering.experts import expert_split

    r = {}
    for a2a in ("nccl", "deepep"):  # as SGLang makes them: 128 tokens, DeepEP's size hints
        r[a2a] = simulate("deepseek-v3", "hgx-h200", Layout(1, ep=16, attention_dp=16),
                          Workload(8), Options(dtype="fp8", moe_a2a=a2a, engine="sglang"),
                          nodes=2)  # fmt: skip
    low_latency = 2 * (2 * 256 * 128 * 14_560 + 256 * 4) + 128
    nvl = -(-(80 * 7 * 4 + 80 * 288 * (14_336 + 2_056)) // 128) * 128
    rdma_normal = -(-(20 * 18 * 2 * 4 + 20 * 140 * 16_408 * 2 + 2**20) // 128) * 128
    assert (nvl, rdma_normal) == (377_673_984, 92_936_320) and rdma_normal < low_latency
    deepep, nccl = r["deepep"].typed.memory, r["nccl"].typed.memory
    grown = deepep.activation_bytes_per_gpu - nccl.activation_bytes_per_gpu
    assert grown == low_latency + nvl == 2_286_084_480
    spec = get_model("deepseek-v3")
    xs = expert_split(spec, 1, 16, 16, 1)
    assert reserved_bytes(spec, xs, Options(engine="sglang").calibration.engine) == grown
    # vLLM: 256 tokens a rank (VLLM_MOE_DP_CHUNK_SIZE), a 1 GiB NVLink buffer, and across
    # hosts the high-throughput manager's 1 GiB RDMA buffer
    vllm = simulate("deepseek-v3", "hgx-h200", Layout(1, ep=16, attention_dp=16), Workload(8),
                    Options(dtype="fp8", moe_a2a="deepep"), nodes=2).typed.memory  # fmt: skip
    assert vllm.activation_bytes_per_gpu - nccl.activation_bytes_per_gpu == (
        2 * (2 * 256 * 256 * 14_560 + 256 * 4) + 128 + 2 * 2**30
    )


def test_a_refusal_says_what_gives_more_memory(capsys) -> None:  # type: ignore[no-untyped-def]
    """Where the layout holds every GPU, raising --tp needs hosts (it had said "raise --tp"
    at TP 8 of 8); the refusal names the MoE layout; serve, which has no --allow-oom, does
    not suggest it."""
    base = ["--model", "deepseek-v3", "--topology", "dgx-h100"]
    assert main(["run", *base, "--tp", "1", "--attention-dp", "8", "--ep", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tpsim: error: tp=1 attention_dp=8 ep=8: deepseek-v3 does not fit")
    assert err.endswith("raise --tp on more --nodes, or --allow-oom")
    assert main(["serve", *base, "--tp", "8", "--rate", "1", "--requests", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith("raise --tp on more --nodes")
    assert main(["run", "--model", "llama-3.1-70b", "--topology", "dgx-h100", "--tp", "1"]) == 2
    assert capsys.readouterr().err.strip().endswith("; raise --tp, or --allow-oom")


def test_the_router_stays_16_bit_in_an_fp8_run() -> None:
    """vLLM builds an MoE router's gate unquantised (quant_config=None), as fp8 checkpoints
    store it: its GEMM reads 2 bytes a weight and the memory holds it so (it was read and
    held at 1 byte)."""
    r = simulate("qwen3-30b-a3b", "dgx-h100", Layout(1), Workload(1), Options(dtype="fp8"))
    router = next(x for x in r.records if x.name == "router")
    assert 2048 * 128 * 2 <= router.bytes < 2048 * 128 * 2 + 8192  # weights, then [1, d] in
    spec, gpu = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    fp8 = memory_per_gpu(spec, 1, Workload(1), Options(dtype="fp8"), gpu).weights_bytes_per_gpu
    bf16 = memory_per_gpu(spec, 1, Workload(1), Options(), gpu).weights_bytes_per_gpu
    linear = sum(linear_params_of_layer(spec, 1, i) for i in range(spec.num_layers))
    router_params = 48 * 2048 * 128
    assert bf16 - fp8 == linear - router_params  # every linear weight halves but the router


def test_replicated_tokens_hold_every_pair_whatever_the_expert_split() -> None:
    """Without attention DP every rank of the MoE group is handed all T tokens and sizes its
    experts' buffers for all T k token-expert pairs before routing says which are its own
    (vLLM's fused_experts_impl: cache13 [M, top_k, max(N, K)] and cache2 [M top_k, N/2];
    the pairs of experts on other EP ranks written as zeros). Qwen3-30B-A3B (d 2048, 128
    experts of width 768, top 8) at TP 2, 16 tokens: tensor-parallel experts hold 16 x 8
    pairs of 384-wide slices; EP 2 holds the same 16 x 8 pairs at the whole 768 (it had
    counted half of them, k / ep, as if the other rank's pairs were never allocated). A
    pair's gate|up [2 Im] and output [d] share cache13 (the output is written after gate|up
    is consumed), beside the activation [Im]: max(2 Im, d) + Im, not 3 Im + d."""
    from tpsim.core.lowering.experts import expert_split

    spec, wl = get_model("qwen3-30b-a3b"), Workload(16)
    d, n = 2048, 128
    tp_experts = activation_elements(spec, 2, wl)
    ep = activation_elements(spec, 2, wl, expert_split(spec, 2, 1, 2, 1))
    attention = 3 * d + (16 + 2 * 2) * 128 + 16 * 128  # below the MoE peak
    assert 2 * d + n + 8 * (d + 384) > attention
    # per pair: cache13 max(2 Im, d) (gate|up, then the output in the same buffer) and
    # cache2 Im (the activation)
    assert tp_experts == 16 * (2 * d + n + 8 * (max(2 * 384, d) + 384))
    assert ep == 16 * (2 * d + n + 8 * (max(2 * 768, d) + 768)) > tp_experts


def test_an_engine_that_chunks_its_fused_experts_holds_one_chunk_s_pairs() -> None:
    """vLLM runs a step's tokens through its fused MoE kernels VLLM_FUSED_MOE_CHUNK_SIZE
    (16,384) at a time, their buffers sized for M = min(tokens, 16,384) (fused_experts_impl):
    a prefill of two 32K prompts (65,536 tokens) of Qwen3-30B-A3B at TP 2 holds a quarter
    of the pairs' buffers an unchunked engine (ideal) holds, and attention's tensors become
    the peak; at 8,192 tokens the two hold the same."""
    from dataclasses import replace

    from tpsim.core.lowering.experts import expert_split

    spec, d, n = get_model("qwen3-30b-a3b"), 2048, 128
    xs = expert_split(spec, 2, 1, 1, 2)  # tensor-parallel experts: 384-wide slices
    chunked = replace(xs, chunk_tokens=16384)
    per_pair = 8 * (max(2 * 384, d) + 384)
    long = Workload(2, "prefill", 32768)  # 65,536 tokens in the step
    assert activation_elements(spec, 2, long, xs) == 65536 * (2 * d + n + per_pair)
    # a chunk's pairs a token: 2d + n + per_pair / 4 = 9,088, below attention's 10,752 (x,
    # normed x and o_proj's output, QKV of 16 + 2 x 2 heads, the output of 16): the peak
    attention = 3 * d + (16 + 2 * 2) * 128 + 16 * 128
    assert 2 * d + n + per_pair // 4 < attention
    assert activation_elements(spec, 2, long, chunked) == 65536 * attention
    short = Workload(1, "prefill", 8192)
    assert activation_elements(spec, 2, short, chunked) == activation_elements(spec, 2, short, xs)
    # the profiles: vLLM's chunk, vLLM V0's and SGLang's (fused_experts_impl's CHUNK_SIZE),
    # none for TensorRT-LLM (its bound defaults to the step's own cap) and the ideal engine
    names = ("vllm", "vllm-v0", "sglang", "trtllm", "ideal")
    engine = {e: Options(engine=e).calibration.engine for e in names}
    assert engine["vllm"].fused_moe_chunk_tokens == 16384
    assert engine["vllm-v0"].fused_moe_chunk_tokens == 65536
    assert engine["sglang"].fused_moe_chunk_tokens == 65536
    assert engine["trtllm"].fused_moe_chunk_tokens is None
    assert engine["ideal"].fused_moe_chunk_tokens is None


def test_vllm_s_long_moe_prefill_needs_less_memory_than_an_unchunked_engine_s() -> None:
    """Through the whole run: two 32K prompts of Qwen3-30B-A3B at TP 2 under vLLM peak at
    attention's tensors, the unchunked engine's at all 65,536 tokens' pairs."""
    spec = get_model("qwen3-30b-a3b")
    wl, layout = Workload(2, "prefill", 32768), Layout(tp=2)
    runs = {e: simulate(spec, "dgx-h100", layout, wl, Options(engine=e, allow_oom=True))
            for e in ("vllm", "ideal")}  # fmt: skip
    act = {e: r.typed.memory.activation_bytes_per_gpu for e, r in runs.items()}
    moe = 2 * 2048 + 128 + 8 * (max(2 * 384, 2048) + 384)  # the unchunked peak a token
    attention = 3 * 2048 + (16 + 2 * 2) * 128 + 16 * 128  # vLLM's, its pairs chunked
    assert act["ideal"] - act["vllm"] == 65536 * (moe - attention) * 2  # bf16: 1.69 GB


def test_sglang_chunks_a_moe_prefill_past_64k_tokens_and_trtllm_does_not() -> None:
    """SGLang's fused_experts_impl runs 64 * 1024 tokens at a time, its buffers sized for
    M = min(tokens, 65,536): two 32K prompts of Qwen3-30B-A3B at TP 2 (65,536 tokens, one
    chunk) hold what TensorRT-LLM holds, four (131,072) half of the pairs' buffers: 6.21 ->
    3.66 GB a GPU. TensorRT-LLM's MoE bound (MoeConfig.max_num_tokens, by default
    max_num_tokens x attention DP) is never below its step: every pair at once, as ideal."""
    spec, layout = get_model("qwen3-30b-a3b"), Layout(tp=2)

    def act(engine: str, prompts: int) -> int:
        run = simulate(spec, "dgx-h100", layout, Workload(prompts, "prefill", 32768),
                       Options(engine=engine, allow_oom=True))  # fmt: skip
        return run.typed.memory.activation_bytes_per_gpu

    per_pair = 8 * (max(2 * 384, 2048) + 384)  # a token's pairs, tensor-parallel experts
    assert act("sglang", 2) == act("trtllm", 2) == act("ideal", 2)
    four = {e: act(e, 4) for e in ("sglang", "trtllm", "ideal")}
    assert four["trtllm"] == four["ideal"]
    # half the step's pairs held at once, still above attention's tensors (the peak): bf16
    assert four["trtllm"] - four["sglang"] == 131072 * per_pair // 2 * 2  # 2.55 GB
