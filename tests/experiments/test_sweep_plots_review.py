"""Issue #17's review of the sweep plots and of the words of sweeps and studies: each defect
a user found, seen through matplotlib's artists (or the printed text) on hand-made rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from sweep_rows import BATCHES, grid, row
from tpsim.core.errors import ConfigError
from tpsim.experiments.plots import figures
from tpsim.experiments.plots import sweep as sp
from tpsim.experiments.plots.figures import plot_results


@pytest.fixture(scope="module")
def grid_plots(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """The plots of :func:`grid`'s rows, drawn once for the module: the folder, what was written."""
    out = tmp_path_factory.mktemp("grid-plots")
    return out, list(plot_results(grid(), out, gantt_ids=[]))


def test_plots_of_a_sweep_come_with_an_index(grid_plots: tuple[Path, list[Path]]) -> None:
    """Defect: loose PNGs, no index. Every figure is listed in index.html with a caption."""
    folder, written = grid_plots
    index = (folder / "index.html").read_text()
    pngs = sorted(p.name for p in folder.glob("*.png"))
    assert written[-1] == folder / "index.html" and len(pngs) == 4
    for name in pngs:
        assert f'<img src="{name}"' in index and f"<figcaption>{name}: " in index


def test_breakdown_shows_every_batch_each_on_its_scale() -> None:
    """Defect: 2-3 batches on one linear axis, 25 s bars flattening 1 ms ones."""
    fig = sp.draw_breakdown_bars(grid(), title="t")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == [f"batch {b}" for b in BATCHES]
    tops = [ax.get_ylim()[1] for ax in shown]
    assert tops[-1] > 5 * tops[0]  # each panel scaled to its own bars


def test_breakdown_labels_prefill_per_pass() -> None:
    """Defect: prefill labelled "ms per step"."""
    pre = sp.draw_breakdown_bars(grid(phase="prefill"), title="t")
    dec = sp.draw_breakdown_bars(grid(), title="t")
    assert pre.axes[0].get_ylabel() == "ms per pass (prefill)"
    assert dec.axes[0].get_ylabel() == "ms per step (decode)"


def test_throughput_ticks_plain_and_legend_off_the_data() -> None:
    """Defects: 1.5x10^4 log labels; a legend over the TP 16 points."""
    fig = sp.draw_throughput_vs_tp(grid(), title="t")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert labels and not any("$" in t or "times" in t for t in labels)
        legend = ax.get_legend()
        if legend is not None:
            box, area = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
            assert box.x0 >= area.x1  # beside the axes, not on them
    assert any(ax.get_legend() is not None for ax in fig.axes)


def test_host_boundary_marked_on_tp_axes() -> None:
    """Defect: nothing marks where a group crosses into a second host."""
    for draw in (sp.draw_throughput_vs_tp, sp.draw_in_node_vs_cross_node):
        fig = draw(grid(), title="t")
        marks = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid() == sp.HOST_BOUNDARY]
        assert marks and all(8 < ln.get_xdata()[0] < 16 for ln in marks)  # type: ignore[index]
    one_host = [r for r in grid() if r["hosts"] == 1]
    fig = sp.draw_throughput_vs_tp(one_host, title="t")
    assert not [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid()]


def test_in_node_vs_cross_node_all_batches_from_zero_with_ratio() -> None:
    """Defect: 4 of 7 batches, a y-axis not from zero, no ratio."""
    fig = sp.draw_in_node_vs_cross_node(grid(), title="t")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == [f"batch {b}" for b in BATCHES]
    assert all(ax.get_ylim()[0] == 0 for ax in shown)
    for ax in shown:
        ratios = [t.get_text() for t in ax.texts if t.get_gid() == "ratio"]
        assert len(ratios) == 1 and ratios[0].endswith("x TP 16\nin one host") is False
        assert "x TP 8" in ratios[0]


def test_regime_legend_lists_only_regimes_present() -> None:
    """Defect: legends list regimes that do not appear."""
    fig = sp.draw_regime_map([row(tp, b) for tp in (1, 2) for b in (1, 8)], title="t")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["memory-bound"]


def test_regime_map_shows_the_margin_of_near_ties() -> None:
    """Defect: a near tie (memory 53 %, communication 47 %) painted as a clear regime."""
    rows = [row(1, 1, memory_share=0.9), row(2, 1, memory_share=0.53)]
    fig = sp.draw_regime_map(rows, title="t")
    ax = fig.axes[0]
    texts = sorted(t.get_text() for t in ax.texts)
    assert any("memory 90%" in t and "communication" not in t for t in texts)
    assert any("memory 53%" in t and "communication 47%" in t for t in texts)
    ties = [p for p in ax.patches if p.get_gid() == "tie"]
    assert len(ties) == 1 and ties[0].get_xy() == (0.5, -0.5)  # the TP 2 cell alone
    grid_values = ax.images[0].get_array()
    assert grid_values[0][0] != grid_values[0][1]  # a lighter shade of the same regime


@pytest.mark.slow
def test_series_share_axes(tmp_path: Path) -> None:
    """Defect: series (H100 vs L40S) never on shared axes."""
    h100, l40s = grid(), grid(topology="pcie-l40s", gpu="l40s")
    fig = sp.draw_series_comparison({"dgx-h100": h100, "pcie-l40s": l40s}, title="t")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == len(BATCHES)
    assert all(len(ax.get_lines()) == 2 for ax in shown)
    assert len({ax.get_ylim() for ax in shown}) == 1  # one shared scale
    plot_results(h100 + l40s, tmp_path, gantt_ids=[])
    assert "compare_series.png" in (tmp_path / "index.html").read_text()


@pytest.mark.slow
def test_sweep_plots_are_deterministic(grid_plots: tuple[Path, list[Path]], tmp_path: Path) -> None:
    first, _ = grid_plots  # the same rows drawn a second time, here
    plot_results(grid(), tmp_path, gantt_ids=[])
    assert sorted(p.name for p in first.iterdir()) == sorted(p.name for p in tmp_path.iterdir())
    for p in sorted(first.iterdir()):
        assert p.read_bytes() == (tmp_path / p.name).read_bytes(), p.name


def test_layouts_beyond_tp_are_drawn_not_collapsed(tmp_path: Path) -> None:
    """A sweep over dp (or pp): each (tp, layout, batch) is its own point, a line per layout
    in the throughput plot, a bar and a regime-map column each."""
    rows = [
        row(tp, 8, dp=dp, pp=1, micro_batches=1) | {"point_id": f"{tp}-{dp}"}
        for tp in (2, 4)
        for dp in (1, 2)
    ]
    fig = sp.draw_throughput_vs_tp(rows, title="t")
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["batch 8", "batch 8, DP 2"]
    bars = sp.draw_breakdown_bars(rows, title="t")
    ticks = [t.get_text() for t in bars.axes[0].get_xticklabels()]
    assert ticks == ["TP 2", "TP 2 x DP 2", "TP 4", "TP 4 x DP 2"]
    cols = [t.get_text() for t in sp.draw_regime_map(rows, title="t").axes[0].get_xticklabels()]
    assert cols == ["TP 2", "TP 2 x DP 2", "TP 4", "TP 4 x DP 2"]
    written = plot_results(rows, tmp_path, gantt_ids=[])
    assert any(p.name == "regime_map.png" for p in written)


def test_a_narrow_log_axis_still_has_labels() -> None:
    rows = [row(2, 8), row(4, 8, latency_s=1.2e-3)]
    fig = sp.draw_throughput_vs_tp(rows, title="t")
    ax = fig.axes[0]
    fig.canvas.draw()
    shown = [t.get_text() for t in ax.get_yticklabels(minor=True) if t.get_text()]
    shown += [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert shown  # within one decade the minor ticks carry the labels


def test_a_cell_with_a_run_and_an_error_shows_the_run(tmp_path: Path) -> None:
    """Issue #27: TP 16 fails on one host and runs on two; the regime map said "error" for
    it and the throughput plots left it out."""
    rows = [row(tp, b) for tp in (4, 8) for b in (1, 16)]
    rows += [row(16, b, error="tp=16: only 8 GPUs on this host") for b in (1, 16)]
    rows += [row(16, b, hosts=2) for b in (1, 16)]
    plot_results(rows, tmp_path, gantt_ids=[])
    drawn = figures._one_per(rows, figures.POINT)  # what every figure of the series is given
    assert [(r["tp"], r["hosts"], r["error"]) for r in drawn if r["tp"] == 16] == [
        (16, 2, None),
        (16, 2, None),
    ]
    fig = sp.draw_regime_map(rows, title="t")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "error" not in texts and sum("tok/s" in t for t in texts) == 6


def test_a_layout_that_does_not_fit_gets_no_tokens_per_s() -> None:
    """Issue #27: the demo's map printed "18.5 tok/s ... no fit", a number a reviewer could
    quote for a layout that cannot run; it says what the layout would need instead."""
    rows = [row(1, 1, fits=False, total_bytes_per_gpu=142e9), row(2, 1)]
    fig = sp.draw_regime_map(rows, title="t")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "does not fit\nneeds 142 GB/GPU" in texts
    assert sum("tok/s" in t for t in texts) == 1
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "does not fit" in legend


def test_engines_and_expert_layouts_are_series_and_points_not_merged(tmp_path: Path) -> None:
    """A sweep over engines is a series per engine (named in its files and titles); one over
    EP (or attention DP) a point per layout, never two engines or two layouts on one line."""
    rows = [
        row(tp, 1, engine=e) | {"point_id": f"{tp}-{e}", "latency_s": 1e-3 * (1 + (e == "tgi-v1"))}
        for tp in (1, 2)
        for e in ("vllm", "tgi-v1")
    ]
    written = {p.name for p in plot_results(rows, tmp_path, gantt_ids=[])}
    assert {"vllm_throughput_vs_tp.png", "tgi-v1_throughput_vs_tp.png"} <= written
    assert "engine tgi-v1" in figures.series_title(rows[1])
    moe = [row(8, 64, ep=ep, attention_dp=1) | {"point_id": f"ep{ep}"} for ep in (1, 8)]
    ticks = [t.get_text() for t in sp.draw_breakdown_bars(moe, title="t").axes[0].get_xticklabels()]
    assert ticks == ["TP 8", "TP 8 EP 8"]


def test_an_axis_spanning_a_decade_or_two_is_readable() -> None:
    """152 to 5,572 tok/s had one label ("1k"): within two decades the 2x and 5x ticks are
    labelled too, at least three labels on every axis."""
    rows = [row(1, 1, latency_s=6.6e-3), row(8, 64, latency_s=11.5e-3)]
    fig = sp.draw_throughput_vs_tp(rows, title="t")
    fig.canvas.draw()
    for ax in fig.axes[:2]:
        lo, hi = ax.get_ylim()
        shown = [t for t in ax.get_yticklabels(minor=True) + ax.get_yticklabels()
                 if t.get_text() and lo <= t.get_position()[1] <= hi]  # fmt: skip
        assert len(shown) >= 3, [t.get_text() for t in shown]


def test_a_layout_placed_over_more_hosts_is_drawn_apart(tmp_path: Path) -> None:
    """A sweep over --gpus-per-node placed TP 8 in one host and 4 + 4 over two: every figure
    showed only the one-host point, the other silently left out."""
    rows = [row(4, 8), row(8, 8), row(8, 8, hosts=2, latency_s=2e-3), row(16, 8, hosts=2)]
    for r in rows:
        r["nodes"] = 2
    fig = sp.draw_throughput_vs_tp(rows, title="t")
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["batch 8", "batch 8, split over 2 hosts"]
    bars = sp.draw_breakdown_bars(rows, title="t")
    ticks = [t.get_text() for t in bars.axes[0].get_xticklabels()]
    assert ticks == ["TP 4", "TP 8", "TP 8 (2 hosts)", "TP 16"]
    title = sp.draw_regime_map(rows, title="t").axes[0].get_title()
    assert "1 placement over more hosts not drawn" in title
    plot_results(rows, tmp_path, gantt_ids=[])


def test_attention_dp_points_stand_at_their_group_of_gpus() -> None:
    """TP 1 x attention DP 8 runs on 8 GPUs: the throughput plot drew it at TP 1, beside a
    one-GPU run; it stands at 8 with the axis saying so."""
    rows = [row(8, 64, ep=8, attention_dp=1) | {"point_id": "tp8"},
            row(1, 64, ep=8, attention_dp=8) | {"point_id": "adp8"}]  # fmt: skip
    fig = sp.draw_throughput_vs_tp(rows, title="t")
    xs = sorted(x for line in fig.axes[0].get_lines() for x in line.get_xdata())
    assert xs == [8, 8]
    assert fig.axes[0].get_xlabel() == "GPUs of the TP group (TP x attention DP)"
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["batch 64, EP 8", "batch 64, ADP 8 EP 8"]
    plain = sp.draw_throughput_vs_tp([row(2, 8), row(4, 8)], title="t")
    assert plain.axes[0].get_xlabel() == "TP degree (GPUs)"


def test_attention_dp_rows_stand_at_their_group_in_every_plot_against_tp() -> None:
    """The host boundary and the in-node/cross-node panels place a TP 2 x attention DP 8
    row (16 GPUs over 2 hosts) at 16, where the throughput plot draws it (they had kept 2)."""
    rows = [row(4, 8), row(8, 8), row(2, 8, hosts=2, attention_dp=8, ep=16)]
    assert sp.host_boundary(rows) == (8, 16)
    fig = sp.draw_in_node_vs_cross_node(rows, title="t")
    lines = [line for line in fig.axes[0].get_lines() if line.get_gid() != sp.HOST_BOUNDARY]
    assert sorted(x for line in lines for x in line.get_xdata()) == [4, 8, 16]
    assert fig.axes[0].get_xlabel() == "GPUs of the TP group (TP x attention DP)"
    assert sp.cross_node_ratios(rows, 8)[0][:2] == (16, 2)


def test_plot_gantt_of_a_failed_point_is_refused_naming_the_flag_before_any_figure(
    tmp_path: Path,
) -> None:
    """plot --gantt ID of a row whose point failed re-simulated it after every other figure
    and exited with the point's own error ('tp*pp*dp=16*2*1=32: more than the 16 GPUs...'),
    naming neither --gantt nor the row."""
    failed = row(16, 1) | {"point_id": "f16", "latency_s": None, "error": "more than 8 GPUs"}
    out = tmp_path / "plots"
    with pytest.raises(ConfigError, match=r"^--gantt=f16: that point failed.*more than 8 GPUs"):
        figures.plot_results([row(8, 1), failed], out, gantt_ids=["f16"])
    assert not out.exists()


def test_ratio_labels_stay_inside_their_panel() -> None:
    """Study in_node_vs_cross_node: TP 4 split over two hosts sits at the first tick, and
    its '0.85x TP 4 / in one host', centred on it, ran over the y axis's '40'."""
    rows = [row(4, 1), row(8, 1), row(4, 1, hosts=2), row(8, 1, hosts=2), row(16, 1, hosts=2)]
    fig = sp.draw_in_node_vs_cross_node(rows, title="t")
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    ax = fig.axes[0]
    area = ax.get_window_extent(renderer)
    ratios = [t for t in ax.texts if t.get_gid() == "ratio"]
    assert len(ratios) == 3
    for text in ratios:
        box = text.get_window_extent(renderer)
        assert area.x0 <= box.x0 and box.x1 <= area.x1, text.get_text()


def test_an_attention_dp_group_is_named_by_its_layout_beside_the_host_boundary() -> None:
    """Qwen3-30B-A3B, TP 1 x ADP 8 EP 8 on one host against TP 2 x ADP 8 EP 16 over two:
    the ratio said '1.14x TP 8 in one host' and the boundary 'TP > 8', of groups whose TP
    is 1 and 2 (8 is the GPUs of TP x attention DP, as the axis counts)."""
    rows = [row(1, 8, attention_dp=8, ep=8), row(2, 8, hosts=2, attention_dp=8, ep=16)]
    fig = sp.draw_in_node_vs_cross_node(rows, title="t")
    (ratio,) = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "ratio"]
    assert ratio.endswith("x TP 1 x ADP 8 EP 8\nin one host")
    marks = [t.get_text() for t in fig.axes[0].texts if "hosts" in t.get_text()]
    assert marks == ["> 8 GPUs: group over 2+ hosts"]
    plain = sp.draw_in_node_vs_cross_node([row(8, 8), row(16, 8, hosts=2)], title="t")
    assert "TP > 8: group over 2+ hosts" in [t.get_text() for t in plain.axes[0].texts]
    assert any(t.get_text().endswith("x TP 8\nin one host") for t in plain.axes[0].texts)


def test_a_pipeline_s_bar_holds_its_bubble() -> None:
    """A PP 2 row's breakdown has a bubble part: its bar left it out (half the step at one
    micro-batch) and drew the pipeline twice as fast as its latency."""
    rows = [row(8, 64, pp=2, dp=1, micro_batches=1, latency_s=15.1e-3, memory_s=5.84e-3,
                communication_s=1.71e-3, bubble_s=7.55e-3)]  # fmt: skip
    fig = sp.draw_breakdown_bars(rows, title="t")
    top = max(p.get_y() + p.get_height() for p in fig.axes[0].patches)
    assert top == pytest.approx(15.1)  # the step's latency, bubble included
    assert "bubble" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_a_near_tie_names_the_layout_beyond_tp() -> None:
    """'TP 4 batch 16 bubble-bound' named no PP degree, and the PP 1 point of the same TP and
    batch is memory-bound: the near ties name every degree above 1."""
    from tpsim.experiments.plots.words import regime_summary

    tie = row(4, 16, pp=2, dp=1, micro_batches=1, memory_share=0.52, regime="memory-bound")
    plain = row(4, 16, memory_share=0.52) | {"point_id": "plain"}
    text = regime_summary([tie, plain])
    assert "TP 4 x PP 2 batch 16" in text and "TP 4 batch 16" in text


def test_in_node_vs_cross_node_draws_tp_groups_alone() -> None:
    """A PP 2 point sat on its TP group's 'one host' line beside the plain TP group of the
    same degree (two markers at one x); the plot is of TP groups, and says so."""
    rows = [row(4, 8), row(8, 8), row(16, 8, hosts=2),
            row(4, 8, pp=2, micro_batches=1) | {"point_id": "pp"}]  # fmt: skip
    fig = sp.draw_in_node_vs_cross_node(rows, title="t")
    lines = [line for line in fig.axes[0].get_lines() if line.get_gid() != sp.HOST_BOUNDARY]
    assert sorted(x for line in lines for x in line.get_xdata()) == [4, 8, 16]
    assert "TP groups alone" in fig._suptitle.get_text()


def test_series_comparison_draws_each_layout_of_a_series_apart() -> None:
    """Defect: a series holding PP 1 and PP 2 points of one batch drew them on one line
    against TP, zigzagging between the layouts."""
    plain = [row(tp, 8) for tp in (2, 4)]
    piped = [{**row(tp, 8), "pp": 2, "point_id": f"pp{tp}"} for tp in (2, 4)]
    fig = sp.draw_series_comparison({"a": plain + piped, "b": plain}, title="t")
    lines = fig.axes[0].get_lines()
    assert sorted(line.get_label() for line in lines) == ["a", "a, PP 2", "b"]
    assert all(list(line.get_xdata()) == [2, 4] for line in lines)
