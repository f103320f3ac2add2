"""What each tensor of a pass is stored and computed in: :class:`Precision`, resolved from
``--dtype``/``--kv-dtype``, the model's checkpoint and the GPU's tensor cores
(:func:`precision`, :func:`run_precision`), and the bytes of each dtype."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tpsim.models.kept import NONE_KEPT, KeptModules
from tpsim.models.spec import DTYPE_BYTES, ModelSpec

if TYPE_CHECKING:
    from tpsim.core.config import Options
    from tpsim.topologies.gpus import GPUSpec


@dataclass(frozen=True, slots=True)
class Precision:
    """The dtype of each kind of tensor in the pass (what ``--dtype``/``--kv-dtype`` mean).

    ``--dtype fp8`` quantises the linear layers (QKV, O, gate/up, down), as fp8 checkpoints
    for vLLM do (llm-compressor's FP8 schemes leave ``lm_head`` out): weights in fp8 and, on a
    GPU with fp8 tensor cores, the GEMM inputs too (W8A8, fp8 peak). A GPU without fp8 tensor
    cores (A100) runs them weight-only (W8A16, vLLM's fp8 Marlin kernels): fp8 weight bytes,
    16-bit inputs, the 16-bit peak. The residual stream, norms, GEMM outputs, attention Q/O,
    collectives, embedding and LM head stay 16-bit in either case.

    ``--dtype fp4`` stores the same layers in NVFP4 (4-bit e2m1, an fp8 scale per 16
    elements: 0.5625 byte per weight). On a GPU with fp4 tensor cores (Blackwell) the GEMMs
    quantise their inputs to NVFP4 and run at the fp4 peak (W4A4); on one with fp8 tensor
    cores (Hopper, Ada) the weights are dequantised to fp8 in the GEMM prologue and the GEMM
    runs at the fp8 peak with fp8 inputs (W4A8); on Ampere they are dequantised to 16 bits
    (W4A16, Marlin).

    The KV cache of a quantised run (``--dtype fp8`` or ``fp4``) without ``--kv-dtype`` is
    as the engine profile keeps it (:attr:`tpsim.calibration.Engine.kv_cache_dtype`):
    "activation" leaves it 16-bit, as vLLM's and SGLang's ``--kv-cache-dtype auto`` do
    for a checkpoint that declares no cache quantisation; "quantised" (TensorRT-LLM, whose
    ModelOpt checkpoints declare an fp8 cache, and the ideal engine) makes it fp8, with
    ``fp4`` only where the GPU has fp8 tensor cores, else 16-bit.

    ``--dtype int4`` stores them as AWQ and GPTQ checkpoints do (4-bit integers, a 16-bit
    scale and a 4-bit zero point per 128 weights: 0.52 byte per weight), and runs them as
    vLLM and SGLang do on every GPU since Ampere: weight-only (W4A16), the Marlin kernels
    (awq_marlin, gptq_marlin; Machete for GPTQ on Hopper) dequantising each tile in
    registers ahead of the 16-bit tensor cores, so the GEMM reads 4-bit weights at the 16-bit
    peak. The KV cache stays 16-bit (no integer cache is modelled).

    ``experts``: the routed experts' weights, which a checkpoint may store apart
    (gpt-oss: MXFP4, run weight-only at the GEMMs' own math).

    ``kept``: the GEMMs a quantised checkpoint run as stored keeps 16-bit
    (:class:`tpsim.models.kept.KeptModules`: Meta's Llama-3.1-405B-FP8 keeps attention and
    its first and last layers' MLP bf16), as vLLM builds a skipped layer
    (``UnquantizedLinearMethod``): ``act`` weights and inputs at the 16-bit peak.
    """

    weights: str  # linear-layer weights (QKV, O, MLP)
    gemm_in: str  # activations entering those GEMMs
    act: str  # everything else: residual stream, outputs, embedding/LM head weights, norms
    kv: str  # KV cache
    math: str  # the tensor-core peak the linear GEMMs run at
    experts: str = ""  # the routed experts' weights ("": as weights)
    kept: KeptModules = NONE_KEPT  # GEMMs kept 16-bit (a checkpoint run as stored)

    @property
    def expert_weights(self) -> str:
        return self.experts or self.weights

    def note(self, gpu: str) -> str:
        """One line saying how 8- and 4-bit weights run on ``gpu``, and the KV cache's dtype
        ('' for 16-bit runs)."""
        parts = []
        if self.weights == "int4":
            parts.append(
                f"linear weights int4 (AWQ/GPTQ: a 16-bit scale and 4-bit zero per 128), "
                f"dequantised to {self.math} in the GEMM (Marlin), {self.math} math (W4A16)"
            )
        elif self.weights in ("fp8", "fp4"):
            bits = 4 if self.weights == "fp4" else 8
            form = " (NVFP4: e2m1, an fp8 scale per 16)" if bits == 4 else ""
            if self.math == self.weights:
                how = f"{self.math} tensor cores (W{bits}A{bits})"
            elif self.math == "fp8":
                how = "dequantised to fp8 in the GEMM prologue, fp8 tensor cores (W4A8)"
            else:
                how = (
                    f"dequantised to {self.math} in the GEMM prologue, {self.math} math "
                    f"(W{bits}A16: no {'fp8 or fp4' if bits == 4 else 'fp8'} tensor cores "
                    f"on {gpu})"
                )
            parts.append(f"linear weights {self.weights}{form}, {how}")
        if self.experts and self.experts != self.weights:
            scale = "e2m1, an e8m0 scale per 32" if self.experts == "mxfp4" else "as stored"
            parts.append(
                f"routed experts {self.experts} ({scale}), dequantised to {self.gemm_in} in "
                f"the GEMM prologue, {self.math} math"
            )
        if parts:  # the cache of a quantised run, as --kv-dtype or the engine keeps it
            parts.append(f"KV cache {self.kv}")
        if self.kept:
            parts.append(f"kept {self.act} by the checkpoint ({self.act} math): "
                         f"{self.kept.describe()}")  # fmt: skip
        return "; ".join(parts)


def precision(
    options: Options,
    model_dtype: str,
    fp8_tensor_cores: bool,
    *,
    fp4_tensor_cores: bool = False,
    expert_dtype: str = "",
    kept: KeptModules = NONE_KEPT,
    kv_declared: str = "",
) -> Precision:
    """Resolve ``options.dtype``/``kv_dtype`` against the model and the GPU.

    No ``--dtype``: the model's own dtype, except fp32 checkpoints, which run in fp16 (vLLM's
    ``dtype="auto"``: "FP16 precision for FP32 and FP16 models, BF16 for BF16 models"), and
    routed experts stored in their own ``expert_dtype`` (gpt-oss's MXFP4) stay in it. A
    ``--dtype`` quantises (or dequantises) every linear layer, the experts too. The KV cache
    is ``--kv-dtype``, else a 16-bit ``--dtype``'s, else as the engine profile of
    ``options`` keeps a quantised run's (:class:`Precision`); a checkpoint stored in fp8
    (DeepSeek-V3's) or NVFP4 run without ``--dtype`` keeps a 16-bit cache, as every
    engine's ``auto`` does for one that declares no cache quantisation. The GEMMs a
    checkpoint keeps 16-bit (``kept``) stay so run as stored; a ``--dtype`` quantises them
    too.
    """
    quantised_kv = options.calibration.engine.kv_cache_dtype == "quantised"
    prec = _resolved(options, model_dtype, fp8_tensor_cores, fp4_tensor_cores, expert_dtype,
                     quantised_kv=quantised_kv)  # fmt: skip
    if options.dtype is None and options.kv_dtype is None and kv_declared:
        # a checkpoint that declares its cache's quantisation (ModelOpt's
        # kv_cache_quant_algo, llm-compressor's kv_cache_scheme), run as stored: every
        # engine's "auto" follows it
        prec = replace(prec, kv=kv_declared)
    if options.dtype is None and kept:
        return replace(prec, kept=kept)
    return prec


def _resolved(
    options: Options,
    model_dtype: str,
    fp8_tensor_cores: bool,
    fp4_tensor_cores: bool,
    expert_dtype: str,
    *,
    quantised_kv: bool,
) -> Precision:
    experts = "" if options.dtype else expert_dtype
    base = options.dtype or model_dtype
    if base == "fp32":
        base = "fp16"
    act = model_dtype if model_dtype in ("bf16", "fp16") else "bf16"
    # the engine quantises the cache with the weights (not those of a checkpoint run as
    # stored: every engine's "auto" keeps its cache 16-bit)
    quantised_kv = quantised_kv and options.dtype is not None
    if base == "int4":  # W4A16 everywhere (Marlin); no integer KV cache
        return Precision("int4", act, act, options.kv_dtype or act, act, experts)
    if base == "fp4":
        kv = options.kv_dtype or ("fp8" if fp8_tensor_cores and quantised_kv else act)
        if fp4_tensor_cores:
            return Precision("fp4", "fp4", act, kv, "fp4")
        if fp8_tensor_cores:
            return Precision("fp4", "fp8", act, kv, "fp8")  # W4A8: dequantised to fp8
        return Precision("fp4", act, act, kv, act)  # W4A16 (Marlin): Ampere
    kv = options.kv_dtype or (act if base == "fp8" and not quantised_kv else base)
    if base != "fp8":
        return Precision(base, base, base, kv, base, experts)
    if fp8_tensor_cores:
        return Precision("fp8", "fp8", act, kv, "fp8", experts)
    return Precision("fp8", act, act, kv, act, experts)  # W8A16: no fp8 tensor cores (A100)


def run_precision(options: Options, model: ModelSpec, gpu: GPUSpec) -> Precision:
    """:func:`precision` of ``model`` on ``gpu`` (its fp8 and fp4 tensor cores)."""
    return precision(
        options,
        model.dtype,
        gpu.fp8_flops is not None,
        fp4_tensor_cores=gpu.fp4_flops is not None,
        expert_dtype=model.expert_dtype,
        kept=model.kept,
        kv_declared=model.kv_cache_dtype,
    )


def dtype_bytes(dtype: str) -> float:
    return DTYPE_BYTES[dtype]


__all__ = ["Precision", "dtype_bytes", "precision", "run_precision"]
