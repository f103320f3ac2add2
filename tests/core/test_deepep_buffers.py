"""DeepEP as the engines make it (tpsim.core.deepep_buffers): its RDMA buffer across hosts,
the hidden sizes its kernels take, and the group sizes its normal kernels have configs for."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tpsim import ConfigError, Layout, Options, Workload, simulate
from tpsim.cli import main
from tpsim.core import deepep_buffers as dbuf
from tpsim.core.lowering.experts import expert_split
from tpsim.models.catalog import get_model


def _engine(name: str):  # type: ignore[no-untyped-def]
    return Options(engine=name).calibration.engine


def test_the_normal_kernels_rdma_buffer_is_counted_only_across_hosts() -> None:
    """vLLM's high-throughput manager asks for a 1 GiB RDMA buffer when its group spans
    hosts (none in one host); DeepEP's own hint (SGLang) is 0 up to 8 ranks, and beyond them
    the buffer SGLang shares with the low-latency kernels is the larger of the two."""
    spec, vllm, sglang = get_model("deepseek-v3"), _engine("vllm"), _engine("sglang")
    one_host = expert_split(spec, 1, 8, 8, 1)
    two_hosts = replace(expert_split(spec, 1, 16, 16, 1), nodes=2)
    ll_vllm = dbuf.low_latency_hint(256, 7168, 256)
    assert dbuf.reserved_bytes(spec, one_host, vllm) == ll_vllm + 2**30
    assert dbuf.reserved_bytes(spec, two_hosts, vllm) == ll_vllm + 2 * 2**30
    for cfg in (dbuf.DISPATCH[8], dbuf.COMBINE[8]):
        assert dbuf.rdma_hint(cfg, 2 * 7168, 8) == 0
    # a small low-latency buffer (2 tokens a rank) leaves the normal kernels' hint the larger
    small = replace(sglang, deepep_ll_tokens=2)
    rdma = max(dbuf.rdma_hint(c[16], 2 * 7168, 16) for c in (dbuf.DISPATCH, dbuf.COMBINE))
    assert dbuf.low_latency_hint(2, 7168, 256) < rdma
    nvl = max(dbuf.nvl_hint(c[16], 2 * 7168, 16) for c in (dbuf.DISPATCH, dbuf.COMBINE))
    assert dbuf.reserved_bytes(spec, two_hosts, small) == nvl + rdma


def test_a_hidden_size_sglangs_deepep_lacks_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """gpt-oss's 2880 is no size DeepEP's low-latency kernels are compiled for; SGLang hands
    it over as it is and DeepEP fails ('Unsupported hidden')."""
    argv = ["run", "--model", "gpt-oss-120b", "--topology", "dgx-h100", "--tp", "1",
            "--attention-dp", "8", "--ep", "8", "--moe-a2a", "deepep",
            "--engine", "sglang"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--moe-a2a deepep" in err and "hidden size 2880" in err
    assert "2048, 2560, 4096, 5120, 6144, 7168, 8192" in err


def test_vllm_pads_the_hidden_size_up_for_deepep() -> None:
    """vLLM rounds gpt-oss's 2880 up to 3072 (DeepEPLLPrepareAndFinalize.SUPPORTED_HIDDEN_SIZES;
    the high-throughput kernels' 512-byte multiple gives the same): its tokens travel at
    3072, and a hidden size above 8192 is refused."""
    r = simulate("gpt-oss-120b", "dgx-h100", Layout(1, ep=8, attention_dp=8), Workload(8),
                 Options(moe_a2a="deepep"))  # fmt: skip
    sent = {rec.site: rec.detail for rec in r.records if rec.site.startswith("moe_")}
    pairs = 8 * 4  # each GPU's own 8 tokens, top 4
    assert f"all_to_all {pairs * (3072 + 4 * 24 + 16)} B" in sent["moe_dispatch"]
    assert f"all_to_all {pairs * 2 * 3072} B" in sent["moe_combine"]
    vllm = _engine("vllm")
    assert dbuf.hidden_for(2880, vllm, low_latency=False) == 3072
    wide = replace(get_model("deepseek-v3"), hidden_size=12288)
    problem = dbuf.hidden_problem(wide, vllm)
    assert problem is not None and "hidden size 12288" in problem and "at most 8192" in problem
    assert dbuf.hidden_problem(get_model("deepseek-v3"), _engine("sglang")) is None


def test_a_group_deepeps_normal_kernels_have_no_config_for_is_refused() -> None:
    assert dbuf.ranks_problem(16) is None
    problem = dbuf.ranks_problem(12)
    assert problem is not None and problem.endswith("not 12")
    # 96 experts over 6 GPUs: DeepEP's Buffer.get_dispatch_config has no 6
    spec = replace(get_model("qwen3-30b-a3b"), num_experts=96)
    with pytest.raises(ConfigError, match=r"^--moe-a2a deepep: DeepEP's normal kernels"):
        simulate(spec, "dgx-h100", Layout(1, ep=6, attention_dp=6), Workload(6),
                 Options(moe_a2a="deepep"))  # fmt: skip
