"""Kernel pricing for the lowering: what each kernel of one rank costs, as a value.

The lowering asks for GEMMs by name and shape, attention by its per-rank heads, and
elementwise kernels by name, bytes, FLOPs and rows; :class:`Pricing` answers with a
:class:`~tpsim.core.kernels.costs.KernelCost` from the cost models in
:mod:`tpsim.core.kernels.costs`, in
the dtypes the run resolved (:class:`~tpsim.core.precision.Precision`). A measured kernel
table (:mod:`tpsim.core.kernels.kernel_table`) overrides the kernels it matches: GEMMs by shape,
and, once bound to the model's shape and TP, every operator it measured. The LM head stays
16-bit in fp8 checkpoints: it is priced at the 16-bit peak with 16-bit inputs and weights.
Nothing is stored: every method is a pure function of its arguments and the frozen fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from tpsim.core.errors import ConfigError
from tpsim.core.kernels import attention, costs
from tpsim.core.kernels.costs import Hardware, KernelCost, RowKernel
from tpsim.core.kernels.kernel_table import KernelTable
from tpsim.core.precision import Precision, dtype_bytes

_T = TypeVar("_T")

#: Row-per-CTA kernels (norms, SwiGLU/GELU, rotary) and the norms among them.
NORMS = ("input_norm", "post_attn_norm", "final_norm")
ROWWISE = (*NORMS, "act", "rotary")


def _check_physical(
    name: str, shape: str, dtype: str, seconds: float, flops: float, weights: float, g: Hardware
) -> None:
    """ConfigError when a kernel table's time for a GEMM beats what the GPU can do at its
    peaks: its FLOPs at the dense peak of its dtype, its weights at the HBM's peak (weights
    its L2 could hold may have stayed there in a benchmark's loop). Such a row is a unit
    slip (ms written as us), not a measurement."""
    floor = flops / g.peak_flops if g.peak_flops > 0 else 0.0
    if weights > g.l2_bytes:
        floor = max(floor, weights / g.hbm_Bps)
    if seconds < floor:
        raise ConfigError(
            f"kernel table: {name} {shape} {dtype}: time_us={seconds * 1e6:.4g} is faster "
            f"than {g.name} can run it ({floor * 1e6:.4g} us at its FLOP and HBM peaks); "
            "check the row's units"
        )


@dataclass(frozen=True)
class Pricing:
    """Prices kernels on one GPU in one run's dtypes; build with :meth:`of`."""

    hw: Hardware
    hw16: Hardware  # the same GPU at its 16-bit peak, for the 16-bit LM head
    prec: Precision
    act_b: float  # bytes per element: activations (residual stream, outputs, LM head)
    w_b: float  # linear-layer weights
    in_b: float  # activations entering the linear GEMMs
    kv_b: float  # KV cache
    table: KernelTable | None = None
    expert_b: float = 0.0  # the routed experts' weights (0: w_b)
    #: prices already asked for, by their arguments (None: none kept): a cache of a pure
    #: function, shared by the copies a lowering makes (MixedPricing.around)
    memo: dict[tuple[object, ...], object] | None = field(
        default=None, compare=False, hash=False, repr=False
    )

    @classmethod
    def of(cls, hw: Hardware, prec: Precision, table: KernelTable | None = None) -> Pricing:
        hw16 = replace(hw, peak_flops=hw.peak16_flops or hw.peak_flops)
        return cls(hw, hw16, prec, dtype_bytes(prec.act), dtype_bytes(prec.weights),
                   dtype_bytes(prec.gemm_in), dtype_bytes(prec.kv), table,
                   dtype_bytes(prec.expert_weights))  # fmt: skip

    def _kept(self, key: tuple[object, ...], price: Callable[[], _T]) -> _T:
        """``price()``, kept in :attr:`memo` under ``key`` when there is one."""
        memo = self.memo
        if memo is None:
            return price()
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = price()
        return hit  # type: ignore[return-value]

    def _measured(
        self, op: str, dtype: str, x: int, y: int, model: Callable[[int, int], float]
    ) -> float | None:
        """The table's time of operator ``op`` at (``x``, ``y``), if it measured it."""
        if self.table is None:
            return None
        return self.table.op_seconds(op, self.hw.name, dtype, x, y, model)

    def gemm(self, name: str, m: int, n: int, k: int, layer: int = -1) -> tuple[KernelCost, str]:
        """GEMM ``name`` of ``[m, k] x [k, n]`` of ``layer`` and its shape text (``(kernel
        table)`` added when a measured time replaced the model's; ``16-bit`` when the
        checkpoint keeps it so on this layer)."""
        # the LM head and an MoE router stay 16-bit in quantised checkpoints (vLLM builds
        # the router's gate with quant_config=None: DeepSeek, Qwen3-MoE, Mixtral), and so
        # does a GEMM the checkpoint's skip list names (UnquantizedLinearMethod)
        linear = name not in ("lm_head", "router") and not self.prec.kept.has(name, layer)
        key = ("gemm", name, m, n, k, linear)
        return self._kept(key, lambda: self._gemm(name, m, n, k, linear))

    def _gemm(self, name: str, m: int, n: int, k: int, linear: bool) -> tuple[KernelCost, str]:
        g = self.hw if linear else self.hw16
        a_in, w, wdtype = (
            (self.in_b, self.w_b, self.prec.weights)
            if linear
            else (self.act_b, self.act_b, self.prec.act)
        )

        def price(rows: int) -> KernelCost:
            return costs.gemm(rows, n, k, g, act_bytes=a_in, w_bytes=w, out_bytes=self.act_b)

        cost = price(m)
        detail = f"[{m}, {k}] x [{k}, {n}]"
        if not linear and name not in ("lm_head", "router"):
            detail += f" {self.prec.act} (kept 16-bit)"
        if self.table is not None:
            t = self.table.gemm_seconds(
                name, self.hw.name, wdtype, m, n, k, lambda r: price(r).seconds
            )
            if t is None:
                t = self._measured(name, wdtype, m, 0, lambda r, _: price(r).seconds)
            if t is not None:
                _check_physical(name, detail, wdtype, t, 2.0 * m * n * k, k * n * w, g)
                cost = replace(cost, seconds=t, measured=True)
                detail += " (kernel table)"
        return cost, detail

    def grouped_gemm(
        self, name: str, rows: int, n: int, k: int, experts_read: float, layer: int = -1
    ) -> tuple[KernelCost, str]:
        """The routed experts' grouped GEMM ``name`` of ``layer``: ``rows`` token-expert
        pairs ``[rows, k]`` over ``experts_read`` expert weights ``[k, n]`` (no kernel table
        measures one: always the model's price); 16-bit at the 16-bit peak where the
        checkpoint keeps this layer's experts so."""
        detail = f"[{rows}, {k}] x {experts_read:.2f} experts [{k}, {n}]"
        if self.prec.kept.has(name, layer):
            cost = costs.grouped_gemm(rows, n, k, self.hw16, experts_read=experts_read,
                                      act_bytes=self.act_b, w_bytes=self.act_b,
                                      out_bytes=self.act_b)  # fmt: skip
            return cost, f"{detail} {self.prec.act} (kept 16-bit)"
        cost = costs.grouped_gemm(rows, n, k, self.hw, experts_read=experts_read,
                                  act_bytes=self.in_b, w_bytes=self.expert_b or self.w_b,
                                  out_bytes=self.act_b)  # fmt: skip
        return cost, detail

    def batched_gemm(self, name: str, batch: int, m: int, n: int, k: int) -> tuple[KernelCost, str]:
        """``batch`` independent 16-bit GEMMs ``[m, k] x [k, n]``, one weight each (a bmm:
        MLA's absorbed per-head projections, which engines keep in the activations' dtype,
        vLLM's ``W_UK_T`` and ``W_UV`` dequantised at load): at the 16-bit peak, priced as a
        grouped GEMM of ``batch`` groups. No kernel table measures one."""
        cost = costs.grouped_gemm(batch * m, n, k, self.hw16, experts_read=batch,
                                  act_bytes=self.act_b, w_bytes=self.act_b)  # fmt: skip
        return cost, f"{batch} x [{m}, {k}] x [{k}, {n}]"

    def attention_prefill(self, batch: int, prompt: int, heads: int, kv_heads: int,
                          head_dim: int, *, v_head_dim: int = 0, cache_width: int = 0,
                          window: int = 0, chunk: int = 0) -> KernelCost:  # fmt: skip
        """Causal attention of ``batch`` prompts of ``prompt`` tokens over this rank's heads
        (``v_head_dim``, ``cache_width``, ``window``, ``chunk``:
        :func:`attention.attention_prefill`).

        A table measures one sequence's chunk after some cached tokens; ``batch`` prompts
        read it at the chunk ``prompt * sqrt(batch)`` with nothing cached, the same FLOPs
        (Vidur's rule for a batch of prefills: the root of the summed squared chunks)."""

        def price(b: int, seq: int, cached: int = 0) -> KernelCost:
            return attention.attention_prefill(b, seq, heads, kv_heads, head_dim, self.hw,
                                           act_bytes=self.act_b, kv_bytes=self.kv_b,
                                           cached=cached, v_head_dim=v_head_dim,
                                           cache_width=cache_width, window=window,
                                           chunk=chunk)  # fmt: skip

        cost = price(batch, prompt)
        one = round(prompt * math.sqrt(batch))  # the one sequence's chunk a table reads
        t = self._measured(
            "attn_prefill", self.prec.kv, one, 0, lambda c, y: price(1, c, y).seconds
        )
        return cost if t is None else replace(cost, seconds=t, measured=True)

    def attention_decode(self, batch: int, context: int, heads: int, kv_heads: int,
                         head_dim: int, *, v_head_dim: int = 0, cache_width: int = 0,
                         window: int = 0, chunk: int = 0) -> KernelCost:  # fmt: skip
        """One new token per sequence attending over ``context`` cached keys
        (``v_head_dim``, ``cache_width``: :func:`attention.attention_decode`). ``window``,
        ``chunk``: the layer's sliding window or attention chunk, already applied to
        ``context`` (said for a composition of contexts,
        :class:`tpsim.core.lowering.mixed.MixedPricing`)."""

        def price(b: int, ctx: int) -> KernelCost:
            return attention.attention_decode(b, ctx, heads, kv_heads, head_dim, self.hw,
                                          act_bytes=self.act_b, kv_bytes=self.kv_b,
                                          v_head_dim=v_head_dim,
                                          cache_width=cache_width)  # fmt: skip

        cost = price(batch, context)
        t = self._measured(
            "attn_decode", self.prec.kv, batch, context, lambda b, c: price(b, c).seconds
        )
        return cost if t is None else replace(cost, seconds=t, measured=True)

    def elementwise(
        self,
        nbytes: float,
        flops: float,
        op: str = "",
        rows: int = 0,
        width: int = 0,
        fused_add: bool = False,
    ) -> KernelCost:
        """A bytes-bound kernel ``op`` (norm, rotary, activation, residual add, embedding
        gather) over ``rows`` rows of ``width`` elements; ``fused_add``: a norm with the
        residual add fused in. A table prices a fused norm as its measured norm plus its
        measured residual add (the same work, in the two kernels the measurement ran)."""
        key = ("ew", nbytes, flops, op, rows, width, fused_add)
        return self._kept(key, lambda: self._elementwise(nbytes, flops, op, rows, width, fused_add))

    def _elementwise(
        self, nbytes: float, flops: float, op: str, rows: int, width: int, fused_add: bool
    ) -> KernelCost:
        passes = self.hw.traits.norm_passes if op in NORMS else 1

        def price(r: int) -> KernelCost:  # this kernel over r rows: bytes and FLOPs scale
            s = r / rows if rows else 1.0
            row = RowKernel(r, width, passes, r * width * self.act_b) if op in ROWWISE else None
            gather = op == "embedding"
            return costs.elementwise(nbytes * s, flops * s, self.hw, row=row, gather=gather)

        cost = price(rows)
        if self.table is None or not op:
            return cost

        def model(r: int, _: int) -> float:
            return price(r).seconds

        t = self._measured(op, self.prec.act, rows, 0, model)
        if t is not None and fused_add:
            add = self._measured("residual", self.prec.act, rows, 0, model)
            t = None if add is None else t + add
        return cost if t is None else replace(cost, seconds=t, measured=True)


__all__ = ["NORMS", "ROWWISE", "Pricing"]
