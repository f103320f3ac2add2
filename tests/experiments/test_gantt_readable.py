"""Gantt charts a reviewer can read (issue: op names, tooltips, no black smear, labels that
do not collide, a CPU row that says why it is empty, latency and regime in the title).
Checked through matplotlib's artists and the SVG text, not by eye alone."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from matplotlib.colors import to_rgba
from tpsim import Layout, Options, Workload, simulate
from tpsim.experiments.plots.gantt import gantt, gantt_figure
from tpsim.experiments.plots.gantt_draw import KIND_COLORS, RAIL
from tpsim.experiments.plots.gantt_text import LABEL_GAP_PX, MAX_BAR_NAMES
from tpsim.outputs.text import chart_title

BLACK = to_rgba("black")


@pytest.fixture(scope="module")
def l40s_prefill():
    # PCIe collectives are long and back to back: outlines used to paint them solid black
    return simulate("llama-3.1-8b", "pcie-l40s", Layout(4), Workload(1, "prefill", 512), Options())


@pytest.fixture(scope="module")
def graph_decode():
    return simulate("llama-3.1-8b", "dgx-h100", Layout(4), Workload(8), Options())


def test_critical_path_is_a_rail_never_an_outline(l40s_prefill) -> None:
    chart = gantt_figure(l40s_prefill.records, critical=l40s_prefill.critical_path)
    rails = 0
    for coll in chart.ax.collections:
        edges = coll.get_edgecolor()
        widths = coll.get_linewidth()
        outlined = any(tuple(e) == BLACK and w > 0 for e, w in zip(edges, widths, strict=False))
        assert not outlined, "a black outline would smear narrow bars"
        if len(coll.get_facecolor()) and tuple(coll.get_facecolor()[0]) == BLACK:
            (path, *_) = coll.get_paths()
            ys = path.vertices[:, 1]
            assert ys.max() - ys.min() == pytest.approx(RAIL)
            rails += 1
    assert rails >= 2  # the path runs through compute and comm rows


def test_op_names_on_bars_when_zoomed_and_capped_on_a_full_pass(l40s_prefill) -> None:
    zoomed = gantt_figure(l40s_prefill.records, layers=(0, 0))  # names at a legible size
    names = {t.get_text() for t in zoomed.ax.texts}
    assert {"mlp_up", "mlp_down"} <= names
    full = gantt_figure(l40s_prefill.records)
    ops = {r.name for r in l40s_prefill.records}
    assert sum(t.get_text() in ops for t in full.ax.texts) <= MAX_BAR_NAMES


def test_layer_labels_do_not_collide(graph_decode) -> None:
    chart = gantt_figure(graph_decode.records, layers="all")  # the whole step: most labels
    ax = chart.ax
    labels = sorted(
        t.get_position()[0] for t in ax.texts if re.fullmatch(r"emb|L\d+", t.get_text())
    )
    assert len(labels) > 5
    lo, hi = ax.get_xlim()
    px = (hi - lo) / (ax.get_position().width * chart.fig.get_figwidth() * chart.fig.dpi)
    gaps = [(b - a) / px for a, b in itertools.pairwise(labels)]
    assert min(gaps) >= LABEL_GAP_PX


def test_graph_mode_cpu_row_says_why_it_is_empty_when_zoomed(graph_decode) -> None:
    chart = gantt_figure(graph_decode.records, layers=(28, 29))  # past the overlapped host work
    assert any("no host work in this window" in t.get_text() for t in chart.ax.texts)


def test_a_long_title_breaks_after_a_comma_not_between_a_name_and_its_value() -> None:
    """TP 2 x DP 4's title broke as '... launch graph, engine' / 'vllm' and Qwen3's as
    '..., context' / '1024, ...'; a clause longer than the width still breaks at words."""
    from tpsim.experiments.plots.gantt_text import text_px, wrap

    title = ("llama-3.1-8b on dgx-h100, TP 2 x DP 4, decode batch 16, context 1024, bf16, "
             "launch graph, engine vllm")  # fmt: skip
    width = text_px("llama-3.1-8b on dgx-h100, TP 2 x DP 4, decode batch 16, context", 13)
    lines = wrap(title, 13, width).split("\n")
    assert lines[0].endswith("batch 16,") and lines[-1].endswith("launch graph, engine vllm")
    assert all(text_px(line, 13) <= width for line in lines)
    long = wrap("a clause of many words longer than the width", 13, text_px("a clause of", 13))
    assert long.split("\n")[0] == "a clause of"


def test_title_carries_latency_and_regime(graph_decode) -> None:
    text = chart_title(graph_decode.summary)
    assert "per step" in text and graph_decode.summary["regime"] in text and "%" in text


def test_svg_bars_have_tooltips(graph_decode, tmp_path: Path) -> None:
    out = tmp_path / "g.svg"
    gantt(graph_decode.records, out, layers=(0, 0), critical=graph_decode.critical_path)
    svg = out.read_text()
    chart = gantt_figure(graph_decode.records, layers=(0, 0))
    tips = re.findall(r"<title>([^<]*)</title>", svg)
    assert len(tips) == len(chart.bars) > 10
    assert all("duration" in t and " us" in t for t in tips)
    again = tmp_path / "again.svg"
    gantt(graph_decode.records, again, layers=(0, 0), critical=graph_decode.critical_path)
    assert again.read_bytes() == out.read_bytes()


def test_cross_node_steps_are_distinct_from_nvlink_steps() -> None:
    from tpsim.core.schedule import NET_STEP

    two = simulate("llama-3.1-8b", "dgx-h100", Layout(16), Workload(8), Options(), nodes=2)
    net = [r for r in two.records if r.kind == "collective" and r.detail.endswith(NET_STEP)]
    inside = [r for r in two.records if r.kind == "collective" and not r.detail.endswith(NET_STEP)]
    assert net and inside  # hierarchical: steps in the node, then across the NICs
    chart = gantt_figure(two.records, layers=(0, 0))
    labels = [t.get_text() for t in chart.ax.get_legend().get_texts()]
    assert "collective (network)" in labels and "collective" in labels
    one = simulate("llama-3.1-8b", "dgx-h100", Layout(8), Workload(8), Options())
    assert not any(r.detail.endswith(NET_STEP) for r in one.records)


def _drawn_px(chart: Any, colour: str) -> float:
    """Pixels of width the chart's bars of ``colour`` cover, summed over its bars."""
    ax = chart.ax
    lo, hi = ax.get_xlim()
    px = (hi - lo) / (ax.get_position().width * chart.fig.get_figwidth() * chart.fig.dpi)
    want = to_rgba(colour)
    return sum(
        (p.get_extents().x1 - p.get_extents().x0) / px
        for c in ax.collections
        if len(c.get_facecolor()) and tuple(c.get_facecolor()[0]) == want
        for p in c.get_paths()
    )


def test_a_tiny_bar_is_not_widened_over_the_bar_after_it() -> None:
    """An eager prefill drawn whole: each kernel's 2.75 us device dispatch, a tenth of a
    pixel, was widened to MIN_BAR_PX over the kernel after it and drawn last, so the
    compute row read as mostly 'dispatch' (Llama-3.1-70B 8K prefill, TP 4 x PP 2: grey
    over most of each layer for 0.5% of its time). A bar is widened only into the free
    time after it; the dispatches now cover about their own time."""
    r = simulate(
        "llama-3.1-8b", "dgx-h100", Layout(2), Workload(1, "prefill", 1024), Options(launch="eager")
    )
    chart = gantt_figure(r.records, layers="all")
    ax = chart.ax
    lo, hi = ax.get_xlim()
    px = (hi - lo) / (ax.get_position().width * chart.fig.get_figwidth() * chart.fig.dpi)
    dispatch = [w / px for rec, _, (_, w) in chart.bars if rec.kind == "dispatch"]
    assert dispatch and sum(dispatch) < 0.5 * len(dispatch)  # each far thinner than a pixel
    assert _drawn_px(chart, KIND_COLORS["dispatch"]) < 1.5 * sum(dispatch)  # was ~10x


def test_layer_labels_stay_below_the_title_of_a_tall_chart() -> None:
    """Eight GPUs of an 8K prefill zoomed on layers 0-1 (sweep's gantt_best): the labels sat
    1% of the axes' height above them, 20 px on a 15-inch chart, and ran 12 px into the
    title's last line; they sit a fixed 2 points above the axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    r = simulate("llama-3.1-8b", "dgx-h100", Layout(8), Workload(1, "prefill", 8192), Options())
    chart = gantt_figure(r.records, layers=(0, 1), title="a title\nof two lines")
    assert chart.view is not None and len(chart.view.ranks) == 8
    renderer = FigureCanvasAgg(chart.fig).get_renderer()
    title = chart.ax.title.get_window_extent(renderer)
    axes = chart.ax.get_window_extent(renderer)
    labels = [t for t in chart.ax.texts if re.fullmatch(r"emb|L\d+|head", t.get_text())]
    assert labels
    for t in labels:
        box = t.get_window_extent(renderer)
        assert axes.y1 <= box.y0 and box.y1 <= title.y0, t.get_text()
