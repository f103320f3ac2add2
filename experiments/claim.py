"""Is a claimed tokens/s possible? A lower bound on the step time from first principles.

The bound is the largest of three terms, each a time no real system can beat:

- memory: the bytes each GPU must read from HBM in one pass (its shard of the linear weights
  and of the LM head, plus the KV cache its attention reads, a sliding-window layer's at
  most its window) / the peak HBM bandwidth; of a mixture-of-experts layer's routed experts
  (tensor-parallel: 1/tp of each) only the k one token picks, the least any routing reads;
- compute: the FLOPs each GPU must do (linear layers, of a MoE layer the k experts each
  token uses, LM head, attention) / the dense peak of the math dtype;
- communication: the bytes each GPU must move for the two all-reduces per layer (Megatron
  TP) over its links' raw bandwidth. Without in-switch reduction a ring, tree or any other
  algorithm makes some GPU send at least 2(p-1)/p x n bytes per all-reduce of n bytes; with
  NVLink SHARP (in-switch reduction) every GPU still receives at least n. A group spanning
  hosts also needs n bytes into each host per all-reduce (even with in-network reduction)
  over the raw capacity of the links into that host's GPUs (a max-flow).

Everything uses peaks, not achievable figures, and leaves out what a clever kernel might
avoid (embedding table reads, activations, norms, launches, latencies), so the bound holds
for any implementation of the stated model, layout and dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tpsim.core.comm.group import tp_group
from tpsim.core.config import Layout, Options, Workload, tp_problem
from tpsim.core.errors import ConfigError
from tpsim.core.kernels.attention import causal_pairs, chunked_pairs
from tpsim.core.lowering.shard import shard
from tpsim.core.memory import group_params_of_layer, linear_params_per_gpu, memory_per_gpu
from tpsim.core.precision import dtype_bytes, run_precision
from tpsim.models.catalog import get_model
from tpsim.models.spec import ModelSpec
from tpsim.topologies.graph import TopologyGraph
from tpsim.topologies.io import get_topology
from tpsim.topologies.routing import max_inflow

TERMS = ("memory", "compute", "communication")


@dataclass(frozen=True)
class Bound:
    """The lower bound on one pass and what it is made of (SI units)."""

    tokens: int  # tokens the pass produces: batch (decode) or batch x prompt_len (prefill)
    terms_s: dict[str, float]  # memory, compute, communication
    fits: bool  # weights + KV cache fit in the whole HBM of one GPU
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def step_s(self) -> float:
        return max(self.terms_s.values())

    @property
    def binding(self) -> str:
        return max(TERMS, key=lambda t: self.terms_s[t])

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_s


def lower_bound(
    model: str | ModelSpec,
    topology: str | TopologyGraph,
    layout: Layout | int,
    workload: Workload,
    *,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    nodes: int = 1,
) -> Bound:
    """The fastest one pass of ``model`` could possibly run on this layout (a model and a
    topology by name, or as loaded: a topology's graph already spans its nodes)."""
    spec = model if isinstance(model, ModelSpec) else get_model(model)
    graph = topology if isinstance(topology, TopologyGraph) else get_topology(topology, nodes)
    layout = Layout(layout) if isinstance(layout, int) else layout
    tp = layout.tp
    if spec.is_mla:  # its KV bytes and attention FLOPs differ
        raise ConfigError(f"{spec.name}: the claim bound does not model latent attention yet")
    problem = tp_problem(tp, spec.num_heads, spec.num_kv_heads)
    if problem:
        raise ConfigError(f"tp={tp} {problem} of {spec.name}")
    group = tp_group(graph, tp, layout.gpus_per_node)
    gpu = group.gpu
    # the ideal engine's precision: without --kv-dtype a quantised run's cache is fp8 (the
    # smallest any engine keeps it), so the bound holds whichever engine serves it
    options = Options(dtype=dtype, kv_dtype=kv_dtype, engine="ideal")
    prec = run_precision(options, spec, gpu)
    d, hd, layers = spec.hidden_size, spec.head_dim, spec.num_layers
    split = shard(spec, tp)
    heads, kv_heads, vocab = split.heads, split.kv_heads, split.vocab
    act_b = dtype_bytes(prec.act)

    # memory: every weight of the linear layers and the LM head is read once per pass; of
    # a MoE layer's routed experts (each split 1/tp wide) at least the k that one token
    # picks, whatever the routing (the same k for every token at best).
    linear = linear_params_per_gpu(spec, tp)
    per_expert = 3 * d * split.expert_width  # one routed expert's slice on one GPU
    routed_all = spec.num_moe_layers * spec.num_experts * per_expert
    routed_least = spec.num_moe_layers * spec.experts_per_token * per_expert
    expert_b = dtype_bytes(prec.experts or prec.weights)
    # the GEMMs the checkpoint keeps 16-bit: read in 16 bits, run at the 16-bit peak
    kept = kept_experts = 0
    for i in range(layers) if prec.kept else ():
        groups = group_params_of_layer(spec, tp, i)
        kept += sum(groups[g] for g in prec.kept.groups_of(i) if g != "experts")
        if "experts" in prec.kept.groups_of(i):
            kept_experts += spec.experts_per_token * per_expert
    weight_bytes = (
        (linear - routed_all - kept) * dtype_bytes(prec.weights)
        + (routed_least - kept_experts) * expert_b
        + (kept + kept_experts) * act_b
        + vocab * d * act_b
    )
    decode = workload.phase == "decode"
    cached = workload.context_len - 1 if decode else 0  # the new token's K and V are computed
    # a sliding-window layer reads (and keeps) at most its window of keys, a chunked layer
    # the new token's chunk's cached ones
    keys = sum(
        spec.attended(i, workload.context_len) - 1
        if decode and spec.is_chunked_layer(i)
        else spec.attended(i, cached)
        for i in range(layers)
    )
    kv_bytes = workload.batch * keys * kv_heads * hd * 2 * dtype_bytes(prec.kv)
    memory_s = (weight_bytes + kv_bytes) / gpu.hbm_Bps

    # compute: 2 FLOPs per weight a token uses (of a MoE layer: the k experts it picks);
    # logits for the last token of each sequence; attention QK^T and PV (4 x head_dim per
    # query-key pair), causal in prefill, banded on a sliding-window layer.
    tokens = workload.tokens
    s = workload.prompt_len
    pairs: float
    if decode:
        pairs = workload.batch * sum(spec.attended(i, workload.context_len) for i in range(layers))
    else:
        windows = [spec.local_span(i) for i in range(layers)]
        pairs = workload.batch * sum(
            chunked_pairs(s, c) if c else causal_pairs(s, w) for w, c in windows
        )
    attention_flops = 4.0 * heads * hd * pairs
    kept_flops = 2.0 * tokens * (kept + kept_experts)
    linear_flops = 2.0 * tokens * (linear - routed_all + routed_least) - kept_flops
    head_flops = 2.0 * workload.batch * vocab * d
    math_peak = gpu.fp8_flops if prec.math == "fp8" and gpu.fp8_flops else gpu.bf16_flops
    if prec.math == "fp4" and gpu.fp4_flops:
        math_peak = gpu.fp4_flops
    fp8_attention = prec.kv == "fp8" and gpu.fp8_flops
    attn_peak = gpu.fp8_flops if fp8_attention and gpu.fp8_flops else gpu.bf16_flops
    compute_s = (
        linear_flops / math_peak
        + kept_flops / gpu.bf16_flops
        + (attention_flops + head_flops) / attn_peak
    )

    comm = _communication(graph, group.gpu_ranks, group.routes, tp, tokens * d * act_b, layers)
    mem = memory_per_gpu(spec, tp, workload, options, gpu)
    resident = mem.weights_bytes_per_gpu + mem.kv_cache_bytes_per_gpu
    return Bound(
        tokens=tokens if not decode else workload.batch,
        terms_s={"memory": memory_s, "compute": compute_s, "communication": comm.pop("time_s")},
        fits=resident <= gpu.hbm_bytes,
        details={
            "gpu": gpu.name,
            "dtype": prec.weights,
            "math": prec.math,
            "weight_bytes_read_per_gpu": round(weight_bytes),
            "kv_bytes_read_per_gpu": round(kv_bytes),
            "hbm_peak_Bps": gpu.hbm_Bps,
            "flops_per_gpu": linear_flops + kept_flops + attention_flops + head_flops,
            "peak_flops": math_peak,
            "resident_bytes_per_gpu": resident,
            "hbm_bytes": gpu.hbm_bytes,
            **comm,
        },
    )


def _communication(
    graph: TopologyGraph, gpu_ranks: tuple[int, ...], routes: Any, tp: int, n: float, layers: int
) -> dict[str, Any]:
    """Least time for 2 all-reduces of ``n`` bytes per layer, and how it is derived."""
    if tp == 1:
        return {"time_s": 0.0, "allreduces": 0, "allreduce_bytes": n}
    nodes = [routes.node(g) for g in gpu_ranks]
    in_switch = bool(graph.graph.get("nvls"))
    if in_switch:  # every GPU must receive n bytes
        per_gpu = n
        link_Bps = min(
            sum(graph.edges[u, v]["bandwidth_Bps"] for u, v in graph.in_edges(x)) for x in nodes
        )
    else:  # some GPU must send 2(p-1)/p n bytes
        per_gpu = 2 * (tp - 1) / tp * n
        link_Bps = max(
            sum(graph.edges[u, v]["bandwidth_Bps"] for u, v in graph.out_edges(x)) for x in nodes
        )
    per_allreduce = per_gpu / link_Bps
    hosts: dict[int, list[str]] = {}
    for g, node in zip(gpu_ranks, nodes, strict=True):
        hosts.setdefault(routes.host(g), []).append(node)
    host_Bps = 0.0
    if len(hosts) > 1:
        host_Bps = min(
            max_inflow(graph, [x for x in nodes if x not in inside], inside)
            for inside in hosts.values()
        )
        per_allreduce = max(per_allreduce, n / host_Bps)
    count = 2 * layers
    return {
        "time_s": count * per_allreduce,
        "allreduces": count,
        "allreduce_bytes": n,
        "bytes_per_gpu_per_allreduce": per_gpu,
        "in_switch_reduction": in_switch,
        "gpu_link_Bps": link_Bps,
        "host_ingress_Bps": host_Bps,
    }


@dataclass(frozen=True)
class Verdict:
    verdict: str  # "impossible" or "plausible"
    claimed_tokens_per_s: float
    bound: Bound

    @property
    def ratio(self) -> float:
        """Claimed over the bound: above 1 is impossible."""
        return self.claimed_tokens_per_s / self.bound.tokens_per_s

    def to_dict(self) -> dict[str, Any]:
        b = self.bound
        return {
            "verdict": self.verdict,
            "claimed_tokens_per_s": self.claimed_tokens_per_s,
            "bound_tokens_per_s": b.tokens_per_s,
            "ratio": self.ratio,
            "bound_step_s": b.step_s,
            "binding": b.binding,
            "terms_s": b.terms_s,
            "fits": b.fits,
            "details": b.details,
        }


#: Claims outside these are no throughput of any deployment (a denormal, 10**30 tokens/s).
MIN_CLAIM, MAX_CLAIM = 1e-6, 1e15


def check_claim(claimed_tokens_per_s: float, bound: Bound) -> Verdict:
    """``impossible`` when the claim beats the bound or the weights do not fit in HBM."""
    if not (math.isfinite(claimed_tokens_per_s) and claimed_tokens_per_s > 0):
        raise ConfigError(
            f"tokens_per_s={claimed_tokens_per_s!r}: must be a finite positive number"
        )
    if not MIN_CLAIM <= claimed_tokens_per_s <= MAX_CLAIM:
        raise ConfigError(
            f"tokens_per_s={claimed_tokens_per_s!r}: implausible claim "
            f"(between {MIN_CLAIM:g} and {MAX_CLAIM:g} tokens/s)"
        )
    possible = bound.fits and claimed_tokens_per_s <= bound.tokens_per_s
    return Verdict("plausible" if possible else "impossible", claimed_tokens_per_s, bound)


def verdict_text(v: Verdict) -> str:
    """The verdict line, then the bound and each term with the numbers it is made of."""
    b, d = v.bound, v.bound.details
    gb = 1e9
    why = "" if b.fits else "; the weights and KV cache do not fit in one GPU's HBM"
    lines = [
        f"{v.verdict}: {v.claimed_tokens_per_s:,.6g} tokens/s claimed; at most "
        f"{b.tokens_per_s:,.1f} tokens/s possible (claim / bound = {v.ratio:.3g}x){why}",
        f"  lower bound on one pass: {b.step_s * 1e3:.4g} ms, set by {b.binding}",
    ]
    if not b.fits:
        lines.append(
            f"  weights + KV cache: {d['resident_bytes_per_gpu'] / gb:.1f} GB per GPU, "
            f"HBM {d['hbm_bytes'] / gb:.1f} GB"
        )
    weights, kv = d["weight_bytes_read_per_gpu"] / gb, d["kv_bytes_read_per_gpu"] / gb
    how = {
        "memory": f"weights read {weights:.2f} GB + KV cache {kv:.3f} GB per GPU / "
        f"{d['hbm_peak_Bps'] / 1e12:.2f} TB/s peak HBM",
        "compute": f"{d['flops_per_gpu'] / 1e9:.4g} GFLOP per GPU / "
        f"{d['peak_flops'] / 1e12:.0f} TFLOP/s {d.get('math', d['dtype'])} peak",
        "communication": "TP 1: no all-reduce",
    }
    if d["allreduces"]:
        moved = "received (in-switch reduction)" if d["in_switch_reduction"] else "sent"
        how["communication"] = (
            f"{d['allreduces']} all-reduces x {d['bytes_per_gpu_per_allreduce'] / 1e3:.4g} kB "
            f"{moved} per GPU at {d['gpu_link_Bps'] / gb:.0f} GB/s"
        )
        if d["host_ingress_Bps"]:
            how["communication"] += (
                f"; {d['allreduce_bytes'] / 1e3:.4g} kB into each host at "
                f"{d['host_ingress_Bps'] / gb:.0f} GB/s"
            )
    for term in TERMS:
        lines.append(f"    {term:<13} {b.terms_s[term] * 1e3:10.4g} ms  ({how[term]})")
    return "\n".join(lines)
