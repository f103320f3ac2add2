"""How long one serving iteration takes: the forward-pass simulator run on its composition.

:class:`IterationTimer` resolves a TP group once (:func:`tpsim.core.plan.resolve`) and times
any :class:`~tpsim.core.lowering.mixed.MixedStep` on it: ``exact`` lowers and runs the whole
iteration through the engine; otherwise a cache answers.

The cache keeps what the engine must simulate apart from what is a pure function:

- attention, the only part that depends on each sequence's context, is priced directly
  (:func:`~tpsim.core.lowering.mixed.attention_seconds`, times the layers): it runs on the
  compute stream between the QKV and output GEMMs, nothing overlaps it, so it adds to the
  step as it is;
- the rest is simulated with attention priced at zero (:meth:`IterationTimer.base_seconds`).
  A model whose layers are alike runs with 2 layers and each lane (the GPU's streams, the
  host thread) is extrapolated to every layer from its second layer
  (:meth:`IterationTimer._extrapolated`: equal to the whole model's step to rounding). The
  step depends on its tokens ``T`` (the layers) and its sequences ``B`` (the LM head's rows,
  the host's per-sequence work), which add up; each part is interpolated between grid
  points, less the priced seconds of the step's GPU kernels
  (:meth:`IterationTimer._kernels_at`: the step lowered, not run), which are added back at
  the asked count: a GEMM's wave and tile counts step the kernels' time up at some counts,
  and where the step is GPU-bound those steps cancel, so what is interpolated is near-linear
  and a coarse grid suffices; a bracket is halved while its midpoint strays (a host-bound
  stretch, a collective changing protocol), never across the engine's CUDA-graph limit.

The error this leaves against exact simulation is tested (``tests/core/test_mixed_step.py``:
within 1 % on random iterations).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tpsim.core import metrics
from tpsim.core.comm.group import Comms, run_programs
from tpsim.core.config import Layout, Options, Workload
from tpsim.core.engine.jitter import HostJitter
from tpsim.core.kernels.pricing import Pricing
from tpsim.core.lowering import host
from tpsim.core.lowering.mixed import MixedStep, attention_seconds, lower_mixed
from tpsim.core.lowering.mla import mixed_attention
from tpsim.core.lowering.step import step_pricing
from tpsim.core.parallel import run_layout
from tpsim.core.plan import RunPlan, resolve
from tpsim.core.program import Programs
from tpsim.core.records import Record
from tpsim.models.spec import ModelSpec

if TYPE_CHECKING:
    import networkx as nx

#: Token counts simulated as they are up to this; above it, grid points per octave.
EXACT_BELOW = 16
PER_OCTAVE = 2
#: The same for the sequences of a step with a prefill.
SEQ_EXACT_BELOW = 16
SEQ_PER_OCTAVE = 2
#: The prefill step the sequences' part of a step is measured at (tokens).
REFERENCE_TOKENS = 1024
#: The layers of the short run a step of many alike layers is extrapolated from: its last
#: layer is the one every later one repeats (the first differs: its norm has no residual to
#: add).
SHORT_LAYERS = 2
#: How far (relative) a bracket's midpoint may stray from the line through its ends.
LINEAR_TOL = 1e-3


def grid_below(x: int, per_octave: int, exact_below: int = 0) -> int:
    """The largest grid point <= ``x`` (``x`` itself up to ``exact_below``, default
    :data:`EXACT_BELOW`): above it, ``per_octave`` (a power of two) points per octave."""
    if x <= (exact_below or EXACT_BELOW):
        return x
    step = 1 << max(0, x.bit_length() - per_octave.bit_length())
    return x - x % step


def grid_above(x: int, per_octave: int, exact_below: int = 0) -> int:
    """The smallest grid point > ``x``."""
    if x < (exact_below or EXACT_BELOW):
        return x + 1
    lo = grid_below(x, per_octave, exact_below)
    step = 1 << max(0, (lo + 1).bit_length() - per_octave.bit_length())
    return lo + step


def interpolate(x: int, lo: int, hi: int, f: Callable[[int], float],
                g: Callable[[int], float], whole: Callable[[int], float]) -> float:  # fmt: skip
    """``f(x) + g(x)`` with ``g`` known everywhere and ``f`` interpolated on the integer
    bracket ``lo < x < hi``: halved towards ``x`` while ``f`` at its midpoint strays from the
    line through its ends by more than :data:`LINEAR_TOL` of ``whole`` there (down to a
    bracket of one: exact)."""
    f_lo, f_hi = f(lo), f(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        f_mid = f(mid)
        line = f_lo + (f_hi - f_lo) * (mid - lo) / (hi - lo)
        if abs(f_mid - line) <= LINEAR_TOL * whole(mid):
            break
        if x <= mid:
            hi, f_hi = mid, f_mid
        else:
            lo, f_lo = mid, f_mid
    if x in (lo, hi):
        return (f_lo if x == lo else f_hi) + g(x)
    return f_lo + (f_hi - f_lo) * (x - lo) / (hi - lo) + g(x)


def _lanes(records: list[Record], through: int | None = None) -> tuple[float, float, float]:
    """When the GPU's streams end, when the host thread ends its work before the post-step
    work, and how long that post-step work takes (it waits for both); ``through``: the two
    lanes' ends at the end of that layer's work (the embedding's is layer -1), the third 0."""
    if through is not None:
        gpu = cpu = 0.0
        for r in records:
            if r.layer <= through:
                if r.stream != "cpu":
                    gpu = max(gpu, r.end_s)
                elif r.name not in host.POST_STEP:
                    cpu = max(cpu, r.end_s)
        return gpu, cpu, 0.0
    gpu = max((r.end_s for r in records if r.stream != "cpu"), default=0.0)
    post = [r for r in records if r.stream == "cpu" and r.name in host.POST_STEP]
    cpu = max((r.end_s for r in records if r.stream == "cpu" and r.name not in host.POST_STEP),
              default=0.0)  # fmt: skip
    end = max((r.end_s for r in records), default=0.0)
    start = min((r.start_s for r in post), default=end)
    return gpu, cpu, end - start


def _first_layers(spec: ModelSpec, n: int) -> ModelSpec:
    """``spec`` cut to its first ``n`` layers (their sliding, chunked, linear and dense layers
    and the GEMMs they keep 16-bit kept)."""
    return replace(
        spec,
        num_layers=n,
        sliding_layers=tuple(i for i in spec.sliding_layers if i < n),
        chunked_layers=tuple(i for i in spec.chunked_layers if i < n),
        dense_layers=tuple(i for i in spec.dense_layers if i < n),
        linear_layers=tuple(i for i in spec.linear_layers if i < n),
        kept_16bit=spec.kept.first(n),
    )


class IterationTimer:
    """Seconds of one iteration of a ``tp``-way group of ``model`` on ``topology``."""

    def __init__(
        self,
        model: ModelSpec | str,
        topology: nx.DiGraph | str,
        tp: int,
        options: Options,
        *,
        nodes: int = 1,
        gpus_per_node: int = 0,
        exact: bool = False,
        ep: int = 1,
        attention_dp: int = 1,
    ) -> None:
        layout = Layout(tp, gpus_per_node, ep=ep, attention_dp=attention_dp)
        self.plan: RunPlan = resolve(  # serving's commands have no --allow-oom to name
            model,
            topology,
            layout,
            Workload(1, "decode", 1, 1),
            options,
            nodes=nodes,
            oom_flag=False,
        )
        self.exact = exact
        self.simulated = 0  # engine runs so far (the cache's misses)
        self._base: dict[tuple[int, int, bool], float] = {}
        self._kernels: dict[tuple[int, int, bool], float] = {}
        #: the kernels' seconds at a routed token count of the MoE group's own (attention
        #: data parallelism: each group its own iteration), by (tokens, seqs, prefill, routed)
        self._routed: dict[tuple[int, int, bool, int], float] = {}
        self._prices: dict[int, Pricing] = {}  # the lowerings' prices, by layer count
        spec = self.plan.model
        alike = all(spec.is_moe_layer(i) == spec.is_moe_layer(0) for i in range(spec.num_layers))
        alike = alike and len(self.plan.experts.histogram) <= 1  # per-layer routing differs
        alike = alike and spec.kept.uniform  # 16-bit GEMMs on some layers only: they differ
        #: the short model the step is extrapolated from, if its layers are alike
        self._short: tuple[int, ModelSpec] | None = (
            (SHORT_LAYERS, _first_layers(spec, SHORT_LAYERS))
            if alike and spec.num_layers > 2 * SHORT_LAYERS
            else None
        )
        split = self.plan.split
        self._heads = (split.heads, split.kv_heads, spec.head_dim)
        #: layers of sliding-window attention (gpt-oss alternates them with full ones)
        self._sliding = sum(1 for i in range(spec.num_layers) if spec.is_sliding_layer(i))
        #: layers of chunked local attention (Llama 4's RoPE layers)
        self._chunked = len(spec.chunked_layers)
        #: linear-attention layers (Qwen3-Next's Gated DeltaNet): no softmax attention, their
        #: recurrence is in the lowered step (tpsim.core.lowering.gdn)
        self._linear = len(spec.linear_layers)
        # the prices lower_mixed's steps use, each kernel's kept (attention_s prices with it)
        self._pricing = self._prices[spec.num_layers] = step_pricing(
            spec, tp, self.plan.options, self.plan.hardware, self.plan.table, memo=True
        )

    @property
    def model(self) -> ModelSpec:
        return self.plan.model

    def _lower(self, model: ModelSpec, step: MixedStep, no_attention: bool) -> Programs:
        plan = self.plan
        price = self._prices.get(model.num_layers)
        if price is None:  # each kernel priced once over all the steps lowered
            price = self._prices[model.num_layers] = step_pricing(
                model, plan.layout.tp, plan.options, plan.hardware, plan.table, memo=True
            )
        return lower_mixed(model, plan.layout.tp, step, plan.options, plan.hardware,
                           plan.table, no_attention=no_attention, experts=plan.experts,
                           price=price)  # fmt: skip

    def _records(self, model: ModelSpec, step: MixedStep, no_attention: bool) -> list[Record]:
        plan = self.plan
        programs = self._lower(model, step, no_attention)
        # the host jitter of tpsim run's steps (tpsim.core.engine.jitter): the same ranks
        # wait (a TP group; with attention data parallelism the MoE group)
        lay = plan.layout
        jitter = HostJitter(plan.calib.engine.host_jitter_cv, lay.tp * lay.attention_dp,
                            plan.options.host_jitter_seed)  # fmt: skip
        sms = plan.calib.collectives.comm_sms
        if isinstance(plan.comms, Comms):
            ran = run_programs(plan.comms, programs, comm_sms=sms, host_jitter=jitter,
                               canonical=False)  # fmt: skip
        else:  # attention data parallelism over several TP groups: the layout's run
            ran = run_layout(plan.comms, programs, lay, plan.gpu, comm_sms=sms,
                             host_jitter=jitter)  # fmt: skip
        self.simulated += 1
        return ran.records

    def _run(self, model: ModelSpec, step: MixedStep, no_attention: bool) -> float:
        return metrics.makespan(self._records(model, step, no_attention))

    def _extrapolated(self, step: MixedStep) -> float:
        """The step of every layer from one short run (:data:`SHORT_LAYERS`), attention
        priced at zero: each lane (the GPU's streams, the host thread up to its post-step
        work) ends later by the same time per layer once past the first, the time its last
        layer's work ends after the layer before's (a layer's work is done before the next
        one's is, whatever follows it: the same as the difference of a run one layer
        shorter), so each is extrapolated on its own, and the step ends when both have, plus
        the host's serial post-step work (which waits for both)."""
        assert self._short is not None
        n, short = self._short
        records = self._records(short, step, True)
        end, before, last = _lanes(records), _lanes(records, n - 2), _lanes(records, n - 1)
        more = self.plan.model.num_layers - n
        gpu = end[0] + (last[0] - before[0]) * more
        cpu = end[1] + (last[1] - before[1]) * more
        return max(gpu, cpu) + end[2]

    def exact_seconds(self, step: MixedStep) -> float:
        """The iteration lowered whole and run through the engine."""
        return self._run(self.plan.model, step, no_attention=False)

    def attention_s(self, step: MixedStep) -> float:
        """Attention of every layer of ``step`` on one rank (it adds to the step as is)."""
        h, kv, hd = self._heads
        spec = self.plan.model
        if spec.is_mla:  # absorbed decodes and expanded chunks (tpsim.core.lowering.mla)
            return mixed_attention(self._pricing, spec, h, step).seconds * spec.num_layers
        sliding, chunked = self._sliding, self._chunked
        total = attention_seconds(self._pricing, step, h, kv, hd).seconds * (
            spec.num_layers - sliding - chunked - self._linear
        )
        if chunked:
            chunk = spec.attention_chunk_size
            total += (
                attention_seconds(self._pricing, step, h, kv, hd, chunk=chunk).seconds * chunked
            )
        if sliding:
            window = spec.sliding_window
            total += attention_seconds(self._pricing, step, h, kv, hd, window).seconds * sliding
        return total

    @staticmethod
    def _seqs(tokens: int, seqs: int, prefill: bool) -> int:
        """The sequences the cache times for ``tokens`` and ``seqs`` (:meth:`_composition`)."""
        seqs = min(seqs, tokens)
        if prefill and seqs == tokens:  # a prefill chunk has at least one token of its own
            seqs = max(1, tokens - 1) if tokens > 1 else 1
        return seqs

    @staticmethod
    def _composition(tokens: int, seqs: int, prefill: bool) -> MixedStep:
        """The step the cache times for ``tokens`` and ``seqs`` (from :meth:`_seqs`):
        decodes of one token each, and with a prefill one chunk of the tokens left."""
        if prefill:
            return MixedStep.of((1,) * (seqs - 1), ((tokens - seqs + 1, 0),))
        return MixedStep.of((1,) * tokens, ())

    def _memo(
        self,
        store: dict[tuple[int, int, bool], float],
        price: Callable[[MixedStep], float],
        tokens: int,
        seqs: int,
        prefill: bool,
    ) -> float:
        """``price`` of the step the cache times for ``tokens`` and ``seqs``
        (:meth:`_composition`), kept in ``store``."""
        key = (tokens, self._seqs(tokens, seqs, prefill), prefill)
        hit = store.get(key)
        if hit is None:
            hit = store[key] = price(self._composition(*key))
        return hit

    def _base_at(self, tokens: int, seqs: int, prefill: bool) -> float:
        """The step without attention at exactly ``tokens`` tokens and ``seqs`` sequences."""
        return self._memo(self._base, self._base_run, tokens, seqs, prefill)

    def _base_run(self, step: MixedStep) -> float:
        if self._short:
            return self._extrapolated(step)
        return self._run(self.plan.model, step, no_attention=True)

    def _kernels_at(self, tokens: int, seqs: int, prefill: bool) -> float:
        """The GPU kernels' seconds of the step without attention at exactly ``tokens``
        tokens and ``seqs`` sequences, lowered but not run (:meth:`_kernels_priced`)."""
        return self._memo(self._kernels, self._kernels_priced, tokens, seqs, prefill)

    def _kernels_priced(self, step: MixedStep) -> float:
        """The sum of the compute stream's priced kernels of ``step`` on its busiest rank,
        the repeating layer's extrapolated to every layer. It carries the steps a GEMM's
        wave and tile counts put into the step's time, at the cost of a lowering (no engine
        run)."""
        model = self._short[1] if self._short else self.plan.model
        programs = self._lower(model, step, no_attention=True)
        repeat = self._short[0] - 1 if self._short else -1  # the short model's last layer
        extra = self.plan.model.num_layers - model.num_layers
        best = 0.0
        for program in {id(p): p for p in programs}.values():
            total = layer = 0.0
            for op in program.ops:
                if op.stream == "compute":
                    total += op.seconds
                    if op.layer == repeat:
                        layer += op.seconds
            best = max(best, total + extra * layer)
        return best

    def _along_tokens(self, tokens: int, seqs: int | None, prefill: bool) -> float:
        """The step without attention at ``tokens`` tokens (and ``seqs`` sequences; None:
        as many as tokens), interpolated between token grid points where it is linear.

        A GEMM's wave count steps its time up at some token counts, so what is interpolated
        is the step less its GPU kernels' priced seconds (:meth:`_kernels_at`, known at any
        count without running the engine), which are added back at ``tokens``: where the
        step is GPU-bound the steps cancel and the rest (collectives, gaps) is near-linear.
        The bracket is halved towards ``tokens`` while the step so rebuilt at its midpoint
        strays from the simulated one by more than :data:`LINEAR_TOL` (down to one token:
        exact), so a host-bound stretch, where the kernels' steps do not show, or a
        collective that changes its protocol, is resolved as finely as it needs. Never
        across the engine's CUDA-graph limit."""

        def g(t: int) -> float:
            return self._kernels_at(t, t if seqs is None else seqs, prefill)

        def f(t: int) -> float:
            return self._base_at(t, t if seqs is None else seqs, prefill) - g(t)

        lo, hi = grid_below(tokens, PER_OCTAVE), grid_above(tokens, PER_OCTAVE)
        if lo == tokens:
            return f(tokens) + g(tokens)
        graphs = self.plan.calib.engine.graph_max_tokens
        if lo <= graphs < tokens:
            lo = graphs + 1
        elif tokens <= graphs < hi:
            hi = graphs
        return interpolate(tokens, lo, hi, f, g, lambda t: f(t) + g(t))

    def _per_sequence(self, seqs: int) -> float:
        """What ``seqs`` sequences add to a prefill step over one sequence of the same
        tokens (at :data:`REFERENCE_TOKENS`): the LM head's rows, their logits' all-gather
        and the host's per-sequence work. Interpolated between sequence grid points as
        :meth:`_along_tokens` interpolates the tokens' part: less what the GPU kernels'
        prices add (the LM head's GEMM steps up with its rows' tiles), the bracket halved
        while its midpoint strays by more than :data:`LINEAR_TOL` of the step."""

        def at(b: int) -> int:
            return max(b, REFERENCE_TOKENS)

        def g(b: int) -> float:
            return self._kernels_at(at(b), b, True) - self._kernels_at(at(b), 1, True)

        def f(b: int) -> float:
            return self._base_at(at(b), b, True) - self._base_at(at(b), 1, True) - g(b)

        lo = grid_below(seqs, SEQ_PER_OCTAVE, SEQ_EXACT_BELOW)
        if lo == seqs:
            return f(seqs) + g(seqs)
        hi = grid_above(seqs, SEQ_PER_OCTAVE, SEQ_EXACT_BELOW)
        return interpolate(seqs, lo, hi, f, g, lambda b: self._base_at(at(b), b, True))

    def base_seconds(self, tokens: int, seqs: int, prefill: bool) -> float:
        """The step without attention. Decodes alone: a function of the tokens (one per
        sequence), :meth:`_along_tokens`. With a prefill: the tokens' part (one sequence)
        plus the sequences' part (:meth:`_per_sequence`), which add up: the sequences'
        work is the host's before and after the layers and the head after them, the
        tokens' is the layers'. Up to :data:`EXACT_BELOW` tokens, every step is simulated
        as it is (a short step can be host-bound, where nothing adds up)."""
        if tokens <= EXACT_BELOW:
            return self._base_at(tokens, seqs, prefill)
        if not prefill:
            return self._along_tokens(tokens, None, False)
        return self._along_tokens(tokens, 1, True) + self._per_sequence(seqs)

    def seconds(self, step: MixedStep) -> float:
        """The iteration's time: exact, or the cache's answer. A step whose MoE layers route
        a token count of its own (``step.routed``) adds what its experts' kernels take at
        that count over what they take when every attention group runs ``step``
        (:meth:`_routed_delta`): the experts' GEMMs run on the compute stream between the
        dispatch and the combine, which wait for them, so their seconds add to the step."""
        if self.exact:
            return self.exact_seconds(step)
        prefill = bool(step.chunks)
        base = self.base_seconds(step.tokens, step.batch, prefill)
        return base + self.attention_s(step) + self._routed_delta(step, prefill)

    def _routed_delta(self, step: MixedStep, prefill: bool) -> float:
        xs = self.plan.experts
        if not step.routed or not xs.dispatch or step.routed == xs.routed_tokens(step.tokens):
            return 0.0
        key = (step.tokens, self._seqs(step.tokens, step.batch, prefill), prefill)
        own = self._routed.get((*key, step.routed))
        if own is None:
            routed = replace(self._composition(*key), routed=step.routed)
            own = self._routed[(*key, step.routed)] = self._kernels_priced(routed)
        return own - self._kernels_at(step.tokens, step.batch, prefill)

    def group_seconds(self, steps: Sequence[MixedStep]) -> float:
        """One iteration of attention data-parallel groups that each run a step of their
        own (``steps``: those with work; an idle group joins the collectives with none):
        every group's layers wait at each MoE layer's all-to-all for the others, whose
        tokens its experts compute, so the iteration lasts as long as the slowest group's
        step with the MoE layers routing every group's tokens."""
        routed = sum(s.tokens for s in steps)
        return max(self.seconds(replace(s, routed=routed)) for s in steps)


__all__ = ["IterationTimer", "grid_above", "grid_below", "interpolate"]
