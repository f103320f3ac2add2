"""Attention beyond multi-head attention, as a part of :class:`~tpsim.models.spec.ModelSpec`:
multi-head latent attention (MLA, DeepSeek-V2/V3), sliding-window layers and attention
sinks (gpt-oss), and the sentences that say what a model's numbers rest on (:meth:`notes`).

MLA (``kv_lora_rank`` R > 0; h heads, ``head_dim`` the q/k head width nope + rope r,
``v_head_dim`` the value head width)::

    q:   q_a [d, Rq], norm [Rq], q_b [Rq, h head_dim]   (or q [d, h head_dim] if Rq = 0)
    kv:  kv_a [d, R + r], norm [R], kv_b [R, h (nope + v_head_dim)]
    o:   [h v_head_dim, d]

The cache holds the latent ``R + r`` per token and layer, one for all heads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpsim.models.errors import ModelError

#: Upper bound of every size field: far above any published model (d = 18432, vocab = 256000,
#: 126 layers), low enough that parameter, byte and FLOP counts stay exact and finite.
MAX_MODEL_DIM = 1 << 24
#: Upper bound of max_position_embeddings (a learned table of that many rows is counted).
MAX_POSITIONS = 1 << 31
#: Multi-head latent attention, routing groups, MTP and the sliding window: 0 when unused.
ATTENTION_INT_FIELDS = (
    "q_lora_rank",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "v_head_dim",
    "n_group",
    "topk_group",
    "mtp_layers",
    "sliding_window",
    "rotary_dim",
    "attention_chunk_size",
)


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class AttentionShapes:
    """The attention part of a ModelSpec (its fields are the dataclass's)."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    q_lora_rank: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    v_head_dim: int
    n_group: int
    topk_group: int
    mtp_layers: int
    sliding_window: int
    rotary_dim: int
    sliding_layers: tuple[int, ...]
    attention_chunk_size: int
    chunked_layers: tuple[int, ...]
    linear_layers: tuple[int, ...]
    attention_sinks: bool
    qk_norm_whole: bool
    expert_dtype: str
    vision_params: int

    def _check_attention(self, where: str) -> None:
        for field in ATTENTION_INT_FIELDS:
            value = getattr(self, field)
            if not is_int(value) or value < 0:
                raise ModelError(f"{field}={value!r} {where}: must be a non-negative integer")
            if value > MAX_MODEL_DIM:
                raise ModelError(f"{field}={value!r} {where}: must be at most {MAX_MODEL_DIM}")
        if self.kv_lora_rank:
            if not 0 < self.qk_rope_head_dim < self.head_dim:
                raise ModelError(
                    f"qk_rope_head_dim={self.qk_rope_head_dim!r} {where}: must be positive and "
                    f"below head_dim={self.head_dim} (nope + rope) with multi-head latent attention"
                )
            if self.num_kv_heads != self.num_heads:
                raise ModelError(
                    f"num_kv_heads={self.num_kv_heads} {where}: multi-head latent attention "
                    f"expands to num_heads={self.num_heads} key and value heads"
                )
        else:
            for field in ("q_lora_rank", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, field):
                    raise ModelError(
                        f"{field}={getattr(self, field)} {where}: needs kv_lora_rank > 0"
                    )
        if self.rotary_dim and (self.rotary_dim % 2 or self.rotary_dim > self.head_dim):
            raise ModelError(
                f"rotary_dim={self.rotary_dim} {where}: must be even and at most "
                f"head_dim={self.head_dim} (rotary turns pairs of each q/k head's dimensions)"
            )
        if self.rotary_dim and self.kv_lora_rank:
            raise ModelError(
                f"rotary_dim={self.rotary_dim} {where}: multi-head latent attention rotates "
                "qk_rope_head_dim dimensions; leave rotary_dim 0"
            )
        if self.topk_group > self.n_group:
            raise ModelError(
                f"topk_group={self.topk_group} {where}: must be from 1 to n_group={self.n_group}"
            )
        for field, size in (("sliding_layers", "sliding_window"),
                            ("chunked_layers", "attention_chunk_size")):  # fmt: skip
            self._check_local(field, size, where)
        both = set(self.sliding_layers) & set(self.chunked_layers)
        if both:
            raise ModelError(
                f"chunked_layers={short(self.chunked_layers)} {where}: layer {min(both)} is "
                "also a sliding layer; a layer attends one way"
            )

    def _check_local(self, field: str, size: str, where: str) -> None:
        """``field``'s layers (sliding or chunked) are in order, in the model, and set with
        ``size`` (the window or the chunk) and only with it."""
        layers = getattr(self, field)
        if not isinstance(layers, tuple) or not all(is_int(i) for i in layers):
            raise ModelError(f"{field}={layers!r} {where}: must be a tuple of layer indices")
        if list(layers) != sorted(set(layers)) or any(not 0 <= i < self.num_layers for i in layers):
            raise ModelError(
                f"{field}={short(layers)} {where}: must be distinct layer indices from 0 "
                f"to {self.num_layers - 1}, in order"
            )
        if bool(layers) != bool(getattr(self, size)):
            raise ModelError(
                f"{size}={getattr(self, size)} {where}: a nonzero {size} needs {field} "
                f"and {field} a nonzero {size}"
                if field == "chunked_layers"
                else f"{size}={getattr(self, size)} {where}: a window needs sliding_layers "
                "and sliding_layers a window"
            )
        if self.kv_lora_rank and layers:
            raise ModelError(
                f"{field}={short(layers)} {where}: not modelled with multi-head latent attention"
            )

    @property
    def is_mla(self) -> bool:
        """Whether attention is multi-head latent attention (a compressed KV cache)."""
        return self.kv_lora_rank > 0

    @property
    def qk_nope_head_dim(self) -> int:
        """MLA: the part of each q/k head without rotary embedding."""
        return self.head_dim - self.qk_rope_head_dim

    @property
    def value_head_dim(self) -> int:
        """Width of each value (and attention output) head: v_head_dim, else head_dim."""
        return self.v_head_dim or self.head_dim

    @property
    def kv_latent_dim(self) -> int:
        """MLA: elements the cache holds per token and layer, R + r (0 without MLA)."""
        return self.kv_lora_rank + self.qk_rope_head_dim if self.is_mla else 0

    @property
    def rotary_width(self) -> int:
        """Dimensions of each q/k head that rotary embedding turns: ``rotary_dim``, else all
        of ``head_dim`` (GLM-4.5: half, its ``partial_rotary_factor`` 0.5)."""
        return self.rotary_dim or self.head_dim

    def is_sliding_layer(self, layer: int) -> bool:
        """Whether ``layer`` attends over the last ``sliding_window`` tokens only."""
        return layer in self.sliding_layers

    def is_chunked_layer(self, layer: int) -> bool:
        """Whether ``layer`` attends within its ``attention_chunk_size`` chunk only (Llama 4's
        RoPE layers: chunked local attention)."""
        return layer in self.chunked_layers

    def local_span(self, layer: int) -> tuple[int, int]:
        """``(window, chunk)`` of ``layer``: its sliding window, or its attention chunk, 0
        where it has none (a full layer: ``(0, 0)``)."""
        if self.is_sliding_layer(layer):
            return self.sliding_window, 0
        return 0, self.attention_chunk_size if self.is_chunked_layer(layer) else 0

    def attended(self, layer: int, tokens: int) -> int:
        """Keys a query at ``tokens`` tokens of context attends over in ``layer``: the
        window on a sliding layer; on a chunked layer the keys of its own chunk, from
        ``floor((tokens - 1) / C) C`` to itself: ``(tokens - 1) mod C + 1`` (transformers'
        create_chunked_causal_mask, vLLM's ChunkedLocalAttention); none on a linear-attention
        layer (its recurrent state stands for them)."""
        if self.is_linear_layer(layer):
            return 0
        if self.is_sliding_layer(layer):
            return min(tokens, self.sliding_window)
        if self.is_chunked_layer(layer) and tokens > 0:
            return (tokens - 1) % self.attention_chunk_size + 1
        return tokens

    def held(self, layer: int, tokens: int, new: int = 0) -> int:
        """Tokens ``layer``'s cache must hold for one sequence of up to ``tokens`` tokens: the
        window on a sliding layer, one chunk on a chunked layer (a chunk's keys are all held
        by its last query; the chunks before it are not read again), none on a linear layer,
        else all of them.

        ``new``: the last ``new`` of the ``tokens`` are computed in this step (a prefill
        pass). Their K and V are all written into the cache before the attention reads
        them, so a chunked layer holds its current chunk's cached tokens plus every new one:
        ``(tokens - new) mod C + new`` (vLLM V1's ChunkedLocalAttentionSpec
        .max_memory_usage_bytes: "at most attention_chunk_size computed tokens plus the
        newly scheduled tokens"; ChunkedLocalAttentionManager frees the chunks before the
        computed tokens' own, get_num_skipped_tokens, only before the next step). A sliding
        layer likewise holds the window's cached tokens before them, ``min(tokens - new,
        window - 1) + new`` (SlidingWindowSpec.max_memory_usage_bytes: "we allocate KV cache
        for the last sliding_window-1 computed tokens plus the newly scheduled tokens";
        SlidingWindowManager frees the tokens before
        ``num_computed_tokens - window + 1`` only before the next step). A whole prompt in
        one pass: all of it, on every attention layer."""
        if self.is_chunked_layer(layer):
            if new:
                return (tokens - new) % self.attention_chunk_size + new
            return min(tokens, self.attention_chunk_size)
        if self.is_sliding_layer(layer) and new:
            return min(tokens - new, self.sliding_window - 1) + new
        return self.attended(layer, tokens)

    def mla_params_per_layer(self) -> int:
        """The MLA projections of one layer (weights only; the two latent norms are in
        :meth:`norm_params_per_layer`)."""
        d, h, hd = self.hidden_size, self.num_heads, self.head_dim
        ql, r = self.q_lora_rank, self.kv_lora_rank
        q = d * ql + ql * h * hd if ql else d * h * hd
        kv = d * (r + self.qk_rope_head_dim) + r * h * (self.qk_nope_head_dim + self.value_head_dim)
        return q + kv + h * self.value_head_dim * d

    def kv_elements_per_token(self) -> int:
        """Cache elements one token adds in one layer: K and V of every KV head, or MLA's
        latent ``kv_lora_rank + qk_rope_head_dim`` (one, shared by all heads)."""
        return self.kv_latent_dim if self.is_mla else 2 * self.kv_size

    def mtp_params(self) -> int:
        """DeepSeek-V3's multi-token prediction layers: each a full MoE layer, the norms of
        its two inputs [2d] and their projection eh_proj [2d, d] (embedding and head shared
        with the model). Not in :meth:`num_params`: a step never runs them, and engines load
        them only for speculative decoding."""
        if not self.mtp_layers:
            return 0
        d = self.hidden_size
        layer = self.params_per_layer() + (
            self.moe_params_per_layer() - self.mlp_params_per_layer() if self.is_moe else 0
        )
        return self.mtp_layers * (layer + 2 * d + 2 * d * d + d)

    # -- what the numbers rest on -----------------------------------------------------

    if TYPE_CHECKING:  # ModelSpec's own

        def num_params(self) -> int: ...
        def is_linear_layer(self, layer: int) -> bool: ...
        def linear_state_elements(self, tp: int = 1) -> int: ...
        def params_per_layer(self) -> int: ...
        def moe_params_per_layer(self, experts: int | None = None) -> int: ...
        def mlp_params_per_layer(self) -> int: ...
        @property
        def kv_size(self) -> int: ...
        def active_params(self, *, embedding: bool = True) -> int: ...
        @property
        def is_moe(self) -> bool: ...

    def notes(self) -> tuple[str, ...]:
        """What a reader of the model's numbers should know, one sentence each (``tpsim list
        models NAME``): MLA's cache, the window, sinks, MTP, the expert dtype, and the active
        count without the embedding table (as DeepSeek and OpenAI quote it)."""
        out = []
        if self.is_mla:
            out.append(
                f"multi-head latent attention: KV cache {self.kv_latent_dim} elements per "
                f"token and layer (kv_lora_rank {self.kv_lora_rank} + rope "
                f"{self.qk_rope_head_dim}), whole on every TP rank"
            )
        if self.sliding_layers:
            out.append(
                f"sliding-window attention ({self.sliding_window} tokens) on "
                f"{len(self.sliding_layers)} of {self.num_layers} layers"
            )
        if self.chunked_layers:
            out.append(
                f"chunked local attention ({self.attention_chunk_size}-token chunks) on "
                f"{len(self.chunked_layers)} of {self.num_layers} layers, full attention on "
                "the others"
            )
        if self.linear_layers:
            out.append(
                f"linear attention (Gated DeltaNet) on {len(self.linear_layers)} of "
                f"{self.num_layers} layers: no KV cache there, a constant state of "
                f"{self.linear_state_elements()} elements a sequence and layer (conv and "
                "recurrent), full attention on the others"
            )
        if self.attention_sinks:
            out.append("attention sinks: one learned logit per head and layer")
        if self.rotary_dim and self.rotary_dim < self.head_dim:
            out.append(
                f"partial rotary: {self.rotary_dim} of each q/k head's {self.head_dim} "
                "dimensions rotated"
            )
        if self.qk_norm_whole:
            out.append(
                "q/k norms over all heads: under tensor parallelism one all-reduce a layer of "
                "each token's q and k variances (fp32, 8 bytes a token)"
            )
        if self.n_group:
            out.append(f"grouped routing: {self.n_group} groups, top {self.topk_group}")
        if self.mtp_layers:
            out.append(
                f"MTP: {self.mtp_layers} next-token prediction layer(s), "
                f"{self.mtp_params() / 1e9:.1f} B parameters beyond the total, "
                "not run and not loaded (no speculative decoding)"
            )
        if self.expert_dtype:
            out.append(f"routed experts stored in {self.expert_dtype}, the rest in {self.dtype}")
        if self.vision_params:
            out.append(
                f"vision encoder: about {self.vision_params / 1e9:.2f} B parameters in the "
                "checkpoint, not counted in the totals nor in the weights per GPU (a text "
                "decode never runs it; an engine that loads it holds "
                f"{2 * self.vision_params / 1e9:.1f} GB more in 16 bits)"
            )
        if self.is_moe:
            lookup = self.active_params(embedding=False)
            out.append(f"active without the embedding table: {lookup / 1e9:.2f} B")
        return tuple(out)


__all__ = ["ATTENTION_INT_FIELDS", "MAX_MODEL_DIM", "MAX_POSITIONS", "AttentionShapes"]
