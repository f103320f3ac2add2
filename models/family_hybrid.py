"""The readers of the families whose layers are not all full attention, or whose norm is
not per head: Llama 4 (chunked local attention), MiniMax-M2 (q/k norms over all heads)
and Qwen3-Next (Gated DeltaNet linear attention). Registered in
:data:`tpsim.models.families.FAMILIES`."""

from __future__ import annotations

from dataclasses import replace

from tpsim.models.family_base import llama_like, qwen_dense_layers, rotary_dims
from tpsim.models.hf_reader import Reader, heads_of, top_k
from tpsim.models.spec import ModelSpec


def _layer_flags(r: Reader, key: str, layers: int) -> list[int] | None:
    """``key``: a list of 0/1 flags, one per layer at least (transformers reads the first
    ``layers``), or None when absent or empty (transformers then builds the default)."""
    value = r.cfg.get(key)
    if value is None or value == []:
        return None
    if (
        not isinstance(value, list)
        or len(value) < layers
        or not all(v in (0, 1) and not isinstance(v, float) for v in value)
    ):
        raise r.fail(key, value, f"must be a list of at least {layers} flags, 0 or 1")
    return [int(v) for v in value[:layers]]


def llama4(r: Reader, name: str) -> ModelSpec:
    """Llama 4's language model (transformers' Llama4TextConfig and modeling_llama4.py, vLLM's
    llama4.py): GQA with ``head_dim``; layer i is MoE when ``(i + 1) %
    interleave_moe_layer_step == 0`` (vLLM's Llama4DecoderLayer; transformers' default
    ``moe_layers``, which must agree where given), ``num_local_experts`` routed experts of
    width ``intermediate_size``, top ``num_experts_per_tok``, a sigmoid router and one shared
    expert of the same width; the other layers a dense MLP of width ``intermediate_size_mlp``.
    ``no_rope_layers`` (default: 0, NoPE, on every ``no_rope_layer_interval``-th layer) says
    which layers use RoPE: those attend within their ``attention_chunk_size`` chunk
    (chunked local attention, transformers' ``chunked_attention`` layer type), the NoPE ones
    over the whole context. ``use_qk_norm``'s L2 norm has no weights (not counted; its
    elementwise pass is not priced) and attention temperature tuning costs nothing.
    Absent fields take Llama4TextConfig's defaults."""
    if r.boolean("attention_bias", False):
        raise r.fail("attention_bias", True, "biases on q, k, v and o_proj are not modelled "
                     "for Llama 4 (vLLM's llama4.py builds none)")  # fmt: skip
    layers = r.integer("num_hidden_layers")
    experts = r.integer("num_local_experts", 16)
    step = r.integer("interleave_moe_layer_step", 1)
    moe = [i for i in range(layers) if (i + 1) % step == 0]
    given = r.cfg.get("moe_layers")
    if given is not None and given != moe:
        raise r.fail("moe_layers", given,
                     f"must be the layers interleave_moe_layer_step={step} makes MoE (vLLM's "
                     "llama4.py builds those, whatever moe_layers says)")  # fmt: skip
    if not moe:
        raise r.fail("interleave_moe_layer_step", step, f"leaves none of the {layers} layers MoE")
    rope = _layer_flags(r, "no_rope_layers", layers)
    if rope is None:
        interval = r.integer("no_rope_layer_interval", 4)
        rope = [int((i + 1) % interval != 0) for i in range(layers)]
    kinds = r.cfg.get("layer_types")
    if kinds is not None:
        expected = ["chunked_attention" if f else "full_attention" for f in rope]
        if not isinstance(kinds, list) or kinds[:layers] != expected:
            raise r.fail("layer_types", kinds,
                         "must be chunked_attention on the RoPE layers and full_attention on "
                         "the NoPE ones (no_rope_layers), as vLLM builds them")  # fmt: skip
    # absent: Llama4TextConfig's 8192; null: no chunking (every layer attends fully)
    chunk = r.cfg.get("attention_chunk_size", 8192)
    if chunk is not None:
        chunk = r.integer("attention_chunk_size", 8192)
    chunked = tuple(i for i in range(layers) if rope[i]) if chunk else ()
    width = r.integer("intermediate_size")
    spec = llama_like(
        r,
        name,
        "llama4",
        num_experts=experts,
        experts_per_token=top_k(r, experts),
        moe_intermediate_size=width,
        shared_intermediate_size=width,
        dense_layers=tuple(i for i in range(layers) if i not in moe),
        attention_chunk_size=chunk if chunked else 0,
        chunked_layers=chunked,
    )
    return replace(spec, intermediate_size=r.integer("intermediate_size_mlp", 16384))


#: MiniMax's ``attn_type_list`` entries (vLLM's minimax_text_01.py, MiniMaxText01DecoderLayer:
#: ``attention_type`` 0 builds MiniMaxText01LinearAttention, lightning attention; 1 the
#: softmax MiniMaxText01Attention over a KV cache)
_FULL_ATTENTION = 1


def minimax_m2(r: Reader, name: str) -> ModelSpec:
    """MiniMax-M2 (vLLM's minimax_m2.py, SGLang's minimax_m2.py): GQA with ``head_dim``,
    rotary on ``rotary_dim`` of each head (a ``partial_rotary_factor``, top level or in
    ``rope_parameters``, wins, as vLLM's MiniMaxM2Attention lets it), every layer MoE:
    ``num_local_experts`` gated experts of width ``intermediate_size``, top
    ``num_experts_per_tok``, a sigmoid router with ``e_score_correction_bias``
    (``use_routing_bias``; fp32, E floats a layer: not counted), no shared expert. Its q and
    k norms span all heads (``qk_norm_type: per_layer``): vLLM builds them whatever
    ``use_qk_norm`` says, so false is refused, as is ``per_head``. Every ``attn_type_list``
    entry must be 1 (softmax attention): lightning attention (0, MiniMax-Text-01/M1) is not
    modelled. ``num_mtp_modules`` MTP modules of ``mtp_transformer_layers`` layers each are
    counted apart, as DeepSeek's."""
    layers = r.integer("num_hidden_layers")
    kinds = r.cfg.get("attn_type_list")
    if kinds is not None:
        if not isinstance(kinds, list) or len(kinds) < layers:
            raise r.fail("attn_type_list", kinds, f"must be a list of at least {layers} "
                         "attention types, one per layer")  # fmt: skip
        for i, kind in enumerate(kinds[:layers]):
            if kind != _FULL_ATTENTION or isinstance(kind, bool):
                raise r.fail(f"attn_type_list[{i}]", kind,
                             "lightning (linear) attention layers (0, MiniMax-Text-01/M1) are "
                             "not modelled by tpsim; MiniMax-M2's layers are all 1 (softmax "
                             "attention)")  # fmt: skip
    if not r.boolean("use_qk_norm", True):
        raise r.fail("use_qk_norm", False, "vLLM's minimax_m2.py normalises q and k whatever "
                     "it says (MiniMaxText01RMSNormTP on every layer)")  # fmt: skip
    norm_type = r.cfg.get("qk_norm_type", "per_layer")
    if norm_type != "per_layer":
        raise r.fail("qk_norm_type", norm_type, "only per_layer (one norm over all heads) is "
                     "what vLLM's minimax_m2.py builds")  # fmt: skip
    shared = r.integer("shared_intermediate_size", 0, minimum=0)
    if shared:
        raise r.fail("shared_intermediate_size", shared, "a shared expert is not built by "
                     "vLLM's minimax_m2.py (MiniMaxM2MoE has none)")  # fmt: skip
    experts = r.integer("num_local_experts")
    d, heads = r.integer("hidden_size"), r.integer("num_attention_heads")
    head_dim = heads_of(r, d, "num_attention_heads", heads)[1]
    rope = r.cfg.get("rope_parameters")
    if r.has("partial_rotary_factor") or (isinstance(rope, dict)
                                          and "partial_rotary_factor" in rope):  # fmt: skip
        rotary = rotary_dims(r, head_dim, 1.0)
    else:
        rotary = r.integer("rotary_dim", head_dim)
        if rotary > head_dim or rotary % 2:
            raise r.fail("rotary_dim", rotary, f"must be an even number of at most the head's "
                         f"{head_dim} dims")  # fmt: skip
        rotary = 0 if rotary == head_dim else rotary
    modules = r.integer("num_mtp_modules", 0, minimum=0)
    return llama_like(
        r,
        name,
        "minimax_m2",
        num_experts=experts,
        experts_per_token=top_k(r, experts),
        moe_intermediate_size=r.integer("intermediate_size"),
        qk_norm=True,
        qk_norm_whole=True,
        rotary_dim=rotary,
        mtp_layers=modules * r.integer("mtp_transformer_layers", 1, minimum=0) if modules else 0,
    )


#: Qwen3NextConfig's defaults (transformers' configuration_qwen3_next.py) of the fields its
#: reader takes when absent: vLLM reads the same config object
_QWEN3_NEXT_DEFAULTS = {
    "head_dim": 256,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
}
_LINEAR, _FULL = "linear_attention", "full_attention"


def qwen3_next(r: Reader, name: str) -> ModelSpec:
    """Qwen3-Next (transformers' Qwen3NextConfig and modeling_qwen3_next.py, vLLM's
    qwen3_next.py and gdn_linear_attn.py): ``layer_types`` (default: every
    ``full_attention_interval``-th layer, 4, full attention, the others linear) says which
    layers are Gated DeltaNet linear attention (``linear_num_key_heads`` x
    ``linear_key_head_dim`` q and k, ``linear_num_value_heads`` x ``linear_value_head_dim``
    v, a causal conv of ``linear_conv_kernel_dim``) and which gated full attention: GQA with
    ``head_dim``, q_proj doubled for the sigmoid output gate (``attn_output_gate``, vLLM's
    default true), per-head q/k RMSNorms, rotary on ``partial_rotary_factor`` (0.25) of
    each head. Every layer's MLP is qwen2_moe's (``num_experts`` of
    ``moe_intermediate_size``, top ``num_experts_per_tok``, a shared expert of
    ``shared_expert_intermediate_size`` whose [d, 1] sigmoid gate is not counted;
    ``mlp_only_layers`` and ``decoder_sparse_step`` dense). ``num_nextn_predict_layers``
    (vLLM's qwen3_next_mtp.py: 1 when absent) MTP layers, each a full-attention layer, are
    counted apart as DeepSeek's. Absent linear and head fields take Qwen3NextConfig's
    defaults."""
    r = Reader({**_QWEN3_NEXT_DEFAULTS, **r.cfg}, r.source)
    if r.boolean("attention_bias", False):
        raise r.fail("attention_bias", True, "biases on q, k, v and o_proj are not modelled "
                     "for Qwen3-Next (vLLM's qwen3_next.py builds none)")  # fmt: skip
    layers = r.integer("num_hidden_layers")
    kinds = r.cfg.get("layer_types")
    if kinds is None:
        interval = r.integer("full_attention_interval", 4)
        kinds = [_FULL if (i + 1) % interval == 0 else _LINEAR for i in range(layers)]
    if not isinstance(kinds, list) or len(kinds) < layers:
        raise r.fail("layer_types", kinds, f"must be a list of at least {layers} layer "
                     "types, one per layer")  # fmt: skip
    for i, kind in enumerate(kinds[:layers]):
        if kind not in (_LINEAR, _FULL):
            raise r.fail(f"layer_types[{i}]", kind, "must be linear_attention or "
                         "full_attention (what vLLM's Qwen3NextDecoderLayer builds)")  # fmt: skip
    linear = tuple(i for i in range(layers) if kinds[i] == _LINEAR)
    nk, nv = r.integer("linear_num_key_heads"), r.integer("linear_num_value_heads")
    if nv % nk:
        raise r.fail("linear_num_value_heads", nv, f"must be a multiple of "
                     f"linear_num_key_heads={nk} (vLLM groups v heads by key head)")  # fmt: skip
    conv = r.integer("linear_conv_kernel_dim")
    if conv < 2:
        raise r.fail("linear_conv_kernel_dim", conv, "must be at least 2 (the conv state "
                     "holds its last kernel - 1 inputs)")  # fmt: skip
    experts = r.integer("num_experts")
    dense = qwen_dense_layers(r, layers)
    d, heads = r.integer("hidden_size"), r.integer("num_attention_heads")
    head_dim = heads_of(r, d, "num_attention_heads", heads)[1]
    return llama_like(
        r,
        name,
        "qwen3_next",
        num_experts=experts,
        experts_per_token=top_k(r, experts),
        moe_intermediate_size=r.integer("moe_intermediate_size"),
        shared_intermediate_size=r.integer("shared_expert_intermediate_size", 512, minimum=0),
        dense_layers=dense,
        qk_norm=True,
        rotary_dim=rotary_dims(r, head_dim, 0.25),
        mtp_layers=r.integer("num_nextn_predict_layers", 1, minimum=0),
        linear_layers=linear,
        linear_key_heads=nk if linear else 0,
        linear_value_heads=nv if linear else 0,
        linear_key_head_dim=r.integer("linear_key_head_dim") if linear else 0,
        linear_value_head_dim=r.integer("linear_value_head_dim") if linear else 0,
        linear_conv_kernel=conv if linear else 0,
        attn_output_gate=r.boolean("attn_output_gate", True),
    )


__all__ = ["llama4", "minimax_m2", "qwen3_next"]
