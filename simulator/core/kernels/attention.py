"""Attention kernel costs: FlashAttention-style causal prefill over a prompt (chunk) and its
cached prefix, and decode attention over the KV cache, each priced by its roofline plus the
engine's fixed time (:func:`tpsim.core.kernels.costs._priced`), with the traits of the
engine's attention kernels (:class:`~tpsim.core.kernels.costs.Traits`: split-KV, in-kernel
KV append, KV-cache streaming share, query heads a decode CTA covers)."""

from __future__ import annotations

from tpsim.core.kernels.costs import Hardware, KernelCost, Traits, _priced


def causal_pairs(seq: int, window: int = 0) -> float:
    """(query, key) pairs of causal attention over a chunk of ``seq`` new tokens: query i
    (1-based) sees i keys, or at most ``window`` keys with a sliding window (0: none)."""
    if not window or window >= seq:
        return seq * (seq + 1) / 2
    return window * (window + 1) / 2 + (seq - window) * window


def chunked_pairs(tokens: int, chunk: int) -> float:
    """(query, key) pairs of chunked local attention over positions 0 .. ``tokens`` - 1:
    the query at position p sees its own chunk's keys up to itself, ``p mod chunk + 1``
    (a block-diagonal causal mask)."""
    full, rest = divmod(tokens, chunk)
    return full * chunk * (chunk + 1) / 2 + rest * (rest + 1) / 2


def attention_prefill(
    batch: int,
    seq: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    hw: Hardware,
    *,
    act_bytes: float,
    kv_bytes: float,
    cached: int = 0,
    v_head_dim: int = 0,
    cache_width: int = 0,
    window: int = 0,
    chunk: int = 0,
) -> KernelCost:
    """Causal FlashAttention over a prompt (chunk) of ``seq`` tokens per sequence, after
    ``cached`` tokens already in the KV cache: QK^T and PV over the lower triangle of the
    chunk and the whole cached rectangle.

    FLOPs: ``2 * batch * heads * (head_dim + v_head_dim) * pairs``, pairs = ``seq (seq +
    1) / 2 + seq * cached`` (:func:`causal_pairs`; with a sliding ``window`` each query sees at
    most ``window`` keys, the cached ones included; with chunked local attention of ``chunk``
    tokens the query at position p sees the keys of its chunk up to itself, ``p mod chunk +
    1``: :func:`chunked_pairs`, and reads the cached keys of the first query's chunk only).
    ``v_head_dim`` (0: ``head_dim``): the
    value heads' width (MLA's prefill: q/k 192, v 128). Bytes: read Q, K, V and write O once
    (tiles stay on chip), write the chunk's ``cache_width`` elements per token into the cache
    (default K and V of every KV head, ``2 kv_heads head_dim``; MLA: its latent) and read
    the cached ones. One CTA per (sequence, head, ``attention_block_m`` queries): with
    few heads per rank and short prompts there are fewer CTAs than SMs, and the compute term
    is scaled by the waves' fill (when quantised); with ``attention_split_kv`` such a grid
    splits the KV range over the idle SMs (one split per ``attention_block_m`` keys at
    least), as FlashAttention's split-KV kernel does. ``attention_append_efficiency > 0``:
    every CTA first copies the chunk's new K and V up to its causal limit into the cache
    (FlashAttention-2's ``flash_attn_with_kvcache`` with ``k``/``v``; all CTAs of a KV head
    write the same rows), read and written at that share of the HBM bandwidth.
    """
    tr = hw.traits
    vd = v_head_dim or head_dim
    width = cache_width or kv_heads * (head_dim + vd)
    per_pair = 2.0 * batch * heads * (head_dim + vd)
    tokens = batch * seq
    qkvo = tokens * (heads + kv_heads) * (head_dim + vd) * act_bytes
    nbytes = qkvo + tokens * width * kv_bytes  # the chunk written into the cache
    if chunk:  # block-diagonal causal: the cached keys of the chunk the prompt starts in
        pairs = chunked_pairs(cached + seq, chunk) - chunked_pairs(cached, chunk)
        nbytes += batch * (cached % chunk) * width * kv_bytes
    elif cached and window:  # query i sees min(window, cached + i) keys
        pairs = causal_pairs(cached + seq, window) - causal_pairs(cached, window)
        nbytes += batch * min(cached, window) * width * kv_bytes
    else:
        pairs = causal_pairs(seq, window) + seq * cached
        nbytes += batch * cached * width * kv_bytes
    flops = per_pair * pairs
    t = flops / (_attention_peak(hw) * hw.attention_efficiency)
    bm = hw.attention_block_m
    if hw.tile is not None:
        ctas = batch * heads * -(-seq // bm)
        if tr.attention_split_kv and ctas < hw.sm_count:
            ctas *= max(1, min(-(-(seq + cached) // bm), hw.sm_count // ctas))
        t *= -(-ctas // hw.sm_count) * hw.sm_count / ctas
    append_s = 0.0
    if tr.attention_append_efficiency > 0:
        m_blocks = -(-seq // bm)  # query block i copies min(seq, (i + 1) bm) new tokens
        copied = batch * heads * (bm * (m_blocks - 1) * m_blocks // 2 + seq)
        append_bytes = copied * (head_dim + vd) * kv_bytes * 2  # K and V, read and written
        append_s = append_bytes / (hw.hbm_achievable_Bps * tr.attention_append_efficiency)
    return _priced(t, round(nbytes), flops, hw, fixed_s=tr.attention_fixed_s, extra_s=append_s)


def attention_decode(
    batch: int,
    context: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    hw: Hardware,
    *,
    act_bytes: float,
    kv_bytes: float,
    v_head_dim: int = 0,
    cache_width: int = 0,
) -> KernelCost:
    """One new token per sequence attending over ``context`` cached keys and values.

    FLOPs: ``2 * batch * heads * (head_dim + v_head_dim) * context`` (``v_head_dim`` 0:
    ``head_dim``, so ``4 batch heads head_dim context``). Bytes: the cache of every sequence,
    ``batch * context * cache_width`` (default K and V of every KV head, ``2 kv_heads
    head_dim``; MLA's absorbed decode: the latent, one for all heads), plus Q in and O out,
    read at ``attention_stream_efficiency`` of the achievable HBM bandwidth. A kernel whose
    CTA covers at most ``attention_heads_per_cta`` query heads (TurboMind v0.1's: 4) reads
    each KV head's cache once per CTA of its group: ``group / per_cta`` times, ``per_cta`` the
    largest power of two up to that dividing the group (Llama-2-70B's 8 query heads a KV
    head: twice); assumed from HBM, the CTAs not sharing it through L2.
    """
    tr = hw.traits
    vd = v_head_dim or head_dim
    width = cache_width or kv_heads * (head_dim + vd)
    flops = 2.0 * batch * heads * (head_dim + vd) * context
    cache_read = batch * context * width * kv_bytes * _kv_reads(heads, kv_heads, cache_width, tr)
    q_o = batch * heads * (head_dim + vd) * act_bytes
    t = flops / (_attention_peak(hw) * hw.attention_efficiency)
    return _priced(
        t,
        round(cache_read + q_o),
        flops,
        hw,
        stream=tr.attention_stream_efficiency,
        fixed_s=tr.attention_fixed_s,
    )


def _kv_reads(heads: int, kv_heads: int, cache_width: int, tr: Traits) -> int:
    """Times a decode step reads each KV head's cache (1 unless the kernel's CTAs cover
    fewer query heads than share it; a latent cache, ``cache_width``, is read once)."""
    most = tr.attention_heads_per_cta
    if not most or cache_width or kv_heads <= 0 or heads % kv_heads:
        return 1
    group = heads // kv_heads
    per_cta = next(n for n in (64, 32, 16, 8, 4, 2, 1) if n <= most and group % n == 0)
    return group // per_cta


def _attention_peak(hw: Hardware) -> float:
    return hw.attention_peak_flops or hw.peak_flops


__all__ = ["attention_decode", "attention_prefill", "causal_pairs"]
