"""What the engine runs: one list of ops per rank, with dependencies and priced kernels.

The engine knows nothing of transformers: an op is a kernel of known duration on the
compute stream, or a collective on the comm stream that the engine times over links.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Host cost of launching work, per launch mode. Sources (../shared/calibration/README.md,
#: "Host launch overhead"): a PyTorch eager op costs about 8 us of host time on A100; a
#: serving engine's NCCL call about 20 us of CPU (Vidur's default); a CUDA graph replay
#: about 15 us fixed plus about 0.6 us per node.


@dataclass(frozen=True, slots=True)
class LaunchCost:
    replay_s: float  # once per pass, before the first op (CUDA graph launch)
    kernel_s: float  # per compute kernel
    collective_s: float  # per collective call


LAUNCH_COSTS: dict[str, LaunchCost] = {
    "eager": LaunchCost(replay_s=0.0, kernel_s=8e-6, collective_s=20e-6),
    "graph": LaunchCost(replay_s=15e-6, kernel_s=0.6e-6, collective_s=0.6e-6),
}
NO_LAUNCH_COST = LaunchCost(0.0, 0.0, 0.0)


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
