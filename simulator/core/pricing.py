"""Kernel pricing for the lowering: what each kernel of one rank costs, as a value.

The lowering asks for GEMMs by name and shape, attention by its per-rank heads, and
elementwise kernels by bytes and FLOPs; :class:`Pricing` answers with a
:class:`~tpsim.core.costs.KernelCost` from the cost models in :mod:`tpsim.core.costs`, in
the dtypes the run resolved (:class:`~tpsim.core.config.Precision`). A measured kernel
table (:mod:`tpsim.core.kernel_table`) overrides the GEMMs it matches. The LM head stays
16-bit in fp8 checkpoints: it is priced at the 16-bit peak with 16-bit inputs and weights.
Nothing is stored: every method is a pure function of its arguments and the frozen fields.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tpsim.core import costs
from tpsim.core.config import Precision, dtype_bytes
from tpsim.core.costs import Hardware, KernelCost
from tpsim.core.kernel_table import KernelTable


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

    @classmethod
    def of(cls, hw: Hardware, prec: Precision, table: KernelTable | None = None) -> Pricing:
        hw16 = replace(hw, peak_flops=hw.peak16_flops or hw.peak_flops)
        return cls(hw, hw16, prec, dtype_bytes(prec.act), dtype_bytes(prec.weights),
                   dtype_bytes(prec.gemm_in), dtype_bytes(prec.kv), table)  # fmt: skip

    def gemm(self, name: str, m: int, n: int, k: int) -> tuple[KernelCost, str]:
        """GEMM ``name`` of ``[m, k] x [k, n]`` and its shape text (``(kernel table)`` added
        when a measured time replaced the model's)."""
        linear = name != "lm_head"  # the LM head stays 16-bit in fp8 checkpoints
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
        if self.table is not None:
            t = self.table.gemm_seconds(
                name, self.hw.name, wdtype, m, n, k, lambda r: price(r).seconds
            )
            if t is not None:
                cost = replace(cost, seconds=t)
                detail += " (kernel table)"
        return cost, detail

    def attention_prefill(self, batch: int, prompt: int, heads: int, kv_heads: int,
                          head_dim: int) -> KernelCost:  # fmt: skip
        """Causal attention of ``batch`` prompts of ``prompt`` tokens over this rank's heads."""
        return costs.attention_prefill(batch, prompt, heads, kv_heads, head_dim, self.hw,
                                       act_bytes=self.act_b, kv_bytes=self.kv_b)  # fmt: skip

    def attention_decode(self, batch: int, context: int, heads: int, kv_heads: int,
                         head_dim: int) -> KernelCost:  # fmt: skip
        """One new token per sequence attending over ``context`` cached keys."""
        return costs.attention_decode(batch, context, heads, kv_heads, head_dim, self.hw,
                                      act_bytes=self.act_b, kv_bytes=self.kv_b)  # fmt: skip

    def elementwise(self, nbytes: float, flops: float) -> KernelCost:
        """A bytes-bound kernel (norm, rotary, activation, residual add, embedding gather)."""
        return costs.elementwise(nbytes, flops, self.hw)


__all__ = ["Pricing"]
