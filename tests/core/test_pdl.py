"""Programmatic dependent launch (an engine's ``pdl_archs``): in a CUDA graph a kernel that
follows another kernel is launched while that one drains, so no dispatch gap separates
them; after a collective, or eager, the gap stays; on an architecture the engine does not
list, nothing changes."""

from __future__ import annotations

import pytest
from tpsim import Options, Workload
from tpsim.calibration import CalibrationError
from tpsim.calibration import default as default_calibration
from tpsim.calibration.profiles import profile
from tpsim.core.kernels.costs import KernelCost
from tpsim.core.lowering.opbuild import OpBuilder

US = 1e-6
COST = KernelCost(10 * US, 0.0, 0, "memory")


def _graph_builder(pdl: bool) -> OpBuilder:
    return OpBuilder(default_calibration().launch["graph"], ranks=2, pdl=pdl)


def test_a_kernel_after_a_kernel_has_no_gap_with_pdl() -> None:
    gap = default_calibration().launch["graph"].gpu_gap_s
    assert gap == pytest.approx(0.6 * US)
    for pdl, want in ((False, 10 * US + gap), (True, 10 * US)):
        b = _graph_builder(pdl)
        b.kernel(0, "first", "gemm", 0, COST, "")
        b.kernel(0, "second", "gemm", 0, COST, "")
        first, second = b.ops
        assert first.seconds == pytest.approx(10 * US + gap)  # nothing before it: the gap
        assert second.seconds == pytest.approx(want)


def test_after_a_collective_the_gap_stays() -> None:
    gap = default_calibration().launch["graph"].gpu_gap_s
    b = _graph_builder(True)
    b.kernel(0, "o_proj", "gemm", 0, COST, "")
    b.collective(0, "all_reduce", "attn_out", 0, 1 << 17)
    b.kernel(0, "norm", "elementwise", 0, COST, "")
    assert b.ops[-1].seconds == pytest.approx(10 * US + gap)


def test_eager_launches_keep_their_gap() -> None:
    b = OpBuilder(default_calibration().launch["eager"], ranks=2, eager=True, pdl=True)
    b.kernel(0, "first", "gemm", 0, COST, "")
    b.kernel(0, "second", "gemm", 0, COST, "")
    assert b.ops[1].dispatch_s == pytest.approx(2.75 * US)


def _no_pdl(tmp_path) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "trtllm-no-pdl.yaml"
    path.write_text(
        "name: trtllm-no-pdl\nabout: trtllm without programmatic dependent launch\n"
        "extends: trtllm\noverrides:\n  engine:\n    pdl_archs:\n      value: []\n"
        "      source: test\n"
    )
    return str(path)


def _step_s(topology: str, engine: str) -> float:
    from tpsim import simulate

    options = Options(engine=engine, dtype="fp8")
    return simulate("llama-3.1-8b", topology, 2, Workload(batch=8, context_len=1024),
                    options).summary["latency_s"]  # fmt: skip


def test_tensorrt_llm_steps_are_shorter_with_pdl_on_hopper_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    without = _no_pdl(tmp_path)
    gap = default_calibration().launch["graph"].gpu_gap_s
    on_h200, off_h200 = _step_s("hgx-h200", "trtllm"), _step_s("hgx-h200", without)
    # 32 layers, each with several kernels that follow a kernel: at least 4 gaps a layer
    assert off_h200 - on_h200 > 32 * 4 * gap
    assert _step_s("dgx-a100", "trtllm") == pytest.approx(_step_s("dgx-a100", without))


def test_tensorrt_llm_launches_with_pdl_on_hopper_and_blackwell_only() -> None:
    trt = profile("trtllm").engine
    assert set(trt.pdl_archs) == {"hopper", "blackwell"}
    assert profile("vllm").engine.pdl_archs == ()
    assert default_calibration().engine.pdl_archs == ()


def test_a_malformed_pdl_list_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: bad\nabout: a string where a list belongs\nextends: trtllm\noverrides:\n"
        "  engine:\n    pdl_archs:\n      value: hopper\n      source: test\n"
    )
    with pytest.raises(CalibrationError, match="pdl_archs='hopper'"):
        profile(str(path))
