"""ModelSpec: the architecture of a decoder-only transformer, and what follows from it.

Counts are exact integers (parameters, bytes); FLOPs are floats. SI units throughout:
bytes, FLOP. Nothing here knows about tensor parallelism; the simulator splits these
numbers per rank. The fields and their checks are here; the counts, bytes and FLOPs, with
the parameter layout of one layer, in :mod:`tpsim.models.sizes` (:class:`ModelSizes`).

``mlp_bias`` means "every linear layer outside Wqkv has a bias" (gpt2, gpt3, opt, neox);
``qkv_bias`` alone is qwen2's layout (biases on q, k, v only); ``qk_norm`` is qwen3's
RMSNorm of each query and key head (a weight [head_dim] each, per layer); with
``qk_norm_whole`` (MiniMax-M2's ``qk_norm_type: per_layer``) one RMSNorm over the whole q
(all heads, a weight [h hd]) and one over the whole k ([kv hd]), whose variance the TP ranks
sum with an all-reduce.

Mixture of experts (``num_experts`` E > 0; gated, bias-free MLPs only): every layer not in
``dense_layers`` replaces the MLP with::

    router:  [d, E]  (softmax, top-k: each token picks ``experts_per_token`` k experts)
    experts: E x (gate, up [d, Im], down [Im, d])          Im = moe_intermediate_size
    shared:  gate, up [d, Is], down [Is, d] on every token  Is = shared_intermediate_size

``dense_layers`` keep the dense MLP of width ``intermediate_size``. The defaults (E = 0)
are the dense model.
Its checks and counts are :class:`tpsim.models.experts.ExpertShapes`'s; the dtypes and
their bytes per element are :mod:`tpsim.models.dtypes`'s.

Multi-head latent attention (DeepSeek-V2/V3, ``kv_lora_rank`` > 0) is laid out in
:mod:`tpsim.models.attention`. ``sliding_layers`` attend over the last ``sliding_window``
tokens only (gpt-oss) and cache only those; ``chunked_layers`` attend within their
``attention_chunk_size`` chunk (Llama 4: the query at position p over the keys from
``floor(p / C) C`` to p) and cache one chunk; ``attention_sinks`` adds one learned logit per
head and layer. ``mtp_layers`` (DeepSeek-V3's multi-token prediction module) is counted
apart (:meth:`mtp_params`): it is not part of the forward pass of a step, nor loaded without
speculative decoding.
``expert_dtype`` is the routed experts' checkpoint dtype where it differs (gpt-oss: mxfp4).
``kept_16bit`` names the GEMMs a quantised checkpoint keeps in 16 bits, per layer
(:mod:`tpsim.models.kept`: Meta's Llama-3.1-405B-FP8 keeps attention and its first and last
layers' MLP bf16).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tpsim.models.attention import ATTENTION_INT_FIELDS, MAX_MODEL_DIM, MAX_POSITIONS
from tpsim.models.attention import is_int as _is_int
from tpsim.models.dtypes import DTYPE_BYTES, check_dtype
from tpsim.models.errors import ModelError
from tpsim.models.experts import MOE_INT_FIELDS
from tpsim.models.kept import Kept, check_kept
from tpsim.models.linear_attention import LINEAR_INT_FIELDS
from tpsim.models.sizes import NORM_VECTORS, ModelSizes

_POSITIVE_INT_FIELDS = (
    "hidden_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
)
#: Fields a dense model leaves at their default; left out of :meth:`ModelSpec.to_dict`
#: when they are, so a dense model's summary is what it was before they existed.
LATER_FIELDS = (
    *MOE_INT_FIELDS,
    "dense_layers",
    "qk_norm",
    "qk_norm_whole",
    *ATTENTION_INT_FIELDS,
    "sliding_layers",
    "chunked_layers",
    "attention_sinks",
    "expert_dtype",
    "weight_block",
    "kept_16bit",
    "kv_cache_dtype",
    "vision_params",
    "linear_layers",
    *LINEAR_INT_FIELDS,
    "attn_output_gate",
)

_BOOL_FIELDS = (
    "gated_mlp",
    "tied_embeddings",
    "qkv_bias",
    "mlp_bias",
    "learned_position_embeddings",
    "qk_norm",
    "qk_norm_whole",
    "attention_sinks",
    "attn_output_gate",
)


@dataclass(frozen=True)
class ModelSpec(ModelSizes):
    """Architecture of a decoder-only transformer (validated on construction)."""

    name: str
    hidden_size: int  # d
    num_layers: int
    num_heads: int  # query heads
    num_kv_heads: int  # == num_heads for MHA, < num_heads for GQA, 1 for MQA
    head_dim: int  # usually hidden_size // num_heads; may differ when given explicitly
    intermediate_size: int  # MLP inner width (per branch for gated MLPs)
    vocab_size: int
    gated_mlp: bool = True  # SwiGLU gate+up+down (llama); False = up+down (gpt2/gpt3/opt/neox)
    tied_embeddings: bool = False  # lm_head shares the token embedding table
    dtype: str = "bf16"  # the weights' native dtype
    norm: str = "rmsnorm"  # "rmsnorm" | "layernorm" (layernorm has weight + bias)
    qkv_bias: bool = False  # biases on q, k, v (qwen2; all gpt-style models)
    mlp_bias: bool = False  # biases on o_proj and every MLP linear (gpt2/gpt3/opt/neox)
    max_position_embeddings: int = 0  # 0 = unknown
    learned_position_embeddings: bool = False  # gpt2/gpt3/opt: a [max_pos, d] table
    qk_norm: bool = False  # qwen3: an RMSNorm [head_dim] on q and one on k, per layer
    #: MiniMax-M2: the q and k norms span all heads (weights [h hd] and [kv hd]); under TP
    #: their variance is all-reduced (vLLM's MiniMaxText01RMSNormTP.forward_qk)
    qk_norm_whole: bool = False
    num_experts: int = 0  # E routed experts per MoE layer; 0 = dense
    experts_per_token: int = 0  # k: routed experts each token uses (top-k)
    moe_intermediate_size: int = 0  # Im: one routed expert's FFN width
    shared_intermediate_size: int = 0  # Is: the shared experts' FFN width, all together
    dense_layers: tuple[int, ...] = ()  # MoE models: layers that keep the dense MLP
    q_lora_rank: int = 0  # MLA: the query's latent width (0: one q projection)
    kv_lora_rank: int = 0  # MLA: the KV latent width R; 0 = not MLA
    qk_rope_head_dim: int = 0  # MLA: the rotary part r of each q/k head (and of the cache)
    v_head_dim: int = 0  # MLA: each value head's width (0: head_dim)
    n_group: int = 0  # DeepSeek grouped routing: expert groups (0: none)
    topk_group: int = 0  # DeepSeek grouped routing: groups each token may pick from
    mtp_layers: int = 0  # DeepSeek-V3 multi-token prediction layers (not run, not loaded)
    sliding_window: int = 0  # tokens a sliding layer attends over (0: none)
    sliding_layers: tuple[int, ...] = ()  # layers with sliding-window attention
    attention_chunk_size: int = 0  # tokens of a chunk of chunked local attention (0: none)
    chunked_layers: tuple[int, ...] = ()  # Llama 4: layers attending within their chunk
    #: a multimodal checkpoint's vision tower (Llama 4: about 0.87 B), not in num_params
    #: nor in the weights: a text decode never runs it (in the model's notes)
    vision_params: int = 0
    attention_sinks: bool = False  # gpt-oss: a learned sink logit per head and layer
    expert_dtype: str = ""  # the routed experts' dtype when it differs ("": dtype)
    #: a block-scaled fp8 checkpoint's weight blocks (output rows, input columns), as its
    #: ``quantization_config.weight_block_size``; (): none
    weight_block: tuple[int, ...] = ()
    #: the dimensions of each q/k head rotary embedding turns (GLM-4.5's
    #: ``partial_rotary_factor`` 0.5: 64 of 128); 0: all of head_dim
    rotary_dim: int = 0
    #: the GEMMs a quantised checkpoint keeps 16-bit, (group, layers) pairs
    #: (:mod:`tpsim.models.kept`); (): every linear layer in ``dtype``
    kept_16bit: Kept = ()
    #: the KV cache's dtype a quantised checkpoint declares (ModelOpt's
    #: ``kv_cache_quant_algo``, llm-compressor's ``kv_cache_scheme``), which the engines'
    #: ``auto`` cache follows when it runs as stored; "": none declared
    kv_cache_dtype: str = ""
    #: Qwen3-Next: the linear-attention (Gated DeltaNet) layers (:mod:`tpsim.models.
    #: linear_attention`), their key and value heads, head widths and conv kernel
    linear_layers: tuple[int, ...] = ()
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    #: Qwen3-Next's full layers: q_proj doubled, its second half a sigmoid gate on the
    #: attention output (vLLM's Qwen3NextAttention, ``attn_output_gate``)
    attn_output_gate: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ModelError(f"name={self.name!r} in ModelSpec: must be a non-empty string")
        where = f"in ModelSpec {self.name!r}"
        for field in _POSITIVE_INT_FIELDS:
            value = getattr(self, field)
            if not _is_int(value) or value <= 0:
                raise ModelError(f"{field}={value!r} {where}: must be a positive integer")
            if value > MAX_MODEL_DIM:
                raise ModelError(f"{field}={value!r} {where}: must be at most {MAX_MODEL_DIM}")
        mpe = self.max_position_embeddings
        if not _is_int(mpe) or mpe < 0:
            raise ModelError(
                f"max_position_embeddings={mpe!r} {where}: must be a non-negative integer"
            )
        if mpe > MAX_POSITIONS:
            raise ModelError(
                f"max_position_embeddings={mpe!r} {where}: must be at most {MAX_POSITIONS}"
            )
        for field in _BOOL_FIELDS:
            value = getattr(self, field)
            if not isinstance(value, bool):
                raise ModelError(f"{field}={value!r} {where}: must be true or false")
        if self.num_heads % self.num_kv_heads != 0:
            raise ModelError(
                f"num_kv_heads={self.num_kv_heads} {where}: must divide num_heads={self.num_heads}"
            )
        if not isinstance(self.dtype, str) or self.dtype not in DTYPE_BYTES:
            valid = ", ".join(sorted(DTYPE_BYTES))
            raise ModelError(f"dtype={self.dtype!r} {where}: unknown dtype; valid: {valid}")
        if not isinstance(self.norm, str) or self.norm not in NORM_VECTORS:
            valid = ", ".join(sorted(NORM_VECTORS))
            raise ModelError(f"norm={self.norm!r} {where}: unknown norm; valid: {valid}")
        self._check_moe(where)
        self._check_attention(where)
        self._check_linear(where)
        if self.expert_dtype and self.expert_dtype not in DTYPE_BYTES:
            valid = ", ".join(sorted(DTYPE_BYTES))
            raise ModelError(f"expert_dtype={self.expert_dtype!r} {where}: unknown; valid: {valid}")
        if self.learned_position_embeddings and self.rotary_dim:
            raise ModelError(
                f"rotary_dim={self.rotary_dim} {where}: a model with learned position "
                "embeddings has no rotary embedding"
            )
        self._check_kept(where)
        if self.qk_norm_whole and not self.qk_norm:
            raise ModelError(f"qk_norm_whole=True {where}: needs qk_norm (the norms it spans)")
        if not _is_int(self.vision_params) or not 0 <= self.vision_params <= MAX_POSITIONS:
            raise ModelError(
                f"vision_params={self.vision_params!r} {where}: must be an integer from 0 "
                f"to {MAX_POSITIONS}"
            )
        if self.kv_cache_dtype not in ("", "fp8"):
            raise ModelError(
                f"kv_cache_dtype={self.kv_cache_dtype!r} {where}: unknown; valid: fp8 (or none)"
            )
        if self.learned_position_embeddings and mpe == 0:
            raise ModelError(
                f"max_position_embeddings=0 {where}: must be positive when "
                "learned_position_embeddings is true"
            )

    def _check_kept(self, where: str) -> None:
        check_kept(self.kept_16bit, self.num_layers, where)
        for group, layers in self.kept_16bit:
            if group in ("qkv_proj", "o_proj"):  # every layer has attention
                continue
            moe = group in ("shared_up", "shared_down", "experts")
            wrong = [i for i in layers if self.is_moe_layer(i) != moe]
            if moe and group != "experts" and not self.shared_intermediate_size:
                wrong = list(layers)
            if wrong:
                where_not = "a layer with those experts" if moe else "a dense MLP layer"
                raise ModelError(f"kept_16bit[{group!r}] layer {wrong[0]} {where}: not {where_not}")

    def to_dict(self) -> dict[str, object]:
        """The fields as a dict (the run summary's ``config.model``). The MoE and qk_norm
        fields appear only where they are set, with the total and active parameter counts
        of an MoE model: a dense model's dict is the same as before they existed."""
        out = dataclasses.asdict(self)
        for field in LATER_FIELDS:
            if out[field] == _DEFAULTS[field]:
                del out[field]
        for field in ("dense_layers", "sliding_layers", "chunked_layers", "weight_block",
                      "linear_layers"):  # fmt: skip
            if field in out:
                out[field] = list(getattr(self, field))
        if "kept_16bit" in out:
            out["kept_16bit"] = self.kept.to_dict()
        if self.num_experts:
            out["params_total"] = self.num_params()
            out["params_active"] = self.active_params()
        if self.mtp_layers:
            out["params_mtp"] = self.mtp_params()
        return out

    def with_dtype(self, dtype: str) -> ModelSpec:
        """The same model with weights in ``dtype`` (every linear layer: other weights than
        the checkpoint's keep neither its blocks nor its 16-bit layers)."""
        dtype = check_dtype(dtype)
        same = dtype == self.dtype
        return dataclasses.replace(self, dtype=dtype, weight_block=self.weight_block if same
                                   else (), kept_16bit=self.kept_16bit if same else ())  # fmt: skip


#: The defaults of the fields in LATER_FIELDS (a dense model's values).
_DEFAULTS: dict[str, object] = {
    f.name: f.default for f in dataclasses.fields(ModelSpec) if f.name in LATER_FIELDS
}
