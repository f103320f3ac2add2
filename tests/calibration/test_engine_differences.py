"""Engine profiles differ where their engines differ: all-reduce fusion, compiled kernels,
host loop, and Blackwell's kernel floors."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpsim import Options, Workload, simulate
from tpsim.calibration.loader import CalibrationError
from tpsim.calibration.profiles import engines, profile
from tpsim.core.lowering.lower import lower
from tpsim.core.plan import resolve

DECODE = Workload(8, "decode", context_len=1024)


def _refused(tmp_path: Path, section: str, entry: str, value: str, needle: str) -> None:
    """A profile extending vllm with ``section.entry`` set to ``value`` is refused with a
    message matching ``needle``."""
    f = tmp_path / f"{entry}.yaml"
    f.write_text(
        f"name: x\nextends: vllm\noverrides:\n  {section}:\n"
        f"    {entry}: {{value: {value}, source: test}}\n"
    )
    with pytest.raises(CalibrationError, match=needle):
        profile(str(f))


def _names(engine: str, workload: Workload = DECODE, tp: int = 8, **kw: object) -> list[str]:
    opts = Options(engine=engine, **kw)  # type: ignore[arg-type]
    plan = resolve("llama-3.1-70b", "hgx-h200", tp, workload, opts)
    programs = lower(plan.model, tp, plan.workload, plan.options, plan.hardware, plan.table)
    return [op.name for op in programs[0].ops]


def test_trtllm_folds_residual_and_norm_into_its_all_reduce() -> None:
    names = _names("trtllm")
    assert "attn_out.all_reduce+post_attn_norm" in names
    assert "mlp_out.all_reduce+input_norm" in names
    assert "mlp_out.all_reduce+final_norm" in names
    assert "post_attn_norm" not in names
    assert names.count("input_norm") == 1  # layer 0's, after the embedding (no residual yet)
    vllm = _names("vllm")
    assert vllm.count("post_attn_norm") == 80 and not any("+" in n for n in vllm)
    assert len(names) == len(vllm) - 2 * 80  # one kernel less after every all-reduce


def test_trtllm_keeps_the_norm_apart_above_its_kernels_limit_and_on_one_gpu() -> None:
    big = Workload(1, "prefill", prompt_len=4096)  # 4096 x 8192 x 2 B = 64 MiB > 8 MiB
    names = _names("trtllm", big)
    assert names.count("post_attn_norm") == 80 and not any("+" in n for n in names)
    assert _names("trtllm", tp=1, dtype="fp8").count("post_attn_norm") == 80
    nccl = _names("trtllm", allreduce_algo="nccl")  # the engine's kernels not allowed: NCCL
    assert nccl.count("post_attn_norm") == 80


def test_gpt_fast_runs_compiled_kernels_whatever_the_launch_mode() -> None:
    names = _names("gpt-fast")
    assert "rotary" not in names and "residual" not in names
    assert "rotary" in _names("vllm")


def test_the_engines_no_longer_give_one_step() -> None:
    """trtllm, sglang, vllm and gpt-fast on a 70B at TP 8 gave the same step within 3 %;
    their all-reduce kernels, fusions, norm and attention kernels and host loops now set them
    apart."""
    runs = {
        e: simulate("llama-3.1-70b", "hgx-h200", 8, DECODE, Options(engine=e, dtype="fp8"))
        for e in ("trtllm", "sglang", "vllm", "gpt-fast")
    }
    step = {e: r.latency_s for e, r in runs.items()}
    assert step["trtllm"] < 0.85 * min(step["vllm"], step["sglang"])  # fused AR, C++ kernels
    assert max(step.values()) / min(step.values()) > 1.2

    def busy(engine: str, *names: str) -> float:  # rank 0's kernels of those names
        return sum(r.end_s - r.start_s for r in runs[engine].records
                   if r.rank == 0 and r.name in names)  # fmt: skip

    def comm(engine: str) -> float:
        return float(runs[engine].summary["communication"]["time_s"])

    # gpt-fast all-reduces through NCCL, vLLM through its one-shot kernel ...
    assert comm("gpt-fast") > 1.2 * comm("vllm")
    # ... but its decode attention is one SDPA kernel, against FlashAttention's split-KV
    # pair; both compile their norms with Inductor (vLLM V1's custom ops are off), and
    # TensorRT-LLM's are vectorised CUDA kernels: the same price
    assert busy("gpt-fast", "attn") < 0.7 * busy("vllm", "attn")
    norms = ("input_norm", "post_attn_norm")
    assert busy("gpt-fast", *norms) == pytest.approx(busy("vllm", *norms), rel=1e-9)


def test_blackwell_kernel_floors_are_hoppers() -> None:
    k = profile("vllm").kernels
    assert k.latency_scale_of("blackwell") == k.latency_scale_of("hopper") < 1


@pytest.mark.parametrize(("value", "needle"), [
    ("{hopper: -1}", r"^engine=.*kernels.yaml.latency_scale.hopper=-1: must"),
    ("{hopper: 1000}", "must be from 0 to 10"),
    ("{hoppr: 0.5}", "unknown architecture 'hoppr'"),
])  # fmt: skip
def test_a_profile_s_fixed_time_factors_are_checked(
    tmp_path: Path, value: str, needle: str
) -> None:
    """A negative factor would subtract the floors from the kernels' streaming times (a step
    faster than HBM allows); a thousandfold one, or an architecture misspelt, is a slip.
    The message names the profile the value came from."""
    _refused(tmp_path, "kernels", "latency_scale", value, needle)


def test_a_fixed_time_beyond_a_second_is_refused(tmp_path: Path) -> None:
    _refused(tmp_path, "engine", "collective_latency_us", "1.0e+12", "more than a second")


def test_vllm_decodes_with_one_kernel_on_blackwell_only(tmp_path: Path) -> None:
    """vLLM runs FlashAttention's split-KV pair on Hopper and FlashInfer's TensorRT-LLM
    decode kernel on Blackwell (SGLang, FlashAttention-3 and trtllm_mha, likewise): the same
    step's attention floor drops there alone; an unknown architecture is refused."""
    k = profile("vllm").kernels
    assert k.attention_fixed_of("blackwell") < 0.5 * k.attention_fixed_of("hopper")
    assert k.attention_fixed_of("hopper") == k.attention_fixed_of("ampere") == k.attention_fixed_s
    named = {e for e in engines() if profile(e).kernels.attention_fixed_by_arch_s}
    assert named == {"vllm", "sglang"}  # SGLang's trtllm_mha on SM100 as well
    one = Workload(1, "decode", context_len=128)  # the floor dominates: 1 sequence, 128 keys

    def attn(topology: str, engine: str) -> float:
        run = simulate("llama-3.1-8b", topology, 1, one, Options(engine=engine))
        return next(r.end_s - r.start_s for r in run.records if r.name == "attn")

    # on B200 vLLM's attention is TensorRT-LLM's (less its dependent launch: the 0.6 us graph
    # gap); on H100 it is not
    assert attn("dgx-b200", "vllm") == pytest.approx(attn("dgx-b200", "trtllm"), abs=0.7e-6)
    assert attn("dgx-h100", "vllm") > 2 * attn("dgx-h100", "trtllm")
    _refused(tmp_path, "kernels", "attention_fixed_by_arch_us", "{hoper: 3}",
             "unknown architecture 'hoper'")  # fmt: skip


def test_turbomind_reads_a_kv_head_once_per_cta_of_its_group(tmp_path: Path) -> None:
    """TurboMind v0.1's decode attention covers 4 query heads a CTA: Llama-2-70B's groups of
    8 read each KV head twice, the MHA Llama-2-13B once; a GQA-aware kernel (vLLM's) once.
    Only the cache bytes double (Q and O are tiny beside them)."""
    assert profile("fastertransformer").kernels.attention_heads_per_cta == 4
    assert {e for e in engines() if profile(e).kernels.attention_heads_per_cta} == {
        "fastertransformer"
    }
    wl = Workload(32, "decode", context_len=4096)

    def attn_bytes(model: str, engine: str) -> int:
        run = simulate(model, "dgx-a100", 4, wl, Options(engine=engine))
        return next(o.bytes for o in run.records if o.name == "attn")

    def reads(model: str) -> float:
        return attn_bytes(model, "fastertransformer") / attn_bytes(model, "vllm")

    assert reads("llama-2-70b") == pytest.approx(2.0, rel=0.01)
    assert reads("llama-2-13b") == pytest.approx(1.0, rel=1e-9)
    _refused(tmp_path, "kernels", "attention_heads_per_cta", "3", "attention_heads_per_cta=3")


def test_profile_fields_are_checked(tmp_path: Path) -> None:
    for field, value, needle in (
        ("allreduce_fusion", "residual_norm", "allreduce_fusion='residual_norm'"),
        ("compiled", "sometimes", "compiled='sometimes'"),
    ):
        _refused(tmp_path, "engine", field, value, needle)


def test_only_trtllm_fuses_and_only_gpt_fast_compiles() -> None:
    fused = {e for e in engines() if profile(e).engine.allreduce_fusion != "none"}
    compiled = {e for e in engines() if profile(e).engine.compiled}
    assert fused == {"trtllm"} and compiled == {"gpt-fast"}


def test_the_switch_port_share_is_a_fraction(tmp_path: Path) -> None:
    _refused(tmp_path, "nccl", "switch_all_to_all_efficiency", "1.5",
             r"switch_all_to_all_efficiency=1.5: must be in")  # fmt: skip
