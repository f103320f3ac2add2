"""The H200 kernels measured with experiments/measure_kernels.py, and tpsim's prices of them
(experiments/validation/measured_kernels.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from unittest.mock import MagicMock, patch

import pytest
from tpsim.calibration import csv_rows, measured
from tpsim.cli import main
from tpsim.core.kernels import kernel_table
from tpsim.experiments.validation import measured_kernels as mk
from tpsim.models.catalog import get_model

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "experiments" / "measure_kernels.py"


def _script() -> dict[str, object]:
    """The measuring script's module namespace (a bare file: it runs without tpsim)."""
    namespace: dict[str, object] = {"__name__": "measure_kernels"}
    exec(compile(SCRIPT.read_text(), str(SCRIPT), "exec"), namespace)
    return namespace


def test_the_script_measures_the_catalog_models_gemms() -> None:
    """Its shapes are Llama-3.1-70B's as the catalog has it: at every TP the four GEMMs hold
    one layer's projection weights split TP ways."""
    shapes = _script()["gemm_shapes"]
    m = get_model("llama-3.1-70b")
    per_layer = (m.hidden_size * (m.num_heads + 2 * m.num_kv_heads) * m.head_dim
                 + m.num_heads * m.head_dim * m.hidden_size
                 + 3 * m.hidden_size * m.intermediate_size)  # fmt: skip
    for tp in (1, 2, 4, 8):
        gemms = shapes(tp)  # type: ignore[operator]
        assert sum(n * k for n, k in gemms.values()) * tp == per_layer
        assert gemms["mlp_up"] == (2 * m.intermediate_size // tp, m.hidden_size)


def test_without_torch_the_script_says_so_in_one_line(tmp_path: Path) -> None:
    code = "import sys; sys.modules['torch'] = None; sys.argv[1:] = ['--out', sys.argv[1]]; "
    code += f"exec(open({str(SCRIPT)!r}).read())"
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], capture_output=True,
                       text=True, check=False)  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.splitlines()) == 1 and "needs PyTorch" in r.stderr
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_file_holds_every_gemm_and_the_add() -> None:
    cases = mk.cases()
    gemms = [c for c in cases if c.op != "residual"]
    assert len(gemms) == 4 * 4 * 13 * 2  # ops x TP x token counts x dtypes
    assert len(cases) - len(gemms) == 13  # the add once per token count
    assert {c.family for c in cases} == {f"{f} {d}" for f in ("QKV", "O", "gate/up", "down")
                                         for d in ("bf16", "fp8")} | {"add"}  # fmt: skip


def test_the_refit_prices_the_h200_gemms_within_15_percent_per_family() -> None:
    fams = mk.families(mk.predict())
    for family, (_, error, bias) in fams.items():
        if family != "add":
            assert error <= 0.15, family
            assert abs(bias) <= 0.15, family
    # fp8 halves a weight-bound GEMM's bytes: priced and measured alike
    p = dict(zip(mk.cases(), mk.predict(), strict=True))
    one = {(c.op, c.dtype, c.tp): (c.measured_s, s) for c, s in p.items() if c.tokens == 1}
    meas16, sim16 = one[("mlp_up", "bf16", 1)]
    meas8, sim8 = one[("mlp_up", "fp8", 1)]
    assert meas8 / meas16 == pytest.approx(0.5, abs=0.05)
    assert sim8 / sim16 == pytest.approx(0.5, abs=0.05)


def test_the_file_reads_as_a_kernel_table(capsys: pytest.CaptureFixture[str]) -> None:
    """What the script writes is a --kernel-table: a run on the H200 takes its GEMM times."""
    args = ["run", "--model", "llama-3.1-70b", "--topology", "hgx-h200", "--tp", "8",
            "--batch", "8", "--dtype", "fp8", "--json"]  # fmt: skip
    assert main(args) == 0
    model = capsys.readouterr().out
    table = str(measured(mk.FILE))
    assert main([*args, "--kernel-table", table]) == 0
    assert capsys.readouterr().out != model


def _fake_torch() -> dict[str, MagicMock]:
    """A stand-in for PyTorch on a GPU: every call succeeds, every CUDA event pair reads
    1 ms, so the script's control flow and files can be checked where no GPU is."""
    torch = MagicMock(name="torch")
    torch.__version__ = "0.0-fake"
    torch.version.cuda = "0.0"
    torch.cuda.is_available.return_value = True
    props = torch.cuda.get_device_properties.return_value
    props.name, props.multi_processor_count, props.L2_cache_size = "Fake GPU", 1, 60 << 20
    torch.cuda.Event.return_value.elapsed_time.return_value = 1.0
    big = torch.empty.return_value
    big.numel.return_value = 1 << 31
    big.normal_.return_value = big
    profiler = MagicMock(name="torch.profiler")
    profiler.profile.return_value.__enter__.return_value.events.return_value = []
    attention = MagicMock(name="torch.nn.attention")
    return {"torch": torch, "torch.profiler": profiler, "torch.nn.attention": attention}


def test_the_script_writes_a_table_tpsim_reads(tmp_path: Path) -> None:
    """Run end to end on a fake GPU: its kernels.csv is a kernel table tpsim's reader takes,
    with every GEMM and the add, and its other files have their headers."""
    out = tmp_path / "out"
    with patch.dict(sys.modules, _fake_torch()):
        main_ = _script()["main"]
        assert main_(["--out", str(out), "--gpu", "h200-sxm", "--quick", "--profiled",  # type: ignore[operator]
                      "--attention"]) == 0  # fmt: skip
    assert "Traceback" not in (out / "log.txt").read_text()
    rows = [r for r in csv_rows(out / "kernels.csv")]
    assert len(rows) == 4 * 4 * 5 * 2 + 5 * 4 * 2  # GEMMs, and the add under every TP and dtype
    assert kernel_table.load(str(out / "kernels.csv")).ops  # tpsim reads it as a table
    assert (out / "profiled.csv").read_text().startswith("op,dtype,tp,tokens,kernels,")
    assert (out / "attention.csv").read_text().startswith("backend,heads,kv_heads,")
    assert (out / "facts.csv").read_text().count("\n") == 1 + 8
