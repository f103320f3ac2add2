"""The command line with the DeepSeek and gpt-oss families and 4-bit weights: the catalog
lists them, a model's entry says what its numbers rest on, the run's text says how its
weights run, and a config.json with attention tpsim does not model exits 2 in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpsim.cli import main
from tpsim.models.catalog import CONFIGS


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_catalog_lists_the_new_families(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, "list", "models")
    assert rc == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["deepseek-v3"][1:3] == ["671.0B", "37.6B"]
    assert rows["gpt-oss-120b"][1] == "116.8B" and rows["gpt-oss-120b"][-1] == "4/128"
    assert rows["gpt-oss-20b"][-1] == "4/32"


def test_a_model_entry_says_mla_mtp_and_the_active_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, out, _ = cli(capsys, "list", "models", "deepseek-v3")
    assert rc == 0
    assert "KV cache 576 elements per token and layer" in out
    assert "MTP: 1 next-token prediction layer(s), 11.6 B parameters" in out
    assert "active without the embedding table: 36.63 B" in out
    rc, out, _ = cli(capsys, "list", "models", "gpt-oss-120b")
    assert "sliding-window attention (128 tokens) on 18 of 36 layers" in out
    assert "active without the embedding table: 5.13 B" in out


def test_the_run_says_how_4_bit_weights_run(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["run", "--model", "gpt-oss-20b", "--tp", "1", "--batch", "4", "--dtype", "fp4"]
    for topology, says in (
        ("dgx-b200", "fp4 tensor cores (W4A4)"),
        ("dgx-h100", "dequantised to fp8 in the GEMM prologue, fp8 tensor cores (W4A8)"),
        ("dgx-a100", "bf16 math (W4A16: no fp8 or fp4 tensor cores on a100-sxm-80gb)"),
    ):
        rc, out, _ = cli(capsys, *base, "--topology", topology)
        assert rc == 0
        line = next(x for x in out.splitlines() if x.strip().startswith("precision"))
        assert "NVFP4" in line and says in line
    rc, out, _ = cli(capsys, *base[:-2], "--topology", "dgx-h100")
    assert "routed experts mxfp4" in out  # as the checkpoint stores them
    rc, out, _ = cli(capsys, "run", "--model", "llama-3.1-8b", "--topology", "dgx-h100",
                     "--tp", "1")  # fmt: skip
    assert "precision" not in out  # a 16-bit run has nothing to say


def test_unmodelled_attention_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cfg = json.loads((CONFIGS / "qwen3-32b.json").read_text())
    cfg["layer_types"] = ["sliding_attention"] * cfg["num_hidden_layers"]
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    rc, out, err = cli(capsys, "run", "--model", str(f), "--topology", "dgx-h100", "--tp", "1")
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "layer_types='sliding_attention'" in err
    assert "the families whose layer_types tpsim reads: gpt_oss" in err
