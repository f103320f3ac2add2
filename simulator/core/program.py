"""What the engine runs: one list of ops per rank, with dependencies and priced kernels.

The engine knows nothing of transformers: an op is a kernel of known duration on the
compute stream, or a collective on the comm stream that the engine times over links.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Cost of launching work, per launch mode (../shared/calibration/README.md, "Host launch
#: overhead"). Host side: a PyTorch eager op costs about 8 us of host time on A100, a
#: serving engine's NCCL call about 20 us (Vidur's default); a CUDA graph replay about 15
#: us fixed. Device side, between one kernel and the next: launched one by one, the GPU
#: starts kernels at cudaLaunchKernel's rate, 2.5-3 us each (2.75 taken); from a graph,
#: about 0.6 us per node. With these a batch-1 decode of a 7B model on one A100 (about 350
#: kernels, 8.5 ms) gains about 10% from CUDA graphs, as reported.


@dataclass(frozen=True, slots=True)
class LaunchCost:
    replay_s: float  # host, once per pass before the first op (CUDA graph launch)
    kernel_s: float  # host, per compute kernel
    collective_s: float  # host, per collective call
    gpu_gap_s: float  # device, added to every kernel: dispatch after the one before


LAUNCH_COSTS: dict[str, LaunchCost] = {
    "eager": LaunchCost(replay_s=0.0, kernel_s=8e-6, collective_s=20e-6, gpu_gap_s=2.75e-6),
    "graph": LaunchCost(replay_s=15e-6, kernel_s=0.0, collective_s=0.0, gpu_gap_s=0.6e-6),
    # torch.compile with CUDA graphs: the same replay, over fewer (fused) kernels
    "compiled": LaunchCost(replay_s=15e-6, kernel_s=0.0, collective_s=0.0, gpu_gap_s=0.6e-6),
}
NO_LAUNCH_COST = LaunchCost(0.0, 0.0, 0.0, 0.0)


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
