"""4-bit integer weights (AWQ, GPTQ, llm-compressor W4A16): stored in groups of 128 with a
16-bit scale and a 4-bit zero point, run weight-only (W4A16, Marlin) on every GPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tpsim import simulate
from tpsim.core.config import Options, Workload
from tpsim.core.kernels.costs import hardware_for
from tpsim.core.lowering.lower import lower
from tpsim.core.memory import memory_per_gpu
from tpsim.core.precision import run_precision
from tpsim.models import MODELS, spec_from_hf_dict
from tpsim.models.catalog import CONFIGS
from tpsim.models.dtypes import DTYPE_BYTES
from tpsim.topologies.gpus import GPUS

INT4 = 0.5 + (2 + 0.5) / 128  # packed weights, an fp16 scale and a 4-bit zero per 128
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
       "version": "gemm"}  # fmt: skip


def test_int4_bytes_are_the_packed_weights_scales_and_zeros() -> None:
    assert DTYPE_BYTES["int4"] == INT4 == pytest.approx(0.5195, abs=1e-4)


@pytest.mark.parametrize("gpu", ["a100-sxm-80gb", "h100-sxm", "b200"])
def test_int4_runs_weight_only_at_the_16_bit_peak_on_every_gpu(gpu: str) -> None:
    """Marlin dequantises in registers ahead of the 16-bit tensor cores, on Blackwell too (no
    int4 tensor-core path in vLLM); the KV cache stays 16-bit."""
    prec = run_precision(Options(dtype="int4"), MODELS["llama-3.1-8b"], GPUS[gpu])
    assert (prec.weights, prec.gemm_in, prec.math, prec.kv) == ("int4", "bf16", "bf16", "bf16")
    assert "W4A16" in prec.note(gpu) and "Marlin" in prec.note(gpu)
    assert hardware_for(GPUS[gpu], prec.math).peak_flops == GPUS[gpu].bf16_flops
    with_fp8_cache = run_precision(Options(dtype="int4", kv_dtype="fp8"), MODELS["llama-3.1-8b"],
                                   GPUS[gpu])  # fmt: skip
    assert with_fp8_cache.kv == "fp8"


def test_a_gemm_reads_int4_weights_and_16_bit_activations() -> None:
    g = GPUS["h100-sxm"]
    opts = Options(ideal=True, dtype="int4")
    prec = run_precision(opts, MODELS["llama-3.1-8b"], g)
    hw = hardware_for(g, prec.math, opts.calibration.kernels, kv_dtype=prec.kv)
    wl = Workload(batch=1, phase="decode", context_len=128)
    ops = {o.name: o for o in lower(MODELS["llama-3.1-8b"], 1, wl, opts, hw).per_rank[0].ops
           if o.layer == 0}  # fmt: skip
    down = ops["mlp_down"]  # [1, 14336] x [14336, 4096]
    assert down.bytes == round(14336 * 2 + 14336 * 4096 * INT4 + 4096 * 2)


def test_an_awq_mixtral_checkpoint_is_its_published_size() -> None:
    """TheBloke/Mixtral-8x7B-v0.1-AWQ: 24.65 GB of safetensors (the experts and attention in
    int4, embedding, head and router in 16 bits), not the 93.4 GB of the bf16 model."""
    cfg = {**json.loads((CONFIGS / "mixtral-8x7b.json").read_text()), "quantization_config": AWQ}
    m = spec_from_hf_dict(cfg, "mixtral-awq")
    assert m.dtype == "int4"
    wl = Workload(batch=1, phase="decode", context_len=128)
    mem = memory_per_gpu(m, 1, wl, Options(), GPUS["h100-sxm"])
    assert mem.weights_bytes_per_gpu / 1e9 == pytest.approx(24.65, rel=0.015)


def test_int4_decode_reads_about_a_quarter_of_the_weights() -> None:
    """70B at batch 1 on one H100: int4 fits (bf16 does not), and its step is faster than
    fp8's but not 4x bf16's at TP 2 (norms, attention, the 16-bit LM head and the
    all-reduces do not shrink)."""
    wl = Workload(batch=1, phase="decode", context_len=1024)
    one = simulate("llama-3.1-70b", "dgx-h100", 1, wl, Options(dtype="int4")).typed_summary
    assert one.memory.fits
    assert one.memory.weights_bytes_per_gpu / 1e9 == pytest.approx(39.8, rel=0.02)
    step = {
        d: simulate("llama-3.1-70b", "dgx-h100", 2, wl, Options(dtype=d)).typed_summary.latency_s
        for d in ("bf16", "fp8", "int4")
    }
    assert step["int4"] < step["fp8"] < step["bf16"] < 4 * step["int4"]


def test_run_prints_the_w4a16_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tpsim", "run", "--model", "llama-3.1-8b", "--topology",
         "dgx-a100", "--tp", "1", "--dtype", "int4", "--batch", "4"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "precision     linear weights int4" in out and "(W4A16)" in out


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200"])
def test_int4_gemms_run_in_marlin_s_16_row_blocks(gpu: str) -> None:
    """A decode token's int4 GEMM was padded to Hopper's and Blackwell's 64-row wgmma tiles:
    4x the arithmetic, priced compute-bound beside its 4-bit weight read (70B TP 2 on H100
    at batch 1, 72% compute). In Marlin's m16 blocks it is memory-bound, and 65 rows cost
    80 rows' arithmetic, not 128's."""
    g = GPUS[gpu]
    opts = Options(dtype="int4")
    prec = run_precision(opts, MODELS["llama-3.1-70b"], g)
    hw = hardware_for(g, prec.math, opts.calibration.kernels, kv_dtype=prec.kv)
    from tpsim.core.kernels.costs import gemm

    one = gemm(1, 28672, 8192, hw, act_bytes=2, w_bytes=prec_bytes(prec))
    assert one.category == "memory"
    at64, at65 = (gemm(m, 28672, 8192, hw, act_bytes=2, w_bytes=prec_bytes(prec)).seconds
                  for m in (64, 65))  # fmt: skip
    assert at65 < 1.45 * at64


def prec_bytes(prec: object) -> float:
    return DTYPE_BYTES[prec.weights]  # type: ignore[attr-defined]


def test_a_dtype_over_a_quantised_checkpoint_is_said(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """vLLM's --dtype sets the activations of an AWQ checkpoint; tpsim's sets its weights:
    run with --dtype bf16, the checkpoint is dequantised, and the run says so."""
    from tpsim.cli import main

    cfg = {**json.loads((CONFIGS / "mixtral-8x7b.json").read_text()), "quantization_config": AWQ}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    argv = ["run", "--model", str(f), "--topology", "dgx-h100", "--tp", "4"]
    assert main([*argv, "--dtype", "bf16"]) == 0
    assert (
        "--dtype bf16 runs the checkpoint's int4 linear layers as bf16" in capsys.readouterr().err
    )
    assert main(argv) == 0
    assert "warning" not in capsys.readouterr().err
