"""A design review's sweep plots of an 8K prefill on TP 4 x PP 2 beside TP 4 and TP 8: what
their titles and axes said of it, read through matplotlib's artists on hand-made rows."""

from __future__ import annotations

from test_sweep_plots_review import row
from tpsim.experiments.plots import figures
from tpsim.experiments.plots import sweep as sp

TITLE = "llama-3.1-70b prefill on dgx-h100 (prompt 8192, launch graph, engine vllm)"


def _prefill(tp: int, pp: int = 1) -> dict[str, object]:
    return row(tp, 1, phase="prefill", prompt_len=8192, pp=pp, point_id=f"{tp}-{pp}")


def test_a_one_panel_breakdown_keeps_its_title_inside_the_figure() -> None:
    """One batch: the figure is 7 inches wide and its title, centred left of the legend,
    ran off the left edge ('a-3.1-70b prefill on ...'); its lines are wrapped to fit."""
    fig = sp.draw_breakdown_bars([_prefill(4), _prefill(4, 2), _prefill(8)], title=TITLE)
    box = fig._suptitle.get_window_extent(renderer=fig.canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1


def test_a_prefill_run_eagerly_is_titled_so() -> None:
    """vLLM has no CUDA graph for a prefill of more than 512 tokens: the run, its Gantt and
    the sweep's assumptions said 'launch eager', the plots' titles 'launch graph'."""
    eager = [_prefill(4), _prefill(8)]
    assert "launch eager (no CUDA graph" in figures.series_title(eager[0], eager)
    graph = [row(4, 1, phase="prefill", prompt_len=256)]
    assert "launch graph," in figures.series_title(graph[0], graph)
    both = [*graph, row(4, 4, phase="prefill", prompt_len=256)]  # 1,024 tokens: eager
    assert "launch graph, eager where" in figures.series_title(both[0], both)


def test_throughput_of_a_pipeline_is_the_whole_layouts_and_one_point_is_singular() -> None:
    """A prefill's TP 4 x PP 2 point (8 GPUs) was drawn on an axis saying 'whole TP group',
    and one point left out was '1 points'."""
    rows = [_prefill(4), _prefill(4, 2), _prefill(8), _prefill(8, 2) | {"error": "too big"}]
    fig = sp.draw_throughput_vs_tp(rows, title=TITLE)
    assert fig.axes[0].get_ylabel() == "tokens/s (whole layout)"
    title = fig._suptitle.get_text()
    assert "(1 point not fitting or failed: not drawn)" in title.replace("\n", " ")
    box = fig._suptitle.get_window_extent(renderer=fig.canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1


def test_points_not_drawn_are_those_of_which_no_row_is_drawn() -> None:
    """A sweep over --nodes 1,2 --tp 8,16: TP 16 fails on one host, runs on two and is
    drawn; the title counted every failed placement, '2 points ... not drawn' here where one
    is left out (Llama-3.1-70B, --nodes 1,2 --tp 2,4,8,16 --pp 1,2: 7 where 3 were)."""
    failed = {"hosts": None, "latency_s": None, "error": "more than the 8 GPUs of dgx-h100"}
    rows = [row(8, 1), row(8, 1, hosts=2), row(16, 1) | failed, row(16, 1, hosts=2)]
    rows.append(row(16, 64) | failed)  # the one point of which no row is drawn
    title = sp.draw_throughput_vs_tp(rows, title=TITLE)._suptitle.get_text()
    assert "(1 point not fitting or failed: not drawn)" in title.replace("\n", " ")
