"""DeepSeek-V2/V3 (multi-head latent attention) and gpt-oss (sliding window, sinks, MXFP4
experts) read from their config.json: parameter counts by hand, the cache per token, the
4-bit dtypes and what stays refused."""

from __future__ import annotations

import json

import pytest
from tpsim.models import DTYPE_BYTES, MODELS, ModelError, ModelSpec, spec_from_hf_dict
from tpsim.models.catalog import CONFIGS, get_model


def _cfg(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def test_deepseek_v3_is_read_as_published() -> None:
    m = MODELS["deepseek-v3"]
    assert (m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads) == (7168, 61, 128, 128)
    assert (m.head_dim, m.value_head_dim, m.qk_nope_head_dim) == (192, 128, 128)
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim) == (1536, 512, 64)
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (256, 8, 2048)
    assert m.shared_intermediate_size == 2048  # one shared expert of the routed width
    assert m.dense_layers == (0, 1, 2)  # first_k_dense_replace
    assert (m.n_group, m.topk_group, m.mtp_layers) == (8, 4, 1)
    assert m.dtype == "fp8"  # quantization_config: fp8 block-scaled checkpoint
    assert get_model("deepseek-ai/DeepSeek-R1") is m


def test_deepseek_v3_attention_by_hand() -> None:
    m = MODELS["deepseek-v3"]
    d, h = 7168, 128
    q = d * 1536 + 1536 * h * 192  # q_a, q_b
    kv = d * (512 + 64) + 512 * h * (128 + 128)  # kv_a (latent + k_pe), kv_b (k_nope, v)
    o = h * 128 * d
    assert m.attention_params_per_layer() == q + kv + o
    assert m.norm_params_per_layer() == 2 * d + 1536 + 512  # + the q and KV latent norms


def test_deepseek_v3_totals_mtp_apart() -> None:
    m = MODELS["deepseek-v3"]
    # DeepSeek's README_WEIGHTS.md: 671 B main model, 36.6 B activated; MTP 11.5 B unique
    assert m.num_params() / 1e9 == pytest.approx(671, rel=0.005)
    assert m.active_params(embedding=False) / 1e9 == pytest.approx(36.6, rel=0.01)
    assert m.mtp_params() / 1e9 == pytest.approx(11.5, rel=0.02)
    per_layer = m.params_per_layer() + m.moe_params_per_layer() - m.mlp_params_per_layer()
    assert m.mtp_params() == per_layer + 2 * 7168 + 2 * 7168 * 7168 + 7168
    assert m.to_dict()["params_mtp"] == m.mtp_params()
    assert any("MTP" in n and "not run" in n for n in m.notes())


def test_mla_cache_is_the_latent_per_token_and_layer() -> None:
    m = MODELS["deepseek-v3"]
    assert m.kv_elements_per_token() == 512 + 64
    assert m.kv_bytes_per_token("bf16") == 61 * 576 * 2
    assert m.kv_bytes_per_token("fp8") == 61 * 576
    # the same model with plain attention would cache 2 x 128 heads x 192 per token and layer
    assert 2 * 128 * 192 / 576 > 85


def test_deepseek_without_q_latent_reads_one_q_projection() -> None:
    cfg = {**_cfg("deepseek-v3"), "q_lora_rank": None}
    m = spec_from_hf_dict(cfg, "v2-lite-like")
    d, h = 7168, 128
    assert m.q_lora_rank == 0
    kv = d * 576 + 512 * h * 256
    assert m.attention_params_per_layer() == d * h * 192 + kv + h * 128 * d


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            {"quantization_config": {"quant_method": "bitsandbytes"}},
            "quant_method='bitsandbytes'.*modelled: fp8",
        ),
        ({"topk_group": 9}, "topk_group=9.*n_group=8"),
        ({"first_k_dense_replace": 61}, "first_k_dense_replace=61.*none of the 61"),
        ({"kv_lora_rank": None}, "kv_lora_rank missing"),
    ],
)
def test_deepseek_config_errors_name_the_field(change: dict, says: str) -> None:
    with pytest.raises(ModelError, match=says):
        spec_from_hf_dict({**_cfg("deepseek-v3"), **change}, "x")


def test_gpt_oss_120b_is_read_as_published() -> None:
    m = MODELS["gpt-oss-120b"]
    assert (m.num_heads, m.num_kv_heads, m.head_dim) == (64, 8, 64)
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (128, 4, 2880)
    assert m.sliding_window == 128 and m.sliding_layers == tuple(range(0, 36, 2))
    assert m.attention_sinks and m.qkv_bias and m.expert_dtype == "mxfp4"
    assert m.dense_layers == ()
    # model card: 116.83 B total, 5.13 B active (its biases, about 0.04 B, not counted)
    assert m.num_params() / 1e9 == pytest.approx(116.83, rel=0.002)
    assert m.active_params(embedding=False) / 1e9 == pytest.approx(5.13, rel=0.005)
    # sinks: one logit per head and layer
    d, q, kv = 2880, 64 * 64, 8 * 64
    assert m.attention_params_per_layer() == d * (q + 2 * kv) + (q + 2 * kv) + q * d + 64


def test_gpt_oss_20b_counts() -> None:
    m = MODELS["gpt-oss-20b"]
    assert (m.num_layers, m.num_experts) == (24, 32)
    assert m.num_params() / 1e9 == pytest.approx(20.91, rel=0.005)
    assert m.active_params(embedding=False) / 1e9 == pytest.approx(3.61, rel=0.01)


def test_gpt_oss_weight_bytes_mix_mxfp4_experts_and_bf16() -> None:
    m = MODELS["gpt-oss-120b"]
    experts = 36 * 128 * 3 * 2880 * 2880
    assert m.expert_weight_params() == experts
    rest = m.num_params() - experts
    assert m.weight_bytes() == round(rest * 2 + experts * (0.5 + 1 / 32))
    assert m.weight_bytes() / 1e9 == pytest.approx(65.2, rel=0.01)  # the checkpoint: ~65 GB
    assert m.weight_bytes("bf16") == 2 * m.num_params()


def test_sliding_window_caches_and_attends_over_the_window_only() -> None:
    m = MODELS["gpt-oss-120b"]
    assert m.attended(0, 4096) == 128 and m.attended(1, 4096) == 4096
    assert m.attended(0, 100) == 100
    per_key = 2 * 64 * (64 + 64)
    assert m.flops_per_token(4096) == 2 * m.matmul_params() + per_key * 18 * (4096 + 128)
    assert m.kv_bytes_per_token("bf16") == 36 * 2 * 8 * 64 * 2


def test_a_prefill_pass_holds_its_new_tokens_on_sliding_layers() -> None:
    """Each new token's K and V is written into the cache before attention, and vLLM frees
    a sliding layer's tokens before the window only before the next step (SlidingWindowSpec:
    the last window - 1 computed tokens plus the newly scheduled ones): a 32K prompt in one
    pass holds all of it on every layer (gpt-oss-120b at TP 1: 1.21 -> 2.42 GB of cache,
    tpsim had held the window on the sliding layers); a decode still holds the window."""
    from tpsim import Layout, Options, Workload, simulate

    m = MODELS["gpt-oss-120b"]
    assert m.held(0, 32_768, 32_768) == 32_768
    assert m.held(0, 12_000, 2_000) == 127 + 2_000
    assert m.held(0, 12_000) == 128 and m.held(1, 12_000, 2_000) == 12_000  # a full layer
    pass_ = Workload(1, "prefill", 32_768, 1)
    memory = simulate("gpt-oss-120b", "dgx-h100", Layout(1), pass_, Options()).summary["memory"]
    per_token = 36 * 2 * 8 * 64 * 2  # every layer, K and V of 8 heads of 64, bf16
    assert memory["kv_cache_bytes_per_gpu"] == 32_768 * per_token


def test_gpt_oss_layer_types_default_alternate_and_are_checked() -> None:
    cfg = _cfg("gpt-oss-20b")
    del cfg["layer_types"]
    assert spec_from_hf_dict(cfg, "x").sliding_layers == tuple(range(0, 24, 2))
    with pytest.raises(ModelError, match="layer_types='chunked_attention'"):
        spec_from_hf_dict({**cfg, "layer_types": ["chunked_attention"] * 24}, "x")
    with pytest.raises(ModelError, match=r"layer_types=.*one per layer"):
        spec_from_hf_dict({**cfg, "layer_types": ["full_attention"]}, "x")


def test_four_bit_dtypes_carry_their_block_scales() -> None:
    assert DTYPE_BYTES["fp4"] == 0.5 + 1 / 16  # NVFP4: an fp8 scale per 16 elements
    assert DTYPE_BYTES["mxfp4"] == 0.5 + 1 / 32  # MXFP4: an e8m0 scale per 32 elements
    m = MODELS["llama-3.1-8b"]
    gemms = m.num_params() - m.sixteen_bit_params()  # the embedding, head and norms 16-bit
    assert m.weight_bytes("fp4") == round(gemms * 9 / 16 + m.sixteen_bit_params() * 2)


def test_an_attention_field_tpsim_does_not_model_is_refused() -> None:
    cfg = _cfg("qwen3-32b")
    kinds = ["sliding_attention", "full_attention"] * 32
    says = r"^layer_types='sliding_attention'.*layer_types tpsim reads: gpt_oss"
    with pytest.raises(ModelError, match=says):
        spec_from_hf_dict({**cfg, "layer_types": kinds}, "x")
    assert spec_from_hf_dict({**cfg, "layer_types": ["full_attention"] * 64}, "x").num_layers
    with pytest.raises(ModelError, match=r"^kv_lora_rank=512 .*not modelled.*deepseek_v3"):
        spec_from_hf_dict({**cfg, "kv_lora_rank": 512}, "x")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"qk_rope_head_dim": 0}, "qk_rope_head_dim=0"),
        ({"num_kv_heads": 8}, "num_kv_heads=8 .*latent"),
        ({"sliding_window": 128}, "sliding_window=128 .*needs sliding_layers"),
        ({"topk_group": 9}, "topk_group=9"),
        ({"expert_dtype": "int3"}, "expert_dtype='int3'"),
    ],
)
def test_attention_fields_are_checked(change: dict, says: str) -> None:
    fields = {**MODELS["deepseek-v3"].__dict__, **change}
    with pytest.raises(ModelError, match=says):
        ModelSpec(**fields)


def _deepseek_v2(**change: object) -> dict:
    """DeepSeek-V2's config.json (deepseek-ai/DeepSeek-V2), the keys tpsim reads."""
    return {
        "model_type": "deepseek_v2",
        "hidden_size": 5120,
        "num_hidden_layers": 60,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "intermediate_size": 12288,
        "moe_intermediate_size": 1536,
        "n_routed_experts": 160,
        "n_shared_experts": 2,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "n_group": 8,
        "topk_group": 3,
        "vocab_size": 102400,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        **change,
    }


def test_deepseek_v2_and_v2_lite_counts() -> None:
    """Published: DeepSeek-V2 236 B total, 21 B activated; V2-Lite 15.7 B, 2.4 B (its q
    unprojected: q_lora_rank null; one routing group)."""
    v2 = spec_from_hf_dict(_deepseek_v2(), "v2")
    assert v2.shared_intermediate_size == 2 * 1536 and v2.dense_layers == (0,)
    assert v2.num_params() / 1e9 == pytest.approx(236, rel=0.01)
    assert v2.active_params(embedding=False) / 1e9 == pytest.approx(21, rel=0.01)
    lite = spec_from_hf_dict(
        _deepseek_v2(hidden_size=2048, num_hidden_layers=27, num_attention_heads=16,
                     num_key_value_heads=16, q_lora_rank=None, intermediate_size=10944,
                     moe_intermediate_size=1408, n_routed_experts=64, n_group=1,
                     topk_group=1),
        "v2-lite",
    )  # fmt: skip
    assert lite.q_lora_rank == 0 and lite.mtp_layers == 0
    assert lite.num_params() / 1e9 == pytest.approx(15.7, rel=0.01)
    assert lite.active_params(embedding=False) / 1e9 == pytest.approx(2.4, rel=0.03)


def test_qwen_sliding_window_is_refused_when_used() -> None:
    cfg = {**_cfg("qwen3-32b"), "use_sliding_window": True, "sliding_window": 4096}
    with pytest.raises(ModelError, match=r"^use_sliding_window=True .*not modelled"):
        spec_from_hf_dict(cfg, "x")
    assert spec_from_hf_dict({**cfg, "use_sliding_window": False}, "x").sliding_layers == ()
