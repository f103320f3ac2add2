"""An engine instance's KV cache as its engine sizes it when it starts: the blocks of its
pool, and how a sequence holds them (:class:`KVCache`, :func:`kv_cache`)."""

from __future__ import annotations

from dataclasses import dataclass

from tpsim.calibration.scheduler import SchedulerSpec
from tpsim.core.comm.layout import stage_layers
from tpsim.core.config import Workload
from tpsim.core.errors import ConfigError
from tpsim.core.memory import kv_elements_per_rank, memory_per_stage
from tpsim.core.plan import RunPlan
from tpsim.core.precision import dtype_bytes
from tpsim.core.step_timer import IterationTimer
from tpsim.experiments.serve.kvblocks import BlockLayout, hybrid_layout


@dataclass(frozen=True)
class KVCache:
    """One instance's KV cache: blocks, tokens per block, bytes per token per GPU (every
    layer's), and how a sequence holds the blocks."""

    blocks: int
    block_size: int
    bytes_per_token: float
    bytes_per_gpu: int
    layout: BlockLayout | None = None  # None: one block a block_size tokens of every layer

    @property
    def blocks_layout(self) -> BlockLayout:
        return self.layout or BlockLayout(self.block_size)

    @property
    def tokens(self) -> int:
        """The tokens the cache holds, as vLLM reports them: a group's share of the blocks."""
        return self.blocks // self.blocks_layout.groups * self.block_size


def kv_blocks(
    timer: IterationTimer, spec: SchedulerSpec, pp: int = 1, *, hybrid: bool = True
) -> KVCache:
    """The blocks of one instance's KV cache, as its engine sizes it: :func:`kv_cache` of
    the timer's plan."""
    return kv_cache(timer.plan, spec, pp, hybrid=hybrid)


def kv_cache(plan: RunPlan, spec: SchedulerSpec, pp: int = 1, *, hybrid: bool = True) -> KVCache:
    """The blocks of one instance's KV cache, as its engine sizes it (``pp`` pipeline
    stages: each GPU holds its stage's layers, and the stage with the fewest blocks bounds
    the tokens the pipeline holds).

    ``total`` (vLLM): ``gpu_memory_utilization`` of the GPU's memory, less the runtime's
    reserve, the weights, the activations of a profiling step of ``max_num_batched_tokens``
    tokens and the sampler's fp32 logits of ``max_num_seqs`` sequences (on the last stage).
    ``free`` (TensorRT-LLM): that share of what is left after the runtime, weights and
    activations. A block holds every layer of the stage for ``block_size`` tokens, or with
    the engine's hybrid manager (``sliding_window_kv: hybrid``, and ``hybrid``: not with
    a KV transfer connector, as vLLM turns it off then) one group's layers
    (:func:`~tpsim.experiments.serve.kvblocks.hybrid_layout`).
    """
    model, tp, gpu, options = plan.model, plan.layout.tp, plan.gpu, plan.options
    t = spec.max_num_batched_tokens
    kv_b = dtype_bytes(plan.precision.kv)
    runtime = plan.calib.memory.runtime_bytes
    hybrid = hybrid and spec.sliding_window_kv == "hybrid"
    best: KVCache | None = None
    weights, whole = 0, True  # whole: a block fits in each stage's memory at utilisation 1
    for s, layers in enumerate(stage_layers(model.num_layers, pp)):
        last = s == pp - 1
        work = Workload(1, "prefill", t, t)
        mem = memory_per_stage(model, tp, work, options, gpu, layers=layers, first=s == 0,
                               last=last, experts=plan.experts)  # fmt: skip
        logits = spec.max_num_seqs * model.vocab_size * 4 if last else 0
        used = mem.weights_bytes_per_gpu + mem.activation_bytes_per_gpu + logits
        if spec.memory_rule == "total":
            room = gpu.hbm_bytes * spec.gpu_memory_utilization - runtime - used
        else:
            room = spec.gpu_memory_utilization * (gpu.hbm_bytes - runtime - used)
        # the cache one token adds on one GPU, every layer of the stage (MLA: the whole
        # latent on each), and what a block of the pool holds
        per_token = kv_elements_per_rank(model, tp, 1, layers) * kv_b
        layout, block = None, per_token * spec.block_size
        if hybrid:
            layout, held = hybrid_layout(model, layers, spec.block_size)
            block = per_token / len(layers) * held * spec.block_size
        blocks = int(room // block) if room > 0 else 0
        whole = whole and gpu.hbm_bytes - runtime - used >= block
        if best is None or blocks < best.blocks:
            best = KVCache(blocks, spec.block_size, per_token, round(room), layout)
            weights = mem.weights_bytes_per_gpu
    assert best is not None
    if best.blocks < 1:
        more = "raise --tp" + (" or --pp" if pp > 1 else "")
        if whole:  # the GPUs could hold a cache: the share the engine may use is the cause
            raise ConfigError(
                f"gpu_memory_utilization={spec.gpu_memory_utilization:g}: leaves no room for "
                f"a KV cache beside {model.name}'s {weights / 2**30:.1f} GiB of weights per "
                f"{gpu.name} at TP {tp}; raise it, or {more}"
            )
        raise ConfigError(
            f"tp={tp}: {model.name} leaves no room for a KV cache on {gpu.name} "
            f"({weights / 2**30:.1f} GiB of weights per GPU); {more}"
        )
    return best


__all__ = ["KVCache", "kv_blocks", "kv_cache"]
