"""The routed experts as the serving engine builds them: the width per GPU and the hidden size
their weights are made at and their grouped GEMMs run at, which the engine may round up from
the checkpoint's for the MoE kernel it picks (:func:`engine_experts`).

- Under DeepEP, an engine that pads the hidden size for DeepEP's kernels (vLLM's
  ``maybe_roundup_layer_hidden_size``: :func:`tpsim.core.deepep_buffers.hidden_for`) pads
  the MoE layer's own: FusedMoE takes the rounded size as its ``hidden_size``
  (fused_moe/layer.py ``maybe_roundup_hidden_size``, before ``FusedMoEConfig`` and
  ``quant_method.create_weights``), so the experts' ``w13`` [E, 2 Im, H] and ``w2`` [E, H,
  Im] are built at it and the hidden states are padded into the experts and cut after. The
  router (the model's gate) and the shared experts (a plain MLP beside FusedMoE) stay at the
  model's hidden size. vLLM runs one all-to-all backend a deployment: a decode step here
  (DeepEP's low-latency kernels) stands for ``deepep_low_latency``, a prefill for
  ``deepep_high_throughput``.
- An MXFP4 checkpoint's experts (gpt-oss) are rounded for the engine's MXFP4 MoE kernel on
  the GPU's architecture (the profile's ``mxfp4_expert_pad``; ``_batched`` where DeepEP's
  low-latency kernels hand the experts their tokens batched per expert), after the DeepEP
  rounding (vLLM's ``Mxfp4MoEMethod.maybe_roundup_sizes`` calls the base's first).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tpsim.core.config import ceil_div
from tpsim.core.deepep_buffers import hidden_for

if TYPE_CHECKING:
    from tpsim.calibration.model import Engine
    from tpsim.core.lowering.experts import ExpertSplit
    from tpsim.models.spec import ModelSpec


def engine_experts(
    xs: ExpertSplit,
    model: ModelSpec,
    engine: Engine,
    *,
    arch: str,
    expert_dtype: str,
    phase: str,
    a2a: str,
) -> ExpertSplit:
    """``xs`` with the routed experts' width alignment and hidden size as ``engine`` builds
    them on a GPU of ``arch`` (``expert_dtype``: the routed experts' weights, the
    precision's; ``phase`` and ``a2a`` pick DeepEP's kernels); unchanged for a dense model."""
    if not model.is_moe:
        return xs
    hidden = model.hidden_size
    deepep = a2a == "deepep" and xs.dispatch
    low_latency = deepep and phase == "decode"
    if deepep and engine.deepep_pad_hidden:
        hidden = hidden_for(hidden, engine, low_latency=low_latency)
    align = 1
    if expert_dtype == "mxfp4":
        pad = engine.mxfp4_expert_pad.get(arch)
        if low_latency and engine.mxfp4_expert_pad_batched is not None:
            pad = engine.mxfp4_expert_pad_batched
        if pad is not None:
            align, multiple = pad
            hidden = ceil_div(hidden, multiple) * multiple
    return replace(xs, width_align=align, expert_hidden=hidden)


__all__ = ["engine_experts"]
