"""Kernels as the GPU sees them: the tiled GEMM model, its calibration, attention, fusion,
dtypes and measured kernel tables."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpsim import ConfigError, Options, Workload, simulate
from tpsim.calibration import TileShape, csv_rows, measured
from tpsim.calibration import default as default_calibration
from tpsim.calibration import ideal as ideal_calibration
from tpsim.cli import main
from tpsim.core.config import kv_split
from tpsim.core.kernels.attention import attention_prefill
from tpsim.core.kernels.costs import Hardware, gemm, hardware_for
from tpsim.core.kernels.gemm import Feed, choose, compute_seconds, plan, tile_seconds
from tpsim.core.kernels.kernel_table import load
from tpsim.core.lowering.lower import lower
from tpsim.core.memory import memory_per_gpu
from tpsim.models.catalog import get_model
from tpsim.topologies.gpus import get_gpu

DATA = Path(__file__).parents[1] / "data"
SAMPLE = Path(__file__).resolve().parents[2] / "experiments" / "data" / "kernel_table_sample.csv"
A100 = hardware_for(get_gpu("a100-sxm-80gb"), "bf16")
H100 = hardware_for(get_gpu("h100-sxm"), "bf16")


def t(m: int, n: int, k: int, hw=A100) -> float:  # type: ignore[no-untyped-def]
    return gemm(m, n, k, hw, act_bytes=2, w_bytes=2).seconds


# ------------------------------------------------------------------------------ GEMM model
dims = st.integers(1, 20_000)


@settings(max_examples=300, deadline=None)
@given(m=dims, n=dims, k=dims, step=st.integers(1, 3000), axis=st.sampled_from("mnk"))
def test_gemm_time_is_monotone_in_each_dimension(
    m: int, n: int, k: int, step: int, axis: str
) -> None:
    bigger = {"m": (m + step, n, k), "n": (m, n + step, k), "k": (m, n, k + step)}[axis]
    for hw in (A100, H100):
        assert t(*bigger, hw=hw) >= t(m, n, k, hw=hw) * (1 - 1e-12)


@pytest.mark.parametrize(("hw", "n_full"), [(A100, 27 * 128), (H100, 33 * 256)])
def test_wave_quantisation_jump_at_the_tile_boundary(hw, n_full: int) -> None:  # type: ignore[no-untyped-def]
    # m = 512 is 4 rows of 128-row tiles: A100 (108 SMs) 4 x 27 tiles of 128 columns and
    # H100 (132 SMs) 4 x 33 tiles of 256 fill exactly one wave of the reference tile; one
    # more column adds 4 tiles and a second wave that is nearly empty: with that tile alone
    # the compute-bound time doubles. The library then picks another kernel (A100 64x64:
    # 8 x 55 = 440 tiles, 5 waves of a quarter tile, at 0.85 of the rate by its L2 feed;
    # H100 128x128: 4 x 67 = 268 tiles, 3 waves of half a tile): 1.5x, not 2x.
    m, k = 512, 8192
    ref = hw.tile[0]
    assert plan(m, n_full, k, ref, hw.sm_count, hw.split_k_min).tiles == hw.sm_count
    assert plan(m, n_full, k, ref, hw.sm_count, hw.split_k_min).waves == 1
    assert plan(m, n_full + 1, k, ref, hw.sm_count, hw.split_k_min).waves == 2
    assert t(m, n_full - 1, k, hw=hw) == pytest.approx(t(m, n_full, k, hw=hw))  # same tiles
    alone = replace(hw, tile=(ref,))
    assert t(m, n_full + 1, k, hw=alone) > 1.9 * t(m, n_full, k, hw=alone)
    assert 1.4 < t(m, n_full + 1, k, hw=hw) / t(m, n_full, k, hw=hw) < 1.5
    # ideal mode has no tiles: the same step costs 1/n_full more
    ideal = hardware_for(get_gpu(hw.name), "bf16", ideal_calibration().kernels)
    ratio = t(m, n_full + 1, k, hw=ideal) / t(m, n_full, k, hw=ideal)
    assert ratio == pytest.approx((n_full + 1) / n_full, rel=1e-3)


def _feed(hw: Hardware) -> Feed:
    return Feed(hw.l2_Bps, 2.0, 2.0)


SHAPES = [(544, 22016, 4096), (512, 4096, 14336), (37, 1536, 4096)]


@pytest.mark.parametrize("hw", [A100, H100])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_the_library_picks_the_candidate_of_least_time(hw, m: int, n: int, k: int) -> None:  # type: ignore[no-untyped-def]
    kw = {"peak_flops": hw.matmul_flops, "sm_count": hw.sm_count, "split_k_min": hw.split_k_min}
    each = {c: tile_seconds(m, n, k, c, feed=_feed(hw), **kw) for c in hw.tile}
    best, seconds = choose(m, n, k, hw.tile, feed=_feed(hw), **kw)
    assert seconds == min(each.values()) == each[best]
    assert compute_seconds(m, n, k, tile=hw.tile, feed=_feed(hw), **kw) == seconds
    assert compute_seconds(m, n, k, tile=best, feed=_feed(hw), **kw) == seconds  # one kernel


def test_a_small_tile_is_slower_per_flop_by_its_l2_feed() -> None:
    # A100: the L2 feeds 5120 B/clk over 108 x 2048 FLOP/clk, 7.22 TB/s at 312 TFLOP/s. A
    # 64x64 bf16 tile re-reads (64 + 64) x 2 B per 2 x 64 x 64 FLOP (1/32 B/FLOP): at the
    # achievable 271.2 TFLOP/s it needs 8.48 TB/s, so it runs at 7.22 / 8.48 = 0.85 of the
    # rate; 128x128 needs half that and is math bound.
    assert A100.l2_Bps == pytest.approx(5120 / (108 * 2048) * 312e12)
    kw = {"peak_flops": A100.matmul_flops, "sm_count": 108, "split_k_min": A100.split_k_min}
    small, big = TileShape(64, 64, 16), TileShape(128, 128, 16)
    m, n, k = 64 * 108, 64, 8192  # one full wave of either tile shape's CTAs
    math_s = 2.0 * 64 * 64 * k / (A100.matmul_flops / 108)
    assert tile_seconds(m, n, k, small, **kw) == pytest.approx(math_s)
    assert tile_seconds(m, n, k, small, feed=_feed(A100), **kw) == pytest.approx(
        math_s * 271.2e12 / 32 / A100.l2_Bps
    )
    assert tile_seconds(2 * m, 2 * n, k, big, feed=_feed(A100), **kw) == pytest.approx(4 * math_s)


# Llama-2-7B's gate/up on one GPU from 512 to 544 rows (5 rows of 128-row tiles), ideally
# +6.25%: on H100, 128x256's 86 column tiles went from 3 to 4 waves (+33%); the library now
# takes 128x128 (7 waves of half a tile against 3 of a whole one: +16.7%). The margin is
# that quantisation step, not a fit: real kernels are not linear either. (The down
# projection, N = 4096, still doubles there on H100: 64 tiles split K over one wave, 80
# cannot, and no candidate tile evens that out.)
MARGIN = 0.11


@pytest.mark.parametrize(("hw", "n"), [(H100, 22016), (A100, 22016), (A100, 28672)])
def test_a_few_more_rows_cost_about_their_share(hw, n: int) -> None:  # type: ignore[no-untyped-def]
    grow = t(544, n, 4096, hw=hw) / t(512, n, 4096, hw=hw)
    assert grow <= 544 / 512 + MARGIN
    alone = replace(hw, tile=hw.tile[:1])
    assert t(544, n, 4096, hw=alone) >= t(544, n, 4096, hw=hw)  # choosing never costs time


def test_ideal_gemm_stays_exact() -> None:
    ideal = hardware_for(get_gpu("h100-sxm"), "bf16", ideal_calibration().kernels)
    assert ideal.tile is None and ideal.matmul_flops == 989e12
    kw = {"peak_flops": 989e12, "tile": None, "sm_count": 132, "split_k_min": 256}
    for m in (1, 511, 512, 544, 4097):
        exact = 2 * m * 22016 * 4096 / 989e12
        assert compute_seconds(m, 22016, 4096, feed=Feed(9e12), **kw) == exact
    # compute binds from 544 rows on (the weight read is 62.7 us at 3.35 TB/s)
    assert gemm(544, 22016, 4096, ideal, act_bytes=2, w_bytes=2).seconds == (
        2 * 544 * 22016 * 4096 / 989e12
    )


def calibration_rows() -> list[dict[str, str]]:
    return csv_rows(measured("gemm.csv"))


def test_gemm_calibration_geomean_error_under_15_percent() -> None:
    # error of a row: |ln(model / measured)|; geomean = exp(mean) - 1
    logs = []
    for r in calibration_rows():
        hw = hardware_for(get_gpu(r["gpu"]), "bf16")  # fp16 runs at the same peak
        m, n, k = int(r["m_tokens"]), int(r["n"]), int(r["k"])
        measured = (
            float(r["time_ms"]) * 1e-3
            if r["time_ms"]
            else 2 * m * n * k / float(r["tflops"]) / 1e12
        )
        logs.append(abs(math.log(t(m, n, k, hw=hw) / measured)))
    assert len(logs) == 23
    assert math.exp(sum(logs) / len(logs)) - 1 < 0.15
    assert max(logs) < math.log(1.2)  # and no row off by more than 20%


def test_fp8_peaks() -> None:
    h100, a100 = get_gpu("h100-sxm"), get_gpu("a100-sxm-80gb")
    assert hardware_for(h100, "fp8").peak_flops == 1979e12
    assert hardware_for(a100, "fp8").peak_flops == 312e12  # no fp8 tensor cores
    # --dtype fp8 on A100 runs weight-only fp8 (W8A16): fp8 weight bytes, bf16 math
    wl = Workload(1, "decode", context_len=128)
    a = simulate("llama-3.1-8b", "dgx-a100", 1, wl, Options(dtype="fp8"))
    b = simulate("llama-3.1-8b", "dgx-a100", 1, wl, Options(dtype="bf16"))
    up_a = next(r for r in a.records if r.name == "mlp_up")
    up_b = next(r for r in b.records if r.name == "mlp_up")
    assert up_a.bytes == 4096 * 28672 * 1 + (4096 + 28672) * 2  # fp8 weights, bf16 in/out
    assert up_b.bytes == (4096 * 28672 + 4096 + 28672) * 2
    assert a.summary["config"]["options"]["dtype"] == "fp8"


# ------------------------------------------------------------------------------ attention
def test_prefill_attention_is_causal_flash_attention() -> None:
    ideal = hardware_for(get_gpu("h100-sxm"), "bf16", ideal_calibration().kernels)
    c = attention_prefill(2, 1024, 8, 1, 128, ideal, act_bytes=2, kv_bytes=2)
    assert c.flops == 4 * 2 * 8 * 128 * 1024 * 1025 / 2
    # Q and O for 8 heads, K and V for 1, plus K and V written to the cache
    assert c.bytes == 2 * 1024 * (2 * 8 + 2 * 1) * 128 * 2 + 2 * 1024 * 2 * 128 * 2
    # 8 heads x 8 blocks of 128 queries x 2 sequences = 128 CTAs: one wave of 132 SMs
    real = attention_prefill(2, 1024, 8, 1, 128, H100, act_bytes=2, kv_bytes=2)
    fill = 128 / 132
    assert real.seconds - 2e-6 == pytest.approx(c.flops / (989e12 * 0.73) / fill, rel=1e-9)


def test_gqa_kv_heads_replicated_beyond_tp8() -> None:
    # Llama-3.1-70B: 64 heads, 8 KV heads. TP 16: 4 heads and 1 KV head per GPU, each KV head
    # on 2 GPUs (the run-level split is in the contract check "gqa")
    model, wl = get_model("llama-3.1-70b"), Workload(1, "decode", context_len=1024)
    assert kv_split(16, 8) == (1, 2)
    h100 = get_gpu("h100-sxm")
    m16 = memory_per_gpu(model, 16, wl, Options(), h100)
    m8 = memory_per_gpu(model, 8, wl, Options(), h100)
    # a replicated KV head costs its full cache, and its K/V projection, on both GPUs
    assert m16.kv_cache_bytes_per_gpu == m8.kv_cache_bytes_per_gpu == 1024 * 128 * 2 * 80 * 2
    program = lower(model, 16, wl, Options(), H100)[0]
    attn = next(op for op in program.ops if op.name == "attn")
    qkv = next(op for op in program.ops if op.name == "qkv_proj")
    assert "4/1 heads" in attn.detail
    assert qkv.detail == "[1, 8192] x [8192, 768]"  # (4 + 2 x 1) x 128 columns


# ------------------------------------------------------------------------------ fusion
def _compute_ops(fused: bool, model: str = "llama-3.1-8b"):  # type: ignore[no-untyped-def]
    r = simulate(model, "dgx-h100", 2, Workload(4, "decode", context_len=256), Options(fused=fused))
    return [x for x in r.records if x.rank == 0 and x.stream == "compute"]


def test_fusion_removes_residual_kernels_and_their_bytes() -> None:
    fused, unfused = _compute_ops(True), _compute_ops(False)
    L, T, d = 32, 4, 4096
    # unfused: residual after attention and after the MLP (2L kernels), each norm its own
    assert sum(x.name == "residual" for x in unfused) == 2 * L
    assert not [x for x in fused if x.name == "residual"]
    assert len(unfused) - len(fused) == 2 * L
    # each of the 2L fusions moves 4 [T, d] tensors instead of 3 + 2
    saved = sum(x.bytes for x in unfused) - sum(x.bytes for x in fused)
    assert saved == 2 * L * T * d * 2
    first = next(x for x in fused if x.name == "input_norm")
    assert first.bytes == 2 * T * d * 2 + d * 2  # layer 0: no residual to add yet
    post = next(x for x in fused if x.name == "post_attn_norm")
    assert post.bytes == 4 * T * d * 2 + d * 2
    assert {x.name for x in fused} >= {"act", "rotary"}  # SwiGLU one kernel, rotary apart


def test_layernorm_models_are_not_fused() -> None:
    gpt2 = str(DATA / "models" / "gpt2.json")
    assert len(_compute_ops(True, gpt2)) == len(_compute_ops(False, gpt2))


# ------------------------------------------------------------------------------ kernel tables
def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "table.csv"
    p.write_text(text)
    return str(p)


HEADER = "gpu,op,dtype,m,n,k,time_us\n"


def test_sample_table_parses_and_matches_the_vidur_rows() -> None:
    table = load(SAMPLE)
    pts = table.points("mlp_up", "h100-sxm", "fp16", 7168, 8192)
    assert pts == ((1, 43e-6), (512, 91e-6), (4096, 631e-6))
    assert table.points("qkv_proj", "h100-sxm", "fp16", 7168, 8192) == ()  # op-specific rows
    assert table.points("mlp_up", "h100-sxm", "bf16", 7168, 8192) == ()  # dtype must match


def test_table_interpolates_linearly_in_m_and_scales_outside(tmp_path: Path) -> None:
    table = load(write(tmp_path, HEADER + "g,gemm,bf16,100,64,32,10\ng,gemm,bf16,300,64,32,30\n"))

    def roof(m: int) -> float:
        return m * 1e-6

    assert table.gemm_seconds("o_proj", "g", "bf16", 100, 64, 32, roof) == 10e-6
    assert table.gemm_seconds("o_proj", "g", "bf16", 150, 64, 32, roof) == pytest.approx(15e-6)
    # outside: roofline x the nearest row's measured/roofline ratio (10/100 and 30/300 us)
    assert table.gemm_seconds("o_proj", "g", "bf16", 50, 64, 32, roof) == pytest.approx(5e-6)
    assert table.gemm_seconds("o_proj", "g", "bf16", 600, 64, 32, roof) == pytest.approx(60e-6)
    assert table.gemm_seconds("o_proj", "g", "bf16", 150, 64, 33, roof) is None


def test_table_overrides_the_roofline_in_a_run() -> None:
    wl = Workload(1, "decode", context_len=128)
    r = simulate("llama-2-70b", "dgx-h100", 8, wl, Options(kernel_table=str(SAMPLE)))
    ups = [x for x in r.records if x.name == "mlp_up" and x.rank == 0]
    assert len(ups) == 80
    slot = (
        43e-6 + default_calibration().launch["graph"].gpu_gap_s
    )  # measured kernel + its dispatch from a graph
    assert all(x.duration_s == pytest.approx(slot) and "kernel table" in x.detail for x in ups)
    qkv = next(x for x in r.records if x.name == "qkv_proj")
    assert "kernel table" not in qkv.detail


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu,op,dtype,m,n,time_us\n", r"row 1: column='k': missing"),
        ("gpu,op,dtype,m,n,k,time_us,x\n", r"row 1: column='x': unknown"),
        (HEADER + "g,gemm,bf16,1,2,3,4\ng,gemm,bf16,x,2,3,4\n", r"row 3: m='x': must be a pos"),
        (HEADER + "g,gemm,int3,1,2,3,4\n", r"row 2: dtype='int3'"),
        (HEADER + "g,attn,bf16,1,2,3,4\n", r"row 2: op='attn'"),
        (HEADER + "g,gemm,bf16,1,2,3,-4\n", r"row 2: time_us='-4'"),
        (HEADER + "g,gemm,bf16,1,2,3\n", r"row 2: row='g,gemm,bf16,1,2,3': has 6 fields"),
        (HEADER + "g,gemm,bf16,1,2,3,4\ng,gemm,bf16,1,2,3,5\n", r"row 3: m=1: duplicate"),
        ("# only a comment\n", r"empty"),
    ],
)
def test_bad_tables_name_file_row_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)  # a short path: a long one is shown shortened
    path = write(Path(), text)
    with pytest.raises(ConfigError, match=message) as err:
        load(path)
    assert path in str(err.value)


def test_bad_table_on_the_command_line_exits_2(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)  # a short path: a long one is shown shortened
    path = write(Path(), HEADER + "g,gemm,bf16,1,2,3,zero\n")
    args = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1"]
    assert main([*args, "--kernel-table", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "row 2: time_us='zero'" in err and path in err
    assert main([*args, "--kernel-table", str(tmp_path / "missing.csv")]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="ideal"):
        Options(kernel_table=path, ideal=True)
