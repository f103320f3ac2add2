"""tpsim plan --plots: the Pareto front, labels that do not overlap, the PNG written."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure
from tpsim.cli import main
from tpsim.experiments.plots.pareto import ParetoPoint, pareto_front, place_labels


def test_pareto_front_keeps_the_undominated_by_increasing_tpot() -> None:
    pts = [
        ParetoPoint(1, 10, "a"),
        ParetoPoint(2, 30, "b"),
        ParetoPoint(3, 20, "c"),
        ParetoPoint(4, 40, "d"),
    ]
    assert [p.label for p in pareto_front(pts)] == ["a", "b", "d"]


def test_labels_of_a_crowded_plot_do_not_overlap() -> None:
    pts = [
        ParetoPoint(1 + 0.01 * i, 100 + i, f"TP {i} x PP 2 x DP 2 b64", best=i == 0)
        for i in range(8)
    ]
    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    ax.scatter([p.x for p in pts], [p.y for p in pts])
    ax.set_xlim(0, 3)
    ax.set_ylim(50, 200)
    boxes = place_labels(fig, ax, pts)
    assert len(boxes) == len(pts)
    for i, a in enumerate(boxes):
        assert not any(a.overlaps(b) for b in boxes[i + 1 :])


def test_plan_plots_writes_the_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--batch-max", "2"]
    assert main([*args, "--jobs", "1", "--slo-tpot-ms", "5", "--plots", str(tmp_path)]) == 0
    png = tmp_path / "plan_pareto.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {png}" in capsys.readouterr().out
    assert main([*args, "--plots", str(tmp_path / "no" / "such")]) == 2
