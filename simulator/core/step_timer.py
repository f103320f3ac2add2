"""How long one serving iteration takes: the forward-pass simulator run on its composition.

:class:`IterationTimer` resolves a TP group once (:func:`tpsim.core.plan.resolve`) and times
any :class:`~tpsim.core.lowering.mixed.MixedStep` on it: ``exact`` lowers and runs the whole
iteration through the engine; otherwise a cache answers.

The cache keeps what the engine must simulate apart from what is a pure function:

- attention, the only part that depends on each sequence's context, is priced directly
  (:func:`~tpsim.core.lowering.mixed.attention_seconds`, times the layers): it runs on the
  compute stream between the QKV and output GEMMs, nothing overlaps it, so it adds to the
  step as it is;
- the rest depends on the iteration's tokens ``T``, its sequences ``B`` (LM head rows, the
  host's per-sequence work) and whether a prefill runs (the engine's CUDA-graph rule). It
  is simulated with attention priced at zero on a grid of (T, B) points and interpolated
  bilinearly between them. The grid is exact up to 64 and then 32 points per octave (a
  GEMM's tile and wave steps fall between points; the error this leaves is tested against
  exact simulation, ``tests/core/test_step_timer.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpsim.core import metrics
from tpsim.core.comm.group import Comms, run_programs
from tpsim.core.config import Layout, Options, Workload, precision
from tpsim.core.kernels.pricing import Pricing
from tpsim.core.lowering.mixed import MixedStep, attention_seconds, lower_mixed
from tpsim.core.plan import RunPlan, resolve
from tpsim.models.spec import ModelSpec

if TYPE_CHECKING:
    import networkx as nx

#: Grid points per octave above :data:`EXACT_BELOW` (token and sequence counts).
PER_OCTAVE = 32
EXACT_BELOW = 64


def grid_below(x: int) -> int:
    """The largest grid point <= ``x`` (``x`` itself below :data:`EXACT_BELOW`)."""
    if x <= EXACT_BELOW:
        return x
    step = 1 << max(0, x.bit_length() - 1 - PER_OCTAVE.bit_length() + 1)
    return x - x % step


def grid_above(x: int) -> int:
    """The smallest grid point > ``x``."""
    if x < EXACT_BELOW:
        return x + 1
    lo = grid_below(x)
    step = 1 << max(0, (lo + 1).bit_length() - 1 - PER_OCTAVE.bit_length() + 1)
    return lo + step


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
    ) -> None:
        layout = Layout(tp, gpus_per_node)
        self.plan: RunPlan = resolve(
            model, topology, layout, Workload(1, "decode", 1, 1), options, nodes=nodes
        )
        self.exact = exact
        self.simulated = 0  # engine runs so far (the cache's misses)
        self._base: dict[tuple[int, int, bool], float] = {}
        spec = self.plan.model
        split = self.plan.split
        self._heads = (split.heads, split.kv_heads, spec.head_dim)
        p = self.plan  # the prices lower_mixed's steps use (tpsim.core.lowering.lower.start_step)
        prec = precision(p.options, spec.dtype, p.hardware.fp8_tensor_cores)
        self._pricing = Pricing.of(p.hardware, prec, p.table.bind(spec, tp) if p.table else None)

    @property
    def model(self) -> ModelSpec:
        return self.plan.model

    def _run(self, model: ModelSpec, step: MixedStep, no_attention: bool) -> float:
        plan = self.plan
        programs = lower_mixed(model, plan.layout.tp, step, plan.options, plan.hardware,
                               plan.table, no_attention=no_attention)  # fmt: skip
        assert isinstance(plan.comms, Comms)
        ran = run_programs(plan.comms, programs, comm_sms=plan.calib.collectives.comm_sms)
        self.simulated += 1
        return metrics.makespan(ran.records)

    def exact_seconds(self, step: MixedStep) -> float:
        """The iteration lowered whole and run through the engine."""
        return self._run(self.plan.model, step, no_attention=False)

    def attention_s(self, step: MixedStep) -> float:
        """Attention of every layer of ``step`` on one rank (it adds to the step as is)."""
        h, kv, hd = self._heads
        one = attention_seconds(self._pricing, step, h, kv, hd).seconds
        return one * self.plan.model.num_layers

    def _base_at(self, tokens: int, seqs: int, prefill: bool) -> float:
        """The step without attention at exactly ``tokens`` tokens and ``seqs`` sequences."""
        seqs = min(seqs, tokens)
        if prefill and seqs == tokens:  # a prefill chunk has at least one token of its own
            seqs = max(1, tokens - 1) if tokens > 1 else 1
        key = (tokens, seqs, prefill)
        hit = self._base.get(key)
        if hit is not None:
            return hit
        if prefill:
            step = MixedStep.of((1,) * (seqs - 1), ((tokens - seqs + 1, 0),))
        else:
            step = MixedStep.of((1,) * tokens, ())
        t = self._run(self.plan.model, step, no_attention=True)
        self._base[key] = t
        return t

    def base_seconds(self, tokens: int, seqs: int, prefill: bool) -> float:
        """The step without attention, interpolated bilinearly on the (tokens, sequences)
        grid."""
        t0, t1 = grid_below(tokens), grid_above(tokens)
        b0, b1 = grid_below(seqs), grid_above(seqs)
        ft = 0.0 if t0 == tokens else (tokens - t0) / (t1 - t0)
        fb = 0.0 if b0 == seqs else (seqs - b0) / (b1 - b0)

        def at(t: int, b: int) -> float:
            return self._base_at(t, min(b, t), prefill)

        low = at(t0, b0) if fb == 0 else (1 - fb) * at(t0, b0) + fb * at(t0, b1)
        if ft == 0:
            return low
        high = at(t1, b0) if fb == 0 else (1 - fb) * at(t1, b0) + fb * at(t1, b1)
        return (1 - ft) * low + ft * high

    def seconds(self, step: MixedStep) -> float:
        """The iteration's time: exact, or the cache's answer."""
        if self.exact:
            return self.exact_seconds(step)
        base = self.base_seconds(step.tokens, step.batch, bool(step.chunks))
        return base + self.attention_s(step)


__all__ = ["IterationTimer", "grid_above", "grid_below"]
