"""Lower a model, a TP degree and a workload to the programs of a TP group (Megatron-style).

This module holds the model's block structure: embedding, attention block, MLP block and
head, each written per rank with its shapes. Kernel prices come from
:class:`~tpsim.core.kernels.pricing.Pricing`, ops are built by
:class:`~tpsim.core.lowering.opbuild.OpBuilder`
and per-rank sizes from :func:`~tpsim.core.lowering.shard.shard`.

Per-rank shapes are written beside each op (``T`` tokens in the pass, ``b`` sequences,
``d`` hidden size, ``h``/``kv`` heads per rank, ``hd`` head_dim, ``I`` MLP width per rank,
``V`` vocab rows per rank). Column-parallel QKV and gate/up; row-parallel output projection
and down projection, each followed by an all-reduce; vocab-parallel embedding (all-reduce)
and LM head (all-gather of the logits).

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

from dataclasses import replace

from tpsim.core.config import Options, Workload, ceil_div
from tpsim.core.kernels.costs import Hardware
from tpsim.core.kernels.kernel_table import KernelTable
from tpsim.core.kernels.pricing import Pricing
from tpsim.core.lowering import host
from tpsim.core.lowering.experts import ExpertSplit, expert_split
from tpsim.core.lowering.gdn import GatedDeltaNet
from tpsim.core.lowering.mla import LatentAttention
from tpsim.core.lowering.moe_block import ExpertBlock
from tpsim.core.lowering.opbuild import OpBuilder
from tpsim.core.lowering.shard import shard
from tpsim.core.lowering.step import Slice, batch_slices, passes, step_pricing
from tpsim.core.program import Program, Programs
from tpsim.models.spec import ModelSpec

#: Bytes a token adds to MiniMax-M2's q/k-norm all-reduce: its q and its k mean of squares,
#: fp32 ([T, 2]: vLLM's MiniMaxText01RMSNormTP.forward_qk concatenates q_var and k_var
#: before tensor_model_parallel_all_reduce; SGLang's rms_sumsq_serial pads the 2T floats
#: to a multiple of 4, at most 12 bytes more)
QK_VAR_BYTES = 8


class _Megatron(LatentAttention, ExpertBlock, GatedDeltaNet):
    """The Megatron TP split of one transformer, per rank, emitted into an OpBuilder."""

    def __init__(
        self,
        model: ModelSpec,
        tp: int,
        workload: Workload,
        options: Options,
        price: Pricing,
        build: OpBuilder,
        experts: ExpertSplit | None = None,
        ep_rank: int = 0,
    ) -> None:
        self.m, self.tp, self.w = model, tp, workload
        self.xs = experts or expert_split(model, tp, 1, 1, tp, options.expert_skew)
        self.ep_rank = ep_rank  # this rank's expert-parallel rank (its share of the load)
        self.a2a = options.moe_a2a
        self.price, self.build = price, build
        self.act_b = price.act_b
        engine = options.calibration.engine
        compiled = options.launch == "compiled" or engine.compiled
        self.fuse = (options.fused or compiled) and model.norm == "rmsnorm"
        self.rotary_in_attention = compiled  # Inductor folds rotary into the attention prologue
        self.sp = options.sequence_parallel and tp > 1
        self.chunks = 1
        if options.overlap == "chunked":
            # default: the TP degree, at most 4 pieces (each piece is its own NCCL call and
            # pays the protocol's pipeline fill again: finer pieces lose what they overlap)
            self.chunks = options.overlap_chunks or min(tp, 4)
        # all-reduces up to this size also add the residual and normalise (TensorRT-LLM)
        self.ar_norm_max = 0
        if (engine.allreduce_fusion == "residual_rms_norm" and self.fuse and not self.sp
                and self.chunks == 1
                and options.collective_algo in ("auto", "oneshot", "twoshot")):  # fmt: skip
            # the engine's custom kernels' own limit at this many ranks on this GPU
            self.ar_norm_max = options.calibration.collectives.custom_max(price.hw.arch, tp)
        self.d, self.hd = model.hidden_size, model.head_dim
        split = shard(model, tp, self.xs)
        self.h = split.heads  # query heads per rank: heads / tp
        self.kv = split.kv_heads  # KV heads per rank (replicated when tp exceeds them)
        self.inner = split.mlp_width  # I: MLP width per rank (padded)
        self.vocab = split.vocab  # V: vocab rows per rank (padded)
        self.expert = split.expert_width  # Im: each routed expert's width per rank
        self.expert_d = split.expert_hidden  # the hidden size the routed experts take
        # DeepEP's low-latency buffer (tokens a rank) and whether the engine chunks above it
        self.ll_cap, self.ll_chunked = engine.deepep_ll_tokens, engine.deepep_ll_chunked
        self.engine_name = engine.name
        self.shared = split.shared_width  # Is: the shared experts' width per rank
        assert self.h * tp == model.num_heads

    def next_pass(self, workload: Workload, options: Options) -> _Megatron:
        """The lowering of the step's next pass (:func:`passes`): its own shapes, the same
        prices and op builder."""
        return _Megatron(self.m, self.tp, workload, options, self.price, self.build, self.xs,
                         self.ep_rank)  # fmt: skip

    # ------------------------------------------------------------------ helpers
    def ew(self, mb: Slice, name: str, layer: int, nbytes: float, flops: float, shape: str,
           rows: int, width: int, fused: bool = False) -> None:  # fmt: skip
        """An elementwise (bytes-bound) kernel over ``rows`` rows of ``width`` elements
        (``fused``: a norm with the residual add fused in)."""
        cost = self.price.elementwise(nbytes, flops, name, rows, width, fused)
        shape += " (kernel table)" if cost.measured else ""
        self.build.kernel(mb.index, name, "elementwise", layer, cost, shape)

    def gemm(self, mb: Slice, name: str, layer: int, m: int, n: int, k: int, site: str = "",
             deps: tuple[int, ...] | None = None, part: str = "") -> int:  # fmt: skip
        """GEMM ``name`` of ``[m, k] x [k, n]`` as one kernel (piece ``part`` of a split)."""
        cost, detail = self.price.gemm(name, m, n, k, layer)
        return self.build.kernel(mb.index, name + part, "gemm", layer, cost, detail, site, deps)

    def rows(self, mb: Slice) -> int:
        """Tokens of the residual stream a rank holds: T, or T/tp with sequence parallelism."""
        return ceil_div(mb.tokens, self.tp) if self.sp else mb.tokens

    def norm(self, mb: Slice, name: str, layer: int, *, add: bool = False) -> None:
        rows, d, b = self.rows(mb), self.d, self.act_b
        if add and self.ar_norm_max and self.into_allreduce(mb, name):
            return
        if add:  # fused residual add + norm: read x and residual, write both [rows, d]
            self.ew(
                mb,
                name,
                layer,
                4 * rows * d * b + d * b,
                5.0 * rows * d,
                f"[{rows}, {d}] + residual",
                rows,
                d,
                fused=True,
            )
        else:  # read x [rows, d], write y [rows, d], read the weight [d]
            shape = f"[{rows}, {d}]"
            self.ew(mb, name, layer, 2 * rows * d * b + d * b, 4.0 * rows * d, shape, rows, d)

    def into_allreduce(self, mb: Slice, name: str) -> bool:
        """Whether the residual add and norm ``name`` ride in the all-reduce just before them
        (TensorRT-LLM's fused kernel, AllReduceFusionOp.RESIDUAL_RMS_NORM: each CTA sums its
        tokens' rows from the peers, adds the residual, normalises and writes both; its own
        one-shot/two-shot kernels only, up to their size limit, NCCL runs the norm apart).
        The collective is renamed; the epilogue's reads and writes (4 rows of d per token,
        about 0.5 MB at 8 tokens of 8192) go at HBM speed inside the kernel and are left out."""
        i = self.build.last.get(mb.index)
        if i is None:
            return False
        op = self.build.ops[i]
        call = op.collective
        if call is None or call.op != "all_reduce" or call.nbytes > self.ar_norm_max:
            return False
        fused = f"{op.detail}, + residual + RMSNorm (fused)"
        self.build.ops[i] = replace(op, name=f"{op.name}+{name}", detail=fused)
        return True

    def residual(self, mb: Slice, layer: int) -> None:  # a + b -> c, [rows, d]
        rows = self.rows(mb)
        self.ew(
            mb,
            "residual",
            layer,
            3 * rows * self.d * self.act_b,
            rows * self.d,
            f"[{rows}, {self.d}]",
            rows,
            self.d,
        )

    def column_gemm(self, mb: Slice, name: str, layer: int, n: int, site_in: str) -> None:
        """A column-parallel GEMM [T, d] x [d, n]; with sequence parallelism the input is
        all-gathered first (in chunks that overlap the GEMM when chunked)."""
        d, tokens = self.d, mb.tokens
        if not self.sp:
            self.gemm(mb, name, layer, tokens, n, d)
            return
        full = round(tokens * d * self.act_b)  # the gathered input [T, d]
        self._split(mb, name, layer, n, d, full, "all_gather", site_in, gather_first=True)

    def row_gemm(self, mb: Slice, name: str, layer: int, k: int, site: str) -> None:
        """A row-parallel GEMM [T, k] x [k, d] and the collective that sums its partials."""
        full = round(mb.tokens * self.d * self.act_b)  # the partial sums [T, d]
        op = "reduce_scatter" if self.sp else "all_reduce"
        self._split(mb, name, layer, self.d, k, full, op, site, gather_first=False)

    def _split(
        self,
        mb: Slice,
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
        build = self.build
        parts = max(1, min(self.chunks, mb.tokens)) if self.tp > 1 else 1
        rows = [mb.tokens // parts + (1 if j < mb.tokens % parts else 0) for j in range(parts)]
        sizes = [nbytes * r // mb.tokens for r in rows]
        sizes[-1] += nbytes - sum(sizes)
        entry = build.tail(mb.index)
        prev: tuple[int, ...] = entry
        for j, (r, size) in enumerate(zip(rows, sizes, strict=True)):
            part = f"[{j}/{parts}]" if parts > 1 else ""
            if gather_first:  # piece j of [T, d] gathered, then [r, k] x [k, n]
                g = build.collective(mb.index, coll, site, layer, size, deps=entry, part=part)
                self.gemm(mb, name, layer, r, n, k, deps=entry if g is None else (g,), part=part)
            else:  # [r, k] x [k, n] partial sums, then their collective
                gi = self.gemm(mb, name, layer, r, n, k, site, deps=prev, part=part)
                prev = (gi,)
                build.collective(mb.index, coll, site, layer, size, deps=(gi,), part=part)

    # ------------------------------------------------------------------ the model
    def embedding(self, mb: Slice) -> None:
        # each rank gathers the rows of its vocab shard [V, d], zeros elsewhere, then sums
        tokens, d = mb.tokens, self.d
        full = round(tokens * d * self.act_b)  # x: [T, d]
        shape = f"[{tokens}, {d}] from [{self.vocab}, {d}]"
        self.ew(mb, "embedding", -1, 2 * full, 0.0, shape, tokens, d)
        coll = "reduce_scatter" if self.sp else "all_reduce"
        self.build.collective(mb.index, coll, "embedding", -1, full)  # x: [T, d] (or [T/tp, d])

    def attention_block(self, mb: Slice, layer: int) -> None:
        m, h, kv, hd = self.m, self.h, self.kv, self.hd
        self.norm(mb, "input_norm", layer, add=self.fuse and layer > 0)  # x: [T, d]
        w = self.w
        if m.is_mla:  # multi-head latent attention: tpsim.core.lowering.mla
            self.latent_attention(mb, layer, mb.tokens, mb.batch, w.phase, w.prompt_len,
                                  w.context_len)  # fmt: skip
            return
        if m.is_linear_layer(layer):  # Gated DeltaNet (Qwen3-Next): tpsim.core.lowering.gdn
            self.linear_attention(mb, layer)
            return
        # [T, (h+2kv)hd]; with Qwen3-Next's output gate q twice: [T, (2h+2kv)hd]
        gate = h if m.attn_output_gate else 0
        self.column_gemm(mb, "qkv_proj", layer, (h + gate + 2 * kv) * hd, "attn_in")
        tokens = mb.tokens
        if m.qk_norm_whole and self.tp > 1:
            self.qk_norm_tp(mb, layer)
        elif m.qk_norm:  # RMSNorm of each q and k head: [T (h + kv), hd] read and written
            # (MiniMax-M2's on one rank: of the whole q and the whole k, [T, (h + kv) hd])
            rows, width = (tokens, (h + kv) * hd) if m.qk_norm_whole else (tokens * (h + kv), hd)
            weights = (h + kv) * hd if m.qk_norm_whole else 2 * hd
            self.ew(mb, "qk_norm", layer, 2 * rows * width * self.act_b + weights * self.act_b,
                    4.0 * rows * width, f"[{rows}, {width}]", rows, width)  # fmt: skip
        if not m.learned_position_embeddings and not self.rotary_in_attention:
            # rotary on q and k, in place: only the rotated dims of each head are read and
            # written (vLLM's rotary_embedding kernel loops over rot_dim / 2 pairs a head)
            width = (h + kv) * m.rotary_width
            rot = tokens * width
            shape = f"[{tokens}, {width}]"
            self.ew(mb, "rotary", layer, 2 * rot * self.act_b, 6.0 * rot, shape, tokens, width)
        window, chunk = m.local_span(layer)
        # a chunked layer (Llama 4) is named only where it has one: the others' calls as before
        local = {"chunk": chunk} if chunk else {}
        if w.phase == "prefill":  # q [b, h, S, hd] over k, v [b, kv, S, hd], causal
            prompt = w.prompt_len
            cost = self.price.attention_prefill(mb.batch, prompt, h, kv, hd, window=window,
                                                **local)  # fmt: skip
            shape = f"causal [{mb.batch}, {h}/{kv} heads, {prompt}, {hd}]"
        else:  # q [b, h, 1, hd] over the cache k, v [b, kv, ctx, hd] (a window: its last keys;
            # a chunk: the keys of the query's own chunk)
            ctx = m.attended(layer, w.context_len)
            cost = self.price.attention_decode(mb.batch, ctx, h, kv, hd, window=window,
                                               **local)  # fmt: skip
            shape = f"decode [{mb.batch}, {h}/{kv} heads, ctx {ctx}, {hd}]"
        if window:
            shape += f" window {window}"
        if chunk:
            shape += f" chunk {chunk}"
        shape += " (kernel table)" if cost.measured else ""
        self.build.kernel(mb.index, "attn", "attention", layer, cost, shape)  # o: [T, h hd]
        if gate:  # o * sigmoid(gate): read both [T, h hd], write o (vLLM's Qwen3NextAttention)
            out = tokens * h * hd
            self.ew(mb, "attn_gate", layer, 3 * out * self.act_b, 5.0 * out,
                    f"[{tokens}, {h * hd}]", tokens, h * hd)  # fmt: skip
        self.row_gemm(mb, "o_proj", layer, h * hd, "attn_out")  # [T, h hd] x [h hd, d] -> sum

    def qk_norm_tp(self, mb: Slice, layer: int) -> None:
        """MiniMax-M2's q and k norms over all heads, split over the TP ranks (vLLM's
        MiniMaxText01RMSNormTP.forward_qk, SGLang's MiniMaxM2QKRMSNorm): each rank's mean
        of squares of its q and of its k shard, per token, in fp32 ([T, 2]); one all-reduce
        of those 8 bytes a token sums them over the ranks; then q and k are scaled by their
        rsqrt and weight shard. Two passes over q and k, the collective between them."""
        tokens, qk = mb.tokens, (self.h + self.kv) * self.hd
        shape = f"[{tokens}, {qk}] -> [{tokens}, 2] fp32"
        self.ew(mb, "qk_norm_var", layer, tokens * qk * self.act_b + 8 * tokens,
                2.0 * tokens * qk, shape, tokens, qk)  # fmt: skip
        self.build.collective(mb.index, "all_reduce", "qk_norm", layer, QK_VAR_BYTES * tokens)
        nbytes = (2 * tokens * qk + qk) * self.act_b + 8 * tokens  # q, k in and out; weights
        self.ew(mb, "qk_norm", layer, nbytes, 3.0 * tokens * qk, f"[{tokens}, {qk}]", tokens,
                qk)  # fmt: skip

    def mlp_block(self, mb: Slice, layer: int) -> None:
        if not self.fuse:
            self.residual(mb, layer)  # x + attention out: [T, d]
        self.norm(mb, "post_attn_norm", layer, add=self.fuse)  # [T, d]
        if self.m.is_moe_layer(layer):
            self.moe(mb, layer)
            return
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
                tokens,
                inner,
            )
        else:  # gelu(up) -> [T, I]
            shape = f"[{tokens}, {inner}]"
            self.ew(mb, "act", layer, 2 * act * self.act_b, 8.0 * act, shape, tokens, inner)
        self.row_gemm(mb, "mlp_down", layer, inner, "mlp_out")  # [T, I] x [I, d] -> sum [T, d]

    def swiglu(self, mb: Slice, name: str, layer: int, rows: int, inner: int) -> None:
        """silu(gate) * up over ``rows`` rows: read [rows, 2 inner], write [rows, inner]."""
        act = rows * inner
        shape = f"[{rows}, {2 * inner}] -> [{inner}]"
        self.ew(mb, name, layer, 3 * act * self.act_b, 5.0 * act, shape, rows, inner)

    def close_layer(self, mb: Slice, layer: int) -> None:
        if not self.fuse:  # fused: the next norm adds the residual
            self.residual(mb, layer)  # x + MLP out: [T, d]

    def head(self, mb: Slice) -> None:
        L, d = self.m.num_layers, self.d
        self.norm(mb, "final_norm", L, add=self.fuse)  # [T, d]
        if self.sp:  # the last token of each sequence, from whichever rank holds it: [b, d]
            self.build.collective(
                mb.index, "all_gather", "lm_head_in", L, round(mb.batch * d * self.act_b)
            )
        self.gemm(mb, "lm_head", L, mb.batch, self.vocab, d, "lm_head")  # logits [b, V]
        logits = round(mb.batch * self.vocab * self.act_b) * self.tp  # gathered: [b, V * tp]
        self.build.collective(mb.index, "all_gather", "lm_head", L, logits)


def start_step(
    model: ModelSpec,
    tp: int,
    workload: Workload,
    options: Options,
    hw: Hardware,
    table: KernelTable | None,
    group: int = 0,
    experts: ExpertSplit | None = None,
    ep_rank: int = 0,
    price: Pricing | None = None,
) -> tuple[_Megatron, OpBuilder, str]:
    """The lowering of one step of a TP group, up to its first op: prices bound to the
    model's shape (and ``table``'s measured kernels), the launch mode the engine runs the
    step in, an op builder for TP group ``group`` with the engine's pre-step host work in
    it; MoE layers split as ``experts`` says, with expert-parallel rank ``ep_rank``'s
    load; ``price``: the step's prices made already (:func:`step_pricing` of these
    arguments), else made here. Returns (the Megatron lowering, its builder, the launch
    mode)."""
    if price is None:
        price = step_pricing(model, tp, options, hw, table)
    calib = options.calibration
    mode = host.step_mode(calib.engine, options.launch, workload.phase, workload.tokens)
    pdl = hw.arch in calib.engine.pdl_archs  # (profiles name no empty architecture)
    build = OpBuilder(calib.launch[mode], tp, eager=mode == "eager", pdl=pdl)
    build.group = group
    host.before_step(build, calib.engine, tp, workload.batch)
    lo = _Megatron(model, tp, workload, options, price, build, experts, ep_rank)
    return lo, build, mode


def lower(
    model: ModelSpec,
    tp: int,
    workload: Workload,
    options: Options,
    hw: Hardware,
    table: KernelTable | None = None,
    experts: ExpertSplit | None = None,
) -> Programs:
    """The programs of a ``tp``-way group: every rank runs the same one (one object,
    :meth:`Programs.same`), except where expert-parallel ranks carry different loads
    (``expert_skew``): one program per expert-parallel rank.

    ``options.fused`` (default) lowers the norms as vLLM runs them for RMSNorm models: the
    residual add that precedes a norm is fused into it (``fused_add_rms_norm``: read x and
    the residual, write the new residual and the normed x, 4 tensors instead of 3 + 2, one
    kernel instead of two). SwiGLU is one kernel in both modes (``silu_and_mul``: read
    gate|up, write the product) and rotary stays its own kernel, as in vLLM, except with
    ``launch="compiled"``, where the rotary embedding is folded into the attention kernel's
    prologue. LayerNorm models keep separate adds (vLLM's LayerNorm models call the norm
    and the add apart). ``table`` (measured GEMM times) overrides the GEMMs it matches.
    """
    xs = experts or expert_split(model, tp, 1, 1, tp, options.expert_skew)
    ranks = xs.group  # tp, or the attention data-parallel groups of one GPU each
    if not xs.uneven:
        return Programs.same(_program(model, tp, workload, options, hw, table, xs, 0), ranks)
    per_ep = [_program(model, tp, workload, options, hw, table, xs, e) for e in range(xs.ep)]
    return Programs(tuple(per_ep[xs.ep_rank(r)] for r in range(ranks)))


def _program(
    model: ModelSpec,
    tp: int,
    workload: Workload,
    options: Options,
    hw: Hardware,
    table: KernelTable | None,
    experts: ExpertSplit,
    ep_rank: int,
) -> Program:
    """One rank's program of a TP group (expert-parallel rank ``ep_rank``)."""
    engine = options.calibration.engine
    runs = passes(workload, engine)
    lo, build, mode = start_step(model, tp, runs[0], options, hw, table, 0, experts, ep_rank)
    for k, run in enumerate(runs):
        if k:
            lo = lo.next_pass(run, options)
        slices = batch_slices(run, options)
        for mb in slices:
            lo.embedding(mb)
        for layer in range(model.num_layers):
            if mode == "eager":
                host.layer_python(build, engine, layer)
            for block in (lo.attention_block, lo.mlp_block, lo.close_layer):
                for mb in slices:
                    block(mb, layer)
        if run is runs[-1]:
            for mb in slices:
                lo.head(mb)
    host.after_step(build, engine, workload.batch, model.num_layers)
    return build.program()
