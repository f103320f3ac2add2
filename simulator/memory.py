"""Memory per GPU: sharded and replicated weights, the KV cache and activation workspace."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from models.spec import ModelSpec
from simulator.config import Options, Workload, ceil_div, dtype_bytes, kv_split
from topologies.gpus import GPUSpec

#: Share of HBM a serving engine lets the model use: vLLM's default
#: ``gpu_memory_utilization=0.9``; the rest holds the CUDA context, NCCL buffers and
#: allocator slack.
USABLE_FRACTION = 0.90


@dataclass(frozen=True)
class MemoryUse:
    weights_bytes_per_gpu: int
    kv_cache_bytes_per_gpu: int
    activation_bytes_per_gpu: int
    total_bytes_per_gpu: int
    capacity_bytes_per_gpu: int
    fits: bool

    def to_dict(self) -> dict[str, int | bool]:
        return asdict(self)


def weight_params_per_gpu(model: ModelSpec, tp: int) -> int:
    """Parameters one rank holds: column/row shards, replicated KV heads, replicated norms."""
    d, hd = model.hidden_size, model.head_dim
    h = model.num_heads // tp
    kv, _ = kv_split(tp, model.num_kv_heads)
    inner = ceil_div(model.intermediate_size, tp)
    vocab = ceil_div(model.vocab_size, tp)
    qkv_out = (h + 2 * kv) * hd
    attn = d * qkv_out + h * hd * d
    if model.qkv_bias or model.mlp_bias:
        attn += qkv_out  # column-parallel biases are sharded with their columns
    if model.mlp_bias:
        attn += d  # the row-parallel output bias is replicated
    branches = 3 if model.gated_mlp else 2
    mlp = branches * d * inner
    if model.mlp_bias:
        mlp += (branches - 1) * inner + d
    norms = 2 * (2 * d if model.norm == "layernorm" else d)
    per_layer = attn + mlp + norms
    embed = vocab * d + (
        model.max_position_embeddings * d if model.learned_position_embeddings else 0
    )
    head = 0 if model.tied_embeddings else vocab * d
    final_norm = 2 * d if model.norm == "layernorm" else d
    return model.num_layers * per_layer + embed + head + final_norm


def memory_per_gpu(
    model: ModelSpec, tp: int, workload: Workload, options: Options, gpu: GPUSpec
) -> MemoryUse:
    dtype = options.dtype or model.dtype
    act_b = dtype_bytes(dtype)
    kv_b = dtype_bytes(options.kv_dtype or dtype)
    weights = round(weight_params_per_gpu(model, tp) * act_b)
    kv, _ = kv_split(tp, model.num_kv_heads)
    # batch x context x KV heads per GPU x head_dim x (K and V) x layers x bytes
    kv_cache = round(
        workload.batch * workload.kv_len * kv * model.head_dim * 2 * model.num_layers * kv_b
    )
    # Live activations at the widest point of a layer: the residual stream and its normed
    # copy [T, d], the QKV output [T, (h + 2kv) hd] and gate/up plus product [T, 3I], plus
    # the gathered fp32 logits [batch, vocab].
    d, hd = model.hidden_size, model.head_dim
    h = model.num_heads // tp
    inner = ceil_div(model.intermediate_size, tp)
    tokens = workload.tokens
    width = 2 * d + (h + 2 * kv) * hd + 3 * inner
    activations = round(tokens * width * act_b + workload.batch * model.vocab_size * 4)
    total = weights + kv_cache + activations
    capacity = int(gpu.hbm_bytes * USABLE_FRACTION)
    return MemoryUse(weights, kv_cache, activations, total, capacity, total <= capacity)
