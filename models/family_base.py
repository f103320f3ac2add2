"""What the llama-like readers share: :func:`llama_like` (llama, mistral, qwen2, qwen3 and
the MoE families built on them) and :func:`rotary_dims` (the dims rotary turns)."""

from __future__ import annotations

from typing import Any

from tpsim.models.hf_reader import Reader, heads_of, linear_dtype, weight_block
from tpsim.models.spec import ModelSpec


def llama_like(r: Reader, name: str, model_type: str | None, **moe: Any) -> ModelSpec:
    """llama, mistral, qwen2, qwen3 (and the MoE families, whose expert fields are ``moe``;
    ``qk_norm`` there overrides the family's)."""
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
        qk_norm=moe.pop("qk_norm", model_type in ("qwen3", "qwen3_moe")),
        sliding_window=window,
        sliding_layers=tuple(range(layers)) if window else (),
        **moe,
    )


def rotary_dims(
    r: Reader, head_dim: int, default: float, field: str = "partial_rotary_factor"
) -> int:
    """The q/k head dimensions rotary turns: ``head_dim * partial_rotary_factor`` (as
    transformers' and vLLM's get_rope compute it; GPT-NeoX's ``rotary_pct``), the factor
    read at the top level or in ``rope_parameters`` (transformers v5), ``default`` when
    absent; 0 when it is all."""
    rope = r.cfg.get("rope_parameters")
    nested = rope.get(field) if isinstance(rope, dict) else None
    key = field if r.has(field) or nested is None else f"rope_parameters.{field}"
    value = r.cfg.get(field, nested)
    factor = default if value is None else value
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise r.fail(key, value, "must be a number above 0 and at most 1")
    dims = head_dim * factor
    if dims != int(dims) or int(dims) % 2:
        raise r.fail(key, value, f"must turn an even number of the head's {head_dim} dims")
    return 0 if int(dims) == head_dim else int(dims)


def qwen_dense_layers(r: Reader, layers: int) -> tuple[int, ...]:
    """The layers of a Qwen MoE config (qwen2_moe, qwen3_moe, qwen3_next) with a dense MLP:
    those in ``mlp_only_layers`` and those whose ``i + 1`` is no multiple of
    ``decoder_sparse_step``."""
    step = r.integer("decoder_sparse_step", 1)
    only = r.cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in only
    ):
        raise r.fail("mlp_only_layers", only, f"must be a list of layer indices below {layers}")
    return tuple(i for i in range(layers) if i in only or (i + 1) % step != 0)


__all__ = ["llama_like", "qwen_dense_layers", "rotary_dims"]
