"""The mixture-of-experts FFN of :class:`~tpsim.core.lowering.lower._Megatron` (mixed into
it, as :class:`~tpsim.core.lowering.mla.LatentAttention` is): the router and its top-k, the
routed experts as grouped GEMMs over the token-expert pairs a rank receives
(:mod:`tpsim.core.lowering.experts` says how many and which experts they read), the shared
experts, the weighted sum of each token's outputs, and the collectives that bring the
tokens to their experts and back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpsim.core.config import ceil_div
from tpsim.core.errors import ConfigError
from tpsim.core.lowering.block import LoweringBlock

if TYPE_CHECKING:
    from tpsim.core.lowering.experts import ExpertSplit


class ExpertBlock(LoweringBlock):
    """The MoE block of the Megatron lowering, per rank."""

    if TYPE_CHECKING:  # the lowering's own, beyond LoweringBlock's
        xs: ExpertSplit
        ep_rank: int
        a2a: str
        expert: int
        expert_d: int
        shared: int
        ll_cap: int
        ll_chunked: bool
        engine_name: str

    def moe(self, mb: Any, layer: int) -> None:
        """The MoE FFN (:mod:`tpsim.core.lowering.experts`), per rank: the router
        (replicated), top-k, the routed experts as grouped GEMMs over the pairs this rank's
        experts receive and the experts they pick (:meth:`ExpertSplit.load`), the shared
        experts as a dense MLP and the weighted sum of each token's outputs. Replicated
        tokens (no attention data parallelism) end in one all-reduce (reduce-scatter with
        sequence parallelism) of the partial sums, as with tensor-parallel experts;
        dispatched tokens travel by all-to-all (:meth:`moe_dispatched`). Chunked overlap
        does not split it."""
        if self.xs.dispatch:
            self.moe_dispatched(mb, layer)
            return
        tokens = mb.tokens
        self.column_gemm(mb, "router", layer, self.m.num_experts, "mlp_in")  # [T, d] x [d, E]
        self.route(mb, layer, tokens)
        load = self.xs.load(tokens, self.ep_rank, layer)
        self.routed_experts(mb, layer, load.pairs, load.experts_read)
        self.shared_experts(mb, layer, tokens)
        self.weighted_sum(mb, layer, tokens, load.pairs + (tokens if self.shared else 0))
        op = "reduce_scatter" if self.sp else "all_reduce"
        full = round(tokens * self.d * self.act_b)  # [T, d]
        self.build.collective(mb.index, op, "mlp_out", layer, full)

    def moe_dispatched(self, mb: Any, layer: int) -> None:
        """The MoE FFN with attention data parallelism: this rank routes its share of its
        attention group's tokens (``T / tp``), the dispatch all-to-all over the MoE group
        sends each token to the ``moe_tp`` ranks holding each of its experts (through NCCL
        once to each rank holding some of them, its partial outputs summed there before the
        combine; DeepEP's kernels per token-expert pair, deduplicated as they do), the
        experts compute the pairs the whole group sends them, the combine all-to-all
        returns the outputs, this rank sums its tokens' outputs and runs the shared experts
        on them, and (``tp > 1``) an all-gather over the attention group restores every
        token on every rank. Under DeepEP's low-latency kernels the share goes in chunks of
        at most the tokens their buffer holds a rank (:meth:`low_latency_chunks`), each
        chunk its own top-k, dispatch, experts, combine and shared experts."""
        share = ceil_div(mb.tokens, self.tp)  # the tokens this rank routes
        # the gate runs before the MoE layer's chunks, on all of them: [T/tp, d] x [d, E]
        self.gemm(mb, "router", layer, share, self.m.num_experts, self.d)
        low_latency = self.a2a == "deepep" and self.w.phase == "decode"
        chunks = self.low_latency_chunks(share, mb.tokens) if low_latency else [share]
        # the group's tokens: every attention group's as many as this one's, unless the step
        # says how many they route together (serving: each group its own iteration)
        routed = getattr(self.w, "routed", 0) or self.xs.routed_tokens(mb.tokens)
        for tokens in chunks:  # a chunk's share of the group's tokens
            self.moe_chunk(mb, layer, tokens, round(routed * tokens / share), low_latency)
        # every rank of the attention group gets the others' tokens: [T, d] gathered
        full = round(mb.tokens * self.d * self.act_b)
        self.build.collective(mb.index, "all_gather", "moe_out", layer, full)

    def low_latency_chunks(self, share: int, tokens: int) -> list[int]:
        """The pieces this rank's ``share`` of a decode step's tokens reaches DeepEP's
        low-latency kernels in: whole while its buffer holds them (the profile's
        ``deepep_ll_tokens`` a rank); above that, an engine that chunks (vLLM's
        forward_impl_chunked: VLLM_MOE_DP_CHUNK_SIZE tokens a chunk) runs chunks of that
        many and the rest, and one that does not (SGLang) is refused, as DeepEP's
        ``x.size(0) <= num_max_dispatch_tokens_per_rank`` assertion refuses it."""
        cap, engine = self.ll_cap, self.engine_name
        if share <= cap:
            return [share]
        if not self.ll_chunked:
            raise ConfigError(
                f"moe_a2a=deepep: {share} tokens a rank at decode (batch {tokens} / tp "
                f"{self.tp}); engine {engine} hands them to DeepEP's low-latency kernels at "
                f"once, whose buffer holds {cap} (profile key deepep_ll_tokens): at most "
                f"batch {cap * self.tp} per attention-DP group"
            )
        return [min(cap, share - start) for start in range(0, share, cap)]

    def moe_chunk(self, mb: Any, layer: int, share: int, routed: int, low_latency: bool) -> None:
        """One pass of the dispatched MoE over ``share`` tokens of this rank (the group
        routing ``routed``): top-k, dispatch, the experts, combine, the shared experts and
        the weighted sum (:meth:`moe_dispatched`)."""
        xs, d, b = self.xs, self.d, self.act_b
        self.route(mb, layer, share)
        pairs_out = share * xs.top_k * xs.moe_tp  # each pair to every width slice
        if self.a2a != "deepep":  # a token once to each rank holding some of its experts
            pairs_out = round(share * xs.ranks_hit() * xs.moe_tp)
        # [T/tp k moe_tp, d], spread over the group: in the activations' dtype through NCCL;
        # DeepEP dispatches fp8 with a scale per 128 values (and a 16-byte header) and
        # combines in bf16, low-latency kernels at decode, normal ones at prefill
        if self.a2a == "deepep":  # in the hidden size the engine hands DeepEP (padded)
            algo = "deepep_ll" if low_latency else "deepep_normal"
            h = xs.deepep_hidden[0 if low_latency else 1] or d
            out_b, back_b = h + 4 * ceil_div(h, 128) + 16, 2 * h
            extra: dict[str, Any] = {
                "algo": algo,
                "experts": xs.experts,
                "node_dedup": xs.node_dedup(),
            }
        else:
            out_b, back_b, extra = round(d * b), round(d * b), {}
        shares = xs.rank_shares(layer)  # uneven routing: the hot ranks receive more
        if shares:
            extra["shares"] = shares
        span = xs.attention_dp
        self.build.collective(mb.index, "all_to_all", "moe_dispatch", layer, pairs_out * out_b,
                              span=span, phase="dispatch", **extra)  # fmt: skip
        load = xs.load(routed, self.ep_rank, layer)
        self.routed_experts(mb, layer, load.pairs, load.experts_read)
        self.build.collective(mb.index, "all_to_all", "moe_combine", layer, pairs_out * back_b,
                              span=span, phase="combine", **extra)  # fmt: skip
        self.shared_experts(mb, layer, share)
        self.weighted_sum(mb, layer, share, pairs_out + (share if self.shared else 0))

    def route(self, mb: Any, layer: int, tokens: int) -> None:
        """Softmax and top-k of ``tokens`` tokens: read the logits [T, E], write the
        weights and expert ids [T, k]."""
        experts, k, b = self.m.num_experts, self.m.experts_per_token, self.act_b
        topk_bytes = tokens * experts * b + tokens * k * (b + 4)
        shape = f"[{tokens}, {experts}] -> top {k}"
        self.ew(mb, "topk", layer, topk_bytes, 5.0 * tokens * experts, shape, tokens, experts)

    def routed_experts(self, mb: Any, layer: int, pairs: int, read: float) -> None:
        """This rank's experts over its ``pairs`` token-expert pairs, ``read`` experts'
        weights streamed: gate|up [P, d] x [d, 2Im] per expert, SwiGLU, down [P, Im] x
        [Im, d] (Im: the width slice this rank holds; Im and d as the engine builds the
        experts, padded for its kernel: ExpertSplit.width_align, expert_hidden)."""
        if pairs == 0:
            return
        inner, d = self.expert, self.expert_d  # as the engine builds the experts (padded)
        for name, n, kdim in (("experts_up", 2 * inner, d), ("experts_down", d, inner)):
            cost, detail = self.price.grouped_gemm(name, pairs, n, kdim, read, layer)
            self.build.kernel(mb.index, name, "gemm", layer, cost, detail)
            if name == "experts_up":
                self.swiglu(mb, "experts_act", layer, pairs, inner)  # [P, 2Im] -> [P, Im]

    def shared_experts(self, mb: Any, layer: int, tokens: int) -> None:
        """The shared experts, every token: [T, d] x [d, 2Is], SwiGLU, [T, Is] x [Is, d]."""
        if not self.shared:
            return
        self.gemm(mb, "shared_up", layer, tokens, 2 * self.shared, self.d)
        self.swiglu(mb, "shared_act", layer, tokens, self.shared)
        self.gemm(mb, "shared_down", layer, tokens, self.d, self.shared)

    def weighted_sum(self, mb: Any, layer: int, tokens: int, summed: int) -> None:
        """Each token's expert outputs weighted and summed: read ``summed`` rows [., d]
        (its pairs', and the shared experts'), write [T, d]."""
        d, b = self.d, self.act_b
        shape = f"[{summed}, {d}] -> [{tokens}, {d}]"
        sum_bytes = (summed + tokens) * d * b
        self.ew(mb, "moe_sum", layer, sum_bytes, 2.0 * summed * d, shape, tokens, d)


__all__ = ["ExpertBlock"]
