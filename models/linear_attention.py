"""Linear-attention (Gated DeltaNet) layers, as a part of :class:`~tpsim.models.spec.ModelSpec`:
Qwen3-Next's hybrid of ``linear_layers`` with a recurrent state and full (softmax) attention
layers on the others (vLLM's ``GatedDeltaNetAttention``, gdn_linear_attn.py; transformers'
``Qwen3NextGatedDeltaNet``).

One linear layer, nk key heads of dk, nv value heads of dv (d = hidden_size)::

    in_proj_qkvz [d, 2 nk dk + 2 nv dv]   q, k [nk dk] each, v and the gate z [nv dv] each
    in_proj_ba   [d, 2 nv]                the delta rule's beta and the decay's a, per head
    conv1d       [2 nk dk + nv dv, K]     depthwise causal conv over q, k, v (no bias)
    A_log, dt_bias [nv]                   the decay's parameters (A_log fp32 in vLLM)
    norm         [dv]                     RMSNormGated of each head's output, gated by z
    out_proj     [nv dv, d]

Per sequence and layer the state is constant in the context: the conv state, the last
``K - 1`` inputs of each conv channel, and the recurrent state [nv, dv, dk]
(vLLM's MambaStateShapeCalculator.gated_delta_net_state_shape). Under tensor parallelism
both split with the heads. ``attn_output_gate`` (the full layers'): q_proj doubled, a
sigmoid gate of the attention output per query head element (vLLM's Qwen3NextAttention).
"""

from __future__ import annotations

from tpsim.models.attention import MAX_MODEL_DIM, short
from tpsim.models.attention import is_int as _is_int
from tpsim.models.errors import ModelError

#: The linear-attention sizes: 0 (the default) in a model without linear layers.
LINEAR_INT_FIELDS = (
    "linear_key_heads",
    "linear_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel",
)


class LinearShapes:
    """The linear-attention part of a ModelSpec (its fields are the dataclass's)."""

    hidden_size: int
    num_layers: int
    linear_layers: tuple[int, ...]
    linear_key_heads: int
    linear_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel: int
    sliding_layers: tuple[int, ...]
    chunked_layers: tuple[int, ...]
    kv_lora_rank: int

    def _check_linear(self, where: str) -> None:
        for field in LINEAR_INT_FIELDS:
            value = getattr(self, field)
            if not _is_int(value) or value < 0:
                raise ModelError(f"{field}={value!r} {where}: must be a non-negative integer")
            if value > MAX_MODEL_DIM:
                raise ModelError(f"{field}={value!r} {where}: must be at most {MAX_MODEL_DIM}")
        layers = self.linear_layers
        if not isinstance(layers, tuple) or not all(_is_int(i) for i in layers):
            raise ModelError(f"linear_layers={layers!r} {where}: must be a tuple of layer indices")
        if list(layers) != sorted(set(layers)) or any(not 0 <= i < self.num_layers for i in layers):
            raise ModelError(
                f"linear_layers={short(layers)} {where}: must be distinct layer indices from 0 "
                f"to {self.num_layers - 1}, in order"
            )
        if not layers:
            for field in LINEAR_INT_FIELDS:
                if getattr(self, field):
                    raise ModelError(f"{field}={getattr(self, field)} {where}: needs linear_layers")
            return
        for field in LINEAR_INT_FIELDS:
            if not getattr(self, field):
                raise ModelError(f"{field}=0 {where}: must be positive with linear_layers")
        if self.linear_value_heads % self.linear_key_heads:
            raise ModelError(
                f"linear_value_heads={self.linear_value_heads} {where}: must be a multiple of "
                f"linear_key_heads={self.linear_key_heads} (each key head serves a group)"
            )
        both = set(layers) & (set(self.sliding_layers) | set(self.chunked_layers))
        if both:
            raise ModelError(
                f"linear_layers={short(layers)} {where}: layer {min(both)} is also a sliding "
                "or chunked layer; a layer attends one way"
            )
        if self.kv_lora_rank:
            raise ModelError(
                f"linear_layers={short(layers)} {where}: not modelled with multi-head latent "
                "attention"
            )

    def is_linear_layer(self, layer: int) -> bool:
        """Whether ``layer`` is a linear-attention (Gated DeltaNet) layer: no KV cache, a
        recurrent state instead."""
        return layer in self.linear_layers

    @property
    def linear_key_size(self) -> int:
        """Width of the linear layers' q (and of their k): nk dk."""
        return self.linear_key_heads * self.linear_key_head_dim

    @property
    def linear_value_size(self) -> int:
        """Width of the linear layers' v (and of their gate z and output): nv dv."""
        return self.linear_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_dim(self) -> int:
        """Channels of the causal conv: q, k and v, 2 nk dk + nv dv."""
        return 2 * self.linear_key_size + self.linear_value_size

    def linear_gemm_params(self) -> dict[str, int]:
        """The GEMM weights of one linear layer: in_proj_qkvz, in_proj_ba, out_proj."""
        d, key, value = self.hidden_size, self.linear_key_size, self.linear_value_size
        return {
            "in_proj_qkvz": d * (2 * key + 2 * value),
            "in_proj_ba": d * 2 * self.linear_value_heads,
            "out_proj": value * d,
        }

    def linear_other_params(self) -> int:
        """One linear layer's weights outside its GEMMs: the conv [conv_dim, K], A_log and
        dt_bias [nv] each, the gated norm [dv]."""
        return (
            self.linear_conv_dim * self.linear_conv_kernel
            + 2 * self.linear_value_heads
            + self.linear_value_head_dim
        )

    def linear_params_per_layer(self) -> int:
        """All weights of one linear layer's token mixer (its two layer norms apart)."""
        return sum(self.linear_gemm_params().values()) + self.linear_other_params()

    def linear_flops_per_token(self) -> int:
        """FLOPs of one token's gated delta rule in one linear layer, the recurrent form
        (fused_recurrent_gated_delta_rule_fwd_kernel, per value head with the state h
        [dk, dv]): decay h by exp(g) (dk dv), k^T h (2 dk dv), the delta's outer product
        added (2 dk dv), q^T h (2 dk dv): 7 dk dv a head. The chunked form of a prefill
        does more (:func:`tpsim.core.kernels.linear_attention.chunk_flops`)."""
        return 7 * self.linear_value_heads * self.linear_key_head_dim * self.linear_value_head_dim

    def linear_state_elements(self, tp: int = 1) -> int:
        """One sequence's state in one linear layer on one of ``tp`` ranks: the conv state
        (conv_dim / tp channels, K - 1 inputs each) and the recurrent state
        [nv / tp, dv, dk] (vLLM's gated_delta_net_state_shape, no speculative tokens)."""
        if not self.linear_layers:
            return 0
        conv = self.linear_conv_dim // tp * (self.linear_conv_kernel - 1)
        heads = self.linear_value_heads // tp
        return conv + heads * self.linear_value_head_dim * self.linear_key_head_dim


__all__ = ["LINEAR_INT_FIELDS", "LinearShapes"]
