"""A Gated DeltaNet linear-attention layer (Qwen3-Next) per rank, as vLLM's
GatedDeltaNetAttention (gdn_linear_attn.py) runs it.

Tensor parallelism splits the heads: ``nk = linear_num_key_heads / tp`` q/k heads of ``dk``
and ``nv = linear_num_value_heads / tp`` value heads of ``dv`` per rank (vLLM's
MergedColumnParallelLinear in_proj_qkvz and in_proj_ba, the conv1d's channels, A_log and
dt_bias sharded with them, out_proj a RowParallelLinear). Per rank, ``T`` tokens:

- ``in_proj_qkvz`` ``[T, d] x [d, 2 nk dk + 2 nv dv]`` and ``in_proj_ba``
  ``[T, d] x [d, 2 nv]`` (column-parallel), then their split into q, k, v, z, b, a (vLLM's
  fused_qkvzba_split_reshape_cat: each output read and written once);
- the causal conv over q, k, v (``conv = 2 nk dk + nv dv`` channels, kernel ``K``, SiLU):
  a decode updates each sequence's conv state (``K - 1`` inputs a channel, read and
  written: causal_conv1d_update), a prefill convolves the prompt and writes the final state
  (causal_conv1d_fn);
- the gated delta rule (:mod:`tpsim.core.kernels.linear_attention`): the recurrent form on
  a decode (its state read and written, nothing that grows with the context), the chunked
  form on a prefill; the decay and beta gates (fused_gdn_gating) are in its bytes;
- RMSNormGated of each head's output times SiLU(z): ``[T, nv dv]`` and z read, y written;
- ``out_proj`` ``[T, nv dv] x [nv dv, d]`` row-parallel and its all-reduce (as o_proj).
"""

from __future__ import annotations

from typing import Any

from tpsim.core.kernels import linear_attention as gdn
from tpsim.core.kernels.costs import KernelCost
from tpsim.core.lowering.block import LoweringBlock


class GatedDeltaNet(LoweringBlock):
    """The Gated DeltaNet block of :class:`~tpsim.core.lowering.lower._Megatron` (mixed into
    it)."""

    def linear_attention(self, mb: Any, layer: int) -> None:
        """The linear-attention block after the input norm, through out_proj and its
        all-reduce."""
        m, tp, a, w = self.m, self.tp, self.act_b, self.w
        nk, nv = m.linear_key_heads // tp, m.linear_value_heads // tp
        dk, dv, kernel = m.linear_key_head_dim, m.linear_value_head_dim, m.linear_conv_kernel
        key, value = nk * dk, nv * dv
        conv = 2 * key + value
        tokens = mb.tokens
        qkvz = 2 * key + 2 * value
        self.column_gemm(mb, "in_proj_qkvz", layer, qkvz, "attn_in")  # [T, 2 nk dk + 2 nv dv]
        # in_proj_ba reads the same (already gathered) input: [T, d] x [d, 2 nv]
        self.gemm(mb, "in_proj_ba", layer, tokens, 2 * nv, self.d)
        split = tokens * (qkvz + 2 * nv)
        self.ew(mb, "qkvz_split", layer, 2 * split * a, 0.0,
                f"[{tokens}, {qkvz + 2 * nv}]", tokens, qkvz + 2 * nv)  # fmt: skip
        # the conv: x [T, conv] in, out [T, conv], weights [conv, K]; 2 K FLOPs a channel
        # and token, and the SiLU
        rows = tokens * conv
        decodes, chunks = _parts(w, mb.batch)
        # each decode's conv state read and written, each prompt's written (and read where
        # a chunk starts after a cached part: causal_conv1d_fn's initial state)
        held = 2 * decodes + len(chunks) + sum(1 for _, p in chunks if p)
        state = held * conv * (kernel - 1) * a
        nbytes = 2 * rows * a + conv * kernel * a + state
        self.ew(mb, "conv1d", layer, nbytes, (2.0 * kernel + 4) * rows,
                f"[{tokens}, {conv}] kernel {kernel}", tokens, conv)  # fmt: skip
        # the decodes through the recurrent delta rule over each one's state, the prompts (or
        # chunks of them) through the chunked one, each padded to whole chunks: vLLM's
        # GatedDeltaNetAttention._forward splits a mixed batch so (fused_recurrent_gated_
        # delta_rule on its decodes, chunk_gated_delta_rule on its prefills), run back to back
        parts: list[KernelCost] = []
        shapes = []
        if decodes:
            parts.append(gdn.decode(decodes, nv, nk, dk, dv, self.price.hw, act_bytes=a,
                                    state_bytes=a))  # fmt: skip
            shapes.append(f"recurrent [{decodes}, {nv}/{nk} heads, state {dk}x{dv}]")
        for n, count in _lengths(chunks):
            parts.append(gdn.prefill(count, n, nv, nk, dk, dv, self.price.hw, act_bytes=a,
                                     state_bytes=a))  # fmt: skip
            shapes.append(f"chunked [{count}, {nv}/{nk} heads, {n}, state {dk}x{dv}]")
        cost: KernelCost = parts[0] if len(parts) == 1 else KernelCost.of_parts(parts)
        shape = " + ".join(shapes)
        self.build.kernel(mb.index, "gdn", "attention", layer, cost, shape)  # o: [T, nv dv]
        out = tokens * value
        self.ew(mb, "gated_norm", layer, 3 * out * a + dv * a, 8.0 * out,
                f"[{tokens}, {value}] gated by z", tokens, value)  # fmt: skip
        self.row_gemm(mb, "out_proj", layer, value, "attn_out")  # [T, nv dv] -> sum [T, d]


def _parts(w: Any, batch: int) -> tuple[int, tuple[tuple[int, int], ...]]:
    """The decodes and the (chunk tokens, cached tokens) prefills of workload ``w``: a
    serving iteration's (:class:`~tpsim.core.lowering.mixed.MixedStep`), or a run's slice
    of ``batch`` decodes or whole prompts."""
    decodes, chunks = getattr(w, "decodes", ()), getattr(w, "chunks", ())
    if decodes or chunks:
        return len(decodes), tuple(chunks)
    if w.phase == "prefill":
        return 0, ((w.prompt_len, 0),) * batch
    return batch, ()


def _lengths(chunks: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """The prefills' chunk lengths and how many have each, in order of length."""
    counts: dict[int, int] = {}
    for n, _ in chunks:
        counts[n] = counts.get(n, 0) + 1
    return sorted(counts.items())


__all__ = ["GatedDeltaNet"]
