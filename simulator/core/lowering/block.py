"""What a block mixed into the Megatron lowering (:class:`~tpsim.core.lowering.lower._Megatron`)
may use of it: :class:`LoweringBlock` declares the lowering's fields and helpers for the type
checker, so that a block written in a module of its own (latent attention, the MoE FFN) reads
as a part of the lowering."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpsim.core.config import Workload
    from tpsim.core.kernels.pricing import Pricing
    from tpsim.core.lowering.opbuild import OpBuilder
    from tpsim.models.spec import ModelSpec


class LoweringBlock:
    """The Megatron lowering's own fields and helpers, as a block mixed into it sees them."""

    if TYPE_CHECKING:
        m: ModelSpec
        w: Workload
        tp: int
        d: int
        act_b: float
        sp: bool
        price: Pricing
        build: OpBuilder

        def ew(self, mb: Any, name: str, layer: int, nbytes: float, flops: float,
               shape: str, rows: int, width: int, fused: bool = False) -> None: ...  # fmt: skip
        def gemm(self, mb: Any, name: str, layer: int, m: int, n: int, k: int,
                 site: str = "", deps: tuple[int, ...] | None = None,
                 part: str = "") -> int: ...  # fmt: skip
        def column_gemm(self, mb: Any, name: str, layer: int, n: int,
                        site_in: str) -> None: ...  # fmt: skip
        def row_gemm(self, mb: Any, name: str, layer: int, k: int, site: str) -> None: ...
        def swiglu(self, mb: Any, name: str, layer: int, rows: int, inner: int) -> None: ...


__all__ = ["LoweringBlock"]
