"""Load a ModelSpec from a local Hugging Face ``config.json``. Never touches the network.

Supported ``model_type`` values and the layout each implies:

========  ==============================  =====  =========  ===============  =========  ====
type      size keys                       MLP    norm       biases           positions  tied
========  ==============================  =====  =========  ===============  =========  ====
llama     hidden_size, num_hidden_layers  gated  rmsnorm    attention_bias,  rotary     no
          num_attention_heads, ...                          mlp_bias keys
mistral   (as llama)                      gated  rmsnorm    none             rotary     no
qwen2     (as llama)                      gated  rmsnorm    q, k, v          rotary     no
gpt_neox  (as llama)                      plain  layernorm  all linears      rotary     no
gpt2      n_embd, n_layer, n_head, ...    plain  layernorm  all linears      learned    yes
opt       (as llama), ffn_dim             plain  layernorm  all linears      learned    yes
qwen3     (as llama), head_dim            gated  rmsnorm    attention_bias   rotary     no
========  ==============================  =====  =========  ===============  =========  ====

qwen3 adds an RMSNorm on each query and key head (``qk_norm``). Mixture-of-experts families
(gated experts, rmsnorm, rotary, untied by default; ``num_experts_per_tok`` experts per
token):

==========  ==================  ==============================  ========================
type        experts             expert width                    shared experts, dense
==========  ==================  ==============================  ========================
mixtral     num_local_experts   intermediate_size               none
qwen2_moe   num_experts         moe_intermediate_size           shared_expert_intermediate
                                                                _size; mlp_only_layers,
                                                                decoder_sparse_step
qwen3_moe   num_experts         moe_intermediate_size           none; as qwen2_moe
granitemoe  num_local_experts   intermediate_size               none
glm4_moe    n_routed_experts    moe_intermediate_size           n_shared_experts of the
                                                                routed width; the first
                                                                first_k_dense_replace
llama4      num_local_experts   intermediate_size               one of the routed width;
                                                                layers off interleave_moe
                                                                _layer_step, of width
                                                                intermediate_size_mlp
minimax_m2  num_local_experts   intermediate_size               none (shared_intermediate
                                                                _size must be 0); none
qwen3_next  num_experts         moe_intermediate_size           shared_expert_intermediate
                                                                _size (512); as qwen2_moe
==========  ==================  ==============================  ========================

qwen3_next (Qwen3-Next, vLLM's qwen3_next.py and gdn_linear_attn.py): ``layer_types``
(default: every ``full_attention_interval``-th layer, 4, ``full_attention``, the others
``linear_attention``; any other kind refused naming its index) picks each layer's token
mixer. A linear layer is Gated DeltaNet: ``linear_num_key_heads`` q/k heads of
``linear_key_head_dim``, ``linear_num_value_heads`` (a multiple of them) v heads of
``linear_value_head_dim``, a causal conv of ``linear_conv_kernel_dim`` (at least 2), no KV
cache but a constant state per sequence (:mod:`tpsim.models.linear_attention`). A full
layer is GQA with ``head_dim`` (absent: 256, Qwen3NextConfig's), q_proj doubled for the
sigmoid output gate (``attn_output_gate``, default true), per-head q/k RMSNorms and rotary on
``partial_rotary_factor`` (0.25) of each head; ``attention_bias`` true is refused. Absent
linear fields take Qwen3NextConfig's defaults. ``num_nextn_predict_layers`` (1 when absent,
as vLLM's qwen3_next_mtp.py reads it) MTP layers are counted apart as DeepSeek's. Qwen3.5
(``qwen3_5``, ``qwen3_5_moe`` and their ``_text`` models: the same layers in a multimodal
wrapper) is refused naming what is not read.

minimax_m2 (MiniMax-M2 and M2.1, vLLM's and SGLang's minimax_m2.py): GQA with ``head_dim``,
no biases unless ``attention_bias``, rotary on ``rotary_dim`` of each head (a
``partial_rotary_factor``, top level or in ``rope_parameters``, wins), a sigmoid router with
``e_score_correction_bias`` (fp32, not counted), top ``num_experts_per_tok``. Its q and k
RMSNorms span all heads (``qk_norm_type`` per_layer, the only kind vLLM builds; weights
[h hd] and [kv hd]; ``use_qk_norm`` false is refused, vLLM builds them whatever it says);
under TP their fp32 variance ([T, 2]) is all-reduced every layer. ``attn_type_list`` must be
1 (softmax attention) on every layer: 0, MiniMax-Text-01/M1's lightning attention, is
refused naming its index. ``num_mtp_modules`` x ``mtp_transformer_layers`` MTP layers are
counted apart as DeepSeek's. Its fp8 ``quantization_config`` (128 x 128 blocks; the router
and LM head 16-bit) is read as deepseek_v3's.

llama4 (Llama 4 Scout and Maverick, vLLM's llama4.py; the Llama4ForConditionalGeneration
wrapper is read from its ``text_config``, model_type llama4_text, which is also read bare):
GQA with ``head_dim``, no biases (``attention_bias`` true refused), a sigmoid router, top
``num_experts_per_tok``; layer i is MoE when ``(i + 1) % interleave_moe_layer_step == 0``
(``moe_layers`` must agree). The RoPE layers of ``no_rope_layers`` (default: all but every
``no_rope_layer_interval``-th, 4) attend within their ``attention_chunk_size`` chunk
(default 8192; null: none), the NoPE ones over the whole context (``layer_types``, where
given, must say so). ``use_qk_norm``'s L2 norm has no weights; attention temperature tuning
and rope scaling change no cost. The wrapper's ``quantization_config`` and ``torch_dtype``
apply where text_config has none; its vision tower is counted from ``vision_config`` into
the notes (0.87 B), not the totals.

glm4_moe (GLM-4.5/4.6, vLLM's glm4_moe.py) has q, k, v biases (``attention_bias``), per-head
q/k RMSNorms (``use_qk_norm``), rotary on ``partial_rotary_factor`` of each head (default
0.5), a sigmoid router over ``n_group`` groups (kept; its fp32 weights and
``e_score_correction_bias`` are counted as the model's dtype and not at all: 0.2 % of a GPU's
weights at TP 8) and ``num_nextn_predict_layers`` MTP layers counted apart as DeepSeek's.
granitemoe (Granite-3.0 MoE) is mixtral's layout without a window; its multipliers change no
cost and ``attention_bias`` true (biases vLLM does not build) is refused.

qwen2_moe's (and qwen3_next's) sigmoid gate on the shared expert ([d, 1] per layer) is not
counted; qwen3_moe
has qwen3's q/k norms, qwen2_moe qwen2's q, k, v biases. ``norm_topk_prob`` changes no cost.

deepseek_v2/deepseek_v3 (and kimi_k2, Kimi-K2's DeepseekV3ForCausalLM, which vLLM's registry
maps to the same model file by its architecture): multi-head latent attention
(``q_lora_rank`` (null: one q projection), ``kv_lora_rank``, ``qk_nope_head_dim``,
``qk_rope_head_dim``, ``v_head_dim``),
``n_routed_experts`` of ``moe_intermediate_size`` and ``n_shared_experts`` shared ones of the
same width, the first ``first_k_dense_replace`` layers (and those off ``moe_layer_freq``)
dense; ``n_group``/``topk_group`` kept; ``routed_scaling_factor`` and the scoring function
change no cost; ``num_nextn_predict_layers`` MTP layers counted apart. A
``quantization_config`` with ``quant_method`` fp8 (block-scaled e4m3, DeepSeek-V3's
checkpoint) makes the linear layers fp8; the block scales (one fp32 per 128 x 128) are not
counted (0.02 %).

gpt_oss: ``num_local_experts`` experts of width intermediate_size, top
``num_experts_per_tok``; ``layer_types`` (default: sliding, full, sliding, ...) with
``sliding_window``; attention sinks; q, k, v biases (``attention_bias``); the output, router
and expert biases are not counted (0.03 % of gpt-oss-120b); ``quantization_config``
``mxfp4`` stores the routed experts in MXFP4 (attention, router, embedding and head bf16).

A ``layer_types`` entry other than ``full_attention`` in a family that does not read it,
Qwen's ``use_sliding_window: true``, or any field of :data:`UNMODELLED_FIELDS`, is refused
naming it. Mistral's and Mixtral's ``sliding_window`` (when set) makes every layer attend
over that many last tokens, its cache holding them. Each family is one reader
in :data:`tpsim.models.families.FAMILIES`.

"tied" is the default when ``tie_word_embeddings`` is absent. An absent
``num_key_value_heads`` means multi-head attention; an explicit ``head_dim`` wins over
hidden_size // heads. ``torch_dtype`` (or ``dtype``) maps bfloat16/float16/float32 to
bf16/fp16/fp32; absent means bf16.

A config without model_type that has the llama keys loads as llama-like; an unknown
model_type is refused (naming the family its ``architectures`` class belongs to, when tpsim
reads that one). ``quantization_config`` sets the linear layers' dtype in every family
(:func:`tpsim.models.hf_reader.linear_dtype`: fp8, NVFP4, AWQ/GPTQ int4); other quantisations
are refused. Its skip lists keep some GEMMs 16-bit (``ModelSpec.kept_16bit``,
:func:`tpsim.models.hf_skiplist.with_skip_lists`).
Every malformed input raises ModelError with a one-line message naming the field.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tpsim.models.errors import ModelError
from tpsim.models.families import FAMILIES, SUPPORTED_TYPES, llama_like
from tpsim.models.hf_json import model_name, read_config_json
from tpsim.models.hf_reader import Reader, declared_kv_dtype, show, where_of
from tpsim.models.hf_skiplist import with_skip_lists
from tpsim.models.spec import ModelSpec

_LLAMA_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)
#: Fields of layer structures tpsim does not model yet (mixture-of-experts routing and expert
#: FFNs, multi-head latent attention, linear, sparse or chunked attention, Mamba layers) in a
#: family that does not read them. A config that sets one is refused, never timed as the
#: model its other fields describe (a Mixtral read as a dense 7B is ten times off).
UNMODELLED_FIELDS = {
    "num_local_experts": "mixture-of-experts (Mixtral)",
    "num_experts": "mixture-of-experts (Qwen-MoE)",
    "n_routed_experts": "mixture-of-experts (DeepSeek)",
    "num_experts_per_tok": "mixture-of-experts routing",
    "moe_intermediate_size": "mixture-of-experts FFN",
    "kv_lora_rank": "multi-head latent attention (DeepSeek)",
    "q_lora_rank": "multi-head latent attention (DeepSeek)",
    "moe_num_experts": "mixture-of-experts (DBRX, JetMoE)",
    "moe_top_k": "mixture-of-experts routing (DBRX)",
    "ffn_config": "an FFN configured apart (DBRX: its experts)",
    # Llama 4's (model_type llama4) is read: its family unwraps it
    "text_config": "a model nested in text_config (multimodal: Gemma 3, Mllama)",
    # attention that is not softmax attention over a KV cache on every layer: priced as that,
    # a relabelled config's cache and attention time would be off (Qwen3-Next's 48 layers
    # cached where 12 are: 4x)
    "index_topk": "sparse attention with a lightning indexer (DeepSeek-V3.2)",
    # Qwen3-Next's (model_type qwen3_next) are read
    "linear_num_value_heads": "linear-attention (Gated DeltaNet) layers (Qwen3-Next)",
    "full_attention_interval": "linear-attention layers between full ones (Qwen3-Next)",
    # MiniMax-M2's (model_type minimax_m2) is read, and must say softmax on every layer
    "attn_type_list": "lightning (linear) attention layers (MiniMax-Text-01/M1)",
    "attention_chunk_size": "chunked local attention (Llama 4)",
    "mamba_d_state": "Mamba layers (Jamba)",
    "hybrid_override_pattern": "Mamba layers (Nemotron-H)",
    "layers_block_type": "Mamba layers (Zamba, Falcon-H1)",
}
#: The ``architectures`` class of each family tpsim reads: named in the refusal of an
#: unknown model_type whose architecture is one of them (vLLM's registry picks the model
#: file by this class, whatever the model_type: Kimi-K2's kimi_k2 is a DeepseekV3ForCausalLM,
#: read as deepseek_v3 in :data:`tpsim.models.families.FAMILIES`).
ARCHITECTURE_TYPES = {
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "Glm4MoeForCausalLM": "glm4_moe",
    "GraniteMoeForCausalLM": "granitemoe",
    "Llama4ForCausalLM": "llama4_text",
    "Llama4ForConditionalGeneration": "llama4",
    "LlamaForCausalLM": "llama",
    "MiniMaxM2ForCausalLM": "minimax_m2",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen3NextForCausalLM": "qwen3_next",
}
#: Families tpsim knows and does not model yet: model_type and what is missing.
_QWEN3_5 = (
    "Qwen3.5 (Qwen3-Next's Gated DeltaNet and gated full attention layers in a multimodal "
    "wrapper: text_config, a vision tower, M-RoPE, its SSM state in mamba_ssm_dtype) is not "
    "read yet; qwen3_next is"
)
REFUSED_TYPES: dict[str, str] = {
    "qwen3_5": _QWEN3_5,
    "qwen3_5_text": _QWEN3_5,
    "qwen3_5_moe": _QWEN3_5,
    "qwen3_5_moe_text": _QWEN3_5,
}


def spec_from_hf_dict(cfg: dict[str, Any], name: str, *, source: str = "config.json") -> ModelSpec:
    """The ModelSpec described by an already-parsed HF config dict.

    ``source`` names the origin (a path) in error messages.
    """
    if not isinstance(cfg, dict):
        raise ModelError(f"{source}: top level must be a JSON object, got {type(cfg).__name__}")
    r = Reader(cfg, source)
    model_type = r.string("model_type")
    vision = 0
    if model_type == "llama4":
        vision = _llama4_vision(r)
        cfg, source = _llama4_text(r), f"{source} text_config"
        r = Reader(cfg, source)
        model_type = r.string("model_type")
    if model_type in REFUSED_TYPES:
        raise r.fail("model_type", model_type, REFUSED_TYPES[model_type])
    family = FAMILIES.get(model_type) if model_type is not None else None
    if model_type is not None and family is None:
        # a family tpsim does not know is refused, never run as the llama its keys resemble
        raise r.fail("model_type", model_type, _unknown_family(cfg))
    reads = family[1] if family else ()
    for key, what in UNMODELLED_FIELDS.items():
        value = cfg.get(key)
        if key not in reads and value not in (None, 0, 1) and value is not False:
            raise r.fail(
                key,
                value,
                f"{what} is not modelled by tpsim for model_type={model_type!r}, which would "
                f"time this config as a dense model; {_readers(key)}",
            )
    if cfg.get("use_sliding_window") is True and cfg.get("sliding_window"):
        raise r.fail(
            "use_sliding_window",
            True,
            f"sliding-window attention on max_window_layers is not modelled by tpsim for "
            f"model_type={model_type!r} (gpt_oss's layer_types are)",
        )
    kinds = cfg.get("layer_types")
    if "layer_types" not in reads and isinstance(kinds, list):
        other = sorted({str(k) for k in kinds if k != "full_attention"})
        if other:
            raise r.fail(
                "layer_types",
                other[0],
                f"attention layers of this kind are not modelled by tpsim for "
                f"model_type={model_type!r}; {_readers('layer_types')}",
            )
    if family is not None:
        spec = _with_kv(r, with_skip_lists(r, family[0](r, name), model_type))
        return dataclasses.replace(spec, vision_params=vision) if vision else spec
    if model_type is None and all(k in cfg for k in _LLAMA_KEYS):
        return _with_kv(r, with_skip_lists(r, llama_like(r, name, None), None))
    raise ModelError(
        f"model_type missing in {source}: required unless the llama keys "
        f"({', '.join(_LLAMA_KEYS)}) are all present"
    )


#: Fields of a Llama 4 wrapper's top level its language model takes where its text_config
#: does not set them (Meta's FP8 checkpoint puts quantization_config at the top level).
_WRAPPER_FIELDS = ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings")


def _llama4_text(r: Reader) -> dict[str, Any]:
    """The language model of a Llama 4 wrapper (``model_type`` llama4,
    Llama4ForConditionalGeneration): its ``text_config`` (model_type llama4_text), with the
    wrapper's :data:`_WRAPPER_FIELDS` where it has none. The vision tower
    (``vision_config``) is not read: a text decode never runs it (its weights are in the
    model's notes, not in its counts)."""
    text = r.cfg.get("text_config")
    if not isinstance(text, dict):
        raise r.fail("text_config", text, "must be an object: the language model's config")
    kind = text.get("model_type", "llama4_text")
    if kind != "llama4_text":
        raise r.fail("text_config.model_type", kind, "must be llama4_text in a llama4 config")
    top = {k: r.cfg[k] for k in _WRAPPER_FIELDS if k in r.cfg and k not in text}
    return {**top, **text, "model_type": "llama4_text"}


def _llama4_vision(r: Reader) -> int:
    """About how many parameters a Llama 4 wrapper's vision tower holds, from its
    ``vision_config`` (absent fields: Llama4VisionConfig's defaults), laid out as
    transformers' modeling_llama4.py builds it: ``num_hidden_layers`` encoder layers (q, k,
    v, o and fc1 [d, intermediate_size], fc2 with biases, two LayerNorms), the patch
    embedding [3 patch^2, d], the class and positional embeddings ((image / patch)^2 + 1
    rows), two LayerNorms, the pixel-shuffle adapter (fc1 [intermediate_size,
    projector_input_dim], fc2 [projector_output_dim, projector_output_dim]) and the
    projector [vision_output_dim, text hidden_size]. Meta's Scout and Maverick: 0.87 B (their
    109 B and 400 B totals hold it). Only said in the notes, never counted."""
    vc = r.cfg.get("vision_config")
    text = r.cfg.get("text_config")
    if not isinstance(vc, dict) or not isinstance(text, dict):
        return 0
    v = Reader(vc, f"{r.source} vision_config")
    d, inner = v.integer("hidden_size", 768), v.integer("intermediate_size", 5632)
    patch, image = v.integer("patch_size", 14), v.integer("image_size", 448)
    layer = 4 * (d * d + d) + 2 * d * inner + inner + d + 4 * d
    embed = 3 * patch * patch * d + d + ((image // patch) ** 2 + 1) * d + 4 * d
    adapter = (
        inner * v.integer("projector_input_dim", 4096)
        + v.integer("projector_output_dim", 4096) ** 2
    )
    hidden = Reader(text, f"{r.source} text_config").integer("hidden_size")
    projector = v.integer("vision_output_dim", 7680) * hidden
    return v.integer("num_hidden_layers", 34) * layer + embed + adapter + projector


def _with_kv(r: Reader, spec: ModelSpec) -> ModelSpec:
    """``spec`` with the KV cache dtype its checkpoint declares (:func:`declared_kv_dtype`)."""
    kv = declared_kv_dtype(r)
    return dataclasses.replace(spec, kv_cache_dtype=kv) if kv else spec


def _readers(key: str) -> str:
    """Which families tpsim reads ``key`` for, as the end of a refusal."""
    families = [t for t, family in sorted(FAMILIES.items()) if key in family[1]]
    if not families:
        return f"no family tpsim reads models {key}"
    return f"the families whose {key} tpsim reads: {', '.join(families)}"


def _unknown_family(cfg: dict[str, Any]) -> str:
    """Why an unknown model_type is refused, naming first the family its ``architectures``
    says it is built as, when tpsim reads that one."""
    arch = cfg.get("architectures")
    names = arch if isinstance(arch, list) else []
    known = [ARCHITECTURE_TYPES[a] for a in names if isinstance(a, str) and a in ARCHITECTURE_TYPES]
    hint = (
        f" (its architectures name {names[0]}: if it is that model, set model_type to {known[0]!r})"
        if known
        else ""
    )
    return (
        f"unsupported model family{hint}; supported: {', '.join(SUPPORTED_TYPES)} (or a "
        "config without model_type that has the llama keys)"
    )


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read a local HF ``config.json`` (a file, or a directory that holds one)."""
    given = Path(path)
    try:
        is_dir = given.is_dir()
    except OSError as exc:  # e.g. a name longer than the file system allows
        raise ModelError(f"model={show(str(given))}: cannot read ({exc.strerror})") from None
    file = given / "config.json" if is_dir else given
    where = where_of(file)
    if is_dir and not file.is_file():
        raise ModelError(f"model={show(str(given))}: directory has no config.json")
    cfg = read_config_json(file)
    return spec_from_hf_dict(cfg, model_name(cfg, file), source=where)
