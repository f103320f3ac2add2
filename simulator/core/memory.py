"""Memory per GPU: sharded and replicated weights, the KV cache and activation workspace."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from tpsim.core.config import Options, Workload
from tpsim.core.deepep_buffers import reserved_bytes
from tpsim.core.lowering.experts import ExpertSplit
from tpsim.core.lowering.mla import attention_params_per_rank, kv_width_per_rank
from tpsim.core.lowering.shard import shard
from tpsim.core.precision import dtype_bytes, run_precision
from tpsim.models.spec import ModelSpec
from tpsim.topologies.gpus import GPUSpec


@dataclass(frozen=True)
class MemoryUse:
    weights_bytes_per_gpu: int
    kv_cache_bytes_per_gpu: int
    activation_bytes_per_gpu: int
    total_bytes_per_gpu: int
    capacity_bytes_per_gpu: int  # the usable share of HBM less the runtime's reserve
    fits: bool

    def to_dict(self) -> dict[str, int | bool]:
        return asdict(self)

    def refusal(self, what: str, gpu: str, remedy: str) -> str:
        """One line refusing a layout that does not fit: ``what`` on ``gpu``, the bytes it
        needs per GPU by part and those available, and ``remedy``."""

        def gb(n: int) -> str:
            return f"{n / 1e9:.1f}"

        return (
            f"{what} does not fit on {gpu}: needs {gb(self.total_bytes_per_gpu)} GB a GPU "
            f"(weights {gb(self.weights_bytes_per_gpu)}, KV cache "
            f"{gb(self.kv_cache_bytes_per_gpu)}, activations "
            f"{gb(self.activation_bytes_per_gpu)}), {gb(self.capacity_bytes_per_gpu)} GB "
            f"available; {remedy}"
        )


def linear_params_per_gpu(model: ModelSpec, tp: int, experts: ExpertSplit | None = None) -> int:
    """Weights of one rank's linear layers (QKV, O, MLP): column/row shards, KV heads
    replicated when tp exceeds them. Biases are not included."""
    return sum(linear_params_of_layer(model, tp, i, experts) for i in range(model.num_layers))


def linear_params_of_layer(
    model: ModelSpec, tp: int, layer: int, experts: ExpertSplit | None = None
) -> int:
    """One rank's linear weights of ``layer``: attention (MLA: the replicated latent
    projections and 1/tp of the others,
    :func:`~tpsim.core.lowering.mla.attention_params_per_rank`) and the dense MLP, or in an
    MoE layer the router [d, E] (replicated), its routed experts (``N / ep`` of them, ``1 /
    moe_tp`` of each one's width, at the width and hidden size the engine builds them;
    default tensor-parallel: all, ``1/tp``) and the shared experts
    (:func:`tpsim.core.lowering.shard.shard`)."""
    router = model.hidden_size * model.num_experts if model.is_moe_layer(layer) else 0
    return router + sum(group_params_of_layer(model, tp, layer, experts).values())


def group_params_of_layer(
    model: ModelSpec, tp: int, layer: int, experts: ExpertSplit | None = None
) -> dict[str, int]:
    """One rank's weights of each GEMM of ``layer`` (the groups of
    :data:`tpsim.models.kept.GROUPS` the layer has; the router apart)."""
    d, hd, split = model.hidden_size, model.head_dim, shard(model, tp, experts)
    h, kv, inner = split.heads, split.kv_heads, split.mlp_width
    gate = h if model.attn_output_gate else 0  # Qwen3-Next: q_proj doubled for its gate
    out = {"qkv_proj": d * (h + gate + 2 * kv) * hd, "o_proj": h * hd * d}
    if model.is_linear_layer(layer):  # Gated DeltaNet: in_proj_qkvz and in_proj_ba, out_proj
        gemms = model.linear_gemm_params()
        out = {"qkv_proj": (gemms["in_proj_qkvz"] + gemms["in_proj_ba"]) // tp,
               "o_proj": gemms["out_proj"] // tp}  # fmt: skip
    if model.is_mla:
        o = h * model.value_head_dim * d
        out = {"qkv_proj": attention_params_per_rank(model, tp) - o, "o_proj": o}
    if model.is_moe_layer(layer):
        out["experts"] = split.local_experts * 3 * split.expert_hidden * split.expert_width
        shared = split.shared_width
        if shared:
            out["shared_up"], out["shared_down"] = 2 * d * shared, d * shared
        return out
    out["mlp_up"], out["mlp_down"] = (2 if model.gated_mlp else 1) * d * inner, d * inner
    return out


def routed_expert_params_of_layer(
    model: ModelSpec, tp: int, layer: int, experts: ExpertSplit | None = None
) -> int:
    """The routed experts' share of :func:`linear_params_of_layer` (0 in a dense layer)."""
    if not model.is_moe_layer(layer):
        return 0
    split = shard(model, tp, experts)
    return split.local_experts * 3 * split.expert_hidden * split.expert_width


def weight_params_per_gpu(model: ModelSpec, tp: int, experts: ExpertSplit | None = None) -> int:
    """Parameters one rank holds: column/row shards, replicated KV heads, replicated norms."""
    d, hd, split = model.hidden_size, model.head_dim, shard(model, tp, experts)
    h, kv, inner, vocab = split.heads, split.kv_heads, split.mlp_width, split.vocab
    qkv_out = (h + 2 * kv) * hd
    bias = 0
    if model.qkv_bias or model.mlp_bias:
        bias += qkv_out  # column-parallel biases are sharded with their columns
    if model.mlp_bias:
        bias += d  # the row-parallel output bias is replicated
    branches = 3 if model.gated_mlp else 2
    if model.mlp_bias:
        bias += (branches - 1) * inner + d
    # the q and k norms: whole per head; MiniMax-M2's span the heads, sharded with them
    qk = (h + kv) * hd if model.qk_norm_whole else (2 * hd if model.qk_norm else 0)
    norms = 2 * (2 * d if model.norm == "layernorm" else d) + qk
    if model.is_mla:  # the q and KV latents' norms, replicated
        norms += model.q_lora_rank + model.kv_lora_rank
    if model.attention_sinks:  # one logit per head, split with the heads
        norms += split.heads
    embed = vocab * d + (
        model.max_position_embeddings * d if model.learned_position_embeddings else 0
    )
    head = 0 if model.tied_embeddings else vocab * d
    final_norm = 2 * d if model.norm == "layernorm" else d
    rest = model.num_layers * (bias + norms) + embed + head + final_norm
    if model.linear_layers:  # a linear layer's conv, A_log, dt_bias (1/tp) and gated norm
        # [dv], not the q/k norms
        own = (model.linear_conv_dim * model.linear_conv_kernel + 2 * model.linear_value_heads
               ) // tp + model.linear_value_head_dim  # fmt: skip
        rest += len(model.linear_layers) * (own - qk)
    return linear_params_per_gpu(model, tp, experts) + rest


def memory_per_gpu(
    model: ModelSpec,
    tp: int,
    workload: Workload,
    options: Options,
    gpu: GPUSpec,
    experts: ExpertSplit | None = None,
) -> MemoryUse:
    """Weights, KV cache and peak activations of one rank against its usable HBM: the
    serving engine's share of HBM less the runtime's own reserve (calibration ``memory``)."""
    layers = range(model.num_layers)  # one stage holding every layer, embedding and head
    return memory_per_stage(model, tp, workload, options, gpu, layers=layers, first=True,
                            last=True, experts=experts)  # fmt: skip


def activation_elements(
    model: ModelSpec, tp: int, workload: Workload, experts: ExpertSplit | None = None
) -> int:
    """Elements live at the widest point of one layer's forward (inference frees each
    tensor after its last use; layers run one at a time, so the peak is one layer's).

    Attention: residual and normed x [T, d], QKV [T, (h + 2kv) hd], output [T, h hd], and the
    o_proj output [T, d]. MLP: residual and normed x, gate|up [T, 2I] (or up [T, I]) and
    the activation [T, I]. The peak is the larger, not the sum: QKV is freed before the MLP.
    An MoE layer holds its routed experts' tensors per token-expert pair: all ``T k`` with
    replicated tokens (an expert-parallel rank too sizes them before routing), the
    ``T k A / ep`` it receives, in expectation, with dispatched tokens.
    FlashAttention keeps no [S, S] score matrix, so long prompts cost T-linear memory; a
    prefill of ``batch x prompt_len`` tokens in one pass holds all T rows at once.

    Dispatched tokens (attention data parallelism) add the all-to-all buffers of the pairs
    a rank receives (dispatch) and sends back (combine): ``T k attention_dp / ep`` rows of
    ``d`` each, in expectation.
    """
    d, hd, split = model.hidden_size, model.head_dim, shard(model, tp, experts)
    h, kv, inner = split.heads, split.kv_heads, split.mlp_width
    attention = 3 * d + (h + 2 * kv) * hd + h * hd
    if model.attn_output_gate:  # the gate [T, h hd] beside q
        attention += h * hd
    if model.linear_layers:  # qkvz|ba [T, 2 key + 2 value + 2 nv], the conv's output, o
        key, value = model.linear_key_size // tp, model.linear_value_size // tp
        nv = model.linear_value_heads // tp
        linear = 3 * d + (2 * key + 2 * value + 2 * nv) + (2 * key + value) + value
        attention = max(attention, linear)
    if model.is_mla:  # latents [T, Rq + R + r], q [T, h hd], k and v [T, h (hd + v)], out
        v = model.value_head_dim
        attention = 3 * d + model.q_lora_rank + model.kv_latent_dim + h * (2 * hd + 2 * v)
    mlp = 2 * d + (3 if model.gated_mlp else 2) * inner
    if not model.is_moe:
        return workload.tokens * max(attention, mlp)
    # MoE: residual and x, router logits [T, E], per token-expert pair gate|up [Tk, 2Im] and
    # the output [Tk, d] in one buffer (the output written after gate|up is consumed: the
    # fused MoE kernels' cache13 [M, top_k, max(N, K)], vLLM's and SGLang's
    # fused_experts_impl) and the activation [Tk, Im] beside it (cache2), the shared
    # experts' gate|up and activation [T, 3Is]
    k, im = model.experts_per_token, split.expert_width
    # token-expert pairs per token this rank holds buffers for: with replicated tokens the
    # rank is handed all T and sizes its buffers for all T k pairs before routing says which
    # are its own (vLLM's fused_experts_impl: cache13 [M, top_k, max(N, K)], cache2
    # [M top_k, N / 2], another EP rank's pairs written as zeros), whatever ep; dispatched
    # tokens arrive as the pairs routed to it, k A / ep in expectation
    pairs: float = k
    if experts is not None and experts.dispatch:
        pairs = k * experts.attention_dp / experts.ep
    tokens = workload.tokens
    # replicated tokens run through the fused kernels a chunk at a time where the engine
    # chunks them (vLLM's VLLM_FUSED_MOE_CHUNK_SIZE): the pairs' buffers hold one chunk's
    chunk = experts.chunk_tokens if experts is not None and not experts.dispatch else 0
    paired = min(tokens, chunk) if chunk else tokens
    per_pair = pairs * (max(2 * im, d) + im)
    share = paired / tokens if tokens else 1.0  # of the step's pairs held at once
    moe = 2 * d + model.num_experts + 3 * split.shared_width + per_pair * share
    buffers = 0.0
    if experts is not None and experts.dispatch:
        buffers = 2 * pairs * d
    peak = max(attention, mlp if model.dense_layers else 0, moe) + buffers
    return round(tokens * peak)


def memory_per_stage(
    model: ModelSpec,
    tp: int,
    workload: Workload,
    options: Options,
    gpu: GPUSpec,
    *,
    layers: range,
    first: bool,
    last: bool,
    micro_batches: int = 1,
    experts: ExpertSplit | None = None,
) -> MemoryUse:
    """One rank's memory in a pipeline stage holding ``layers``: those layers' weights and
    KV cache (every micro-batch's sequences), the embedding on the first stage, the final
    norm and LM head on the last (a tied head is a copy there when the stages differ), and
    the activations of one micro-batch (with DeepEP's all-to-all, the buffers it reserves:
    :func:`tpsim.core.deepep_buffers.reserved_bytes`). With one stage holding every layer
    this equals :func:`memory_per_gpu`."""
    prec = run_precision(options, model, gpu)
    act_b, kv_b = dtype_bytes(prec.act), dtype_bytes(prec.kv)
    n, L = len(layers), model.num_layers
    split = shard(model, tp, experts)
    d = model.hidden_size
    linear = sum(linear_params_of_layer(model, tp, i, experts) for i in layers)
    everything = weight_params_per_gpu(model, tp, experts) - linear_params_per_gpu(
        model, tp, experts
    )
    embed = split.vocab * d + (
        model.max_position_embeddings * d if model.learned_position_embeddings else 0
    )
    final_norm = 2 * d if model.norm == "layernorm" else d
    tied_head = 0 if model.tied_embeddings else split.vocab * d
    per_layer = (everything - embed - tied_head - final_norm) // L
    other = per_layer * n
    if first:
        other += embed
    if last:  # the head: its own weight, or a copy of the tied embedding on another stage
        other += final_norm + (split.vocab * d if tied_head or not first else 0)
    # routed experts stored in their own dtype (gpt-oss's MXFP4); as the linears otherwise
    routed = sum(routed_expert_params_of_layer(model, tp, i, experts) for i in layers)
    # the router stays 16-bit in a quantised checkpoint (as the LM head; vLLM builds its
    # gate with quant_config=None)
    router = sum(d * model.num_experts for i in layers if model.is_moe_layer(i))
    # the GEMMs the checkpoint keeps 16-bit (Precision.kept: run as stored only)
    kept_linear = kept_routed = 0
    for i in layers if prec.kept else ():
        groups = group_params_of_layer(model, tp, i, experts)
        for g in prec.kept.groups_of(i):
            if g == "experts":
                kept_routed += groups[g]
            else:
                kept_linear += groups[g]
    w_b, e_b = dtype_bytes(prec.weights), dtype_bytes(prec.expert_weights)
    weights = round(
        (linear - routed - router - kept_linear) * w_b
        + (routed - kept_routed) * e_b
        + (other + router + kept_linear + kept_routed) * act_b
    )
    # a prefill pass writes every prompt token's K and V into the cache (a chunked layer's
    # too: its chunks before the last are freed only after the pass)
    new = workload.prompt_len if workload.phase == "prefill" else 0
    kv_cache = round(
        workload.batch * kv_elements_per_rank(model, tp, workload.kv_len, layers, new) * kv_b
    )
    # linear-attention layers: each sequence's conv and recurrent state, whatever its length,
    # in the model's dtype (vLLM's mamba_cache_dtype and mamba_ssm_cache_dtype "auto")
    kv_cache += workload.batch * state_bytes_per_rank(model, tp, layers, act_b)
    mb = -(-workload.batch // micro_batches)
    one = Workload(mb, workload.phase, workload.prompt_len, workload.context_len)
    activations = round(activation_elements(model, tp, one, experts) * act_b)
    if last:
        activations += mb * model.vocab_size * 4  # gathered logits, upcast to fp32
    if options.moe_a2a == "deepep" and experts is not None and experts.dispatch:
        activations += reserved_bytes(model, experts, options.calibration.engine)
    total = weights + kv_cache + activations
    reserve = options.calibration.memory
    capacity = int(gpu.hbm_bytes * reserve.usable_fraction) - reserve.runtime_bytes
    return MemoryUse(weights, kv_cache, activations, total, capacity, total <= capacity)


def state_bytes_per_rank(model: ModelSpec, tp: int, layers: range, state_b: float) -> int:
    """Bytes one sequence's linear-attention state takes on one rank in ``layers``: per
    linear layer the conv state and the recurrent state of the rank's heads
    (:meth:`~tpsim.models.spec.ModelSpec.linear_state_elements`), at ``state_b`` bytes an
    element; constant in the sequence's length. 0 without linear layers."""
    linear = sum(1 for i in layers if model.is_linear_layer(i))
    return round(linear * model.linear_state_elements(tp) * state_b)


def kv_elements_per_rank(
    model: ModelSpec, tp: int, tokens: int, layers: range, new: int = 0
) -> int:
    """Cache elements one sequence of ``tokens`` tokens holds on one rank in ``layers``:
    K and V of the rank's KV heads per token (MLA: the whole latent ``kv_lora_rank +
    qk_rope_head_dim``, which has no head to split, on every rank), on a sliding layer
    only the last ``sliding_window`` tokens, on a chunked layer at most one
    ``attention_chunk_size`` chunk, or, while ``new`` of them are computed in one pass,
    the cached tokens a sliding or chunked layer keeps and all the new ones, none on a
    linear-attention layer (:meth:`~tpsim.models.spec.ModelSpec.held`)."""
    width = kv_width_per_rank(model, shard(model, tp).kv_heads)
    return width * sum(model.held(i, tokens, new) for i in layers)


def _largest(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The largest n in [low, high] with ``fits(n)`` (monotone: fewer always fits too), or
    ``low - 1`` when none does."""
    if high < low or not fits(low):
        return low - 1
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def largest_batch(fits: Callable[[Workload], bool], workload: Workload) -> int:
    """The largest batch up to ``workload``'s that fits at its length (``fits``: the memory
    check of a workload); 0 when not even one sequence does."""
    return max(0, _largest(lambda b: fits(replace(workload, batch=b)), 1, workload.batch))


def what_fits(fits: Callable[[Workload], bool], workload: Workload, *, least_batch: int = 1) -> str:
    """What a planner needs next when ``workload`` does not fit: the largest batch that fits
    at its length, and the longest prompt or context that fits at its batch (``fits``: the
    memory check of a workload; batch and length each searched with the other held)."""
    length = "prompt" if workload.phase == "prefill" else "context"
    n = workload.kv_len
    batch = _largest(lambda b: fits(replace(workload, batch=b)), least_batch, workload.batch - 1)

    def at_length(t: int) -> Workload:
        if workload.phase == "prefill":
            return replace(workload, prompt_len=t)
        return replace(workload, context_len=t)

    tokens = _largest(lambda t: fits(at_length(t)), 1, n - 1)
    parts = []
    if batch >= least_batch:
        parts.append(f"batch {batch} at {length} {n}")
    if tokens >= 1:
        parts.append(f"{length} {tokens} at batch {workload.batch}")
    if not parts and workload.batch == least_batch:  # every shorter length searched
        return f"no {length} length fits at batch {least_batch}: the weights alone leave no room"
    if not parts:
        return f"neither a smaller batch at {length} {n} nor a shorter {length} fits"
    return "what fits: at most " + ", or ".join(parts)
