"""The KV cache of a quantised run without ``--kv-dtype`` is as the engine keeps it (its
profile's ``kv_cache_dtype``): vLLM's, SGLang's and the other engines' ``auto`` leave it in
the activations' 16-bit dtype whatever ``--dtype`` quantises; TensorRT-LLM's follows its
ModelOpt checkpoints' fp8 cache, and the ideal engine quantises it as before. An explicit
``--kv-dtype`` always wins; every path that resolves the precision (run, plan, serve,
claim) reads the same rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpsim import Options, Workload
from tpsim.calibration import CalibrationError, engines, profile
from tpsim.cli import main
from tpsim.core.memory import memory_per_gpu
from tpsim.core.precision import run_precision
from tpsim.experiments.claim import lower_bound
from tpsim.experiments.plan import PlanRequest, fitting_batches
from tpsim.models import MODELS, ModelSpec
from tpsim.models.catalog import CONFIGS
from tpsim.topologies.gpus import GPUS, GPUSpec

LLAMA, DS = MODELS["llama-3.1-8b"], MODELS["deepseek-v3"]
H100, A100 = GPUS["h100-sxm"], GPUS["a100-sxm-80gb"]
#: each shipped engine's cache under --dtype fp8 on an H100
FP8_CACHE = {
    "ideal": "fp8",
    "fastertransformer": "bf16",
    "gpt-fast": "bf16",
    "sglang": "bf16",
    "tgi-v1": "bf16",
    "trtllm": "fp8",
    "vllm": "bf16",
    "vllm-v0": "bf16",
}


def _kv(
    engine: str,
    dtype: str | None,
    gpu: GPUSpec = H100,
    model: ModelSpec = LLAMA,
    kv: str | None = None,
) -> str:
    return run_precision(Options(engine=engine, dtype=dtype, kv_dtype=kv), model, gpu).kv


def test_every_shipped_profile_says_where_its_cache_goes() -> None:
    assert {e: profile(e).engine.kv_cache_dtype for e in engines()} == {
        e: "quantised" if kv == "fp8" else "activation" for e, kv in FP8_CACHE.items()
    }
    assert {e: _kv(e, "fp8") for e in engines()} == FP8_CACHE


@pytest.mark.parametrize("engine", ["vllm", "vllm-v0"])
def test_vllm_keeps_a_16_bit_cache_under_quantised_weights(engine: str) -> None:
    """vLLM's --kv-cache-dtype auto: the model's dtype, under fp8 and NVFP4 weights alike,
    on any GPU; fp8 only when asked."""
    for gpu in (H100, A100, GPUS["b200"]):
        assert _kv(engine, "fp8", gpu) == _kv(engine, "fp4", gpu) == "bf16"
    assert _kv(engine, "fp8", kv="fp8") == "fp8"
    assert _kv(engine, "fp8", model=DS, gpu=GPUS["h200-sxm"]) == "bf16"


def test_sglang_keeps_a_16_bit_cache_under_quantised_weights() -> None:
    for gpu in (H100, GPUS["b200"]):
        assert _kv("sglang", "fp8", gpu) == _kv("sglang", "fp4", gpu) == "bf16"
    assert _kv("sglang", "fp8", model=DS, gpu=GPUS["h200-sxm"]) == "bf16"
    assert _kv("sglang", "fp4", kv="fp8") == "fp8"


def test_trtllm_quantises_the_cache_with_its_modelopt_checkpoints() -> None:
    """fp8 with fp8 weights; with NVFP4 weights where the GPU has fp8 tensor cores (Hopper,
    Blackwell), 16-bit on an A100; an explicit bf16 cache wins."""
    assert _kv("trtllm", "fp8") == _kv("trtllm", "fp4") == "fp8"
    assert _kv("trtllm", "fp4", GPUS["b200"]) == "fp8"
    assert _kv("trtllm", "fp4", A100) == "bf16"
    assert _kv("trtllm", "fp8", kv="bf16") == "bf16"


@pytest.mark.parametrize("engine", ["tgi-v1", "fastertransformer", "gpt-fast"])
def test_the_other_engines_keep_the_model_s_dtype(engine: str) -> None:
    assert _kv(engine, "fp8") == "bf16" and _kv(engine, "fp8", kv="fp8") == "fp8"


def test_ideal_quantises_the_cache_as_before() -> None:
    assert _kv("ideal", "fp8") == _kv("ideal", "fp4") == "fp8"
    assert _kv("ideal", "fp4", A100) == "bf16"


@pytest.mark.parametrize("engine", sorted(FP8_CACHE))
def test_16_bit_int4_and_stored_checkpoints_are_the_same_under_every_engine(engine: str) -> None:
    """A 16-bit --dtype is the cache's; int4 has no integer cache; a checkpoint run as stored
    (DeepSeek-V3's fp8) keeps a 16-bit one, as every engine's auto does."""
    assert _kv(engine, "fp16") == "fp16" and _kv(engine, None) == "bf16"
    assert _kv(engine, "int4") == "bf16"
    assert _kv(engine, None, model=DS, gpu=GPUS["h200-sxm"]) == "bf16"


def test_a_profile_s_kv_cache_dtype_outside_its_choices_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "x.yaml"
    f.write_text("name: x\nextends: vllm\noverrides:\n  engine:\n"
                 "    kv_cache_dtype: {value: fp8, source: test}\n")  # fmt: skip
    with pytest.raises(CalibrationError, match="kv_cache_dtype='fp8': must be one of"):
        profile(str(f))
    rc = main(["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1",
               "--dtype", "fp8", "--engine", str(f)])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "kv_cache_dtype='fp8'" in err


def test_memory_plan_and_claim_read_the_engine_s_cache() -> None:
    wl = Workload(32, "decode", context_len=4096)
    vllm = memory_per_gpu(LLAMA, 1, wl, Options(dtype="fp8"), H100).kv_cache_bytes_per_gpu
    trt = memory_per_gpu(LLAMA, 1, wl, Options(dtype="fp8", engine="trtllm"), H100)
    assert vllm == 2 * trt.kv_cache_bytes_per_gpu == 32 * 4096 * 32 * 8 * 128 * 2 * 2
    # plan: a 16-bit cache holds fewer sequences (TP 1 of an 8B model in fp8 on an H100)
    req = PlanRequest("llama-3.1-8b", "dgx-h100", gpus=1, context_len=32768, dtype="fp8")
    most = {e: fitting_batches(PlanRequest(**{**req.__dict__, "engine": e}), 1, 1)[-1]
            for e in ("vllm", "trtllm")}  # fmt: skip
    assert most["trtllm"] > 1.8 * most["vllm"]
    # claim: a lower bound for any engine reads the smallest cache an fp8 run keeps
    bound = lower_bound("llama-3.1-8b", "dgx-h100", 1, wl, dtype="fp8")
    assert bound.details["kv_bytes_read_per_gpu"] == pytest.approx(32 * 4095 * 32 * 8 * 128 * 2)


def _declaring(quant: dict) -> ModelSpec:
    from tpsim.models.hf_config import spec_from_hf_dict

    cfg = json.loads((CONFIGS / "qwen3-32b.json").read_text())
    return spec_from_hf_dict({**cfg, "quantization_config": quant}, "q")


def test_a_checkpoint_that_declares_an_fp8_cache_runs_one_as_stored() -> None:
    """ModelOpt's kv_cache_quant_algo FP8 (nvidia's FP8 and FP4 releases) and
    llm-compressor's 8-bit float kv_cache_scheme: every engine's auto cache follows them,
    where tpsim had kept it 16-bit; --kv-dtype and --dtype keep their meaning."""
    modelopt = _declaring({"quant_method": "modelopt", "quant_algo": "FP8",
                           "kv_cache_quant_algo": "FP8"})  # fmt: skip
    ct = _declaring({"quant_method": "compressed-tensors",
                     "config_groups": {"g": {"weights": {"type": "float", "num_bits": 8}}},
                     "kv_cache_scheme": {"type": "float", "num_bits": 8}})  # fmt: skip
    silent = _declaring({"quant_method": "modelopt", "quant_algo": "FP8"})
    assert modelopt.kv_cache_dtype == ct.kv_cache_dtype == "fp8"
    assert silent.kv_cache_dtype == "" and "kv_cache_dtype" not in silent.to_dict()
    assert modelopt.to_dict()["kv_cache_dtype"] == "fp8"
    for engine in ("vllm", "sglang", "trtllm"):
        assert _kv(engine, None, model=modelopt) == _kv(engine, None, model=ct) == "fp8"
        assert _kv(engine, None, model=silent) == "bf16"
        assert _kv(engine, None, model=modelopt, kv="bf16") == "bf16"
    stored = memory_per_gpu(modelopt, 2, Workload(8, "decode", 1, 4096), Options(), H100)
    plain = memory_per_gpu(silent, 2, Workload(8, "decode", 1, 4096), Options(), H100)
    assert stored.kv_cache_bytes_per_gpu * 2 == plain.kv_cache_bytes_per_gpu


@pytest.mark.parametrize(
    ("quant", "field"),
    [
        ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "INT8"},
         "kv_cache_quant_algo"),
        ({"quant_method": "compressed-tensors",
          "config_groups": {"g": {"weights": {"type": "float", "num_bits": 8}}},
          "kv_cache_scheme": {"type": "int", "num_bits": 8}}, "kv_cache_scheme"),
    ],
)  # fmt: skip
def test_another_declared_cache_format_is_refused_naming_it(quant: dict, field: str) -> None:
    from tpsim.models import ModelError

    with pytest.raises(ModelError, match=rf"^quantization_config\.{field}=.*not modelled"):
        _declaring(quant)
