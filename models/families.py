"""The model families tpsim reads from a ``config.json``: one reader per ``model_type``.

Each reader turns a config dict into a :class:`~tpsim.models.spec.ModelSpec`; the
registry :data:`FAMILIES` says which ``model_type`` each handles and which fields, refused
in any other family (:data:`tpsim.models.hf_config.UNMODELLED_FIELDS`), it reads. The
layouts each implies are listed in :mod:`tpsim.models.hf_config`; DeepSeek's and gpt-oss's
readers are in :mod:`tpsim.models.family_latent`, Llama 4's, MiniMax-M2's and Qwen3-Next's
in :mod:`tpsim.models.family_hybrid`, the llama-like base in :mod:`tpsim.models.family_base`.
"""

from __future__ import annotations

from collections.abc import Callable

from tpsim.models.family_base import llama_like, qwen_dense_layers, rotary_dims
from tpsim.models.family_hybrid import llama4, minimax_m2, qwen3_next
from tpsim.models.family_latent import deepseek, gpt_oss
from tpsim.models.hf_reader import Reader, heads_of, linear_dtype, top_k, weight_block
from tpsim.models.spec import ModelSpec


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
    dense = qwen_dense_layers(r, r.integer("num_hidden_layers"))
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
        rotary_dim=rotary_dims(r, heads_of(r, d, "num_attention_heads", heads)[1], 0.5),
        n_group=groups,
        topk_group=topk_group,
        mtp_layers=r.integer("num_nextn_predict_layers", 1, minimum=0),
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
        rotary_dim=rotary_dims(r, head_dim, 0.25, "rotary_pct"),
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
    "llama4": (llama4, (*_LLAMA4, "text_config")),
    "llama4_text": (llama4, _LLAMA4),
    "mistral": (lambda r, name: llama_like(r, name, "mistral"), ("sliding_window",)),
    "mixtral": (_mixtral, ("num_local_experts", "num_experts_per_tok", "sliding_window")),
    # MiniMax-M2/M2.1 (MiniMaxM2ForCausalLM); MiniMax-Text-01/M1's lightning attention
    # (model_type minimax, minimax_m1) is not read
    "minimax_m2": (minimax_m2, ("num_local_experts", "num_experts_per_tok", "attn_type_list")),
    "opt": (_opt, ()),
    "qwen2": (lambda r, name: llama_like(r, name, "qwen2"), ()),
    "qwen2_moe": (
        lambda r, name: _qwen_moe(r, name, "qwen2_moe"),
        ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    ),
    "qwen3": (lambda r, name: llama_like(r, name, "qwen3"), ()),
    # Qwen3-Next: Gated DeltaNet linear attention on 3 of every 4 layers
    "qwen3_next": (
        qwen3_next,
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
