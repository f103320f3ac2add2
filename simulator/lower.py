"""Lower a model, a TP degree and a workload to the op list every rank runs (Megatron-style).

Per-rank shapes are written beside each op (``T`` tokens in the pass, ``d`` hidden size,
``h``/``kv`` heads per rank, ``hd`` head_dim, ``I`` MLP width per rank, ``V`` vocab per
rank). Column-parallel QKV and gate/up; row-parallel output projection and down
projection, each followed by an all-reduce; vocab-parallel embedding (all-reduce) and LM
head (all-gather of the logits).
"""

from __future__ import annotations

from dataclasses import replace

from models.spec import ModelSpec
from simulator import costs
from simulator.config import Options, Workload, ceil_div, dtype_bytes, kv_split, precision
from simulator.costs import Hardware, KernelCost
from simulator.kernel_table import KernelTable
from simulator.program import LAUNCH_COSTS, NO_LAUNCH_COST, CollectiveCall, LaunchCost, Op, Program


class _Builder:
    """Appends ops in program order; each op depends on the one before it by default."""

    def __init__(self, launch: LaunchCost) -> None:
        self.ops: list[Op] = []
        self.launch = launch

    def kernel(
        self, name: str, kind: str, layer: int, cost: KernelCost, detail: str, site: str = ""
    ) -> None:
        self.ops.append(
            Op(
                name=name,
                kind=kind,
                layer=layer,
                site=site,
                stream="compute",
                launch_s=self.launch.kernel_s,
                seconds=cost.seconds,
                flops=cost.flops,
                bytes=cost.bytes,
                category=cost.category,
                detail=detail,
                deps=self._prev(),
            )
        )

    def collective(self, op: str, site: str, layer: int, nbytes: int, tp: int) -> None:
        if tp == 1:
            return  # one rank: nothing to reduce or gather
        self.ops.append(
            Op(
                name=f"{site}.{op}",
                kind="collective",
                layer=layer,
                site=site,
                stream="comm",
                launch_s=self.launch.collective_s,
                seconds=0.0,
                flops=0.0,
                bytes=nbytes,
                category="communication",
                detail=f"{op} {nbytes} B over {tp} ranks",
                deps=self._prev(),
                collective=CollectiveCall(op, nbytes),
            )
        )

    def _prev(self) -> tuple[int, ...]:
        return (len(self.ops) - 1,) if self.ops else ()


def lower(
    model: ModelSpec,
    tp: int,
    workload: Workload,
    options: Options,
    hw: Hardware,
    table: KernelTable | None = None,
) -> Program:
    """The op list of one rank of a ``tp``-way group (every rank runs the same list).

    ``options.fused`` (default) lowers the norms as vLLM runs them for RMSNorm models: the
    residual add that precedes a norm is fused into it (``fused_add_rms_norm``: read x and
    the residual, write the new residual and the normed x, 4 tensors instead of 3 + 2, one
    kernel instead of two). SwiGLU is one kernel in both modes (``silu_and_mul``: read
    gate|up, write the product) and rotary stays its own kernel, as in vLLM. LayerNorm models
    keep separate adds (vLLM's LayerNorm models call the norm and the add apart).
    ``table`` (measured GEMM times) overrides the roofline of the GEMMs it matches.
    """
    prec = precision(options, model.dtype, hw.fp8_tensor_cores)
    act_b, w_b, in_b = dtype_bytes(prec.act), dtype_bytes(prec.weights), dtype_bytes(prec.gemm_in)
    kv_b = dtype_bytes(prec.kv)
    hw16 = replace(hw, peak_flops=hw.peak16_flops or hw.peak_flops)  # 16-bit GEMMs (lm_head)
    launch = NO_LAUNCH_COST if options.ideal else LAUNCH_COSTS[options.launch]
    fuse = options.fused and model.norm == "rmsnorm"
    b = _Builder(launch)

    d, hd = model.hidden_size, model.head_dim
    h = model.num_heads // tp  # query heads per rank
    kv, _ = kv_split(tp, model.num_kv_heads)  # KV heads per rank (replicated when tp > KV)
    inner = ceil_div(model.intermediate_size, tp)  # MLP width per rank (padded)
    vocab = ceil_div(model.vocab_size, tp)  # vocab rows per rank (padded)
    batch = workload.batch
    tokens = workload.tokens  # T: batch * prompt_len (prefill) or batch (decode)
    L = model.num_layers
    hidden_bytes = round(tokens * d * act_b)  # one [T, d] activation

    def ew(name: str, layer: int, nbytes: float, flops: float, shape: str) -> None:
        b.kernel(name, "elementwise", layer, costs.elementwise(nbytes, flops, hw), shape)

    def norm(name: str, layer: int, rows: int, *, add: bool = False) -> None:
        if add:  # fused residual add + norm: read x and residual, write both [rows, d]
            shape = f"[{rows}, {d}] + residual"
            ew(name, layer, 4 * rows * d * act_b + d * act_b, 5.0 * rows * d, shape)
        else:  # read x [rows, d], write y [rows, d], read the weight [d]
            ew(name, layer, 2 * rows * d * act_b + d * act_b, 4.0 * rows * d, f"[{rows}, {d}]")

    def residual(layer: int) -> None:  # a + b -> c, [T, d]
        ew("residual", layer, 3 * hidden_bytes, tokens * d, f"[{tokens}, {d}]")

    def gemm(name: str, layer: int, m: int, n: int, k: int, site: str = "") -> None:
        linear = name != "lm_head"  # the LM head stays 16-bit in fp8 checkpoints
        g = hw if linear else hw16
        a_in, w, wdtype = (in_b, w_b, prec.weights) if linear else (act_b, act_b, prec.act)

        def price(rows: int) -> KernelCost:
            return costs.gemm(rows, n, k, g, act_bytes=a_in, w_bytes=w, out_bytes=act_b)

        cost = price(m)
        detail = f"[{m}, {k}] x [{k}, {n}]"
        if table is not None:
            t = table.gemm_seconds(name, hw.name, wdtype, m, n, k, lambda r: price(r).seconds)
            if t is not None:
                cost = replace(cost, seconds=t)
                detail += " (kernel table)"
        b.kernel(name, "gemm", layer, cost, detail, site)

    # Embedding: each rank gathers the rows of its vocab shard, zeros elsewhere, then sums.
    ew("embedding", -1, 2 * hidden_bytes, 0.0, f"[{tokens}, {d}] from [{vocab}, {d}]")
    b.collective("all_reduce", "embedding", -1, hidden_bytes, tp)

    for layer in range(L):
        norm("input_norm", layer, tokens, add=fuse and layer > 0)  # x: [T, d]
        gemm("qkv_proj", layer, tokens, (h + 2 * kv) * hd, d)  # qkv: [T, (h + 2kv) * hd]
        if not model.learned_position_embeddings:
            # rotary on q and k: read and write [T, (h + kv) * hd]
            rot = tokens * (h + kv) * hd
            ew("rotary", layer, 2 * rot * act_b, 6.0 * rot, f"[{tokens}, {(h + kv) * hd}]")
        if workload.phase == "prefill":
            cost = costs.attention_prefill(
                batch, workload.prompt_len, h, kv, hd, hw, act_bytes=act_b, kv_bytes=kv_b
            )
            shape = f"causal [{batch}, {h}/{kv} heads, {workload.prompt_len}, {hd}]"
        else:
            cost = costs.attention_decode(
                batch, workload.context_len, h, kv, hd, hw, act_bytes=act_b, kv_bytes=kv_b
            )
            shape = f"decode [{batch}, {h}/{kv} heads, ctx {workload.context_len}, {hd}]"
        b.kernel("attn", "attention", layer, cost, shape)  # o: [T, h * hd]
        gemm("o_proj", layer, tokens, d, h * hd, site="attn_out")  # partial sums [T, d]
        b.collective("all_reduce", "attn_out", layer, hidden_bytes, tp)
        if not fuse:
            residual(layer)
        norm("post_attn_norm", layer, tokens, add=fuse)
        if model.gated_mlp:
            gemm("mlp_up", layer, tokens, 2 * inner, d)  # gate|up: [T, 2I]
            act = tokens * inner  # silu(gate) * up -> [T, I]
            ew("act", layer, 3 * act * act_b, 5.0 * act, f"[{tokens}, {2 * inner}] -> [{inner}]")
        else:
            gemm("mlp_up", layer, tokens, inner, d)  # up: [T, I]
            act = tokens * inner
            ew("act", layer, 2 * act * act_b, 8.0 * act, f"[{tokens}, {inner}]")
        gemm("mlp_down", layer, tokens, d, inner, site="mlp_out")  # partial sums [T, d]
        b.collective("all_reduce", "mlp_out", layer, hidden_bytes, tp)
        if not fuse:
            residual(layer)  # fused: added by the next norm

    # Head: logits only for the last token of each sequence.
    norm("final_norm", L, tokens, add=fuse)
    gemm("lm_head", L, batch, vocab, d, site="lm_head")  # logits shard [batch, V/tp]
    b.collective("all_gather", "lm_head", L, round(batch * vocab * act_b) * tp, tp)

    return Program(ops=tuple(b.ops), replay_s=launch.replay_s)
