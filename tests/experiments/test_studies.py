"""Golden summaries of the named studies: facts a reader can check by hand or by structure
(which TP is fastest, which placement is slower), not long floats from opaque runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tpsim.cli import main
from tpsim.cli.studies import STUDY_NAMES
from tpsim.experiments.studies import STUDIES
from tpsim.experiments.studies.in_node_vs_cross_node import in_node_vs_cross_node
from tpsim.experiments.studies.launch_overhead import launch_overhead
from tpsim.experiments.studies.worked_examples import worked_examples

KiB, MiB = 1024, 1024**2


def test_worked_examples_of_the_design() -> None:
    s = worked_examples(jobs=1).summary
    assert s["allreduce_8e6_over_300GBps_us"] == pytest.approx(8e6 / 300e9 * 1e6)  # 26.67
    assert s["layer_with_20us_compute_is_communication_bound"]
    assert s["tp4_batch32"] == {
        "allreduces": 64,  # 2 per layer x 32 layers
        "payload_bytes": 256 * KiB,  # 32 tokens x 4096 x 2 B
        "sent_per_allreduce": 384 * KiB,  # 2(p-1)/p x 256 KiB at p = 4
        "bytes_sent_per_gpu": 24 * MiB,  # 64 x 384 KiB
    }
    assert s["tp4_batch1_payload_bytes"] == 8 * KiB
    assert s["napkin_70b_bf16_weights_GB"] == 140
    assert 33 < s["llama_2_70b_tp4_weights_per_gpu_GB"] < 36  # about 35
    assert s["pcie_tp8_below_tp4"] and s["pcie_tp8_regime"] == "communication-bound"
    assert s["cross_node_over_in_node_latency"] > 1.2


def test_tp_batch_sweep_headline(demo_run: tuple[Path, list[str]]) -> None:
    out, lines = demo_run  # tpsim demo runs this study
    s = json.loads((out / "tp_batch_sweep.json").read_text())
    # 70.6e9 x 2 B = 141 GB does not fit one 80 GB H100; TP 2 holds 71 GB of weights and
    # leaves no room for the KV cache of 32 x 2048 tokens (10.7 GB at TP 2)
    assert s["fits"] == {
        "1": [],
        "2": [1, 8],
        "4": [1, 8, 32, 128],
        "8": [1, 8, 32, 128],
        "16": [1, 8, 32, 128],
    }
    # memory-bound decode: halving the weights per GPU pays up to TP 8, but not across nodes
    assert set(s["pays_up_to"].values()) == {8}
    assert all(1.25 < g["8"] < 2 for g in s["doubling_gain"].values())
    assert all(g["16"] < 1.25 for g in s["doubling_gain"].values())
    assert s["best_tp"]["128"] == 8  # at large batch TP 16 over InfiniBand is slower
    assert s["best_tp_per_gpu"] == {"1": 2, "8": 2, "32": 4, "128": 4}  # smallest that fits
    assert set(s["regime_tp8"].values()) == {"memory-bound"}
    assert any("more TP pays up to TP 8" in line for line in lines)


@pytest.mark.slow
def test_in_node_vs_cross_node() -> None:
    study = in_node_vs_cross_node(jobs=2)
    s = study.summary
    assert all(s["tp8_cross_slower_than_tp8_in_node"].values())  # 4 + 4 over InfiniBand
    assert all(r > 1.5 for r in s["comm_ratio_tp8_cross_over_in_node"].values())
    # TP 16 over two nodes: twice the GPUs for at most a few percent more tokens/s
    assert all(g < 1.1 for g in s["tp16_cross_gain_over_tp8_in_node"].values())
    # (at batch 32 TP 16 may win or lose outright by a few percent: a near tie that moves
    # with the all-reduce kernels' calibration, so no claim on its sign)
    assert {r["hosts"] for r in study.rows} == {1, 2}


def test_launch_overhead() -> None:
    s = launch_overhead(jobs=2).summary
    assert s["eager_slowest"] and s["compiled_fastest"]
    ratio = s["eager_over_graph"]
    # the host's per-kernel launches matter less as kernels grow with the model
    assert ratio["llama-3.1-8b"] > ratio["llama-2-13b"] > ratio["llama-3.1-70b"] > 1
    assert s["regime"]["llama-3.1-8b eager"] == "overhead-bound"
    assert s["regime"]["llama-3.1-8b graph"] != "overhead-bound"


def test_study_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert set(STUDIES) == {
        "worked_examples",
        "tp_batch_sweep",
        "in_node_vs_cross_node",
        "launch_overhead",
        "engines",
        "tp_vs_pp_vs_dp",
        "moe_tp_vs_ep",
        "serving_capacity",
        "moe_serving",
    }
    assert main(["study", "worked_examples", "--out", str(tmp_path), "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["study"] == "worked_examples" and j["summary"]["tp4_batch1_payload_bytes"] == 8192
    assert (tmp_path / "worked_examples.csv").is_file()
    assert main(["study", "nope"]) == 2


@pytest.mark.slow
def test_engines_study_shows_where_the_engine_sets_the_limit(tmp_path: Path) -> None:
    from tpsim.experiments.studies.engines import engines

    s = engines(tmp_path, jobs=2)
    gain, host = s.summary["tp8_over_tp4"], s.summary["host_share_at_tp8"]
    assert gain["llama-3.1-8b ideal"] > 1.25 and host["llama-3.1-8b ideal"] == 0
    assert gain["llama-3.1-8b vllm-v0"] < 1.0  # Ray coordination grows with the workers
    assert host["llama-3.1-8b vllm-v0"] > 0.5
    assert gain["llama-3.1-70b vllm"] > 1.25
    assert (tmp_path / "engines.png").stat().st_size > 10_000
    assert (tmp_path / "engines.csv").read_text().count("\n") == 25  # header + 24 points


@pytest.mark.benchmark  # about a minute of serving runs
def test_serving_capacity_study(tmp_path: Path) -> None:
    from tpsim.experiments.studies.serving_capacity import serving_capacity

    s = serving_capacity(tmp_path).summary
    for g, dp in (("8", 1), ("16", 2)):
        tp8, tp4, tp2 = (
            f"{g} TP 8" + (f" x DP {dp}" if dp > 1 else ""),
            f"{g} TP 4 x DP {2 * dp}",
            f"{g} TP 2 x DP {4 * dp}",
        )
        # a wider TP group decodes faster at no load
        assert s["idle_tpot_ms"][tp8] < s["idle_tpot_ms"][tp4] < s["idle_tpot_ms"][tp2]
        # TP 2 holds 70B's weights with room for ~25K tokens of KV cache: it saturates first
        assert all(s["saturates_at"][tp2] <= (v or 1e9) for k, v in s["saturates_at"].items()
                   if k.startswith(g + " "))  # fmt: skip
        # the disaggregated pair keeps its decode step flat while its one prefill worker queues
        assert s["sustains"][f"{g} 1P+1D (TP {4 * dp} each)"] < s["sustains"][tp4]
    assert s["best_within_slo"]["8"] == ["TP 4 x DP 2"]  # faster steps than TP 2, 2 queues
    assert (tmp_path / "serving_capacity.csv").read_text().startswith("gpus,layout,rate")


def test_moe_serving_study_reduced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The study's machinery on a small grid: one model, TP 8 and ADP 8, two rates."""
    from tpsim.experiments.studies import moe_serving as m

    monkeypatch.setattr(m, "CASES", (("qwen3-30b-a3b", "dgx-h100", "bf16"),))
    monkeypatch.setattr(m, "LAYOUTS", (m.LAYOUTS[0], m.LAYOUTS[2]))
    monkeypatch.setattr(m, "RATES", (4.0, 16.0))
    monkeypatch.setattr(m, "REQUESTS", 60)
    s = m.moe_serving(tmp_path)
    tp8, adp8 = "qwen3-30b-a3b TP 8", "qwen3-30b-a3b ADP 8 EP 8"
    assert s.summary["idle_tpot_ms"][tp8] < s.summary["idle_tpot_ms"][adp8]
    assert s.summary["sustains"] == {tp8: 16.0, adp8: 16.0}
    rows = (tmp_path / "moe_serving.csv").read_text().splitlines()
    assert rows[0].startswith("model,layout,rate") and len(rows) == 5
    assert any("ADP 8 EP 8" in line for line in s.lines)


@pytest.mark.benchmark  # about a minute of serving runs
def test_moe_serving_study(tmp_path: Path) -> None:
    from tpsim.experiments.studies.moe_serving import moe_serving

    s = moe_serving(tmp_path).summary
    for model in ("qwen3-235b-a22b", "qwen3-30b-a3b"):
        tp8, adp8 = f"{model} TP 8", f"{model} ADP 8 EP 8"
        # at no load the widest TP group decodes fastest; under load attention DP holds more
        assert s["idle_tpot_ms"][tp8] < s["idle_tpot_ms"][adp8]
        assert s["sustains"][adp8] >= s["sustains"][tp8]
        assert any("ADP" in k for k in s["best_within_slo"][model])
    assert (tmp_path / "moe_serving.csv").read_text().startswith("model,layout,rate")


def test_study_names_are_the_discovered_registry() -> None:
    """The CLI's static STUDY_NAMES (read by --help without importing the studies) are the
    registry discovered from the study modules, in its order."""
    assert tuple(STUDIES) == STUDY_NAMES
    for name, entry in STUDIES.items():
        assert entry.name == name and entry.about and "\n" not in entry.about
        assert entry.run.__module__ == f"tpsim.experiments.studies.{name}"


def test_a_study_module_without_its_entry_is_refused(tmp_path: Path) -> None:
    """The registry refuses a study module whose STUDY is missing or misnamed."""
    import tpsim.experiments.studies as studies

    (tmp_path / "stray.py").write_text("STUDY = None\n")
    path = list(studies.__path__)
    studies.__path__.append(str(tmp_path))
    try:
        with pytest.raises(ImportError, match="needs STUDY = StudyEntry"):
            studies._discover()
    finally:
        studies.__path__[:] = path
        sys.modules.pop("tpsim.experiments.studies.stray", None)
