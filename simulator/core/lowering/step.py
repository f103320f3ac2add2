"""What one step of a TP group is made of before its ops are built: the passes it runs
through the layers (:func:`passes`), the slices of the batch each pass runs as
(:func:`batch_slices`), the launch mode the engine runs it in (:func:`launch_mode`) and the
prices of its kernels (:func:`step_pricing`). :mod:`tpsim.core.lowering.lower` (one pass of
a TP group), :mod:`~tpsim.core.lowering.pipeline` (stages) and
:mod:`~tpsim.core.lowering.mixed` (serving steps) build their ops from these."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tpsim.calibration import Engine
from tpsim.core.config import ConfigError, Options, Workload, ceil_div
from tpsim.core.kernels.costs import Hardware
from tpsim.core.kernels.kernel_table import KernelTable
from tpsim.core.kernels.pricing import Pricing
from tpsim.core.lowering import host
from tpsim.core.precision import precision
from tpsim.models.spec import ModelSpec


@dataclass(frozen=True)
class Slice:
    """A micro-batch: ``batch`` sequences, ``tokens`` tokens in the pass (its ops form one
    dependency chain, numbered ``index``)."""

    index: int
    batch: int
    tokens: int


def step_pricing(model: ModelSpec, tp: int, options: Options, hw: Hardware,
                 table: KernelTable | None, memo: bool = False) -> Pricing:  # fmt: skip
    """The prices of a step of ``model`` at ``tp``: the run's dtypes on ``hw``, ``table``'s
    measured kernels of this shape; ``memo``: each kernel priced once however often it is
    asked for (:attr:`Pricing.memo`: for a caller that lowers many steps of one model)."""
    if table is not None:  # measured kernels of this model's shape at this TP
        table = table.bind(model, tp)
    prec = precision(
        options,
        model.dtype,
        hw.fp8_tensor_cores,
        fp4_tensor_cores=hw.fp4_tensor_cores,
        expert_dtype=model.expert_dtype,
        kept=model.kept,
        kv_declared=model.kv_cache_dtype,
    )
    price = Pricing.of(hw, prec, table)
    return replace(price, memo={}) if memo else price


def launch_mode(workload: Workload, options: Options) -> str:
    """The launch mode a step of ``workload`` really runs in (as
    :func:`tpsim.core.lowering.lower.start_step` decides it for the step's first pass):
    ``options.launch`` where the engine has a CUDA graph for it, else eager."""
    engine = options.calibration.engine
    first = passes(workload, engine)[0]
    return host.step_mode(engine, options.launch, first.phase, first.tokens)


def passes(workload: Workload, engine: Engine) -> list[Workload]:
    """The passes one step runs through the layers, in order; the last computes the logits.

    One, the workload itself, except a prefill under an engine whose first token comes from
    a decode step (``first_token: decode_step``, FasterTransformer and TurboMind v0.1): the
    prefill of all but the last prompt token (none for a one-token prompt), then the decode
    step of that token over the cache, which samples the first token.
    """
    if workload.phase != "prefill" or engine.first_token != "decode_step":
        return [workload]
    step = Workload(workload.batch, "decode", workload.prompt_len, workload.prompt_len)
    if workload.prompt_len == 1:
        return [step]
    return [replace(workload, prompt_len=workload.prompt_len - 1), step]


def batch_slices(workload: Workload, options: Options) -> list[Slice]:
    """The pass as one slice, or two halves of the batch with microbatch overlap."""
    if options.overlap != "microbatch":
        return [Slice(0, workload.batch, workload.tokens)]
    if workload.batch < 2:
        raise ConfigError("overlap='microbatch': needs batch >= 2 to split in two")
    per_seq = workload.tokens // workload.batch
    first = ceil_div(workload.batch, 2)
    return [
        Slice(0, first, first * per_seq),
        Slice(1, workload.batch - first, (workload.batch - first) * per_seq),
    ]


__all__ = ["Slice", "batch_slices", "launch_mode", "passes", "step_pricing"]
