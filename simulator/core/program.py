"""What the engine runs: one list of ops per rank, with dependencies and priced kernels.

The engine knows nothing of transformers: an op is a kernel of known duration on the
compute stream, or a collective on the comm stream that the engine times over links.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class CollectiveCall:
    """A collective over the whole TP group. ``nbytes`` is the nccl-tests size: the
    all-reduce buffer, or the all-gather output (``ranks * per-rank input``)."""

    op: str  # "all_reduce" | "all_gather"
    nbytes: int


@dataclass(frozen=True, slots=True)
class Op:
    name: str  # after the layer structure: "qkv_proj", "attn", "attn_out.all_reduce", ...
    kind: str  # "gemm" | "attention" | "elementwise" | "collective"
    layer: int  # -1 embedding, 0..L-1 layers, L final norm and LM head
    site: str  # collective site, or "" for kernels
    stream: str  # "compute" | "comm"
    launch_s: float  # host time to launch this op
    seconds: float  # kernel duration; 0 for collectives, which the engine times
    flops: float
    bytes: int
    category: str  # "compute" | "memory" | "communication"
    detail: str  # shape, for the trace
    deps: tuple[int, ...]  # indices of ops that must finish before this one starts
    collective: CollectiveCall | None = None


@dataclass(frozen=True)
class Program:
    """The per-rank op list (identical on every rank of a TP group) and its launch prelude."""

    ops: tuple[Op, ...]
    replay_s: float = 0.0  # one host launch before the first op (CUDA graph replay)
    meta: dict[str, object] = field(default_factory=dict)
