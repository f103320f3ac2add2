"""Lower a model, a TP degree and a workload to the op list every rank runs (Megatron-style).

Per-rank shapes are written beside each op (``T`` tokens in the pass, ``d`` hidden size,
``h``/``kv`` heads per rank, ``hd`` head_dim, ``I`` MLP width per rank, ``V`` vocab per
rank). Column-parallel QKV and gate/up; row-parallel output projection and down
projection, each followed by an all-reduce; vocab-parallel embedding (all-reduce) and LM
head (all-gather of the logits).

With sequence parallelism (Megatron-LM's ``--sequence-parallel``) each all-reduce becomes
a reduce-scatter, the norms and residual adds run on ``T/tp`` tokens, and an all-gather
brings the full sequence back before each column-parallel GEMM (sites ``attn_in``,
``mlp_in``, ``lm_head_in``). Overlap modes reshape the op list; the engine does the rest:
``chunked`` splits each row-parallel GEMM (and with sequence parallelism each
column-parallel one) along the tokens so that one chunk's collective runs while the next
chunk computes; ``microbatch`` interleaves two halves of the batch layer by layer, so one
half's collective hides behind the other half's compute.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tpsim.core import costs
from tpsim.core.config import (
    ConfigError,
    Options,
    Workload,
    ceil_div,
    dtype_bytes,
    precision,
)
from tpsim.core.costs import Hardware, KernelCost
from tpsim.core.kernel_table import KernelTable
from tpsim.core.program import LAUNCH_COSTS, NO_LAUNCH_COST, CollectiveCall, Op, Program
from tpsim.core.shard import shard
from tpsim.models.spec import ModelSpec


@dataclass(frozen=True)
class _Slice:
    """A micro-batch: ``batch`` sequences, ``tokens`` tokens in the pass."""

    index: int
    batch: int
    tokens: int


class _Lowering:
    def __init__(
        self,
        model: ModelSpec,
        tp: int,
        workload: Workload,
        options: Options,
        hw: Hardware,
        table: KernelTable | None,
    ) -> None:
        self.m, self.tp, self.w = model, tp, workload
        self.hw, self.table = hw, table
        prec = self.prec = precision(options, model.dtype, hw.fp8_tensor_cores)
        self.act_b, self.w_b = dtype_bytes(prec.act), dtype_bytes(prec.weights)
        self.in_b, self.kv_b = dtype_bytes(prec.gemm_in), dtype_bytes(prec.kv)
        self.hw16 = replace(hw, peak_flops=hw.peak16_flops or hw.peak_flops)  # 16-bit lm_head
        self.launch = NO_LAUNCH_COST if options.ideal else LAUNCH_COSTS[options.launch]
        compiled = options.launch == "compiled"
        self.fuse = (options.fused or compiled) and model.norm == "rmsnorm"
        self.rotary_in_attention = compiled  # Inductor folds rotary into the attention prologue
        self.sp = options.sequence_parallel and tp > 1
        self.chunks = 1
        if options.overlap == "chunked":
            self.chunks = options.overlap_chunks or tp
        self.d, self.hd = model.hidden_size, model.head_dim
        split = shard(model, tp)
        self.h = split.heads  # query heads per rank
        self.kv = split.kv_heads  # KV heads per rank (replicated)
        self.inner = split.mlp_width  # MLP width per rank (padded)
        self.vocab = split.vocab  # vocab rows per rank (padded)
        self.ops: list[Op] = []
        self.last: dict[int, int] = {}  # micro-batch -> index of its latest op

    # ------------------------------------------------------------------ op emission
    def _emit(self, mb: _Slice, op: Op, deps: tuple[int, ...] | None = None) -> int:
        if deps is None:
            deps = (self.last[mb.index],) if mb.index in self.last else ()
        self.ops.append(replace(op, deps=deps))
        self.last[mb.index] = len(self.ops) - 1
        return self.last[mb.index]

    def kernel(
        self,
        mb: _Slice,
        name: str,
        kind: str,
        layer: int,
        cost: KernelCost,
        detail: str,
        site: str = "",
        deps: tuple[int, ...] | None = None,
    ) -> int:
        op = Op(
            name,
            kind,
            layer,
            site,
            "compute",
            self.launch.kernel_s,
            cost.seconds + self.launch.gpu_gap_s,  # the kernel's slot includes its dispatch
            cost.flops,
            cost.bytes,
            cost.category,
            detail,
            (),
        )
        return self._emit(mb, op, deps)

    def collective(
        self,
        mb: _Slice,
        op: str,
        site: str,
        layer: int,
        nbytes: int,
        deps: tuple[int, ...] | None = None,
        part: str = "",
    ) -> int | None:
        if self.tp == 1:
            return None  # one rank: nothing to reduce or gather
        name = f"{site}.{op}{part}"
        o = Op(
            name,
            "collective",
            layer,
            site,
            "comm",
            self.launch.collective_s,
            0.0,
            0.0,
            nbytes,
            "communication",
            f"{op} {nbytes} B over {self.tp} ranks",
            (),
            CollectiveCall(op, nbytes),
        )
        return self._emit(mb, o, deps)

    def ew(
        self, mb: _Slice, name: str, layer: int, nbytes: float, flops: float, shape: str
    ) -> None:
        self.kernel(
            mb, name, "elementwise", layer, costs.elementwise(nbytes, flops, self.hw), shape
        )

    def gemm_cost(self, name: str, m: int, n: int, k: int) -> tuple[KernelCost, str]:
        linear = name != "lm_head"  # the LM head stays 16-bit in fp8 checkpoints
        g = self.hw if linear else self.hw16
        a_in, w, wdtype = (
            (self.in_b, self.w_b, self.prec.weights)
            if linear
            else (self.act_b, self.act_b, self.prec.act)
        )

        def price(rows: int) -> KernelCost:
            return costs.gemm(rows, n, k, g, act_bytes=a_in, w_bytes=w, out_bytes=self.act_b)

        cost = price(m)
        detail = f"[{m}, {k}] x [{k}, {n}]"
        if self.table is not None:
            t = self.table.gemm_seconds(
                name, self.hw.name, wdtype, m, n, k, lambda r: price(r).seconds
            )
            if t is not None:
                cost = replace(cost, seconds=t)
                detail += " (kernel table)"
        return cost, detail

    # ------------------------------------------------------------------ building blocks
    def rows(self, mb: _Slice) -> int:
        """Tokens of the residual stream a rank holds: T, or T/tp with sequence parallelism."""
        return ceil_div(mb.tokens, self.tp) if self.sp else mb.tokens

    def norm(self, mb: _Slice, name: str, layer: int, *, add: bool = False) -> None:
        rows, d, b = self.rows(mb), self.d, self.act_b
        if add:  # fused residual add + norm: read x and residual, write both [rows, d]
            self.ew(
                mb,
                name,
                layer,
                4 * rows * d * b + d * b,
                5.0 * rows * d,
                f"[{rows}, {d}] + residual",
            )
        else:  # read x [rows, d], write y [rows, d], read the weight [d]
            self.ew(mb, name, layer, 2 * rows * d * b + d * b, 4.0 * rows * d, f"[{rows}, {d}]")

    def residual(self, mb: _Slice, layer: int) -> None:  # a + b -> c, [rows, d]
        rows = self.rows(mb)
        self.ew(
            mb,
            "residual",
            layer,
            3 * rows * self.d * self.act_b,
            rows * self.d,
            f"[{rows}, {self.d}]",
        )

    def column_gemm(self, mb: _Slice, name: str, layer: int, n: int, site_in: str) -> None:
        """A column-parallel GEMM [T, d] x [d, n]; with sequence parallelism the input is
        all-gathered first (in chunks that overlap the GEMM when chunked)."""
        d, tokens = self.d, mb.tokens
        if not self.sp:
            cost, detail = self.gemm_cost(name, tokens, n, d)
            self.kernel(mb, name, "gemm", layer, cost, detail)
            return
        full = round(tokens * d * self.act_b)
        self._split(mb, name, layer, n, d, full, "all_gather", site_in, gather_first=True)

    def row_gemm(self, mb: _Slice, name: str, layer: int, k: int, site: str) -> None:
        """A row-parallel GEMM [T, k] x [k, d] and the collective that sums its partials."""
        full = round(mb.tokens * self.d * self.act_b)
        op = "reduce_scatter" if self.sp else "all_reduce"
        self._split(mb, name, layer, self.d, k, full, op, site, gather_first=False)

    def _split(
        self,
        mb: _Slice,
        name: str,
        layer: int,
        n: int,
        k: int,
        nbytes: int,
        coll: str,
        site: str,
        *,
        gather_first: bool,
    ) -> None:
        """GEMM + collective, in ``chunks`` pieces along the tokens when overlap is chunked.
        Row-parallel: GEMM piece i, then its collective, which runs while piece i + 1
        computes. Column-parallel with sequence parallelism: all-gather piece i, then GEMM
        piece i, while piece i + 1 is gathered. Streams run in order, so the last op emitted
        finishing means every piece has."""
        parts = max(1, min(self.chunks, mb.tokens)) if self.tp > 1 else 1
        rows = [mb.tokens // parts + (1 if j < mb.tokens % parts else 0) for j in range(parts)]
        sizes = [nbytes * r // mb.tokens for r in rows]
        sizes[-1] += nbytes - sum(sizes)
        entry = (self.last[mb.index],) if mb.index in self.last else ()
        prev: tuple[int, ...] = entry
        for j, (r, size) in enumerate(zip(rows, sizes, strict=True)):
            part = f"[{j}/{parts}]" if parts > 1 else ""
            cost, detail = self.gemm_cost(name, r, n, k)
            if gather_first:
                g = self.collective(mb, coll, site, layer, size, deps=entry, part=part)
                self.kernel(
                    mb, name + part, "gemm", layer, cost, detail, deps=entry if g is None else (g,)
                )
            else:
                gi = self.kernel(mb, name + part, "gemm", layer, cost, detail, site, deps=prev)
                prev = (gi,)
                self.collective(mb, coll, site, layer, size, deps=(gi,), part=part)

    # ------------------------------------------------------------------ the model
    def embedding(self, mb: _Slice) -> None:
        # each rank gathers the rows of its vocab shard, zeros elsewhere, then sums
        tokens, d = mb.tokens, self.d
        full = round(tokens * d * self.act_b)
        self.ew(mb, "embedding", -1, 2 * full, 0.0, f"[{tokens}, {d}] from [{self.vocab}, {d}]")
        self.collective(mb, "reduce_scatter" if self.sp else "all_reduce", "embedding", -1, full)

    def attention_block(self, mb: _Slice, layer: int) -> None:
        m, h, kv, hd = self.m, self.h, self.kv, self.hd
        self.norm(mb, "input_norm", layer, add=self.fuse and layer > 0)  # x: [T, d]
        self.column_gemm(mb, "qkv_proj", layer, (h + 2 * kv) * hd, "attn_in")  # [T, (h+2kv)hd]
        tokens = mb.tokens
        if not m.learned_position_embeddings and not self.rotary_in_attention:
            rot = tokens * (h + kv) * hd  # rotary on q and k: read and write [T, (h + kv) hd]
            self.ew(
                mb, "rotary", layer, 2 * rot * self.act_b, 6.0 * rot, f"[{tokens}, {(h + kv) * hd}]"
            )
        if self.w.phase == "prefill":
            prompt = self.w.prompt_len
            cost = costs.attention_prefill(
                mb.batch, prompt, h, kv, hd, self.hw, act_bytes=self.act_b, kv_bytes=self.kv_b
            )
            shape = f"causal [{mb.batch}, {h}/{kv} heads, {prompt}, {hd}]"
        else:
            ctx = self.w.context_len
            cost = costs.attention_decode(
                mb.batch, ctx, h, kv, hd, self.hw, act_bytes=self.act_b, kv_bytes=self.kv_b
            )
            shape = f"decode [{mb.batch}, {h}/{kv} heads, ctx {ctx}, {hd}]"
        self.kernel(mb, "attn", "attention", layer, cost, shape)  # o: [T, h hd]
        self.row_gemm(mb, "o_proj", layer, h * hd, "attn_out")  # partial sums [T, d]

    def mlp_block(self, mb: _Slice, layer: int) -> None:
        if not self.fuse:
            self.residual(mb, layer)
        self.norm(mb, "post_attn_norm", layer, add=self.fuse)
        inner, tokens = self.inner, mb.tokens
        width = 2 * inner if self.m.gated_mlp else inner
        self.column_gemm(mb, "mlp_up", layer, width, "mlp_in")  # gate|up: [T, 2I] or [T, I]
        act = tokens * inner
        if self.m.gated_mlp:  # silu(gate) * up -> [T, I]
            self.ew(
                mb,
                "act",
                layer,
                3 * act * self.act_b,
                5.0 * act,
                f"[{tokens}, {2 * inner}] -> [{inner}]",
            )
        else:
            self.ew(mb, "act", layer, 2 * act * self.act_b, 8.0 * act, f"[{tokens}, {inner}]")
        self.row_gemm(mb, "mlp_down", layer, inner, "mlp_out")  # partial sums [T, d]

    def close_layer(self, mb: _Slice, layer: int) -> None:
        if not self.fuse:  # fused: the next norm adds the residual
            self.residual(mb, layer)

    def head(self, mb: _Slice) -> None:
        L, d = self.m.num_layers, self.d
        self.norm(mb, "final_norm", L, add=self.fuse)
        if self.sp:  # the last token of each sequence, from whichever rank holds it
            self.collective(mb, "all_gather", "lm_head_in", L, round(mb.batch * d * self.act_b))
        cost, detail = self.gemm_cost("lm_head", mb.batch, self.vocab, d)
        self.kernel(mb, "lm_head", "gemm", L, cost, detail, "lm_head")  # logits [b, V/tp]
        self.collective(
            mb, "all_gather", "lm_head", L, round(mb.batch * self.vocab * self.act_b) * self.tp
        )


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
    gate|up, write the product) and rotary stays its own kernel, as in vLLM, except with
    ``launch="compiled"``, where the rotary embedding is folded into the attention kernel's
    prologue. LayerNorm models keep separate adds (vLLM's LayerNorm models call the norm
    and the add apart). ``table`` (measured GEMM times) overrides the GEMMs it matches.
    """
    lo = _Lowering(model, tp, workload, options, hw, table)
    slices = [_Slice(0, workload.batch, workload.tokens)]
    if options.overlap == "microbatch":
        if workload.batch < 2:
            raise ConfigError("overlap='microbatch': needs batch >= 2 to split in two")
        per_seq = workload.tokens // workload.batch
        first = ceil_div(workload.batch, 2)
        slices = [
            _Slice(0, first, first * per_seq),
            _Slice(1, workload.batch - first, (workload.batch - first) * per_seq),
        ]
    for mb in slices:
        lo.embedding(mb)
    for layer in range(model.num_layers):
        for block in (lo.attention_block, lo.mlp_block, lo.close_layer):
            for mb in slices:
                block(mb, layer)
    for mb in slices:
        lo.head(mb)
    return Program(ops=tuple(lo.ops), replay_s=lo.launch.replay_s)
