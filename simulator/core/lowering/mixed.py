"""One iteration of a continuous-batching engine: decode tokens and prefill chunks together.

A serving engine (vLLM V1, SGLang with mixed chunks, TensorRT-LLM's in-flight batching) runs
one forward pass over every token it scheduled: each running sequence's next token (a
decode) and pieces of prompts (prefill chunks, each after the prefix already in the cache).
The linear layers, norms, collectives and the embedding see all ``T`` tokens of the
iteration together, as one ``[T, d]`` activation; attention is per part: each decode
attends over its own context, each chunk causally over itself and its prefix. The LM head
computes the logits of the last token of every scheduled sequence (vLLM V1 samples one per
request and drops the samples of unfinished chunks).

:class:`MixedStep` is that composition, a :class:`~tpsim.core.config.Workload` whose
``tokens`` are the iteration's and whose ``batch`` is its sequences. :func:`lower_mixed`
lowers it with the block structure of :mod:`tpsim.core.lowering.lower` unchanged: only the
attention kernel's price is the composition's (:class:`MixedPricing`, the sum of one
decode-attention kernel over the decodes' contexts and one prefill kernel per chunk).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from tpsim.core.config import ConfigError, Options, Workload
from tpsim.core.kernels import attention
from tpsim.core.kernels.costs import Hardware, KernelCost
from tpsim.core.kernels.kernel_table import KernelTable
from tpsim.core.kernels.pricing import Pricing
from tpsim.core.lowering import host
from tpsim.core.lowering.experts import ExpertSplit
from tpsim.core.lowering.lower import start_step
from tpsim.core.lowering.mla import mixed_attention
from tpsim.core.lowering.step import Slice
from tpsim.core.program import Program, Programs
from tpsim.models.spec import ModelSpec


@dataclass(frozen=True)
class MixedStep(Workload):
    """An iteration: ``decodes`` (the context of each decoding sequence, its new token
    included) and ``chunks`` ((chunk tokens, prefix tokens already cached) per prefilling
    sequence). ``batch`` is the number of sequences, ``phase`` prefill when any chunk runs
    (for the engine's CUDA-graph rule), ``prompt_len``/``context_len`` the longest chunk
    and context (for the memory checks that read them). ``routed``: with attention data
    parallelism, the tokens the MoE layers route over the whole MoE group when its
    attention groups run iterations of their own (0: every group runs this one, so
    ``tokens`` x the groups)."""

    decodes: tuple[int, ...] = ()
    chunks: tuple[tuple[int, int], ...] = ()
    routed: int = 0

    @classmethod
    def of(
        cls, decodes: tuple[int, ...], chunks: tuple[tuple[int, int], ...], routed: int = 0
    ) -> MixedStep:
        if not decodes and not chunks:
            raise ConfigError("step=(): an iteration needs a decode or a prefill chunk")
        if (decodes and min(decodes) < 1) or any(n < 1 or p < 0 for n, p in chunks):
            raise ConfigError(f"step={decodes!r},{chunks!r}: lengths must be positive")
        if routed < 0:
            raise ConfigError(f"routed={routed}: must be 0 or more")
        longest = max((n for n, _ in chunks), default=1)
        context = max(max(decodes, default=0), max((n + p for n, p in chunks), default=0))
        return cls(
            batch=len(decodes) + len(chunks),
            phase="prefill" if chunks else "decode",
            prompt_len=longest,
            context_len=context,
            decodes=tuple(decodes),
            chunks=tuple(chunks),
            routed=routed,
        )

    @property
    def tokens(self) -> int:
        return len(self.decodes) + sum(n for n, _ in self.chunks)

    @property
    def kv_len(self) -> int:
        return self.context_len


def attention_seconds(price: Pricing, step: MixedStep, heads: int, kv_heads: int,
                      head_dim: int, window: int = 0, chunk: int = 0) -> KernelCost:  # fmt: skip
    """The attention of one layer of ``step`` on one rank: one decode kernel over every
    decode (its bytes and FLOPs are linear in the contexts, so their mean prices their sum)
    plus one causal kernel per chunk over its prefix (attention.attention_prefill's ``cached``).
    A sliding layer's ``window``: a decode reads at most its last ``window`` keys, a chunk's
    queries see at most ``window`` keys each. A chunked layer's ``chunk``: a decode at
    context c reads its own chunk's ``(c - 1) mod chunk + 1`` keys, a chunk's queries their
    own chunk's keys up to themselves."""
    parts: list[KernelCost] = []
    if step.decodes:
        contexts = [min(c, window) for c in step.decodes] if window else step.decodes
        if chunk:
            contexts = [(c - 1) % chunk + 1 if c > 0 else 0 for c in step.decodes]
        mean = round(sum(contexts) / len(contexts))
        decode = Pricing.attention_decode  # the run's own decode price, not an override
        parts.append(decode(price, len(step.decodes), mean, heads, kv_heads, head_dim))
    for n, cached in step.chunks:
        parts.append(
            attention.attention_prefill(1, n, heads, kv_heads, head_dim, price.hw,
                                    act_bytes=price.act_b, kv_bytes=price.kv_b, cached=cached,
                                    window=window, chunk=chunk)
        )  # fmt: skip
    return KernelCost.of_parts(parts)


@dataclass(frozen=True)
class MixedPricing(Pricing):
    """The run's prices, except attention: ``step``'s parts (:func:`attention_seconds`), or
    nothing at all with ``no_attention`` (the iteration cache adds attention itself)."""

    step: MixedStep | None = None
    no_attention: bool = False
    model: ModelSpec | None = None  # for its attention's form (MLA: both in one layer)

    @classmethod
    def around(cls, base: Pricing, step: MixedStep, no_attention: bool = False,
               model: ModelSpec | None = None) -> MixedPricing:  # fmt: skip
        values = {f.name: getattr(base, f.name) for f in fields(Pricing)}
        return cls(**values, step=step, no_attention=no_attention, model=model)

    def _parts(self, heads: int, kv_heads: int, head_dim: int, window: int,
               chunk: int = 0) -> KernelCost:  # fmt: skip
        assert self.step is not None
        if self.no_attention:
            return KernelCost(0.0, 0.0, 0, "memory")
        if self.model is not None and self.model.is_mla:  # both forms: lowering.mla
            return mixed_attention(self, self.model, heads, self.step)
        return attention_seconds(self, self.step, heads, kv_heads, head_dim, window, chunk)

    def attention_prefill(self, batch: int, prompt: int, heads: int, kv_heads: int,
                          head_dim: int, *, v_head_dim: int = 0, cache_width: int = 0,
                          window: int = 0, chunk: int = 0) -> KernelCost:  # fmt: skip
        return self._parts(heads, kv_heads, head_dim, window, chunk)

    def attention_decode(self, batch: int, context: int, heads: int, kv_heads: int,
                         head_dim: int, *, v_head_dim: int = 0, cache_width: int = 0,
                         window: int = 0, chunk: int = 0) -> KernelCost:  # fmt: skip
        return self._parts(heads, kv_heads, head_dim, window, chunk)


def lower_mixed(
    model: ModelSpec,
    tp: int,
    step: MixedStep,
    options: Options,
    hw: Hardware,
    table: KernelTable | None = None,
    *,
    no_attention: bool = False,
    experts: ExpertSplit | None = None,
    price: Pricing | None = None,
) -> Programs:
    """The programs of a ``tp``-way group running iteration ``step``: the block structure of
    :func:`tpsim.core.lowering.lower.lower` (one pass, one slice: serving engines run no
    micro-batch overlap), every token through the linear layers together, attention priced
    per part (:class:`MixedPricing`). MoE layers split as ``experts`` says (default: the
    experts' width split ``tp`` ways); expert-parallel ranks of different loads (a skew)
    get one program each, as :func:`tpsim.core.lowering.lower.lower` gives them.
    ``price``: the prices of ``model`` at ``tp`` made already
    (:func:`tpsim.core.lowering.step.step_pricing`), for a caller that lowers many steps."""
    if options.overlap == "microbatch":
        raise ConfigError("overlap=microbatch: a serving iteration runs as one batch")
    if experts is None or not experts.uneven:
        one = _mixed_program(model, tp, step, options, hw, table, no_attention, experts, 0, price)
        return Programs.same(one, experts.group if experts else tp)
    per_ep = [_mixed_program(model, tp, step, options, hw, table, no_attention, experts, e,
                             price) for e in range(experts.ep)]  # fmt: skip
    return Programs(tuple(per_ep[experts.ep_rank(r)] for r in range(experts.group)))


def _mixed_program(
    model: ModelSpec,
    tp: int,
    step: MixedStep,
    options: Options,
    hw: Hardware,
    table: KernelTable | None,
    no_attention: bool,
    experts: ExpertSplit | None,
    ep_rank: int,
    price: Pricing | None = None,
) -> Program:
    """One rank's program of iteration ``step`` (expert-parallel rank ``ep_rank``)."""
    engine = options.calibration.engine
    lo, build, mode = start_step(model, tp, step, options, hw, table, 0, experts, ep_rank,
                                 price)  # fmt: skip
    lo.price = MixedPricing.around(lo.price, step, no_attention, model)
    mb = Slice(0, step.batch, step.tokens)
    lo.embedding(mb)
    for layer in range(model.num_layers):
        if mode == "eager":
            host.layer_python(build, engine, layer)
        lo.attention_block(mb, layer)
        lo.mlp_block(mb, layer)
        lo.close_layer(mb, layer)
    lo.head(mb)
    host.after_step(build, engine, step.batch, model.num_layers)
    return build.program()


__all__ = ["MixedPricing", "MixedStep", "attention_seconds", "lower_mixed"]
