"""``tpsim calibrate``: the knobs it fits, the solver, recovering known parameters from points
simulated with them, the self-consistency the contract checks, the identifiability warnings
and bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from tpsim import Options, Workload, simulate
from tpsim.calibration import profile
from tpsim.cli import main
from tpsim.core.kernels.costs import hardware_for
from tpsim.experiments.calibrate import lsq
from tpsim.experiments.calibrate.fit import calibrate
from tpsim.topologies.gpus import GPUS

HEADER = "model,topology,nodes,tp,batch,phase,prompt_len,context_len,dtype,measured_ms"
MODEL = "llama-3.1-8b"


def measure(engine: str, points: list[tuple[int, int, str, int]]) -> str:
    """A measurements CSV of ``points`` (tp, batch, phase, prompt or context length) as
    ``engine`` runs them on one DGX H100."""
    rows = [HEADER]
    for tp, batch, phase, n in points:
        w = Workload(batch, phase, n, n) if phase == "prefill" else Workload(batch, context_len=n)
        ms = simulate(MODEL, "dgx-h100", tp, w, Options(engine=engine)).latency_s * 1e3
        prompt, context = (n, "") if phase == "prefill" else ("", n)
        rows.append(f"{MODEL},dgx-h100,1,{tp},{batch},{phase},{prompt},{context},,{ms!r}")
    return "\n".join(rows) + "\n"


def profile_file(path: Path, overrides: dict) -> Path:
    doc = {"name": path.stem, "about": "test", "extends": "vllm-v0", "overrides": overrides}
    path.write_text(yaml.safe_dump(doc))
    return path


def fitted(result, name: str) -> float:  # type: ignore[no-untyped-def]
    (f,) = [f for f in result.parameters if f.knob.name == name]
    return f.value


# ---------------------------------------------------------------- the knobs


def test_efficiency_scales_multiply_the_gpu_fractions_capped_at_the_peak(tmp_path: Path) -> None:
    h100 = GPUS["h100-sxm"]
    base = profile("vllm-v0").kernels
    p = profile_file(tmp_path / "s.yaml", {"kernels": {
        "hbm_efficiency_scale": {"value": 0.5, "source": "test"},
        "matmul_efficiency_scale": {"value": 10, "source": "test"},
    }})  # fmt: skip
    hw, hw0 = hardware_for(h100, "bf16", profile(str(p)).kernels), hardware_for(h100, "bf16", base)
    assert hw.hbm_efficiency == h100.hbm_efficiency * 0.5
    assert hw.matmul_efficiency == 1.0  # never above the peak
    assert hw0.matmul_efficiency == h100.matmul_efficiency  # 1 as shipped: unchanged


def test_collective_latency_adds_to_every_collective_s_fixed_latency(tmp_path: Path) -> None:
    w = Workload(batch=8, context_len=1024)
    p = profile_file(tmp_path / "c.yaml", {"engine": {
        "collective_latency_us": {"value": 10, "source": "test"}}})  # fmt: skip
    runs = [simulate(MODEL, "dgx-h100", 2, w, Options(engine=e)) for e in ("vllm-v0", str(p))]
    base0, base1 = ([(r.name, r.duration_s) for r in x.records if r.rank == 0 and
                     r.name.endswith(".base")] for x in runs)  # fmt: skip
    # two per layer, the embedding's all-reduce and the LM head's all-gather
    assert [n for n, _ in base0] == [n for n, _ in base1] and len(base1) == 2 * 32 + 2
    assert all(b - a == pytest.approx(10e-6) for (_, a), (_, b) in zip(base0, base1, strict=True))


# ---------------------------------------------------------------- the solver


def test_solver_stays_in_its_box_and_says_which_bound_the_data_push_against() -> None:
    target = np.array([0.5, 3.0])  # the second lies beyond its upper bound of 2
    lo, hi = np.zeros(2), np.full(2, 2.0)
    sol = lsq.solve(lambda x: x - target, np.ones(2), lo, hi)
    assert sol.x == pytest.approx([0.5, 2.0], abs=1e-3)
    assert sol.pressing(lo, hi).tolist() == [False, True]


def test_soft_l1_shrugs_off_an_outlier_least_squares_would_follow() -> None:
    logs = np.log([1.0, 1.02, 0.98, 1.01, 3.0])  # one point 3x off
    sol = lsq.solve(lambda c: c[0] - logs, np.zeros(1), np.full(1, -5.0), np.full(1, 5.0))
    assert abs(sol.x[0]) < 0.02  # least squares: mean(logs) = 0.22
    assert np.mean(logs) > 0.2


# ---------------------------------------------------------------- fits


@pytest.mark.slow
def test_recovers_host_scale_and_gemm_efficiency_from_simulated_points(tmp_path: Path) -> None:
    c = profile("vllm-v0").engine
    truth = profile_file(tmp_path / "truth.yaml", {
        "engine": {"step_host_us": {"source": "vllm-v0 x 1.3", "value": {
            k: [h.base_s * 1.3e6, h.per_seq_s * 1.3e6] for k, h in c.step_host.items()}}},
        "kernels": {"matmul_efficiency_scale": {"value": 0.9, "source": "test"}},
    })  # fmt: skip
    points = [(tp, b, "decode", 1024) for tp in (1, 2) for b in (1, 32)]
    points += [(1, 1, "prefill", 2048), (2, 1, "prefill", 512), (2, 1, "prefill", 2048)]
    csv = tmp_path / "m.csv"
    csv.write_text(measure(str(truth), points))
    result = calibrate(csv, "vllm-v0")
    assert fitted(result, "step_host_scale") == pytest.approx(1.3, rel=0.05)
    assert fitted(result, "matmul_efficiency_scale") == pytest.approx(0.9, rel=0.05)
    assert fitted(result, "hbm_efficiency_scale") == pytest.approx(1.0, rel=0.05)
    assert max(map(abs, result.errors())) < 0.01


@pytest.mark.slow
def test_a_profile_fitted_on_tp_1_and_2_predicts_tp_4_and_8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The contract's self-consistency: calibrating vllm-v0 on its own points keeps it."""
    grid = [(tp, b, "decode", 1024) for tp in (1, 2, 4, 8) for b in (1, 16)]
    rows = measure("vllm-v0", grid).splitlines()
    csv = tmp_path / "m.csv"
    csv.write_text("\n".join(r for r in rows if r.split(",")[3] in ("tp", "1", "2")) + "\n")
    out = tmp_path / "fitted.yaml"
    args = ["calibrate", str(csv), "--engine", "vllm-v0", "--out", str(out)]
    assert main(args) == 0
    first = out.read_bytes()
    assert main([*args, "--jobs", "1"]) == 0
    assert out.read_bytes() == first  # deterministic: no date, no temporary path, any --jobs
    doc = yaml.safe_load(first)
    assert doc["name"] == "fitted" and doc["extends"] == "vllm-v0"
    for entries in doc["overrides"].values():
        for e in entries.values():
            assert e["source"].startswith("fitted by tpsim calibrate to m.csv (sha256 ")
            assert "4 points" in e["source"]
    for line in rows[1:]:
        cells = line.split(",")
        tp, batch, ms = int(cells[3]), int(cells[4]), float(cells[-1])
        got = simulate(MODEL, "dgx-h100", tp, Workload(batch), Options(engine=str(out)))
        assert got.latency_s * 1e3 == pytest.approx(ms, rel=0.05)
    text = capsys.readouterr().out
    assert "layer_host_us: every point replays a CUDA graph" in text


def test_points_at_one_tp_degree_leave_the_collective_latency_at_the_base(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "one_tp.csv"
    csv.write_text(measure("vllm-v0", [(2, b, "decode", 1024) for b in (1, 8, 32, 64)]))
    out = tmp_path / "p.yaml"
    assert main(["calibrate", str(csv), "--engine", "vllm-v0", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "collective_latency_us: every point is at TP 2: a latency per collective cannot " in text
    assert "collective_latency_us" not in yaml.safe_load(out.read_text())["overrides"].get(
        "engine", {}
    )


def test_a_request_is_its_prefill_and_its_decode_steps_at_their_mean_context(
    tmp_path: Path,
) -> None:
    """output_len 256: the prefill and 255 decode steps, each priced at the steps' mean
    context (256 + 128), with the all-reduce the row names."""
    from tpsim.experiments.calibrate.measurements import read_points
    from tpsim.experiments.calibrate.simulate import step_time

    csv = tmp_path / "m.csv"
    csv.write_text(REQUEST + f"{MODEL},dgx-h100,1,2,8,prefill,256,,,900,,\n")
    request, prefill = read_points(csv)
    assert (request.decode_steps, request.allreduce, request.decode.context_len) == (
        255,
        "nccl",
        384,
    )
    assert "+ 255 decode steps" in request.label and "allreduce nccl" in request.label
    opts = Options(engine="vllm-v0", allreduce_algo="nccl")
    want = simulate(MODEL, "dgx-h100", 2, Workload(8, "prefill", 256), opts).latency_s
    want += 255 * simulate(MODEL, "dgx-h100", 2, Workload(8, "decode", 256, 384), opts).latency_s
    assert step_time(request, "vllm-v0") == pytest.approx(want, rel=1e-12)
    assert prefill.decode_steps == 0 and prefill.allreduce == "auto"
    assert step_time(prefill, "vllm-v0") < want / 10


# ---------------------------------------------------------------- bad input

ROWS = [f"{MODEL},dgx-h100,1,{tp},1,decode,,1024,,{ms}" for tp, ms in ((1, 7.7), (2, 7.8))]
GOOD = "\n".join([HEADER, *ROWS]) + "\n"
REQUEST = f"{HEADER},output_len,allreduce\n{MODEL},dgx-h100,1,2,8,prefill,256,,,900,256,nccl\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "m.csv: no measurements"),
        ("# only a comment\n", "m.csv: no measurements"),
        (HEADER + "\n", "m.csv: a header and no measurements"),
        (HEADER.replace("measured_ms", "measured") + "\n", "m.csv row 1: no 'measured_ms' column"),
        ("model,topology,tp\nx,y,1\n", "m.csv row 1: no 'measured_ms' column"),
        (GOOD.replace(",7.8", ",fast"), "m.csv row 3, measured_ms='fast': not a number"),
        (GOOD.replace(",7.8", ",-1"), "m.csv row 3, measured_ms='-1'"),
        (GOOD.replace(",7.8", ",nan"), "m.csv row 3, measured_ms='nan'"),
        (GOOD.replace(",2,1,", ",two,1,"), "m.csv row 3, tp='two': must be a positive whole"),
        (GOOD.replace(",2,1,", ",3,1,"), "m.csv row 3, tp='3': does not divide"),
        (GOOD.replace(",2,1,", f",{'9' * 5000},1,"), "m.csv row 3, tp='9999999999"),
        (GOOD.replace(",7.8", ",1e400"), "m.csv row 3, measured_ms='1e400': must be a time"),
        (GOOD.replace(",2,1,", ",16,1,"), "m.csv row 3, tp='16': larger than the 8 GPUs"),
        (GOOD.replace("decode,,1024,,7.8", "decode,,1024,int3,7.8"), "row 3, dtype='int3'"),
        (GOOD.replace("1,2,1,decode", "1,2,1,train"), "m.csv row 3, phase='train'"),
        (GOOD.replace(f"{MODEL},dgx-h100,1,2", "llama-9b,dgx-h100,1,2"), "row 3, model='llama-9b'"),
        (GOOD.replace("dgx-h100,1,2", "dgx-h999,1,2"), "m.csv row 3, topology='dgx-h999'"),
        (GOOD.replace(",7.8", ",7.8,1"), "m.csv row 3: 11 cells; the header has 10 columns"),
        ("\n".join(GOOD.splitlines()[:2]) + "\n", "m.csv: 1 point; at least 2 are needed"),
        (REQUEST.replace(",prefill,", ",decode,"), "m.csv row 2, phase='decode': a request"),
        (REQUEST.replace(",256,nccl", ",256,magic"), "m.csv row 2, allreduce='magic': must be"),
        (REQUEST.replace(",256,nccl", ",0,nccl"), "m.csv row 2, output_len='0': must be a posi"),
        (GOOD.replace(",2,1,decode,,1024,,7.8", ",1,1,decode,,1024,,7.7"),
         "m.csv: rows 2, 3 all measure one point; at least 2 different points"),
        (GOOD.replace(",7.8", ",0.0078"),
         "m.csv row 3, measured_ms=0.0078: below 2.26 ms, the least time its step"),
    ],
)  # fmt: skip
def test_bad_measurements_exit_2_with_one_line_and_no_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    csv, out = tmp_path / "m.csv", tmp_path / "p.yaml"
    csv.write_text(text)
    assert main(["calibrate", str(csv), "--engine", "vllm-v0", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and str(csv) in err, err
    assert not out.exists() and list(tmp_path.iterdir()) == [csv]


def test_two_points_fit_one_parameter_and_say_which_they_leave(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv, out = tmp_path / "m.csv", tmp_path / "p.yaml"
    # two points of a host-bound 8B model (TP 1 and 2 within 1%): the kernel floors and the
    # HBM, screened first, would have to pass their physical bounds, so each leaves the fit
    # to the parameter after it: the host time per step
    csv.write_text(GOOD)
    assert main(["calibrate", str(csv), "--engine", "vllm-v0", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for knob in ("kernel_floor_scale", "hbm_efficiency_scale"):
        assert f"{knob}: held at its bound " in text
    assert "collective_latency_us: not fitted: 2 points fit at most 1 parameter, taken in" in text
    assert "push it beyond what is physical" not in text  # no knob fitted at a bound
    doc = yaml.safe_load(out.read_text())
    assert list(doc["overrides"]) == ["engine"]  # the host time per step alone
    assert list(doc["overrides"]["engine"]) == ["step_host_us"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "vllm-v9"], "engine='vllm-v9': unknown engine"),
        (["--engine", "vllm-v0", "--out", "p.json"], "--out=p.json: must end in .yaml"),
        (["--engine", "vllm-v0", "--out", "nowhere/p.yaml"], "folder nowhere does not exist"),
        (["--engine", "p.yaml", "--out", "p.yaml"], "--out=p.yaml: is the --engine file"),
    ],
)
def test_bad_flags_exit_2_with_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("m.csv").write_text(GOOD)
    Path("p.yaml").write_text("name: p\nextends: vllm-v0\n")
    if "--out" not in args:
        args = [*args, "--out", "q.yaml"]
    assert main(["calibrate", "m.csv", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not Path("q.yaml").exists() and Path("p.yaml").read_text().startswith("name: p\n")


@pytest.mark.parametrize(
    ("name", "message"),
    [("none.csv", "no such file"), (".", "is a folder"), ("/dev/null", "not a regular file")],
)
def test_a_file_that_is_no_csv_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    path = tmp_path / name
    assert main(["calibrate", str(path), "--engine", "vllm", "--out", str(tmp_path / "p.yaml")])
    assert f"{path}: {message}" in capsys.readouterr().err
    assert not (tmp_path / "p.yaml").exists()


def test_extra_columns_are_kept_and_ignored(tmp_path: Path) -> None:
    """Issue #26: a measurements CSV with a column of its own (notes, a run id) is read, the
    column named as ignored (so a misspelt column of tpsim's own is seen, not silently left
    at its default)."""
    from tpsim.experiments.calibrate.measurements import extra_columns, read_points

    plain = tmp_path / "plain.csv"
    plain.write_text(GOOD)
    lines = GOOD.strip().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("model,"))
    extra = [f"{line},note {i}" for i, line in enumerate(lines[at + 1 :])]
    noted = tmp_path / "noted.csv"
    noted.write_text("\n".join([*lines[:at], lines[at] + ",notes", *extra]) + "\n")
    assert [p.measured_s for p in read_points(noted)] == [p.measured_s for p in read_points(plain)]
    assert extra_columns(noted) == ["notes"] and extra_columns(plain) == []


def test_an_out_the_base_extends_or_written_by_hand_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Writing --out over a profile the --engine chain extends left both extending each
    other; over a hand-written profile it was silently lost. A fit's own output is
    replaced, as fits are re-run."""
    csv = tmp_path / "m.csv"
    csv.write_text(GOOD)
    base = tmp_path / "base.yaml"
    base.write_text("name: base\nabout: mine\nextends: vllm-v0\noverrides: {}\n")
    child = tmp_path / "child.yaml"
    child.write_text("name: child\nabout: mine\nextends: base.yaml\noverrides: {}\n")
    argv = ["calibrate", str(csv), "--engine", str(child), "--out", str(base)]
    assert main(argv) == 2
    assert "is a profile --engine" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 2  # never over its own chain
    hand = tmp_path / "mine.yaml"
    hand.write_text(base.read_text())
    assert main(["calibrate", str(csv), "--engine", "vllm-v0", "--out", str(hand)]) == 2
    assert "not a profile tpsim calibrate wrote; give --overwrite" in capsys.readouterr().err
    assert hand.read_text() == base.read_text()
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("name: a\nabout: x\nextends: b.yaml\noverrides: {}\n")
    b.write_text("name: b\nabout: x\nextends: a.yaml\noverrides: {}\n")
    assert main(["run", "--model", MODEL, "--topology", "dgx-h100", "--tp", "1",
                 "--engine", str(a)]) == 2  # fmt: skip
    assert "extends itself (a.yaml -> b.yaml -> a.yaml)" in capsys.readouterr().err


def test_rows_read_otherwise_than_written_are_named(tmp_path: Path) -> None:
    """A cell the phase does not read, and repeats of one point that disagree (a misspelt
    column left at its default), are warned, as tpsim run warns of the first."""
    from tpsim.experiments.calibrate.checks import ignored_cells, repeated
    from tpsim.experiments.calibrate.measurements import read_points

    csv = tmp_path / "m.csv"
    csv.write_text(HEADER + "\n" + "\n".join([
        f"{MODEL},dgx-h100,1,1,1,decode,2048,1024,,7.7",
        f"{MODEL},dgx-h100,1,1,1,prefill,512,1024,,40",
        f"{MODEL},dgx-h100,1,1,1,decode,,1024,,13.0",
    ]) + "\n")  # fmt: skip
    points = read_points(csv)
    said = ignored_cells(points)
    assert said == [
        "row 2: prompt_len=2048 does not apply to decode (it uses context_len 1024); ignored",
        "row 3: context_len=1024 does not apply to prefill (it uses prompt_len 512); ignored",
    ]
    assert any("rows 2, 4 measure the same point 7.7 to 13 ms apart" in w for w in repeated(points))
