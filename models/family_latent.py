"""The readers of the families whose attention is not plain multi-head attention:
DeepSeek-V2/V3 (multi-head latent attention) and gpt-oss (sliding-window attention with
sinks). What each reads is listed in :mod:`tpsim.models.hf_config`.
"""

from __future__ import annotations

from tpsim.models.hf_reader import (
    Reader,
    dtype_of,
    layer_list,
    linear_dtype,
    quant_method,
    top_k,
    weight_block,
)
from tpsim.models.spec import ModelSpec

#: ``quant_method`` values that set the checkpoint's linear layers' dtype, per family.
_GPT_OSS_QUANT = {"mxfp4": "mxfp4"}


def _quant(r: Reader, known: dict[str, str]) -> str | None:
    method = quant_method(r)
    if method is not None and method not in known:
        raise r.fail(
            "quantization_config.quant_method",
            method,
            f"not modelled for this family; modelled: {', '.join(sorted(known))}",
        )
    return None if method is None else known[method]


def deepseek(r: Reader, name: str, model_type: str) -> ModelSpec:
    """DeepSeek-V2/V3: MLA, shared and routed experts, the first layers dense."""
    d = r.integer("hidden_size")
    heads = r.integer("num_attention_heads")
    layers = r.integer("num_hidden_layers")
    nope, rope = r.integer("qk_nope_head_dim"), r.integer("qk_rope_head_dim")
    experts = r.integer("n_routed_experts")
    width = r.integer("moe_intermediate_size")
    first = r.integer("first_k_dense_replace", 0, minimum=0)
    freq = r.integer("moe_layer_freq", 1)
    dense = tuple(i for i in range(layers) if i < first or i % freq)
    if len(dense) == layers:
        raise r.fail("first_k_dense_replace", first, f"leaves none of the {layers} layers MoE")
    groups = r.integer("n_group", 0, minimum=0)
    topk_group = r.integer("topk_group", 0, minimum=0)
    if topk_group > groups:
        raise r.fail("topk_group", topk_group, f"must be at most n_group={groups}")
    dtype = linear_dtype(r)
    return ModelSpec(
        name=name,
        hidden_size=d,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=heads,  # MLA expands the latent to every head's k and v
        head_dim=nope + rope,
        intermediate_size=r.integer("intermediate_size"),
        vocab_size=r.integer("vocab_size"),
        tied_embeddings=r.boolean("tie_word_embeddings", False),
        dtype=dtype,
        weight_block=weight_block(r),
        qkv_bias=r.boolean("attention_bias", False),
        max_position_embeddings=r.integer("max_position_embeddings", 0, minimum=0),
        num_experts=experts,
        experts_per_token=top_k(r, experts),
        moe_intermediate_size=width,
        shared_intermediate_size=r.integer("n_shared_experts", 0, minimum=0) * width,
        dense_layers=dense,
        q_lora_rank=r.integer("q_lora_rank", 0, minimum=0),
        kv_lora_rank=r.integer("kv_lora_rank"),
        qk_rope_head_dim=rope,
        v_head_dim=r.integer("v_head_dim"),
        n_group=groups,
        topk_group=topk_group,
        mtp_layers=r.integer("num_nextn_predict_layers", 0, minimum=0),
    )


def gpt_oss(r: Reader, name: str) -> ModelSpec:
    """gpt-oss: every layer an MoE of ``num_local_experts``, alternating sliding-window and
    full attention, attention sinks, MXFP4 experts."""
    d = r.integer("hidden_size")
    heads = r.integer("num_attention_heads")
    layers = r.integer("num_hidden_layers")
    kv_heads = r.integer("num_key_value_heads", heads)
    if heads % kv_heads:
        raise r.fail("num_key_value_heads", kv_heads, f"must divide num_attention_heads={heads}")
    kinds = layer_list(r, "layer_types", layers) or [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)
    ]
    for kind in kinds:
        if kind not in ("sliding_attention", "full_attention"):
            raise r.fail("layer_types", kind, "must be sliding_attention or full_attention")
    sliding = tuple(i for i, kind in enumerate(kinds) if kind == "sliding_attention")
    experts = r.integer("num_local_experts")
    expert_dtype = _quant(r, _GPT_OSS_QUANT) or ""
    return ModelSpec(
        name=name,
        hidden_size=d,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=r.integer("head_dim", d // heads),
        intermediate_size=r.integer("intermediate_size"),
        vocab_size=r.integer("vocab_size"),
        tied_embeddings=r.boolean("tie_word_embeddings", False),
        dtype=dtype_of(r),
        qkv_bias=r.boolean("attention_bias", True),
        max_position_embeddings=r.integer("max_position_embeddings", 0, minimum=0),
        num_experts=experts,
        experts_per_token=top_k(r, experts),
        moe_intermediate_size=r.integer("intermediate_size"),
        sliding_window=r.integer("sliding_window") if sliding else 0,
        sliding_layers=sliding,
        attention_sinks=True,
        expert_dtype=expert_dtype,
    )


__all__ = ["deepseek", "gpt_oss"]
