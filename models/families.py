"""The model families tpsim reads from a ``config.json``: one reader per ``model_type``.

Each reader turns a config dict into a :class:`~tpsim.models.spec.ModelSpec`; the
registry :data:`FAMILIES` says which ``model_type`` each handles and which fields, refused
in any other family (:data:`tpsim.models.hf_config.UNMODELLED_FIELDS`), it reads. The
layouts each implies are listed in :mod:`tpsim.models.hf_config`; DeepSeek's and gpt-oss's
readers are in :mod:`tpsim.models.family_latent`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tpsim.models.family_latent import deepseek, gpt_oss
from tpsim.models.hf_reader import Reader, heads_of, linear_dtype, top_k, weight_block
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


def _granitemoe(r: Reader, name: str) -> ModelSpec:
    """Granite-3.0 MoE (vLLM's granitemoe.py): every layer ``num_local_experts`` gated experts
    of width intermediate_size, top ``num_experts_per_tok``, bias-free attention; its
    embedding, residual, attention and logit multipliers change no cost."""
    if r.boolean("attention_bias", False):
        raise r.fail("attention_bias", True, "biases on q, k, v and o_proj are not modelled "
                     "for model_type='granitemoe' (vLLM's granitemoe.py builds none)")  # fmt: skip
    experts = r.integer("num_local_experts")
    return llama_like(
        r,
        name,
        "granitemoe",
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


def _rotary_dim(
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


def _glm4_moe(r: Reader, name: str) -> ModelSpec:
    """GLM-4.5/4.6 (vLLM's glm4_moe.py): GQA with q, k, v biases (``attention_bias``),
    optional per-head q/k RMSNorm (``use_qk_norm``), rotary on ``partial_rotary_factor`` of
    each head; layers from ``first_k_dense_replace`` on are MoE (``n_routed_experts`` of
    ``moe_intermediate_size``, ``n_shared_experts`` shared ones of the same width, a sigmoid
    router over ``n_group`` groups); ``num_nextn_predict_layers`` MTP layers counted apart.
    Absent fields take transformers' Glm4MoeConfig defaults."""
    experts = r.integer("n_routed_experts")
    width = r.integer("moe_intermediate_size")
    layers = r.integer("num_hidden_layers")
    first = r.integer("first_k_dense_replace", 1, minimum=0)
    if first >= layers:
        raise r.fail("first_k_dense_replace", first, f"leaves none of the {layers} layers MoE")
    groups, topk_group = r.integer("n_group", 1), r.integer("topk_group", 1)
    if topk_group > groups:
        raise r.fail("topk_group", topk_group, f"must be at most n_group={groups}")
    d, heads = r.integer("hidden_size"), r.integer("num_attention_heads")
    return llama_like(
        r,
        name,
        "glm4_moe",
        num_experts=experts,
        experts_per_token=top_k(r, experts),
        moe_intermediate_size=width,
        shared_intermediate_size=r.integer("n_shared_experts", 1, minimum=0) * width,
        dense_layers=tuple(range(first)),
        qk_norm=r.boolean("use_qk_norm", False),
        rotary_dim=_rotary_dim(r, heads_of(r, d, "num_attention_heads", heads)[1], 0.5),
        n_group=groups,
        topk_group=topk_group,
        mtp_layers=r.integer("num_nextn_predict_layers", 1, minimum=0),
    )


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


def _llama4(r: Reader, name: str) -> ModelSpec:
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


def _minimax_m2(r: Reader, name: str) -> ModelSpec:
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
        rotary = _rotary_dim(r, head_dim, 1.0)
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


def _qwen3_next(r: Reader, name: str) -> ModelSpec:
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
    step = r.integer("decoder_sparse_step", 1)
    only = r.cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in only
    ):
        raise r.fail("mlp_only_layers", only, f"must be a list of layer indices below {layers}")
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
        dense_layers=tuple(i for i in range(layers) if i in only or (i + 1) % step != 0),
        qk_norm=True,
        rotary_dim=_rotary_dim(r, head_dim, 0.25),
        mtp_layers=r.integer("num_nextn_predict_layers", 1, minimum=0),
        linear_layers=linear,
        linear_key_heads=nk if linear else 0,
        linear_value_heads=nv if linear else 0,
        linear_key_head_dim=r.integer("linear_key_head_dim") if linear else 0,
        linear_value_head_dim=r.integer("linear_value_head_dim") if linear else 0,
        linear_conv_kernel=conv if linear else 0,
        attn_output_gate=r.boolean("attn_output_gate", True),
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
        # transformers' GPTNeoXConfig and vLLM's gpt_neox.py: rotary on rotary_pct of each
        # head (0.25 by default; Pythia's 0.25, GPT-NeoX-20B's 0.25)
        rotary_dim=_rotary_dim(r, head_dim, 0.25, "rotary_pct"),
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

#: What Llama 4's reader reads of UNMODELLED_FIELDS (and the wrapper its text_config: the
#: language model, unwrapped by tpsim.models.hf_config before this reader runs)
_LLAMA4 = ("num_local_experts", "num_experts_per_tok", "attention_chunk_size", "layer_types")

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
    "glm4_moe": (_glm4_moe, ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")),
    "gpt_oss": (gpt_oss, ("num_local_experts", "num_experts_per_tok", "layer_types")),
    # Kimi-K2 (architectures DeepseekV3ForCausalLM, which vLLM's registry maps to
    # deepseek_v2.py whatever the model_type): DeepSeek-V3's layout at other sizes
    "granitemoe": (_granitemoe, ("num_local_experts", "num_experts_per_tok")),
    "kimi_k2": (
        lambda r, name: deepseek(r, name, "kimi_k2"),
        (
            "n_routed_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "kv_lora_rank",
            "q_lora_rank",
        ),
    ),
    "llama": (lambda r, name: llama_like(r, name, "llama"), ()),
    # Llama 4: the wrapper (Llama4ForConditionalGeneration) is read from its text_config
    # (tpsim.models.hf_config), the bare language model as it is
    "llama4": (_llama4, (*_LLAMA4, "text_config")),
    "llama4_text": (_llama4, _LLAMA4),
    "mistral": (lambda r, name: llama_like(r, name, "mistral"), ("sliding_window",)),
    "mixtral": (_mixtral, ("num_local_experts", "num_experts_per_tok", "sliding_window")),
    # MiniMax-M2/M2.1 (MiniMaxM2ForCausalLM); MiniMax-Text-01/M1's lightning attention
    # (model_type minimax, minimax_m1) is not read
    "minimax_m2": (_minimax_m2, ("num_local_experts", "num_experts_per_tok", "attn_type_list")),
    "opt": (_opt, ()),
    "qwen2": (lambda r, name: llama_like(r, name, "qwen2"), ()),
    "qwen2_moe": (
        lambda r, name: _qwen_moe(r, name, "qwen2_moe"),
        ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    ),
    "qwen3": (lambda r, name: llama_like(r, name, "qwen3"), ()),
    # Qwen3-Next: Gated DeltaNet linear attention on 3 of every 4 layers
    "qwen3_next": (
        _qwen3_next,
        (
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "linear_num_value_heads",
            "full_attention_interval",
            "layer_types",
        ),
    ),
    "qwen3_moe": (
        lambda r, name: _qwen_moe(r, name, "qwen3_moe"),
        ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    ),
}
SUPPORTED_TYPES = tuple(sorted(FAMILIES))


__all__ = ["FAMILIES", "SUPPORTED_TYPES", "Family", "llama_like"]
