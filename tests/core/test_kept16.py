"""A quantised checkpoint that keeps some GEMMs 16-bit (``ModelSpec.kept_16bit``): their
weight bytes, their GEMMs' bytes and peak, the run's precision line, and a ``--dtype`` that
quantises them all again."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from tpsim import Options, Workload, simulate
from tpsim.core.kernels import costs
from tpsim.core.kernels.costs import hardware_for
from tpsim.core.lowering.lower import lower
from tpsim.core.memory import memory_per_gpu, memory_per_stage
from tpsim.core.precision import run_precision
from tpsim.models.catalog import get_model
from tpsim.models.hf_config import spec_from_hf_dict
from tpsim.models.spec import ModelSpec
from tpsim.topologies.gpus import GPUS

H100 = GPUS["h100-sxm"]
#: A small llama: d 1024, 8 heads of 128 (2 KV heads), MLP 4096, 4 layers, vocab 32000,
#: stored in fp8 with attention on every layer and layer 0's MLP kept bf16.
SMALL = ModelSpec("small", hidden_size=1024, num_layers=4, num_heads=8, num_kv_heads=2,
                  head_dim=128, intermediate_size=4096, vocab_size=32000, dtype="fp8",
                  kept_16bit=(("qkv_proj", (0, 1, 2, 3)), ("o_proj", (0, 1, 2, 3)),
                              ("mlp_up", (0,)), ("mlp_down", (0,))))  # fmt: skip


def _small() -> ModelSpec:
    return SMALL


def test_a_small_mixed_checkpoint_s_weights_by_hand() -> None:
    # TP 2: 4 heads, 1 KV head, MLP 2048 wide, 16000 vocab rows per GPU.
    # attention per layer: QKV 1024 x (4 + 2) x 128 = 786,432 + O 512 x 1024 = 524,288
    #   = 1,310,720; x 4 layers x 2 B (bf16, kept) = 10,485,760
    # MLP per layer: gate|up 1024 x 4096 = 4,194,304 + down 2048 x 1024 = 2,097,152
    #   = 6,291,456; layer 0 x 2 B = 12,582,912; layers 1-3 x 1 B (fp8) = 18,874,368
    # embedding and LM head 2 x 16000 x 1024 x 2 B = 65,536,000; norms (2 x 4 + 1) x 1024
    #   x 2 B = 18,432
    # = 10,485,760 + 12,582,912 + 18,874,368 + 65,536,000 + 18,432 = 107,497,472
    spec = _small()
    assert spec.kept.describe() == "attention on every layer; MLP on layer 0"
    wl = Workload(1, "decode", context_len=16)
    mem = memory_per_gpu(spec, 2, wl, Options(), H100)
    assert mem.weights_bytes_per_gpu == 107_497_472
    # all fp8 (--dtype fp8): the 11,534,336 kept weights a GPU holds take 1 byte, not 2
    uniform = memory_per_gpu(spec, 2, wl, Options(dtype="fp8"), H100)
    assert uniform.weights_bytes_per_gpu == 107_497_472 - (4 * 1_310_720 + 6_291_456)
    # two pipeline stages of two layers: the first holds layer 0's bf16 MLP, the second
    # the final norm (1024 x 2 B) beside the head (as large as the first's embedding)
    first = memory_per_stage(spec, 2, wl, Options(), H100, layers=range(2), first=True,
                             last=False)  # fmt: skip
    second = memory_per_stage(spec, 2, wl, Options(), H100, layers=range(2, 4), first=False,
                              last=True)  # fmt: skip
    assert first.weights_bytes_per_gpu - second.weights_bytes_per_gpu == 6_291_456 - 2_048
    # the checkpoint: 4 x (QKV 1,572,864 + O 1,048,576) + 12,582,912 MLP bf16 (2 B),
    # 3 x 12,582,912 MLP fp8 (1 B), 65,536,000 embedding and head + 9,216 norms 16-bit, as
    # the memory model holds them (ModelSpec.weight_bytes had counted them at fp8's byte)
    kept = 4 * (1_572_864 + 1_048_576) + 12_582_912
    assert spec.weight_bytes() == 2 * kept + 3 * 12_582_912 + 2 * (65_536_000 + 9_216)


def _ops(spec: ModelSpec, wl: Workload, opts: Options) -> list:
    prec = run_precision(opts, spec, H100)
    hw = hardware_for(H100, prec.math, opts.calibration.kernels, kv_dtype=prec.kv)
    return list(lower(spec, 2, wl, opts, hw).per_rank[0].ops)


def test_a_bf16_attention_gemm_inside_an_fp8_run_on_h100() -> None:
    """The kept QKV of layer 1 reads bf16 weights and inputs and runs at H100's bf16 peak
    (989 TFLOP/s), as vLLM's UnquantizedLinearMethod does; the fp8 MLP beside it reads fp8
    at the fp8 peak (1979 TFLOP/s). Ideal: each GEMM's time is its roofline."""
    spec, opts = _small(), Options(ideal=True)
    wl = Workload(1, "prefill", prompt_len=4096)  # compute-bound: 4096 rows
    ops = {(o.name, o.layer): o for o in _ops(spec, wl, opts)}
    qkv, up = ops["qkv_proj", 1], ops["mlp_up", 1]
    m, k = 4096, 1024
    assert qkv.bytes == m * k * 2 + k * 768 * 2 + m * 768 * 2  # [4096, 1024] x [1024, 768]
    assert qkv.seconds == pytest.approx(2 * m * 768 * k / 989e12, rel=1e-9)
    assert "bf16 (kept 16-bit)" in qkv.detail
    assert up.bytes == m * k * 1 + k * 4096 * 1 + m * 4096 * 2  # fp8 in, bf16 out
    assert up.seconds == pytest.approx(2 * m * 4096 * k / 1979e12, rel=1e-9)
    # layer 0's MLP is kept too; --dtype fp8 quantises every GEMM
    assert ops["mlp_up", 0].bytes == m * k * 2 + k * 4096 * 2 + m * 4096 * 2
    fp8 = {(o.name, o.layer): o for o in _ops(spec, wl, Options(ideal=True, dtype="fp8"))}
    assert fp8["qkv_proj", 1].bytes == m * k + k * 768 + m * 768 * 2
    # calibrated (vLLM's profile): the kept GEMM is priced as a bf16 run's, tiles and all
    opts = Options()
    calibrated = {(o.name, o.layer): o for o in _ops(spec, wl, opts)}
    bf16 = hardware_for(H100, "bf16", opts.calibration.kernels)
    priced = costs.gemm(m, 768, k, bf16, act_bytes=2, w_bytes=2)
    assert calibrated["qkv_proj", 1].seconds == priced.seconds


def test_kept_routed_experts_read_16_bit_weights() -> None:
    """Qwen3-30B-A3B in fp8 with its first layer's experts ignored: that layer's grouped
    GEMM reads two bytes a weight, the next layer's one."""
    spec = replace(get_model("qwen3-30b-a3b"), dtype="fp8", kept_16bit=(("experts", (0,)),))
    ops = {(o.name, o.layer): o for o in _ops(spec, Workload(1, "decode", context_len=16),
                                              Options(ideal=True))}  # fmt: skip
    weights16, weights8 = ops["experts_up", 0].bytes, ops["experts_up", 1].bytes
    # 8 experts read of [2048, 2 x 384] (768 wide split 2 ways)
    assert weights16 - weights8 == pytest.approx(8 * 2048 * 768, rel=0.01)


def test_a_serving_step_is_not_extrapolated_over_layers_that_differ() -> None:
    """Serving times a step of alike layers from a 2-layer run; layer 7's bf16 MLP among
    fp8 ones makes the layers differ, so the step is simulated whole (extrapolated from
    layers 0-1, 4 decodes of 512 came out 1.100 ms, 5 % short of 1.161)."""
    from tpsim.core.lowering.mixed import MixedStep
    from tpsim.core.step_timer import IterationTimer

    spec = replace(SMALL, hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128,
                   intermediate_size=14336, num_layers=8,
                   kept_16bit=(("mlp_up", (7,)), ("mlp_down", (7,))))  # fmt: skip
    t = IterationTimer(spec, "dgx-h100", 1, Options())
    step = MixedStep.of((512,) * 4, ())
    assert t.seconds(step) == pytest.approx(t.exact_seconds(step), rel=0.01)


def test_the_claim_bound_reads_kept_gemms_in_16_bits() -> None:
    """check-claim's least bytes a pass reads: the 11,534,336 kept weights a GPU holds
    (attention and layer 0's MLP, TP 2) at two bytes, one with --dtype fp8."""
    from tpsim.experiments.claim import lower_bound

    wl = Workload(1, "decode", context_len=16)
    mixed = lower_bound(_small(), "dgx-h100", 2, wl).details["weight_bytes_read_per_gpu"]
    fp8 = lower_bound(_small(), "dgx-h100", 2, wl, dtype="fp8").details
    assert mixed - fp8["weight_bytes_read_per_gpu"] == 4 * 1_310_720 + 6_291_456


#: SMALL as its config.json says it: fbgemm_fp8 leaving attention and layer 0's MLP bf16.
SMALL_CONFIG = {
    "model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8,
    "num_key_value_heads": 2, "num_hidden_layers": 4, "intermediate_size": 4096,
    "vocab_size": 32000, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                            "modules_to_not_convert": ["self_attn", "model.layers.0.mlp",
                                                       "lm_head"]},
}  # fmt: skip


def test_the_small_config_reads_as_small() -> None:
    assert spec_from_hf_dict(SMALL_CONFIG, "small") == SMALL


def test_meta_405b_fp8_on_8_h100(tmp_path: Path) -> None:
    """The run's weights are the hand figure of docs/model.md (60,903,292,928 B a GPU: its
    attention and layers 0 and 125's MLP bf16, the rest of the MLPs fp8, the embedding and
    head bf16), its precision line names the kept modules, and --dtype fp8 is 51.26 GB."""
    path = Path(__file__).parents[1] / "data" / "models" / "llama-3.1-405b-instruct-fp8.json"
    s = simulate(str(path), "dgx-h100", 8, Workload(1, "decode", context_len=16)).typed_summary
    assert s.memory.weights_bytes_per_gpu == 60_903_292_928
    assert s.config.precision_note.endswith(
        "kept bf16 by the checkpoint (bf16 math): attention on every layer; MLP on layers 0, 125"
    )
    assert s.config.model.to_dict()["kept_16bit"]["qkv_proj"] == list(range(126))
    fp8 = simulate(str(path), "dgx-h100", 8, Workload(1, "decode", context_len=16),
                   Options(dtype="fp8")).typed_summary  # fmt: skip
    assert fp8.memory.weights_bytes_per_gpu / 1e9 == pytest.approx(51.26, abs=0.005)
    assert "kept" not in fp8.config.precision_note


def test_dtype_on_a_mixed_checkpoint_warns_that_it_quantises_the_kept_layers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tpsim.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL_CONFIG))
    assert main(["run", "--model", str(path), "--topology", "dgx-h100", "--tp", "2"]) == 0
    out, err = capsys.readouterr()
    assert (
        "kept bf16 by the checkpoint (bf16 math): attention on every layer; MLP on layer 0\n" in out
    )
    assert not err
    args = ["run", "--model", str(path), "--topology", "dgx-h100", "--tp", "2", "--dtype", "fp8"]
    assert main(args) == 0
    _, err = capsys.readouterr()
    assert "--dtype fp8 also runs what the checkpoint keeps 16-bit as fp8" in err


@pytest.mark.parametrize("wl", [Workload(1, "prefill", prompt_len=512),
                                Workload(512, "decode", context_len=64)])  # fmt: skip
def test_the_claim_bound_runs_kept_gemms_at_the_16_bit_peak(wl: Workload) -> None:
    """check-claim's compute term: the 11,534,336 kept weights a GPU holds (TP 2) cost 2
    FLOPs a token each at the bf16 peak, not the fp8 one: 512 tokens, 11,811,160,064 FLOPs
    at 1/989 - 1/1979 ns a TFLOP more than --dtype fp8 (the key count of the decode's KV
    reads, reusing the name, had stood in for the kept weights: 0 FLOPs at prefill)."""
    from tpsim.experiments.claim import lower_bound

    mixed = lower_bound(_small(), "dgx-h100", 2, wl, kv_dtype="bf16").terms_s["compute"]
    fp8 = lower_bound(_small(), "dgx-h100", 2, wl, dtype="fp8", kv_dtype="bf16")
    kept_flops = 2 * 512 * (4 * 1_310_720 + 6_291_456)
    more = kept_flops * (1 / H100.bf16_flops - 1 / H100.fp8_flops)
    assert mixed - fp8.terms_s["compute"] == pytest.approx(more, rel=1e-9)
