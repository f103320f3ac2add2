"""Gantt PNGs for a slide (#27): by default a step a reader can read (the embedding, the
first layer, a marked gap, the last layer and the head), no text under 9 pt in a figure
sized for a slide, op names only inside bars that hold them, and compare --gantt's title
naming model, batch and context. Checked through matplotlib's artists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from tpsim import Layout, Options, Workload, simulate
from tpsim.cli import main
from tpsim.experiments.plots import gantt as gantt_module
from tpsim.experiments.plots.gantt import gantt_figure
from tpsim.experiments.plots.gantt_draw import WIDTH_IN
from tpsim.experiments.plots.gantt_view import gantt_view
from tpsim.experiments.plots.style import MIN_FONT_PT

DATA = Path(__file__).parents[1] / "data"


@pytest.fixture(scope="module")
def decode_70b():
    return simulate("llama-3.1-70b", "dgx-h100", Layout(8), Workload(1), Options())


@pytest.fixture(scope="module")
def tp16():
    return simulate("llama-3.1-8b", "dgx-h100", Layout(16), Workload(8), Options(), nodes=2)


def _texts(chart: Any) -> list[Any]:
    ax = chart.ax
    legend = ax.get_legend()
    return [
        *ax.texts,
        ax.title,
        ax.xaxis.label,
        *ax.get_xticklabels(),
        *ax.get_yticklabels(),
        *(legend.get_texts() if legend else []),
    ]


def test_default_view_is_first_and_last_layer_with_a_marked_gap(decode_70b) -> None:
    view = gantt_view(decode_70b.records)
    assert view.gap_layers == (1, 78) and view.gap_s is not None
    chart = gantt_figure(decode_70b.records, critical=decode_70b.critical_path)
    labels = [t.get_text() for t in chart.ax.texts if re.fullmatch(r"emb|L\d+|head", t.get_text())]
    assert set(labels) >= {"L0", "L79", "head"}
    assert not any(s.startswith("L") and 1 <= int(s[1:]) <= 78 for s in labels)
    gap = [t.get_text() for t in chart.ax.texts if "layers 1–78" in t.get_text()]
    assert gap and "collapsed" in gap[0] and "ms" in gap[0]
    drawn_layers = {r.layer for r, _, _ in chart.bars if r.stream == "compute"}
    assert {-1, 0, 79, 80} <= drawn_layers and not drawn_layers & set(range(2, 78))
    # the whole step on demand, and a zoom as before
    whole = gantt_view(decode_70b.records, layers="all")
    assert whole.gap_s is None and whole.t0_s == view.t0_s and whole.t1_s == view.t1_s
    assert gantt_view(decode_70b.records, layers=(3, 4)).gap_s is None
    with pytest.raises(ValueError, match="layers"):
        gantt_view(decode_70b.records, layers="some")  # type: ignore[arg-type]


def test_lanes_a_microsecond_apart_hide_the_same_layers() -> None:
    """Qwen3-30B-A3B at --expert-skew 2 over 16 GPUs: GPU 3 began each layer 1.6 us before
    GPU 0, so the stretch (from the last lane's start of layer 1) held all of its layer 1 but
    that sliver, and its lane said '… layers 2–46 …' beside GPU 0's '… layers 1–46 …'."""
    from tpsim.core.records import Record

    def layer(rank: int, k: int, t0: float) -> Record:
        return Record(10 * k + rank, rank, "compute", "mlp_up", "gemm", "memory", k, "", k,
                      t0, t0 + 200e-6, 0.0, 0, -1, "")  # fmt: skip

    early = {0: 0.0, 1: 1.6e-6}  # rank 1 begins every layer 1.6 us sooner
    records = [layer(r, k, 200e-6 * k - early[r]) for r in (0, 1) for k in range(8)]
    view = gantt_view(records, ranks=[0, 1])
    assert view.gap_layers == (1, 6) and view.gap_layers_by_rank == ()


def test_few_layers_or_pipeline_stages_are_not_collapsed() -> None:
    tiny = simulate(
        str(DATA / "models" / "tiny-llama"),
        "dgx-h100",
        Layout(2),
        Workload(1, context_len=32),
        Options(),
    )
    assert gantt_view(tiny.records).gap_s is None
    pp = simulate("llama-3.1-8b", "dgx-h100", Layout(2, pp=2), Workload(8), Options())
    assert gantt_view(pp.records).gap_s is None


@pytest.mark.parametrize("case", ["decode_70b", "tp16"])
def test_text_is_slide_sized_and_names_fit_their_bars(case: str, request) -> None:
    run = request.getfixturevalue(case)
    chart = gantt_figure(run.records, critical=run.critical_path, rank_labels=run.rank_labels)
    fig = chart.fig
    assert fig.get_figwidth() == WIDTH_IN and fig.dpi >= 150
    texts = [t for t in _texts(chart) if t.get_text()]
    assert texts and min(t.get_fontsize() for t in texts) >= MIN_FONT_PT
    renderer = FigureCanvasAgg(fig).get_renderer()
    named = 0
    for t in chart.ax.texts:
        tx, ty = t.get_position()
        holders = [
            (x, w)
            for r, y, (x, w) in chart.bars
            if t.get_text() in (r.name, r.site)
            and y == ty
            and abs(x + w / 2 - tx) < 1e-9 * max(1, tx)
        ]
        if not holders:
            continue  # a layer label, the gap's words
        (x, w) = holders[0]
        box = t.get_window_extent(renderer)
        x0, x1 = (chart.ax.transData.transform((v, ty))[0] for v in (x, x + w))
        assert x0 - 0.5 <= box.x0 and box.x1 <= x1 + 0.5, t.get_text()
        named += 1
    assert named >= 1  # op names where they fit (mlp_up, lm_head)


def test_compare_gantt_title_names_model_batch_and_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def capture(runs: Any, path: Any, *, title: str = "", layers: Any = None) -> None:
        seen.update(title=title, layers=layers)

    monkeypatch.setattr(gantt_module, "gantt_compare", capture)
    argv = ["compare", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "2,4"]
    argv += ["--batch", "16", "--context-len", "4096", "--gantt", str(tmp_path / "c.png")]
    assert main(argv) == 0
    verdict, about = seen["title"].split("\n")
    assert "tokens/s" in verdict
    assert "llama-3.1-8b" in about and "batch 16" in about and "context 4096" in about
    assert "bf16" in about and "decode" in about
    assert main([*argv, "--gantt-layers", "all"]) == 0
    assert seen["layers"] == "all"


def test_a_long_title_stays_inside_the_figure(decode_70b) -> None:
    """The demo's Gantt title ran off the right edge: it is centred over the axes, which sit
    right of the lane names, so it wraps to the room it has there."""
    title = "llama-3.1-70b on dgx-h100, TP 8, decode batch 8, context 2048, bf16, launch graph"
    title += ", engine vllm (layers 0-1)"
    chart = gantt_figure(decode_70b.records, title=title, layers=(0, 1))
    fig = chart.fig
    renderer = FigureCanvasAgg(fig).get_renderer()
    box = chart.ax.title.get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (box, fig.bbox.width)


def test_the_default_ranks_follow_the_critical_path_into_a_later_stage() -> None:
    """TP 8 x PP 2 over two hosts: ranks 0, 1 and 15 by default, and the rank of stage 1
    the critical path runs on after the send (rank 8), so the rail does not stop at the
    send; without the path, the three."""
    from tpsim.topologies.io import get_topology

    graph = get_topology("dgx-h100", 2)
    r = simulate("llama-3.1-8b", graph, Layout(8, pp=2), Workload(8), nodes=2)
    path = [rec for rec in r.records if rec.id in set(r.critical_path)]
    plain = gantt_view(r.records)
    assert list(plain.ranks) == [0, 1, 15]
    shown = gantt_view(r.records, critical=r.critical_path).ranks
    assert {0, 1, 15} <= set(shown) and any(8 <= k < 15 for k in shown)
    late = max(rec.end_s for rec in path)
    assert any(rec.rank in shown and rec.end_s == late for rec in path)


def test_a_zoom_on_layers_draws_the_gpus_that_hold_them() -> None:
    """TP 2 x PP 2 zoomed on layers 0-1 (run --gantt-layers 0-1, sweep's gantt_best): the
    chart drew stage 1's GPUs as well, empty but for host work beside the window; a zoom
    now keeps the GPUs holding those layers, as compare --gantt's lanes do."""
    r = simulate("llama-3.1-8b", "dgx-h100", Layout(2, pp=2), Workload(4))
    assert gantt_view(r.records, critical=r.critical_path).ranks == (0, 1, 2, 3)
    view = gantt_view(r.records, layers=(0, 1), critical=r.critical_path)
    assert view.ranks == (0, 1)  # was (0, 1, 2, 3)
    assert view.note == "showing 2 of 4 GPUs"
    assert gantt_view(r.records, layers=(20, 21)).ranks == (2, 3)  # stage 1's layers


def test_a_moe_exchange_too_narrow_for_its_step_name_is_named_by_its_site() -> None:
    """Qwen3-30B-A3B, TP 1 x attention-DP 8, EP 8 under DeepEP at 300 tokens a GPU: vLLM
    runs each MoE layer in two chunks, each its own dispatch and combine; zoomed on one
    layer the exchanges were unnamed bars (the combine's step 134 px after its fixed
    latency's 43, 'moe_combine.all_to_all[0]' 250 px), so dispatch could not be told from
    combine but by hovering an SVG. A collective whose steps cannot hold their names is
    named by its site across its bars where that fits."""
    r = simulate(
        "qwen3-30b-a3b",
        "dgx-h100",
        Layout(1, attention_dp=8, ep=8),
        Workload(300, context_len=256),
        Options(moe_a2a="deepep"),
    )
    chart = gantt_figure(r.records, layers=(10, 10))
    combines = [rec for rec, _, _ in chart.bars if rec.site == "moe_combine"]
    assert len({rec.op for rec in combines}) == 2  # the layer's two chunks
    names = [t.get_text() for t in chart.ax.texts]
    assert names.count("moe_combine") == 1  # the first chunk's; was none
    assert not any(n.startswith("moe_combine.") for n in names)


def test_a_three_way_gantt_title_names_every_ratio_and_the_pipeline_kept_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The title kept the verdict's first clause: two of three configurations, and not the
    pipeline that gives the most tokens/s kept full (TP 8 x PP 2 here, 1.99x TP 8)."""
    seen: dict[str, Any] = {}

    def capture(runs: Any, path: Any, *, title: str = "", layers: Any = None) -> None:
        seen.update(title=title)

    monkeypatch.setattr(gantt_module, "gantt_compare", capture)
    argv = ["compare", "--model", "llama-3.1-70b", "--topology", "dgx-h100", "--nodes", "1,2,2",
            "--tp", "8,16,8", "--pp", "1,1,2", "--batch", "16", "--gantt",
            str(tmp_path / "c.png")]  # fmt: skip
    assert main(argv) == 0
    head, kept, _ = seen["title"].split("\n")
    assert head.startswith("TP 8, PP 1, 1 node gives the most tokens/s a step (")
    assert "x TP 16, PP 1, 2 nodes" in head and "x TP 8, PP 2, 2 nodes" in head
    assert kept.startswith("with each pipeline kept full, TP 8, PP 2, 2 nodes gives the most")
