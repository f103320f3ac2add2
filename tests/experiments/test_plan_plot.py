"""tpsim plan --plots: the Pareto front, labels that do not overlap, the PNG written."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure
from tpsim.cli import main
from tpsim.experiments.plots.pareto import (
    CLEAR_PX,
    ParetoPoint,
    _gap,
    draw_pareto,
    pareto_front,
    place_labels,
)


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


def test_a_label_nearer_another_point_is_joined_to_its_own() -> None:
    """Llama-3.1-70B on a DGX H100 at a 50 ms TPOT SLO: TP 2 x PP 4 (48.96 ms, grey) sits
    under the ring of TP 2 x PP 2 x DP 2 (48.97 ms); its label went below TP 4 x PP 2's blue
    point (47.92 ms), nearer that one than its own, with no line: the pair read as TP 2 x
    PP 4 on the front. Every label is plainly nearer its own point, or a line joins them."""
    pts = [
        ParetoPoint(30.38e-3, 395.0, "TP 2 x DP 4 b24"),
        ParetoPoint(32.23e-3, 1985.8, "TP 4 x DP 2 b256"),
        ParetoPoint(36.95e-3, 1732.0, "TP 8 b512"),
        ParetoPoint(47.92e-3, 2003.4, "TP 4 x PP 2 b768"),
        ParetoPoint(48.96e-3, 1960.8, "TP 2 x PP 4 b768"),
        ParetoPoint(48.97e-3, 2123.8, "TP 2 x PP 2 x DP 2 b416", best=True),
        ParetoPoint(51.56e-3, 9.7, "TP 1 x PP 2 x DP 4 b1"),
        ParetoPoint(51.58e-3, 4.8, "TP 1 x PP 4 x DP 2 b1"),
        ParetoPoint(51.64e-3, 2.4, "TP 1 x PP 8 b1"),
    ]
    fig = draw_pareto(pts, title="plan", slo_x=50e-3)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    centres = [tuple(ax.transData.transform((p.x * 1e3, p.y))) for p in pts]
    labels = {t.get_text(): t for t in ax.texts}
    for p, own in zip(pts, centres, strict=True):
        text = labels[p.label]
        box = text.get_window_extent(renderer)
        joined = any(
            (line.get_xdata()[0], line.get_ydata()[0]) == (p.x * 1e3, p.y)  # type: ignore[index]
            for line in ax.lines
        )
        gap = [_gap(box, *c) for c in centres]
        mine = _gap(box, *own)
        nearest_other = min(g for g, c in zip(gap, centres, strict=True) if c != own)
        assert joined or mine + CLEAR_PX <= nearest_other, (p.label, mine, nearest_other)
