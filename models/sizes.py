"""The sizes of a ModelSpec: its parameter counts, weight and KV-cache bytes, and FLOPs per
token, from the layout that :mod:`tpsim.models.spec` describes.

Parameter layout of one layer (d = hidden_size, I = intermediate_size)::

    attention: Wqkv [d, q_size + 2 kv_size] (+ bias if qkv_bias)
               Wo [q_size, d] (+ bias if mlp_bias)
    mlp:       gated: gate, up [d, I], down [I, d]   plain: up [d, I], down [I, d]
               (+ biases on every MLP linear if mlp_bias)
    norms:     two per layer; rmsnorm has a weight [d], layernorm a weight and a bias [d] each

Counts are exact integers (parameters, bytes); FLOPs are floats. The attention, expert and
linear-attention parts' own counts are their mixins' (:mod:`tpsim.models.attention`,
:mod:`tpsim.models.experts`, :mod:`tpsim.models.linear_attention`).
"""

from __future__ import annotations

from tpsim.models.attention import AttentionShapes
from tpsim.models.attention import is_int as _is_int
from tpsim.models.dtypes import DTYPE_BYTES, check_dtype
from tpsim.models.errors import ModelError
from tpsim.models.experts import ExpertShapes
from tpsim.models.kept import Kept, KeptModules
from tpsim.models.linear_attention import LinearShapes

#: Norm layers and their parameter vectors of size d per norm.
NORM_VECTORS: dict[str, int] = {"rmsnorm": 1, "layernorm": 2}


class ModelSizes(AttentionShapes, ExpertShapes, LinearShapes):
    """What a ModelSpec's fields add up to (its fields are the dataclass's)."""

    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    norm: str
    qkv_bias: bool
    max_position_embeddings: int
    learned_position_embeddings: bool
    qk_norm: bool
    attn_output_gate: bool
    kept_16bit: Kept

    @property
    def kept(self) -> KeptModules:
        """The GEMMs kept 16-bit (:class:`tpsim.models.kept.KeptModules`)."""
        return KeptModules(self.kept_16bit, self.num_layers)

    def group_params(self, group: str) -> int:
        """Weights of one layer's GEMM ``group`` (:data:`tpsim.models.kept.GROUPS`), whole
        (no bias): what keeping it 16-bit stores in 16 bits."""
        d, inner = self.hidden_size, self.intermediate_size
        o = self.num_heads * self.value_head_dim * d if self.is_mla else self.q_size * d
        shared = self.shared_intermediate_size
        return {
            "qkv_proj": (self.mla_params_per_layer() - o if self.is_mla
                         else d * self.qkv_width),
            "o_proj": o,
            "mlp_up": (2 if self.gated_mlp else 1) * d * inner,
            "mlp_down": d * inner,
            "shared_up": 2 * d * shared,
            "shared_down": d * shared,
            "experts": self.num_experts * self.expert_params(),
        }[group]  # fmt: skip

    def kept_params(self) -> int:
        """Weights of every GEMM kept 16-bit, over all layers (``kept_16bit``)."""
        return sum(self.group_params(g) * len(layers) for g, layers in self.kept_16bit)

    # -- shapes ---------------------------------------------------------------------------

    @property
    def q_size(self) -> int:
        """Width of the query projection: num_heads * head_dim."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of the key (and of the value) projection: num_kv_heads * head_dim."""
        return self.num_kv_heads * self.head_dim

    @property
    def qkv_width(self) -> int:
        """Outputs of the fused QKV projection: q (twice with ``attn_output_gate``: the
        gate), k and v."""
        return self.q_size * (2 if self.attn_output_gate else 1) + 2 * self.kv_size

    # -- parameter counts ----------------------------------------------------------------

    def attention_params_per_layer(self) -> int:
        """Wqkv and Wo weights, plus their biases where the model has them (MLA: its
        projections, :meth:`mla_params_per_layer`), and the sink logits [heads]."""
        sinks = self.num_heads if self.attention_sinks else 0
        if self.is_mla:
            return self.mla_params_per_layer() + sinks
        return self._mha_params() + sinks

    def _mha_params(self) -> int:
        d, qkv = self.hidden_size, self.qkv_width
        wqkv = d * qkv + (qkv if self.qkv_bias else 0)
        wo = self.q_size * d + (d if self.mlp_bias else 0)
        return wqkv + wo

    def mlp_params_per_layer(self) -> int:
        """gate/up/down (gated) or up/down (plain) weights, plus biases if mlp_bias."""
        d, inner = self.hidden_size, self.intermediate_size
        if self.gated_mlp:
            return 3 * d * inner + ((2 * inner + d) if self.mlp_bias else 0)
        return 2 * d * inner + ((inner + d) if self.mlp_bias else 0)

    def norm_params_per_layer(self) -> int:
        """Two norms per layer (before attention, before the MLP), the q and k norms, and
        MLA's norms of the q and KV latents."""
        latent = (self.q_lora_rank + self.kv_lora_rank) if self.is_mla else 0
        return 2 * self.final_norm_params() + self.qk_norm_params() + latent

    def qk_norm_params(self) -> int:
        """The q and k norms' weights of one layer: [head_dim] each (qwen3), or [h hd] and
        [kv hd] spanning every head (``qk_norm_whole``, MiniMax-M2); 0 without."""
        if not self.qk_norm:
            return 0
        return self.q_size + self.kv_size if self.qk_norm_whole else 2 * self.head_dim

    def params_per_layer(self) -> int:
        """All parameters of one transformer layer (a full-attention one where the model has
        linear layers: :meth:`linear_layer_delta` apart)."""
        return (
            self.attention_params_per_layer()
            + self.mlp_params_per_layer()
            + self.norm_params_per_layer()
        )

    def embedding_params(self) -> int:
        """Token embedding table, plus the learned position table where there is one."""
        positions = self.max_position_embeddings if self.learned_position_embeddings else 0
        return (self.vocab_size + positions) * self.hidden_size

    def lm_head_params(self) -> int:
        """Output projection [d, vocab]; 0 when it is tied to the token embeddings."""
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    def final_norm_params(self) -> int:
        """The norm after the last layer: d (rmsnorm) or 2d (layernorm)."""
        return NORM_VECTORS[self.norm] * self.hidden_size

    def num_params(self) -> int:
        """Total parameter count of the model (every expert; the MTP layers apart:
        :meth:`mtp_params`)."""
        return self._params(None)

    def embedding_lookup_params(self) -> int:
        """The parameters a token reads of the embedding table: one row per table (the
        active counts of DeepSeek and OpenAI leave the rest of the table out)."""
        positions = 1 if self.learned_position_embeddings else 0
        return (1 + positions) * self.hidden_size

    def active_params(self, *, embedding: bool = True) -> int:
        """Parameters one token uses: as :meth:`num_params` with only its top-k routed
        experts of each MoE layer (the router and shared experts included), as MoE models
        quote their active size. Equals :meth:`num_params` for a dense model.
        ``embedding=False``: the embedding table counts only the row a token reads, as
        DeepSeek (36.6 B) and OpenAI (gpt-oss-120b 5.13 B) count active parameters."""
        active = self._params(self.experts_per_token)
        if embedding:
            return active
        return active - self.embedding_params() + self.embedding_lookup_params()

    def linear_layer_delta(self) -> int:
        """Parameters a linear-attention layer has beyond a full one: its token mixer
        (:meth:`linear_params_per_layer`, its gated norm in it) instead of attention and the
        q/k norms."""
        if not self.linear_layers:
            return 0
        return (
            self.linear_params_per_layer()
            - self.attention_params_per_layer()
            - self.qk_norm_params()
        )

    def _params(self, experts: int | None) -> int:
        total = (
            self.num_layers * self.params_per_layer()
            + self.embedding_params()
            + self.lm_head_params()
            + self.final_norm_params()
            + len(self.linear_layers) * self.linear_layer_delta()
        )
        if self.num_experts:  # MoE layers: the expert FFN instead of the dense MLP
            moe = self.moe_params_per_layer(experts) - self.mlp_params_per_layer()
            total += self.num_moe_layers * moe
        return total

    def matmul_params(self) -> int:
        """Weights that take part in a matmul for each token: every linear weight of every
        layer and the lm_head (even when tied, the [d, vocab] product is still computed).
        Biases, norms and the embedding lookup are excluded. An MoE layer counts what one
        token multiplies: the router, its top-k experts and the shared experts."""
        d = self.hidden_size
        attention = d * self.qkv_width + self.q_size * d
        if self.is_mla:
            attention = self.mla_params_per_layer()
        mlp = (3 if self.gated_mlp else 2) * d * self.intermediate_size
        total = self.num_layers * (attention + mlp) + self.vocab_size * d
        if self.linear_layers:  # in_proj_qkvz, in_proj_ba and out_proj instead
            linear = sum(self.linear_gemm_params().values())
            total += len(self.linear_layers) * (linear - attention)
        if self.num_experts:
            moe = self.moe_params_per_layer(self.experts_per_token) - mlp
            total += self.num_moe_layers * moe
        return total

    # -- bytes and FLOPs -----------------------------------------------------------------

    def sixteen_bit_params(self) -> int:
        """Parameters a quantised checkpoint keeps in 16 bits whatever its GEMMs' dtype:
        the embedding table, the LM head, every norm and each MoE layer's router (as
        vLLM's VocabParallelEmbedding, ParallelLMHead, RMSNorm and the gate's
        ReplicatedLinear are built unquantised; the memory model's ``other``)."""
        routers = self.num_moe_layers * self.router_params() if self.num_experts else 0
        return (
            self.embedding_params()
            + self.lm_head_params()
            + self.final_norm_params()
            + self.num_layers * self.norm_params_per_layer()
            + routers
            # a linear layer's conv, decay parameters and gated norm, not its q/k norms
            + len(self.linear_layers) * (self.linear_other_params() - self.qk_norm_params())
        )

    def weight_bytes(self, dtype: str | None = None) -> int:
        """Bytes of all weights stored in ``dtype`` (default: the model's own dtype, with
        the routed experts in ``expert_dtype`` where the checkpoint has one, and the GEMMs
        it keeps 16-bit in two bytes: ``kept_16bit``). Under a dtype of fewer than two bytes
        the embedding, the head, the norms and the routers stay 16-bit
        (:meth:`sixteen_bit_params`): an fp8 checkpoint's embeddings are not fp8."""
        bytes_per = DTYPE_BYTES[check_dtype(self.dtype if dtype is None else dtype)]
        sixteen = self.sixteen_bit_params() if bytes_per < 2 else 0
        if dtype is None and (self.expert_dtype or self.kept_16bit):
            kept_experts = sum(len(ls) for g, ls in self.kept_16bit if g == "experts")
            experts = self.expert_weight_params() - kept_experts * self.group_params("experts")
            kept = self.kept_params()
            rest = self.num_params() - experts - kept - sixteen
            expert_b = DTYPE_BYTES[self.expert_dtype or self.dtype]
            return round(rest * bytes_per + experts * expert_b + (kept + sixteen) * 2)
        return round((self.num_params() - sixteen) * bytes_per + sixteen * 2)

    def kv_bytes_per_token(self, dtype: str | None = None) -> int:
        """KV cache bytes for one token over all layers (whole model, unsharded; a sliding
        layer holds the token while it is inside the window; a linear layer none)."""
        bytes_per = DTYPE_BYTES[check_dtype(self.dtype if dtype is None else dtype)]
        cached = self.num_layers - len(self.linear_layers)
        return round(cached * self.kv_elements_per_token() * bytes_per)

    def flops_per_token(self, context_len: int) -> float:
        """Forward FLOPs for one token attending over ``context_len`` keys.

        2 FLOP per multiply-add for every matmul weight (see ``matmul_params``), plus
        attention scores and the weighted sum of values: 2 * heads * (head_dim +
        value_head_dim) * keys per layer, the keys of a sliding layer capped at the window.
        """
        if not _is_int(context_len) or context_len < 0:
            raise ModelError(f"context_len={context_len!r}: must be a non-negative integer")
        per_key = 2 * self.num_heads * (self.head_dim + self.value_head_dim)
        keys = sum(self.attended(i, context_len) for i in range(self.num_layers))
        recurrent = len(self.linear_layers) * self.linear_flops_per_token()
        return float(2 * self.matmul_params() + per_key * keys + recurrent)
