"""GLM-4.5 (glm4_moe), Kimi-K2 (kimi_k2, read as DeepSeek-V3) and Granite-3.0 MoE
(granitemoe) read from their config.json: counts by hand, the published sizes, the cache
per token, the MoE layers, weight bytes per GPU, and what stays refused.

The fixtures in tests/data/models/:

- glm-4.7.json: https://huggingface.co/zai-org/GLM-4.7/blob/refs%2Fpr%2F49/config.json,
  verbatim. GLM-4.5, 4.6 and 4.7 share the 355B-A32B architecture (vLLM's glm4_moe.py
  serves all three; Megatron-Bridge's docs/models/llm/glm45.md lists GLM-4.5's shapes: 92
  layers, the first 3 dense, 5120 hidden, 96 heads, 8 KV groups, 160 experts of 1536, one
  shared, QK norm); 4.7's differs from 4.5's in max_position_embeddings only.
- intellect-3-base.json: https://huggingface.co/PrimeIntellect/INTELLECT-3-Base/blob/main/
  config.json, verbatim: a continued pretraining of GLM-4.5-Air-Base, its architecture
  (46 layers, the first dense, 4096 hidden, 128 experts of 1408, no QK norm).
- kimi-k2-instruct.json: the fields tpsim reads of
  https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json (NOT the verbatim
  file, which the search tools did not hold): its shapes as Megatron-Bridge's KimiK2Provider
  and the published walk-throughs of that file give them (61 layers, 7168 hidden, 64 heads,
  MLA q_lora 1536 / kv_lora 512 / nope 128 / rope 64 / v 128, 384 experts of 2048, one
  shared, top 8, the first layer dense, vocab 163840, block-fp8 [128, 128] weights).
- granite-3.0-3b-a800m-instruct-8bits.json: https://huggingface.co/RichardErkhov/
  ibm-granite_-_granite-3.0-3b-a800m-instruct-8bits/blob/a0d84e8be65c51cc24e44393ba0a86df262469cc/
  config.json, verbatim: ibm-granite/granite-3.0-3b-a800m-instruct's config with a
  bitsandbytes quantization_config added.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tpsim import Layout, Options, Workload, simulate
from tpsim.core.lowering.experts import expert_split
from tpsim.core.memory import weight_params_per_gpu
from tpsim.models import ModelError, ModelSpec, spec_from_hf_dict
from tpsim.models.catalog import get_model

DATA = Path(__file__).parents[1] / "data" / "models"


def _cfg(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


# -- glm4_moe ------------------------------------------------------------------------------


def test_glm_4_5_is_read_as_vllm_builds_it() -> None:
    m = get_model(DATA / "glm-4.7.json")
    assert (m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim) == (
        5120, 92, 96, 8, 128)  # fmt: skip
    assert m.qkv_bias and not m.mlp_bias  # attention_bias: q, k, v biases; o_proj has none
    assert m.qk_norm  # use_qk_norm: RMSNorm [head_dim] on q and on k
    assert m.rotary_dim == 64 and m.rotary_width == 64  # partial_rotary_factor 0.5 of 128
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (160, 8, 1536)
    assert m.shared_intermediate_size == 1536  # n_shared_experts 1 of the routed width
    assert m.dense_layers == (0, 1, 2)  # first_k_dense_replace 3: layer_idx >= 3 is MoE
    assert [m.is_moe_layer(i) for i in (2, 3, 91)] == [False, True, True]
    assert (m.n_group, m.topk_group, m.mtp_layers) == (1, 1, 1)
    assert m.intermediate_size == 12288 and not m.tied_embeddings and m.dtype == "bf16"


def test_glm_4_5_counts_by_hand() -> None:
    m = get_model(DATA / "glm-4.7.json")
    d, q, kv = 5120, 96 * 128, 8 * 128
    attn = d * (q + 2 * kv) + (q + 2 * kv) + q * d  # Wqkv + its bias, o_proj
    norms = 2 * d + 2 * 128  # input and post-attention norms, q_norm and k_norm [head_dim]
    expert = 3 * d * 1536
    moe = 160 * expert + expert + d * 160  # routed, shared, router [d, E]
    dense = 3 * d * 12288
    vocab = 151552 * d
    total = 92 * (attn + norms) + 3 * dense + 89 * moe + 2 * vocab + d
    assert m.num_params() == total
    # the published 355 B total (GLM-4.5 tech report, Table 1; the MTP layer apart)
    assert m.num_params() / 1e9 == pytest.approx(355, rel=0.01)
    active = 92 * (attn + norms) + 3 * dense + 89 * (8 * expert + expert + d * 160)
    assert m.active_params(embedding=False) == active + vocab + d + d  # + head, row, norm
    # "32B activated" is rounded: the layers without embedding and output head are 32.08 B
    assert round((m.active_params(embedding=False) - vocab) / 1e9) == 32
    # the MTP layer, as the DeepSeek reader counts it: a full MoE layer, enorm, hnorm,
    # eh_proj [2d, d], the shared head's norm; not in the total, not loaded (vLLM's
    # skip_spec_layers drops layers >= num_hidden_layers)
    assert m.mtp_params() == attn + norms + moe + 2 * d + 2 * d * d + d
    assert "params_mtp" in m.to_dict()


def test_glm_4_5_cache_and_weights_per_gpu() -> None:
    m = get_model(DATA / "glm-4.7.json")
    assert m.kv_bytes_per_token() == 92 * 2 * 8 * 128 * 2  # 376,832 B: GQA, 8 KV heads
    # TP 8 / EP 8 (tpsim run: weights 88.33 GB a GPU): 20 of the 160 experts a GPU, the
    # rest split 8 ways but the replicated norms and routers
    per_gpu = 2 * weight_params_per_gpu(m, 8, expert_split(m, 8, 1, 8, 1))
    routers = 89 * 160 * 5120  # replicated on every GPU (vLLM: an fp32 nn.Linear, not split)
    assert per_gpu == pytest.approx((m.weight_bytes() + 7 * 2 * routers) / 8, rel=1e-4)
    assert per_gpu / 1e9 == pytest.approx(88.33, abs=0.005)


def test_glm_4_5_air_published_sizes() -> None:
    m = get_model(DATA / "intellect-3-base.json")
    assert m.dense_layers == (0,) and m.num_moe_layers == 45 and not m.qk_norm
    assert (m.num_experts, m.moe_intermediate_size, m.shared_intermediate_size) == (
        128, 1408, 1408)  # fmt: skip
    assert m.num_params() / 1e9 == pytest.approx(106, rel=0.01)  # 106.85 B
    head = 151552 * 4096
    assert round((m.active_params(embedding=False) - head) / 1e9) == 12  # "12B", 12.18 B
    assert m.kv_bytes_per_token() == 46 * 2 * 8 * 128 * 2  # 188,416 B
    # TP 8 / EP 8 (tpsim run: weights 26.76 GB a GPU): 16 of the 128 experts a GPU
    experts = 45 * 16 * 3 * 4096 * 1408
    rest = m.num_params() - m.expert_weight_params()
    per_gpu = 2 * weight_params_per_gpu(m, 8, expert_split(m, 8, 1, 8, 1))
    assert per_gpu / 1e9 == pytest.approx(2 * (experts + rest / 8) / 1e9, rel=0.002)
    assert per_gpu / 1e9 == pytest.approx(26.76, abs=0.005)


def test_glm_defaults_are_transformers_glm4moeconfig_ones() -> None:
    cfg = _cfg("glm-4.7")
    for key in ("n_shared_experts", "first_k_dense_replace", "n_group", "topk_group",
                "use_qk_norm", "partial_rotary_factor", "num_nextn_predict_layers"):  # fmt: skip
        cfg.pop(key)
    m = spec_from_hf_dict(cfg, "glm")
    assert m.shared_intermediate_size == 1536 and m.dense_layers == (0,)
    assert (m.n_group, m.topk_group, m.mtp_layers, m.qk_norm, m.rotary_dim) == (1, 1, 1, False, 64)
    # transformers v5 keeps the factor in rope_parameters
    nested = {**cfg, "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 1.0}}
    assert spec_from_hf_dict(nested, "glm").rotary_dim == 0  # all of head_dim


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"partial_rotary_factor": 0}, r"^partial_rotary_factor=0 .*above 0 and at most 1"),
        ({"partial_rotary_factor": "half"}, r"^partial_rotary_factor='half' "),
        ({"partial_rotary_factor": 0.3}, r"^partial_rotary_factor=0.3 .*even number"),
        ({"first_k_dense_replace": 92}, r"^first_k_dense_replace=92 .*none of the 92"),
        ({"topk_group": 2}, r"^topk_group=2 .*at most n_group=1"),
        ({"n_routed_experts": None}, r"^n_routed_experts missing"),
        ({"use_qk_norm": "yes"}, r"^use_qk_norm='yes' .*true or false"),
    ],
)
def test_glm_bad_fields_are_refused_naming_them(change: dict, message: str) -> None:
    cfg = {k: v for k, v in {**_cfg("glm-4.7"), **change}.items() if v is not None}
    with pytest.raises(ModelError, match=message):
        spec_from_hf_dict(cfg, "glm")


def test_partial_rotary_prices_only_the_rotated_dims() -> None:
    """vLLM's rotary_embedding kernel (csrc/pos_encoding_kernels.cu) turns rot_dim / 2 pairs
    of each head in place: GLM-4.5's rotary kernel moves half the bytes of a full one."""
    cfg = {**_cfg("glm-4.7"), "num_hidden_layers": 4}
    m = spec_from_hf_dict(cfg, "glm-4-layers")
    work = Workload(phase="decode", batch=8, context_len=1024)

    def rotary_bytes(spec: ModelSpec) -> int:
        result = simulate(spec, "dgx-h100", Layout(tp=8, ep=8), work, Options(allow_oom=True))
        return sum(r.bytes for r in result.records if r.name == "rotary")

    full = rotary_bytes(dataclasses.replace(m, rotary_dim=0))
    assert full > 0 and rotary_bytes(m) * 2 == full


# -- kimi_k2 -------------------------------------------------------------------------------


def test_kimi_k2_reads_as_deepseek_v3() -> None:
    """vLLM picks deepseek_v2.py's DeepseekV3ForCausalLM by the architectures class, whatever
    the model_type (registry.py: "DeepseekV3ForCausalLM": ("deepseek_v2", ...)): kimi_k2 is
    read by the DeepSeek reader, the same spec as with model_type deepseek_v3."""
    cfg = _cfg("kimi-k2-instruct")
    m = spec_from_hf_dict(cfg, "kimi")
    assert m == spec_from_hf_dict({**cfg, "model_type": "deepseek_v3"}, "kimi")
    assert (m.num_heads, m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim) == (64, 1536, 512, 64)
    assert (m.num_experts, m.experts_per_token, m.shared_intermediate_size) == (384, 8, 2048)
    assert m.dense_layers == (0,) and m.num_moe_layers == 60 and m.mtp_layers == 0
    assert m.dtype == "fp8" and m.weight_block == (128, 128)
    assert m.kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2  # the MLA latent


def test_kimi_k2_counts_by_hand() -> None:
    m = spec_from_hf_dict(_cfg("kimi-k2-instruct"), "kimi")
    d, h = 7168, 64
    attn = d * 1536 + 1536 * h * 192 + d * 576 + 512 * h * 256 + h * 128 * d
    norms = 2 * d + 1536 + 512
    expert = 3 * d * 2048
    moe = 384 * expert + expert + d * 384
    total = 61 * (attn + norms) + 3 * d * 18432 + 60 * moe + 2 * 163840 * d + d
    assert m.num_params() == total  # 1026.4 B
    # Moonshot quotes 1.04 T; these shapes give 1.026 T (1.3 % less; no MTP layer)
    assert m.num_params() / 1e12 == pytest.approx(1.026, abs=0.001)
    assert round(m.active_params(embedding=False) / 1e9) == 32  # "32B activated": 31.69 B


# -- granitemoe ----------------------------------------------------------------------------


def test_granite_moe_published_sizes() -> None:
    cfg = _cfg("granite-3.0-3b-a800m-instruct-8bits")
    # as published here: 8-bit bitsandbytes weights, which tpsim does not price
    with pytest.raises(ModelError, match=r"^quantization_config.quant_method='bitsandbytes'"):
        spec_from_hf_dict(cfg, "granite")
    cfg.pop("quantization_config")  # ibm-granite's own 16-bit checkpoint
    m = spec_from_hf_dict(cfg, "granite")
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (40, 8, 512)
    assert m.dense_layers == () and m.tied_embeddings and not m.qkv_bias
    d = 1536
    attn = d * (d + 2 * 512) + d * d
    total = 32 * (attn + 2 * d + 40 * 3 * d * 512 + d * 40) + 49155 * d + d
    assert m.num_params() == total
    # Granite 3.0 report: 3.3 B total, 800 M active
    assert m.num_params() / 1e9 == pytest.approx(3.3, rel=0.01)
    assert m.active_params(embedding=False) / 1e9 == pytest.approx(0.8, rel=0.01)
    assert m.kv_bytes_per_token() == 32 * 2 * 8 * 64 * 2
    with pytest.raises(ModelError, match=r"^attention_bias=True .*granitemoe"):
        spec_from_hf_dict({**cfg, "attention_bias": True}, "granite")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rotary_dim": 63}, r"^rotary_dim=63 .*even and at most head_dim=128"),
        ({"rotary_dim": 130}, r"^rotary_dim=130 .*even and at most head_dim=128"),
        ({"rotary_dim": -2}, r"^rotary_dim=-2 .*non-negative integer"),
        (
            {"learned_position_embeddings": True, "max_position_embeddings": 16},
            r"^rotary_dim=64 .*learned position embeddings",
        ),
    ],
)
def test_modelspec_refuses_a_rotary_dim_it_cannot_run(change: dict, message: str) -> None:
    m = get_model(DATA / "glm-4.7.json")
    with pytest.raises(ModelError, match=message):
        dataclasses.replace(m, **change)
    kimi = spec_from_hf_dict(_cfg("kimi-k2-instruct"), "kimi")
    with pytest.raises(ModelError, match=r"^rotary_dim=32 .*qk_rope_head_dim"):
        dataclasses.replace(kimi, rotary_dim=32)
