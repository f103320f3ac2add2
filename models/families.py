"""The model families tpsim reads from a ``config.json``: one reader per ``model_type``.

Each reader turns a config dict into a :class:`~tpsim.models.spec.ModelSpec`; the
registry :data:`FAMILIES` says which ``model_type`` each handles and which fields, refused
in any other family (:data:`tpsim.models.hf_config.UNMODELLED_FIELDS`), it reads. The
layouts each implies are listed in :mod:`tpsim.models.hf_config`; DeepSeek's and gpt-oss's
readers are in :mod:`tpsim.models.family_latent`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpsim.models.family_latent import deepseek, gpt_oss
from tpsim.models.hf_reader import Reader, heads_of, linear_dtype, top_k, weight_block
from tpsim.models.spec import ModelSpec


def llama_like(r: Reader, name: str, model_type: str | None, **moe: Any) -> ModelSpec:
    """llama, mistral, qwen2, qwen3 (and the MoE families, whose expert fields are ``moe``)."""
    d = r.integer("hidden_size")
    heads = r.integer("num_attention_heads")
    kv_heads, head_dim = heads_of(r, d, "num_attention_heads", heads)
    qkv_bias = r.boolean("attention_bias", model_type in ("qwen2", "qwen2_moe"))
    layers = r.integer("num_hidden_layers")
    # Mistral and Mixtral attend over the last sliding_window tokens on every layer when it
    # is set (transformers' MistralConfig; v0.1 checkpoints: 4096); Qwen's is off unless
    # use_sliding_window (refused then: hf_config)
    window = 0
    if model_type in ("mistral", "mixtral") and r.cfg.get("sliding_window") is not None:
        window = r.integer("sliding_window")
    return ModelSpec(
        name=name,
        hidden_size=d,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=r.integer("intermediate_size"),
        vocab_size=r.integer("vocab_size"),
        gated_mlp=True,
        tied_embeddings=r.boolean("tie_word_embeddings", False),
        dtype=linear_dtype(r),
        weight_block=weight_block(r),
        norm="rmsnorm",
        qkv_bias=qkv_bias,
        mlp_bias=r.boolean("mlp_bias", False),
        max_position_embeddings=r.integer("max_position_embeddings", 0, minimum=0),
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
        sliding_window=window,
        sliding_layers=tuple(range(layers)) if window else (),
        **moe,
    )


def _mixtral(r: Reader, name: str) -> ModelSpec:
    """Mixtral: a mistral whose every MLP is ``num_local_experts`` experts of width
    intermediate_size."""
    experts = r.integer("num_local_experts")
    return llama_like(
        r,
        name,
        "mixtral",
        num_experts=experts,
        experts_per_token=top_k(r, experts),
        moe_intermediate_size=r.integer("intermediate_size"),
    )


def _qwen_moe(r: Reader, name: str, model_type: str) -> ModelSpec:
    """qwen2_moe and qwen3_moe: layer i has experts unless it is in mlp_only_layers or
    (i + 1) is no multiple of decoder_sparse_step."""
    experts = r.integer("num_experts")
    layers = r.integer("num_hidden_layers")
    step = r.integer("decoder_sparse_step", 1)
    only = r.cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in only
    ):
        raise r.fail("mlp_only_layers", only, f"must be a list of layer indices below {layers}")
    dense = tuple(i for i in range(layers) if i in only or (i + 1) % step != 0)
    shared = 0
    if model_type == "qwen2_moe":
        shared = r.integer("shared_expert_intermediate_size", 0, minimum=0)
    return llama_like(
        r,
        name,
        model_type,
        num_experts=experts,
        experts_per_token=top_k(r, experts),
        moe_intermediate_size=r.integer("moe_intermediate_size"),
        shared_intermediate_size=shared,
        dense_layers=dense,
    )


def _gpt_neox(r: Reader, name: str) -> ModelSpec:
    d = r.integer("hidden_size")
    heads = r.integer("num_attention_heads")
    kv_heads, head_dim = heads_of(r, d, "num_attention_heads", heads)
    return ModelSpec(
        name=name,
        hidden_size=d,
        num_layers=r.integer("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=r.integer("intermediate_size"),
        vocab_size=r.integer("vocab_size"),
        gated_mlp=False,
        tied_embeddings=r.boolean("tie_word_embeddings", False),
        dtype=linear_dtype(r),
        weight_block=weight_block(r),
        norm="layernorm",
        qkv_bias=True,
        mlp_bias=True,
        max_position_embeddings=r.integer("max_position_embeddings", 0, minimum=0),
    )


def _gpt2(r: Reader, name: str) -> ModelSpec:
    d = r.integer("n_embd")
    heads = r.integer("n_head")
    if d % heads != 0:
        raise r.fail("n_embd", d, f"not divisible by n_head={heads}")
    return ModelSpec(
        name=name,
        hidden_size=d,
        num_layers=r.integer("n_layer"),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=d // heads,
        intermediate_size=r.integer("n_inner", 4 * d),
        vocab_size=r.integer("vocab_size"),
        gated_mlp=False,
        tied_embeddings=r.boolean("tie_word_embeddings", True),
        dtype=linear_dtype(r),
        weight_block=weight_block(r),
        norm="layernorm",
        qkv_bias=True,
        mlp_bias=True,
        max_position_embeddings=r.integer("n_positions"),
        learned_position_embeddings=True,
    )


def _opt(r: Reader, name: str) -> ModelSpec:
    # word_embed_proj_dim (opt-350m's small projection) is ignored: hidden_size is used.
    # OPT's position table has 2 extra rows (an offset); not counted.
    d = r.integer("hidden_size")
    heads = r.integer("num_attention_heads")
    if d % heads != 0:
        raise r.fail("hidden_size", d, f"not divisible by num_attention_heads={heads}")
    bias = r.boolean("enable_bias", True)
    return ModelSpec(
        name=name,
        hidden_size=d,
        num_layers=r.integer("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=d // heads,
        intermediate_size=r.integer("ffn_dim"),
        vocab_size=r.integer("vocab_size"),
        gated_mlp=False,
        tied_embeddings=r.boolean("tie_word_embeddings", True),
        dtype=linear_dtype(r),
        weight_block=weight_block(r),
        norm="layernorm",
        qkv_bias=bias,
        mlp_bias=bias,
        max_position_embeddings=r.integer("max_position_embeddings"),
        learned_position_embeddings=True,
    )


Family = Callable[[Reader, str], ModelSpec]

#: The families tpsim models: model_type, its reader and the UNMODELLED_FIELDS it reads.
FAMILIES: dict[str, tuple[Family, tuple[str, ...]]] = {
    "deepseek_v2": (
        lambda r, name: deepseek(r, name, "deepseek_v2"),
        (
            "n_routed_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "kv_lora_rank",
            "q_lora_rank",
        ),
    ),
    "deepseek_v3": (
        lambda r, name: deepseek(r, name, "deepseek_v3"),
        (
            "n_routed_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "kv_lora_rank",
            "q_lora_rank",
        ),
    ),
    "gpt2": (_gpt2, ()),
    "gpt_neox": (_gpt_neox, ()),
    "gpt_oss": (gpt_oss, ("num_local_experts", "num_experts_per_tok", "layer_types")),
    "llama": (lambda r, name: llama_like(r, name, "llama"), ()),
    "mistral": (lambda r, name: llama_like(r, name, "mistral"), ("sliding_window",)),
    "mixtral": (_mixtral, ("num_local_experts", "num_experts_per_tok", "sliding_window")),
    "opt": (_opt, ()),
    "qwen2": (lambda r, name: llama_like(r, name, "qwen2"), ()),
    "qwen2_moe": (
        lambda r, name: _qwen_moe(r, name, "qwen2_moe"),
        ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    ),
    "qwen3": (lambda r, name: llama_like(r, name, "qwen3"), ()),
    "qwen3_moe": (
        lambda r, name: _qwen_moe(r, name, "qwen3_moe"),
        ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    ),
}
SUPPORTED_TYPES = tuple(sorted(FAMILIES))


__all__ = ["FAMILIES", "SUPPORTED_TYPES", "Family", "llama_like"]
