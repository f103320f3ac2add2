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
from tpsim.models.spec import ModelSpec


@dataclass(frozen=True)
class KVCache:
    """One instance's KV cache: blocks, tokens per block, bytes per token per GPU (every
    layer's), and how a sequence holds the blocks."""

    blocks: int
    block_size: int
    bytes_per_token: float
    bytes_per_gpu: int
    layout: BlockLayout | None = None  # None: one block a block_size tokens of every layer
    #: SGLang's sliding pool: the sliding layers' share of ``bytes_per_token``, and the
    #: tokens of theirs a KV transfer sends, the model's window less one (SGLang's
    #: exclusive window); 0 and 0 otherwise (every layer's cache of every token is sent)
    sliding_bytes_per_token: float = 0.0
    sent_window: int = 0

    @property
    def blocks_layout(self) -> BlockLayout:
        return self.layout or BlockLayout(self.block_size)

    @property
    def tokens(self) -> int:
        """The tokens the cache holds, as vLLM reports them: a group's share of the blocks
        (SGLang's two pools: the full one's)."""
        return self.blocks // self.blocks_layout.groups * self.block_size

    def sequences(self, tokens: int) -> int:
        """How many sequences of ``tokens`` tokens the cache holds at once."""
        return self.blocks_layout.sequences(self.blocks, tokens)

    def sent_bytes(self, prompt: int) -> float:
        """Bytes per GPU that a disaggregated prefill sends of a ``prompt``-token request:
        every layer's cache of every token, or, from SGLang's two pools, the full layers'
        of every token and the sliding layers' of the last ``sent_window`` only, from a
        page boundary (disaggregation/prefill.py ``send_kv_chunk``: the KV pages of the
        prompt are the full pool's, ``SWAKVPool.get_contiguous_buf_infos``; the sliding
        pool's go as the ``StateType.SWA`` state, ``_swa_payload``: tokens from
        ``max(0, seq_len - sliding_window_size)`` rounded down to a page)."""
        if not self.sliding_bytes_per_token:
            return prompt * self.bytes_per_token
        page = self.block_size
        window = prompt - max(0, prompt - self.sent_window) // page * page
        full = self.bytes_per_token - self.sliding_bytes_per_token
        return prompt * full + window * self.sliding_bytes_per_token


def kv_blocks(
    timer: IterationTimer, spec: SchedulerSpec, pp: int = 1, *, connector: bool = False
) -> KVCache:
    """The blocks of one instance's KV cache, as its engine sizes it: :func:`kv_cache` of
    the timer's plan. ``connector``: the instance sends or receives KV caches
    (disaggregated prefill and decode): vLLM then turns its hybrid KV cache manager off
    (``sliding_window_kv: hybrid``: every layer at length), SGLang keeps its sliding pool
    (``pool``: a prefill and a decode server under ``--disaggregation-mode`` build the same
    ``SWAKVPool``, nothing in server_args or arg_groups/pd_disaggregation_hook.py turns it
    off, and the KV managers take its sliding pool's buffers as ``StateType.SWA`` state:
    ``SWAKVPool.get_state_buf_infos``)."""
    hybrid = not connector or spec.sliding_window_kv == "pool"
    return kv_cache(timer.plan, spec, pp, hybrid=hybrid)


def kv_cache(
    plan: RunPlan, spec: SchedulerSpec, pp: int = 1, *, hybrid: bool = True, states: bool = True
) -> KVCache:
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
    (:func:`~tpsim.experiments.serve.kvblocks.hybrid_layout`). ``sliding_window_kv: pool``
    (SGLang's ``SWAKVPool``; ``hybrid`` False: one pool of every layer, for comparison): a
    model of full and sliding layers splits the room between a pool of the full layers and
    one of the sliding layers (:func:`swa_pools`). A model with linear-attention layers:
    vLLM's hybrid manager's state blocks (:func:`state_block_size`); on an engine without
    it refused (:func:`linear_refusal`), unless ``states`` is False (the planner's batch
    bound without traffic, as before: the full layers' KV blocks only).
    """
    model, tp, gpu, options = plan.model, plan.layout.tp, plan.gpu, plan.options
    t = spec.max_num_batched_tokens
    kv_b = dtype_bytes(plan.precision.kv)
    runtime = plan.calib.memory.runtime_bytes
    pools = hybrid and spec.sliding_window_kv == "pool" and _mixed(model)
    if states and model.linear_layers and not (hybrid and spec.sliding_window_kv == "hybrid"):
        raise ConfigError(linear_refusal(model, spec.engine, hybrid))
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
        size = spec.block_size
        if hybrid:
            if model.linear_layers:
                size = state_block_size(plan, spec)
            layout, held = hybrid_layout(model, layers, size)
            block = _layer_token_bytes(plan) * held * size
        blocks = int(room // block) if room > 0 else 0
        sliding, window = 0.0, 0
        if pools:
            per_layer = kv_elements_per_rank(model, tp, 1, range(1)) * kv_b
            blocks, layout = swa_pools(model, spec, per_layer, room)
            sliding = per_layer * len(_local_layers(model).intersection(layers))
            window = _swa_window(model)
        whole = whole and gpu.hbm_bytes - runtime - used >= block
        if best is None or blocks < best.blocks:
            best = KVCache(blocks, size, per_token, round(room), layout,
                           sliding, window)  # fmt: skip
            weights = mem.weights_bytes_per_gpu
    assert best is not None
    # a pipeline of engines that keep a batch in flight per stage splits the pools between
    # its virtual engines (serve's run does; FasterTransformer's one engine does not)
    virtual = pp if pp > 1 and plan.calib.engine.pipeline_split_tokens is None else 1
    swa = (best.layout.swa_pool if best.layout else 0) // virtual
    if best.blocks >= 1 and swa and best.layout and swa < best.layout.keep_blocks:
        share = f", each of the {virtual} virtual engines' share," if virtual > 1 else ""
        raise ConfigError(  # SGLang refuses a sliding pool short of one request's window
            f"gpu_memory_utilization={spec.gpu_memory_utilization:g}: {model.name}'s "
            f"sliding-window pool{share} holds {swa * spec.block_size} tokens, fewer than "
            f"one sequence keeps there ({best.layout.swa_keep}); raise it, or raise --tp"
        )
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


def linear_refusal(model: ModelSpec, engine: str, hybrid: bool = True) -> str:
    """Why serving ``model``, which has linear-attention layers, on ``engine`` is refused
    (``hybrid`` False: with a KV transfer connector): one line."""
    if not hybrid:
        return (
            f"model={model.name}: disaggregated serving of a model with linear-attention "
            "layers is not simulated: vLLM turns its hybrid KV cache manager off under a KV "
            "connector, and the linear layers' states (MambaSpec) need it"
        )
    return (
        f"engine={engine}: serving {model.name}, a model with linear-attention layers, is "
        "simulated for vLLM V1's hybrid KV cache manager only (a state block per request "
        "and linear group beside the KV blocks); how this engine holds the states is not "
        "modelled"
    )


def _layer_token_bytes(plan: RunPlan) -> float:
    """The cache one token adds on one GPU in one full-attention layer (vLLM's
    ``FullAttentionSpec(block_size=1, ...).page_size_bytes``: K and V of the rank's KV
    heads, at least one)."""
    model = plan.model
    full = next(i for i in range(model.num_layers) if not model.is_linear_layer(i))
    one = kv_elements_per_rank(model, plan.layout.tp, 1, range(full, full + 1))
    return one * dtype_bytes(plan.precision.kv)


def state_block_size(plan: RunPlan, spec: SchedulerSpec) -> int:
    """The tokens of a block of a model with linear-attention layers, as vLLM V1 picks it
    (vllm/model_executor/models/config.py, HybridAttentionMambaModelConfig.
    verify_and_update_config, without prefix caching): the fewest tokens, a multiple of the
    attention kernel's block alignment (16: FlashAttention's; not MLA, not a head size of
    256 on Blackwell, which take 64/128 or 32), whose attention page (the tokens x one
    layer's K and V per token) holds one layer's state page (``MambaSpec.page_size_bytes``:
    the conv and recurrent state of the rank's heads, in the model's dtype: mamba_cache_dtype
    and mamba_ssm_cache_dtype "auto"), or the engine's block size where larger; the state
    page is then padded to the attention page (``mamba_page_size_padded``)."""
    model = plan.model
    align = 32 if plan.gpu.arch == "blackwell" and model.head_dim == 256 else 16
    state = round(model.linear_state_elements(plan.layout.tp) * dtype_bytes(plan.precision.act))
    token = round(_layer_token_bytes(plan))
    return max(spec.block_size, align * -(-state // (align * token)))


def _local_layers(model: ModelSpec) -> frozenset[int]:
    """The layers SGLang keeps in its sliding-window pool (model_config.py
    get_hybrid_layer_ids: ``swa_attention_layer_ids``): the sliding layers (gpt-oss), or
    Llama 4's chunked ones (``(i + 1) % 4 != 0``, its RoPE layers)."""
    return frozenset(model.sliding_layers) | frozenset(model.chunked_layers)


def _swa_window(model: ModelSpec) -> int:
    """The tokens a sequence keeps on those layers (model_runner.py sliding_window_size):
    the model's ``get_attention_sliding_window_size`` where it has one (gpt-oss: its
    window - 1), else ``attention_chunk_size`` (Llama 4: a sliding window of a chunk covers
    every key a chunked query reads)."""
    return model.sliding_window - 1 if model.sliding_layers else model.attention_chunk_size


def _mixed(model: ModelSpec) -> bool:
    """Whether ``model`` has both full and sliding-window (or chunked) layers: SGLang's
    hybrid SWA architectures in the catalog, gpt-oss and Llama 4 (is_hybrid_swa_model); a
    model of one kind keeps one pool."""
    return 0 < len(_local_layers(model)) < model.num_layers


def swa_pools(
    model: ModelSpec, spec: SchedulerSpec, layer_bytes: float, room: float
) -> tuple[int, BlockLayout]:
    """SGLang's two pools in ``room`` bytes of a GPU (``HybridSWAPoolConfigurator``): a
    full-pool token costs ``layer_bytes`` in each full layer and brings
    ``swa_full_tokens_ratio`` of a token in each sliding layer, so the full pool holds
    ``room // (layer_bytes x (full + ratio x sliding))`` tokens and the sliding pool that
    times the ratio, each in whole pages (``block_size``); the layer counts are the
    model's, on a pipeline stage too, as SGLang counts them. A sequence keeps in the
    sliding pool its last ``sliding_window`` tokens (Llama 4: ``attention_chunk_size``), the
    ``swa_eviction_interval`` decoded between two frees of those before it, and a page. The
    full pool's blocks and the layout."""
    size, ratio = spec.block_size, spec.swa_full_tokens_ratio
    sliding = len(_local_layers(model))
    cell = layer_bytes * (model.num_layers - sliding) + ratio * layer_bytes * sliding
    full = int(room // cell) // size * size if room > 0 else 0
    swa = int(full * ratio) // size * size
    keep = _swa_window(model) + spec.swa_eviction_interval + size
    return full // size, BlockLayout(size, swa_pool=swa // size, swa_keep=keep)


__all__ = ["KVCache", "kv_blocks", "kv_cache", "linear_refusal", "state_block_size", "swa_pools"]
