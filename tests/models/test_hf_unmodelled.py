"""Configs of models whose attention tpsim does not model (linear, sparse, lightning,
chunked, Mamba), relabelled as a family it reads: refused naming the field, never priced as
softmax attention with a KV cache on every layer."""

from __future__ import annotations

import json

import pytest
from tpsim.models import ModelError
from tpsim.models.catalog import CONFIGS
from tpsim.models.hf_config import spec_from_hf_dict

#: Qwen3-Next-80B-A3B-Instruct's config.json (its attention and MoE fields):
#: https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
    "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120,
    "vocab_size": 151936, "max_position_embeddings": 262144, "tie_word_embeddings": False,
    "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
    "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "partial_rotary_factor": 0.25, "torch_dtype": "bfloat16",
}  # fmt: skip


def test_qwen3_next_is_read_as_itself_and_refused_relabelled() -> None:
    """Read as qwen2_moe it priced 48 layers of KV cache where 12 have one (4x: 98 KB a
    token, not 24.6 KB) and Gated DeltaNet as softmax attention; as itself (model_type
    qwen3_next) its linear layers are read (tests/models/test_qwen3_next.py)."""
    spec = spec_from_hf_dict(QWEN3_NEXT, "q")
    assert len(spec.linear_layers) == 36
    assert spec.kv_bytes_per_token() == 12 * 2 * 2 * 256 * 2  # 24.6 KB: the 12 full layers
    for family in ("qwen2_moe", "qwen3_moe"):
        with pytest.raises(ModelError, match=r"^linear_num_value_heads=32 .*Gated DeltaNet"):
            spec_from_hf_dict({**QWEN3_NEXT, "model_type": family}, "q")


@pytest.mark.parametrize(
    ("base", "fields", "says"),
    [
        # DeepSeek-V3.2-Exp: DeepSeek-V3's layers plus the indexer
        # (https://huggingface.co/deepseek-ai/DeepSeek-V3.2-Exp/blob/main/config.json)
        ("deepseek-v3", {"index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048},
         r"^index_topk=2048 .*lightning indexer"),
        # MiniMax-Text-01: 7 lightning-attention layers (0) to each softmax one (1)
        # (https://huggingface.co/MiniMaxAI/MiniMax-Text-01/blob/main/config.json)
        ("mixtral-8x7b", {"attn_type_list": [0] * 7 + [1] * 1 + [0] * 7 + [1] * 17},
         r"^attn_type_list=.*lightning"),
        # Llama 4's text model: chunks of 8192 tokens on its RoPE layers
        # (https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct/blob/main/config.json)
        ("qwen3-32b", {"attention_chunk_size": 8192}, r"^attention_chunk_size=8192 .*chunked"),
    ],
)  # fmt: skip
def test_unmodelled_attention_in_a_read_family_is_refused(
    base: str, fields: dict, says: str
) -> None:
    cfg = json.loads((CONFIGS / f"{base}.json").read_text())
    assert spec_from_hf_dict(cfg, "plain").num_layers > 0
    with pytest.raises(ModelError, match=says):
        spec_from_hf_dict({**cfg, **fields}, "x")
