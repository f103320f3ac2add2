"""Multi-head latent attention (DeepSeek-V2/V3) per rank, as vLLM's MLA backends run it.

Tensor parallelism splits the heads (``h`` per rank); the latent has no head dimension, so
every rank computes it and holds the whole compressed cache. Per rank, ``T`` tokens, ``d``
hidden, ``Rq`` the q latent, ``R`` the KV latent, ``r`` the rotary part, ``hd = nope + r``
the q/k head width, ``v`` the value head width:

- ``qkv_a_proj`` ``[T, d] x [d, Rq + R + r]``: q_a and kv_a fused, replicated on every
  rank (vLLM's ``fused_qkv_a_proj``); the norms of the q and KV latents;
- ``q_b_proj`` ``[T, Rq] x [Rq, h hd]`` (column-parallel; without a q latent ``q_proj``
  ``[T, d] x [d, h hd]``); rotary on ``q_pe`` and ``k_pe``;
- prefill, the non-absorbed form: ``kv_b_proj`` ``[T, R] x [R, h (nope + v)]`` expands the
  latent into every head's k_nope and v, then causal attention with q/k head width ``hd``
  and v width ``v``, writing the latent ``R + r`` per token into the cache;
- decode, the absorbed form: ``q_absorb`` (``h`` x ``[T, nope] x [nope, R]``, W_UK) takes
  each head's query into the latent, attention reads the compressed cache once for all the
  rank's heads (scores over ``R + r``, values ``R``: FlashMLA), ``v_up`` (``h`` x ``[T, R] x
  [R, v]``, W_UV) brings each head back to ``v``. Both are 16-bit batched GEMMs (vLLM
  dequantises ``kv_b_proj`` into ``W_UK_T`` and ``W_UV`` at load);
- ``o_proj`` ``[T, h v] x [h v, d]`` row-parallel and its all-reduce.

A serving iteration that mixes decodes and prefill chunks (a workload with ``decodes`` and
``chunks``, :class:`tpsim.core.lowering.mixed.MixedStep`) runs both forms in one layer, as
vLLM's MLA backends split a batch: the decodes absorbed (``q_absorb``, attention over the
compressed cache, ``v_up``), the chunks expanded (``kv_b_proj`` over each chunk and the
prefix it attends to, causal attention), the projections before and ``o_proj`` after over
every token together (:func:`mixed_attention`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpsim.core.lowering.block import LoweringBlock
from tpsim.models.spec import ModelSpec

if TYPE_CHECKING:
    from tpsim.core.kernels.costs import KernelCost
    from tpsim.core.kernels.pricing import Pricing


def attention_params_per_rank(model: ModelSpec, tp: int) -> int:
    """One rank's MLA weights of one layer: the replicated q_a and kv_a projections, 1/tp
    of q_b (or q), kv_b and o (the latent norms are counted with the norms)."""
    d, hd, v = model.hidden_size, model.head_dim, model.value_head_dim
    h = model.num_heads // tp
    ql, r = model.q_lora_rank, model.kv_lora_rank
    q = d * ql + ql * h * hd if ql else d * h * hd
    kv = d * (r + model.qk_rope_head_dim) + r * h * (model.qk_nope_head_dim + v)
    return q + kv + h * v * d


def kv_width_per_rank(model: ModelSpec, kv_heads: int) -> int:
    """Cache elements one token adds to one layer on one rank: MLA's latent ``R + r``
    (whole on every rank), else K and V of the rank's ``kv_heads``."""
    if model.is_mla:
        return model.kv_latent_dim
    return 2 * kv_heads * model.head_dim


def mixed_attention(price: Pricing, model: ModelSpec, heads: int, workload: Any) -> KernelCost:
    """The attention kernels of one MLA layer of a mixed iteration on one rank, as one
    cost: the absorbed decode kernel over the decodes' contexts and one expanded causal
    kernel per chunk after its prefix (a :class:`~tpsim.core.kernels.costs.KernelCost`)."""
    from tpsim.core.kernels import attention, costs
    from tpsim.core.kernels.pricing import Pricing as Base

    latent, r = model.kv_latent_dim, model.kv_lora_rank
    hd, v = model.head_dim, model.value_head_dim
    parts = []
    if workload.decodes:
        mean = round(sum(workload.decodes) / len(workload.decodes))
        parts.append(Base.attention_decode(price, len(workload.decodes), mean, heads, 1, latent,
                                           v_head_dim=r, cache_width=latent))  # fmt: skip
    for n, cached in workload.chunks:
        parts.append(attention.attention_prefill(1, n, heads, heads, hd, price.hw,
                                             act_bytes=price.act_b, kv_bytes=price.kv_b,
                                             cached=cached, v_head_dim=v,
                                             cache_width=latent))  # fmt: skip
    return costs.KernelCost.of_parts(parts)


class LatentAttention(LoweringBlock):
    """The MLA block of :class:`~tpsim.core.lowering.lower._Megatron` (mixed into it)."""

    if TYPE_CHECKING:  # the lowering's own, beyond LoweringBlock's
        h: int

    def _rms(self, mb: Any, name: str, layer: int, tokens: int, width: int) -> None:
        """An RMSNorm over ``[tokens, width]``: read x and the weight, write y."""
        b = self.act_b
        shape = f"[{tokens}, {width}]"
        nbytes = 2 * tokens * width * b + width * b
        self.ew(mb, name, layer, nbytes, 4.0 * tokens * width, shape, tokens, width)

    def _bmm(self, mb: Any, name: str, layer: int, m: int, n: int, k: int) -> None:
        """``h`` per-head 16-bit GEMMs ``[m, k] x [k, n]`` (the absorbed projections)."""
        cost, detail = self.price.batched_gemm(name, self.h, m, n, k)
        self.build.kernel(mb.index, name, "gemm", layer, cost, detail)

    def latent_attention(self, mb: Any, layer: int, tokens: int, batch: int,
                         phase: str, prompt: int, context: int) -> None:  # fmt: skip
        """The MLA block after the input norm, through o_proj and its all-reduce."""
        m, h = self.m, self.h
        ql, r, rope = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
        hd, v, nope = m.head_dim, m.value_head_dim, m.qk_nope_head_dim
        if ql:  # fused q_a | kv_a, replicated: [T, d] x [d, Rq + R + r]
            self.column_gemm(mb, "qkv_a_proj", layer, ql + r + rope, "attn_in")
            self._rms(mb, "q_a_norm", layer, tokens, ql)
        else:  # q [T, d] x [d, h hd] column-parallel, kv_a [T, d] x [d, R + r] replicated
            self.column_gemm(mb, "q_proj", layer, h * hd, "attn_in")
            self.column_gemm(mb, "kv_a_proj", layer, r + rope, "attn_in")
        self._rms(mb, "kv_a_norm", layer, tokens, r)
        if ql:
            self.gemm(mb, "q_b_proj", layer, tokens, h * hd, ql)  # [T, Rq] x [Rq, h hd]
        width = (h + 1) * rope  # rotary on q_pe [T, h r] and k_pe [T, r]
        rot = tokens * width
        self.ew(mb, "rotary", layer, 2 * rot * self.act_b, 6.0 * rot,
                f"[{tokens}, {width}]", tokens, width)  # fmt: skip
        latent = m.kv_latent_dim  # R + r cached per token, one for all heads
        decodes, chunks = getattr(self.w, "decodes", None), getattr(self.w, "chunks", None)
        if decodes is not None and chunks is not None:  # a mixed iteration: both forms
            expanded = sum(n + cached for n, cached in chunks)  # chunks and their prefixes
            if expanded:
                self.gemm(mb, "kv_b_proj", layer, expanded, h * (nope + v), r)
            if decodes:
                self._bmm(mb, "q_absorb", layer, len(decodes), r, nope)
            cost = self.price.attention_decode(batch, context, h, 1, latent, v_head_dim=r,
                                               cache_width=latent)  # fmt: skip
            shape = f"MLA: {len(decodes)} absorbed decodes, {len(chunks)} expanded chunks"
            self.build.kernel(mb.index, "attn", "attention", layer, cost, shape)
            if decodes:
                self._bmm(mb, "v_up", layer, len(decodes), v, r)
            self.row_gemm(mb, "o_proj", layer, h * v, "attn_out")
            return
        if phase == "prefill":  # expand the latent: [T, R] x [R, h (nope + v)]
            self.gemm(mb, "kv_b_proj", layer, tokens, h * (nope + v), r)
            cost = self.price.attention_prefill(batch, prompt, h, h, hd, v_head_dim=v,
                                                cache_width=latent)  # fmt: skip
            shape = f"causal MLA [{batch}, {h} heads, {prompt}, qk {hd} v {v}]"
        else:  # absorbed: q into the latent, attention over the cache, v back out
            self._bmm(mb, "q_absorb", layer, tokens, r, nope)  # h x [T, nope] x [nope, R]
            cost = self.price.attention_decode(batch, context, h, 1, latent, v_head_dim=r,
                                               cache_width=latent)  # fmt: skip
            shape = f"absorbed MLA [{batch}, {h} heads, ctx {context}, latent {latent}]"
        self.build.kernel(mb.index, "attn", "attention", layer, cost, shape)
        if phase != "prefill":
            self._bmm(mb, "v_up", layer, tokens, v, r)  # h x [T, R] x [R, v]
        self.row_gemm(mb, "o_proj", layer, h * v, "attn_out")  # [T, h v] x [h v, d] -> sum


__all__ = [
    "LatentAttention",
    "attention_params_per_rank",
    "kv_width_per_rank",
    "mixed_attention",
]
