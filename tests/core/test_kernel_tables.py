"""Measured kernels: the operator-table layouts (tpsim's ops, Vidur's files), their matching
and interpolation, the shipped tables, the neutral defaults and the refit's accuracy."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from tpsim import ConfigError, Options, Workload, simulate
from tpsim.calibration import CalibrationError, default, ideal, measured, tables
from tpsim.calibration.profiles import profile
from tpsim.cli import main
from tpsim.core.kernels.costs import Traits, hardware_for
from tpsim.core.kernels.kernel_table import interpolate, load
from tpsim.core.kernels.table_formats import Shape
from tpsim.experiments.calibrate import convert_vidur
from tpsim.experiments.calibrate.vidur_cases import FAMILIES, cases, predict
from tpsim.experiments.validation.kernels import ACCEPT, geomean_error
from tpsim.models.catalog import get_model
from tpsim.topologies.gpus import get_gpu

VIDUR = f"{measured('vidur_mlp_per_op.csv')},{measured('vidur_attention_a100_tp2.csv')}"
OPS = "gpu,dtype,n_embd,heads,kv_heads,intermediate,tp,op,tokens,kv_len,time_us\n"
A70 = Shape(8192, 64, 8, 28672, 2)  # Llama-2-70B at TP 2


def write(tmp_path: Path, text: str, name: str = "t.csv") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


# ------------------------------------------------------------------------------ interpolation
def test_two_axes_are_bilinear_and_exact_on_kv_bytes() -> None:
    # t = 2 + 0.01 * batch * kv (a floor plus the KV bytes): bilinear, so exact in between
    def t(b: int, k: int) -> float:
        return 2 + 0.01 * b * k

    grid = tuple((b, tuple((k, t(b, k)) for k in (128, 1024, 4096))) for b in (1, 8, 64))
    for b, k in [(4, 512), (30, 3000), (8, 700)]:
        assert interpolate(grid, b, k, lambda *_: 1.0) == pytest.approx(t(b, k))
    # beyond the last batch: the model's time x the ratio at (64, k): 2 * t(64, 512)
    assert interpolate(grid, 128, 512, lambda b, k: float(b)) == pytest.approx(2 * t(64, 512))


def test_a_ragged_grid_interpolates_along_each_column_first() -> None:
    # prefill: the 4096-token chunk has no cached column (chunk + cache <= the model length)
    grid = ((2048, ((0, 10.0), (2048, 20.0))), (4096, ((0, 40.0),)))
    # at cache 1024: 15 on the 2048 column; the 4096 column scales its lone point by the model
    assert interpolate(grid, 3072, 1024, lambda x, y: x + y) == pytest.approx(
        (15.0 + 40.0 * 5120 / 4096) / 2
    )


# ------------------------------------------------------------------------------ the layouts
def test_vidur_files_read_directly_with_repeated_points_as_their_median() -> None:
    table = load(VIDUR)
    grid = table.ops[("qkv_proj", "a100-sxm-80gb", "fp16", Shape(8192, 64, 8, 28672, 1))]
    # 2048 tokens: Llama-2-70B rows 1.45, 1.424 ms and Llama-3-70B rows 1.4585, 1.4985 ms
    assert dict((x, pts[0][1]) for x, pts in grid)[2048] == pytest.approx(1.45425e-3)
    decode = table.ops[("attn_decode", "a100-sxm-80gb", "fp16", Shape(8192, 64, 8, 0, 2))]
    assert [x for x, _ in decode] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert all([k for k, _ in pts] == [128, 512, 1024, 2048, 4032] for _, pts in decode)


def test_the_shipped_tables_are_the_vidur_files_converted(tmp_path: Path) -> None:
    for path in convert_vidur.convert(tmp_path):
        assert path.read_bytes() == tables(path.name).read_bytes(), path.name
    direct, shipped = load(VIDUR), load("vidur-a100,vidur-h100")
    assert direct.ops.keys() == shipped.ops.keys()
    for key, grid in direct.ops.items():
        for (x, pts), (x2, pts2) in zip(grid, shipped.ops[key], strict=True):
            assert x == x2 and [p[0] for p in pts] == [p[0] for p in pts2]
            assert [p[1] for p in pts] == pytest.approx([p[1] for p in pts2], rel=1e-9)
    assert tables("vidur-h100.csv").read_text().startswith("# ")


def test_an_ops_table_matches_by_shape_and_tp_and_fp16_stands_for_bf16(tmp_path: Path) -> None:
    path = write(tmp_path, OPS + "g,fp16,8192,64,8,28672,2,input_norm,1,0,5\n"
                 "g,fp16,8192,64,8,28672,2,input_norm,9,0,13\n"
                 "g,fp16,8192,64,8,28672,2,residual,1,0,2\n"
                 "g,fp16,8192,64,8,-,2,attn_decode,4,100,30\n")  # fmt: skip
    table = load(path)
    bound = table.bind(get_model("llama-3.1-70b"), 2)  # bf16, the same shape
    assert bound.bound == A70

    def model(x: int, y: int) -> float:
        return float(x)

    assert bound.op_seconds("input_norm", "G", "bf16", 5, 0, model) == pytest.approx(9e-6)
    assert bound.op_seconds("final_norm", "g", "bf16", 1, 0, model) == 5e-6  # input_norm's
    assert bound.op_seconds("act", "g", "bf16", 1, 0, model) is None
    assert bound.op_seconds("attn_decode", "g", "fp16", 4, 100, model) == 30e-6
    assert table.bind(get_model("llama-3.1-70b"), 4).op_seconds("residual", "g", "fp16", 1, 0,
                                                                model) is None  # fmt: skip
    assert table.bind(get_model("gpt3-175b"), 1).bound is None  # not a gated MLP


def test_a_run_with_the_shipped_table_prices_every_operator_it_measured() -> None:
    wl = Workload(16, "decode", context_len=1024)
    r = simulate("llama-3.1-70b", "dgx-a100", 2, wl, Options(kernel_table="vidur-a100"))
    gap = default().launch["graph"].gpu_gap_s
    first = {}
    for x in r.records:
        if x.rank == 0 and x.stream == "compute":
            first.setdefault(x.name, x)
    assert all("kernel table" in x.detail for n, x in first.items() if n != "lm_head")
    assert "kernel table" not in first["lm_head"].detail  # Vidur has no LM head
    # batch 16 over 1024 cached tokens: Vidur's 57 us; the fused add + norm: norm + add
    assert first["attn"].duration_s - gap == pytest.approx(57e-6)
    # the fused add + norm at 16 tokens: RMSNorm 7 + add 2.33 us (interpolated from 8 and 32)
    assert first["post_attn_norm"].duration_s - gap == pytest.approx((7.0 + 2 + 1 / 3) * 1e-6)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (OPS + "g,fp16,1,1,1,1,1,softmax,1,0,1\n", r"row 2: op='softmax'"),
        (OPS + "g,fp16,1,1,1,-,1,act,1,0,1\n", r"row 2: intermediate='-'"),
        (OPS + "g,fp16,1,1,1,1,1,act,1,3,1\n", r"row 2: kv_len='3': must be 0 for act"),
        (OPS + "g,fp16,1,1,1,-,1,attn_decode,1,0,1\n", r"row 2: kv_len='0'"),
        (OPS + "g,fp16,1,1,1,1,1,act,1,0,1\ng,fp16,1,1,1,1,1,act,1,0,2\n", r"row 3: tokens=1"),
        (OPS.replace(",kv_len", "") + "g,fp16,1,1,1,1,1,act,1,1\n", r"column='kv_len': missing"),
        (
            "gpu,n_head,n_kv_head,n_embd,n_expanded_embd,tp,num_tokens,mlp_act_median_ms,x\n",
            r"row 1: column='x': unknown",
        ),
        (
            "gpu,n_head,n_kv_head,n_embd,n_expanded_embd,tp,num_tokens,mlp_act_median_ms\n"
            "A100,64,8,8192,28672,2,1,fast\n",
            r"row 2: mlp_act_median_ms='fast'",
        ),
        (
            "gpu,shape,tp,phase,batch_size,prefill_chunk_size,kv_cache_size,time_median_ms\n"
            'A100,"n_embd=1,n_q_head=1,n_kv_head=1",2,warmup,1,0,1,1\n',
            r"row 2: phase='warmup'",
        ),
        (
            "gpu,shape,tp,phase,batch_size,prefill_chunk_size,kv_cache_size,time_median_ms\n"
            'A100,"n_embd=8192,n_q_head=64",2,decode,1,0,1,1\n',
            r"row 2: shape=.*n_kv_head=",
        ),
        (
            "gpu,shape,tp,phase,batch_size,prefill_chunk_size,kv_cache_size,time_median_ms\n"
            'A100,"n_embd=1,n_q_head=1,n_kv_head=1",2,prefill,2,8,0,1\n',
            r"row 2: batch_size='2'",
        ),
    ],
)
def test_bad_operator_tables_name_file_row_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as err:
        load(path)
    assert path in str(err.value)


def test_bad_tables_on_the_command_line_exit_2_with_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    args = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1"]
    bad = write(tmp_path, OPS + "g,fp16,1,1,1,1,1,act,1,0,-3\n")
    for value, needle in [
        (bad, f"kernel table {bad} row 2: time_us='-3'"),
        ("vidur-a999", "kernel_table='vidur-a999': no such file or shipped table (vidur-a100"),
        (f"vidur-a100,{tmp_path / 'nope.csv'}", "nope.csv'"),
        (f"{bad},{bad}", "row 2"),
    ]:
        assert main([*args, "--kernel-table", value]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err


def test_a_time_faster_than_the_gpu_s_peaks_is_refused(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A GEMM row whose time beats the GPU's FLOP and HBM peaks (70B's 940 MB up-projection
    in 1 us: a unit slip) is refused naming the kernel, not run as 939 TB/s; one at a
    plausible time runs."""
    path = tmp_path / "fast.csv"
    path.write_text("gpu,op,dtype,m,n,k,time_us\nh100-sxm,mlp_up,bf16,1,57344,8192,1\n"
                    "h100-sxm,mlp_up,bf16,512,57344,8192,2\n")  # fmt: skip
    args = ["run", "--model", "llama-3.1-70b", "--topology", "dgx-h100", "--tp", "1",
            "--allow-oom", "--kernel-table", str(path)]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mlp_up [1, 8192] x [8192, 57344]" in err and "units" in err
    path.write_text("gpu,op,dtype,m,n,k,time_us\nh100-sxm,mlp_up,bf16,1,57344,8192,300\n"
                    "h100-sxm,mlp_up,bf16,512,57344,8192,900\n")  # fmt: skip
    assert main(args) == 0


def test_the_same_operator_in_two_files_is_refused(tmp_path: Path) -> None:
    row = "g,fp16,1,1,1,1,1,act,1,0,1\n"
    a, b = write(tmp_path, OPS + row, "a.csv"), write(tmp_path, OPS + row, "b.csv")
    with pytest.raises(ConfigError, match=rf"{b} row 2: op='act': rows for it are also in {a}"):
        load(f"{a},{b}")


# ------------------------------------------------------------------------------ calibration
def test_the_shipped_calibration_keeps_the_best_achievable_kernels() -> None:
    for gpu in ("a100-sxm-80gb", "h100-sxm", "mi300x"):
        assert hardware_for(get_gpu(gpu), "bf16").traits == Traits()  # today's model
    assert ideal().kernels == ideal().kernels.ideal()
    refit = profile("_kernels")
    assert refit.kernels != default().kernels
    assert refit.ideal().kernels == ideal().kernels  # --ideal undoes the refit


def test_a_bad_kernel_value_in_a_profile_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "name: x\nabout: y\noverrides:\n  kernels:\n    norm_passes:\n"
                 "      value: 3\n      source: a test of the loader\n", "p.yaml")  # fmt: skip
    with pytest.raises(CalibrationError, match="norm_passes=3"):
        profile(path)


def test_hopper_latencies_scale_the_fixed_times() -> None:
    k = profile("_kernels").kernels
    a100 = hardware_for(get_gpu("a100-sxm-80gb"), "bf16", k).traits
    h100 = hardware_for(get_gpu("h100-sxm"), "bf16", k).traits
    assert h100.gemm_fixed_s == pytest.approx(a100.gemm_fixed_s * 0.75)  # type: ignore[operator]
    assert h100.rowwise_latency_s == pytest.approx(a100.rowwise_latency_s * 0.75)


# ------------------------------------------------------------------------------ accuracy
def test_the_refit_and_the_tables_hold_their_bounds_on_every_family() -> None:
    today, refit = default().kernels, profile("_kernels").kernels
    table = load("vidur-a100,vidur-h100")
    runs = {"today": predict(today), "refit": predict(refit), "tables": predict(today, table)}
    err: dict[str, dict[str, float]] = {}
    for variant, prices in runs.items():
        by: dict[str, list[tuple[float, float]]] = {}
        for c, t in zip(cases(), prices, strict=True):
            by.setdefault(c.family, []).append((t, c.measured_s))
        err[variant] = {f: geomean_error(v) for f, v in by.items()}
    for family in FAMILIES:
        assert err["refit"][family] <= ACCEPT["refit"], family
        assert err["tables"][family] <= ACCEPT["tables"], family
        assert err["refit"][family] < err["today"][family], family
    assert len(cases()) == 1470 and all(math.isfinite(t) for t in runs["refit"])


def test_the_profile_holds_what_the_fit_script_fits() -> None:
    import yaml
    from tpsim.experiments.calibrate import kernel_fit

    text = (Path(kernel_fit.__file__).parents[2] / "simulator" / "calibration" / "engines"
            / "_kernels.yaml")  # fmt: skip
    entries = yaml.safe_load(text.read_text())["overrides"]["kernels"]
    values = {n: entries[n.split(".")[0]]["value"] for n in kernel_fit.PARAMETERS}
    values["latency_scale.hopper"] = entries["latency_scale"]["value"]["hopper"]
    for name, structural in kernel_fit.STRUCTURE.items():
        assert entries[name]["value"] == structural
    assert kernel_fit.kernels_of(values) == profile("_kernels").kernels


def test_the_text_says_which_kernels_are_measured(capsys) -> None:  # type: ignore[no-untyped-def]
    """A run with a kernel table printed the same header and assumptions as one without:
    only --json told measured from modelled."""
    from tpsim.cli import main

    argv = ["run", "--model", "llama-2-7b", "--topology", "dgx-a100", "--tp", "1"]
    assert main([*argv, "--kernel-table", "vidur-a100"]) == 0
    assert "kernels measured where vidur-a100 has them, else modelled" in capsys.readouterr().out
    assert main(argv) == 0
    assert "kernels measured" not in capsys.readouterr().out
