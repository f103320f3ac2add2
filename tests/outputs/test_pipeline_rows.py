"""A pipeline's point-to-point rows in the Gantt chart, the Perfetto trace and the report's
interactive timeline: receives drawn with the sends, the ranks the critical path runs on,
p2p rows only for a comparison's pipelines, a zoom across stages marking every stage's
layers, and bars too thin for a pixel still drawn."""

from __future__ import annotations

import math
import re
import typing
from pathlib import Path

import pytest
from test_export import rec
from tpsim.core.records import Record
from tpsim.experiments.plots.gantt import gantt
from tpsim.outputs.export import DEPENDENCY_FLOW_BASE, chrome_trace
from tracecheck import check_trace_structure

US = 1e-6


def stage_pair(recv_us: tuple[float, float] = (10.0, 20.0)) -> list[Record]:
    """Two pipeline stages of one rank each: rank 0 computes, then sends on the p2p stream;
    rank 1 receives on the comm stream (as the lowering posts it, behind the collectives),
    all-gathers the activations there and computes. Rank 1 also sends on (a middle stage),
    from 10 to 30 us."""
    a, b = recv_us
    recv = rec(3, 1, "comm", "pp_recv", "p2p", a, b, site="pp", op=0, cause=1)
    send = rec(1, 0, "p2p", "pp_send", "p2p", 10.0, 20.0, site="pp", op=1, cause=0)
    return [
        rec(0, 0, "compute", "mlp_down", "gemm", 0.0, 10.0),
        send._replace(category="communication", detail="send 4096 B to rank 1 (tag 0)"),
        rec(2, 1, "p2p", "pp_send", "p2p", 10.0, 30.0, site="pp", op=3)._replace(
            category="communication", detail="send 4096 B to rank 2 (tag 0)"
        ),
        recv._replace(category="communication", detail="recv 4096 B from rank 0 (tag 1)"),
        rec(4, 1, "comm", "pp.all_gather[0]", "collective", b, b + 5.0, site="pp", op=1, cause=3),
        rec(5, 1, "compute", "qkv_proj", "gemm", b + 5.0, b + 15.0, op=2, cause=4),
    ]


def row_names(chart: typing.Any) -> dict[int, str]:
    """The Gantt's row labels by row position ("GPU 1 · p2p")."""
    ticks = chart.ax.get_yticks()
    return {round(y): t.get_text() for y, t in zip(ticks, chart.ax.get_yticklabels(), strict=True)}


def test_a_pipeline_receive_is_drawn_on_the_p2p_row_with_the_sends() -> None:
    """A stage's receive ran on the comm stream, so the Gantt drew it among the TP
    collectives while the sends had a p2p row of their own; the trace likewise."""
    from tpsim.experiments.plots.gantt_draw import gantt_figure

    records = stage_pair()
    chart = gantt_figure(records, layers="all")
    names = row_names(chart)
    drawn = {r.id: names[row] for r, row, _ in chart.bars}
    assert drawn[3] == "GPU 1 · p2p"  # the receive: was "GPU 1 · comm"
    assert drawn[1] == "GPU 0 · p2p" and drawn[2] == "GPU 1 · p2p"  # the sends
    assert drawn[4] == "GPU 1 · comm"  # the all-gather after it stays with the collectives

    trace = chrome_trace(records, title="pp")
    assert check_trace_structure(trace) == []
    tid = {e["args"]["id"]: e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert (tid[1], tid[2], tid[3], tid[4]) == (4, 4, 5, 3)  # receive: was the comm stream's 3
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert threads[(2, 4)] == "pipeline sends" and threads[(2, 5)] == "pipeline receives"
    assert (1, 5) not in threads  # a stage that only sends has no receive thread
    # the receive releases the all-gather: now across threads, so an arrow shows it
    arrows = {
        e["ph"]: (e["pid"], e["tid"])
        for e in trace["traceEvents"]
        if e.get("cat") == "dependency" and e["id"] == DEPENDENCY_FLOW_BASE + 4
    }
    assert arrows == {"s": (2, 5), "f": (2, 3)}


def test_a_middle_stage_s_overlapping_send_and_receive_keep_the_trace_nested(
    tmp_path: Path,
) -> None:
    """A middle stage receives micro-batch m + 1 while it still sends m (seen with 8 stages
    and 3 micro-batches): on one row of the Gantt, but on two threads of the trace, since
    one thread's slices must nest and these two only overlap."""
    from tpsim.experiments.plots.gantt_draw import gantt_figure

    records = stage_pair(recv_us=(20.0, 40.0))  # the send runs 10-30 us
    names = row_names(chart := gantt_figure(records, layers="all"))
    assert {names[row] for r, row, _ in chart.bars if r.rank == 1 and r.kind == "p2p"} == {
        "GPU 1 · p2p"
    }
    trace = chrome_trace(records, title="pp")
    assert check_trace_structure(trace) == []
    for name in ("a.png", "b.png"):
        gantt(records, tmp_path / name, layers="all")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


def test_a_simulated_pipeline_draws_every_receive_with_the_sends() -> None:
    """TP 2 x PP 2: stage 1's receives (on the comm stream) are drawn on its GPUs' p2p
    rows and traced on the receive thread; every send on the send thread."""
    from tpsim import Layout, Workload, simulate
    from tpsim.experiments.plots.gantt_draw import gantt_figure

    r = simulate("llama-3.1-8b", "dgx-h100", Layout(2, pp=2), Workload(4))
    p2p = [x for x in r.records if x.kind == "p2p"]
    assert {x.stream for x in p2p if x.name == "pp_recv"} == {"comm"}  # as the engine ran it
    chart = gantt_figure(r.records, layers="all", critical=r.critical_path)
    names = row_names(chart)
    drawn = {(x.name, names[row]) for x, row, _ in chart.bars if x.kind == "p2p"}
    assert drawn == {(x.name, f"GPU {x.rank} · p2p") for x in p2p}
    assert {x.name for x in p2p} == {"pp_send", "pp_recv"}
    trace = chrome_trace(r.records, title="pp", critical=r.critical_path)
    assert check_trace_structure(trace) == []
    tids = {(e["name"], e["tid"]) for e in trace["traceEvents"] if e.get("cat") == "p2p"}
    assert tids == {("pp_send", 4), ("pp_recv", 5)}


def test_the_report_gantt_gives_a_pipeline_its_p2p_lane() -> None:
    """tpsim report's interactive Gantt draws the sends and receives on each GPU's p2p lane,
    as the PNG does (it had no p2p lane: the sends fell outside its lanes)."""
    from tpsim import Layout, Workload, simulate
    from tpsim.experiments.plots.report_gantt import Run, gantt_figure

    r = simulate("llama-3.1-8b", "dgx-h100", Layout(2, pp=2), Workload(4))
    fig, _, _ = gantt_figure(Run(None, r.records, frozenset(r.critical_path), {}))  # type: ignore[arg-type]
    lanes = list(fig.layout.yaxis.categoryarray)
    p2p = next(t for t in fig.data if t.name == "p2p")
    assert set(p2p.y) <= set(lanes) and {"GPU 0 · p2p", "GPU 2 · p2p"} <= set(p2p.y)
    assert not any(y.endswith("· comm") for y in p2p.y)


def test_the_report_gantt_draws_the_ranks_the_critical_path_runs_on() -> None:
    """TP 8 x PP 2 on two hosts: the report drew GPUs 0, 1 and 15, leaving GPU 8, where
    stage 1's part of the critical path runs, out; it picks ranks as run --gantt does."""
    from tpsim import Layout, Workload, simulate
    from tpsim.experiments.plots.gantt_view import gantt_view
    from tpsim.experiments.plots.report_gantt import Run, gantt_figure

    r = simulate("llama-3.1-8b", "dgx-h100", Layout(8, pp=2), Workload(4), nodes=2)
    crit = frozenset(r.critical_path)
    fig, _, _ = gantt_figure(Run(None, r.records, crit, {}))  # type: ignore[arg-type]
    lanes = set(fig.layout.yaxis.categoryarray)
    want = gantt_view(r.records, critical=crit).ranks
    assert 8 in want and {f"GPU {k} · compute" for k in want} <= lanes


def test_a_send_far_thinner_than_a_pixel_is_still_drawn() -> None:
    """A 15 us pipeline send in a 45 ms step is a tenth of a pixel: two of four sends and
    every receive vanished from the PNG (the SVG had them); every bar is now at least
    MIN_BAR_PX wide."""
    from matplotlib.colors import to_rgba
    from tpsim import Layout, Workload, simulate
    from tpsim.experiments.plots.gantt_draw import KIND_COLORS, MIN_BAR_PX, gantt_figure

    r = simulate("llama-3.1-8b", "dgx-h100", Layout(1, pp=2, micro_batches=4), Workload(64))
    chart = gantt_figure(r.records, layers="all", critical=r.critical_path)
    ax = chart.fig.axes[0]
    chart.fig.canvas.draw()
    colour = to_rgba(KIND_COLORS["p2p"])
    widths = [
        ax.transData.transform((p.get_extents().x1, 0))[0]
        - ax.transData.transform((p.get_extents().x0, 0))[0]
        for c in ax.collections
        if tuple(c.get_facecolor()[0]) == colour
        for p in c.get_paths()
    ]
    sends = [x for x in r.records if x.kind == "p2p"]
    assert len(widths) == len(sends) and min(widths) >= 0.99 * MIN_BAR_PX


def test_a_compare_gantt_gives_a_p2p_row_only_to_the_pipeline() -> None:
    """compare --gantt of TP 2 x PP 2 beside plain TP 2: the TP 2 lane had an empty p2p
    row, as the pipeline's lanes had theirs; now its rows are CPU, compute and comm, and
    every bar still sits on the row named after its lane and stream."""
    from tpsim import Layout, Workload, simulate
    from tpsim.experiments.plots.gantt import compare_figure
    from tpsim.experiments.plots.gantt_draw import P2P_ROW, ROWS
    from tpsim.outputs.export import shown_stream

    pp = simulate("llama-3.1-8b", "dgx-h100", Layout(2, pp=2), Workload(4))
    tp = simulate("llama-3.1-8b", "dgx-h100", Layout(2), Workload(4))
    runs = [("PP 2", pp.records, pp.critical_path), ("TP 2", tp.records, tp.critical_path)]
    chart = compare_figure(runs)
    names = row_names(chart)
    lanes: dict[str, list[str]] = {}
    for y in sorted(names):
        lane, row = names[y].rsplit(" · ", 1)
        lanes.setdefault(lane, []).append(row)
    plain = [lane for lane in lanes if lane.startswith("TP 2")]
    piped = [lane for lane in lanes if lane.startswith("PP 2")]
    assert plain and len(piped) >= 2  # stage 1's GPU drawn too
    every = [label for _, label in (*ROWS, P2P_ROW)]
    assert all(lanes[lane] == every[:3] for lane in plain)  # was [..., "p2p"]
    assert all(lanes[lane] == every for lane in piped)
    row_of = dict((*ROWS, P2P_ROW))
    for r, y, _ in chart.bars:  # the rows below a lane without p2p moved up with it
        assert names[y].endswith(f" · {row_of[shown_stream(r)]}")
        assert names[y].startswith("TP 2" if r.id >= len(pp.records) else "PP 2")


def test_a_zoom_across_a_stage_boundary_marks_the_later_stage_s_layers() -> None:
    """TP 1 x PP 2, zoomed on layers 14-17 (stage 0 runs 0-15, stage 1 16-31): the layer
    labels were taken from GPU 0 alone, so L16 and L17 (stage 1's) had neither label nor
    line; they are marked where GPU 1 starts them."""
    from tpsim import Layout, Workload, simulate
    from tpsim.experiments.plots.gantt_draw import gantt_figure

    r = simulate("llama-3.1-8b", "dgx-h100", Layout(1, pp=2), Workload(4))
    chart = gantt_figure(r.records, layers=(14, 17), critical=r.critical_path)
    assert chart.view is not None and chart.view.ranks == (0, 1)
    labels = {t.get_text(): t.get_position()[0] for t in chart.ax.texts if t.get_text()[:1] == "L"}
    assert {"L14", "L15", "L16", "L17"} <= set(labels)  # was L14 and L15 (and L18 at the end)
    start = min(x.start_s for x in r.records if x.rank == 1 and x.layer == 16
                and x.stream == "compute")  # fmt: skip
    t0 = chart.view.t0_s
    assert labels["L16"] == pytest.approx((start - t0) * 1e6)  # the axis in us from t0


def test_the_critical_path_crosses_a_stage_boundary_through_the_send() -> None:
    """TP 8 x PP 2 on two hosts: stage 1's receive waits for stage 0's send, but the path
    ran from the receive to the all-reduce before the send (the receive named the send's
    cause as its own, and started where the send did). It now runs all-reduce, send,
    receive: the breakdown, the Gantt's ranks and the trace's arrows all show the send."""
    from tpsim import Layout, Workload, simulate
    from tpsim.core.metrics import pipeline_tail
    from tpsim.experiments.plots.gantt_view import gantt_view

    r = simulate("llama-3.1-8b", "dgx-h100", Layout(8, pp=2), Workload(8), nodes=2)
    by_id = {x.id: x for x in r.records}
    path = [by_id[i] for i in r.critical_path]
    k = next(j for j, x in enumerate(path) if x.name == "pp_recv")
    send, recv = path[k - 1], path[k]
    assert (send.name, send.rank, recv.rank) == ("pp_send", 0, 8)  # was the all-reduce
    assert recv.cause == send.id and recv.start_s == recv.end_s == send.end_s
    assert "waited" in recv.detail
    # the transfer into the last stage is communication, the time before it the fill
    parts = r.summary["breakdown_s"]
    assert pipeline_tail(path, set(range(8, 16))) == k - 1
    assert parts["bubble"] == send.start_s
    assert math.fsum(parts.values()) == pytest.approx(r.latency_s, rel=1e-12)
    assert 0 in gantt_view(r.records, critical=r.critical_path).ranks
    trace = chrome_trace(r.records, title="pp", critical=r.critical_path)
    assert check_trace_structure(trace) == []
    on = {e["args"]["id"]: e["args"]["on_critical_path"] for e in trace["traceEvents"]
          if e["ph"] == "X"}  # fmt: skip
    assert on[send.id] and on[recv.id]
    arrow = {
        e["ph"]: (e["pid"], e["tid"])
        for e in trace["traceEvents"]
        if e.get("cat") == "dependency" and e["id"] == DEPENDENCY_FLOW_BASE + recv.id
    }
    assert arrow == {"s": (send.rank + 1, 4), "f": (recv.rank + 1, 5)}  # GPU 0's send to GPU 8


def test_the_report_says_how_many_gpus_its_gantt_draws(tmp_path: Path) -> None:
    """TP 8 x PP 2 on two hosts: the report's Gantt draws GPUs 0, 1, 8 and 15 (8 holds
    stage 1's critical path) but its note said 'Showing 3 of 16 GPUs', counted without
    the critical path; the note now counts the GPUs drawn."""
    from tpsim.cli import main

    out = tmp_path / "r.html"
    argv = ["report", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--nodes", "2"]
    argv += ["--tp", "8", "--pp", "2", "--batch", "4", "--out", str(out)]
    assert main(argv) == 0
    text = out.read_text(encoding="utf-8")
    lanes = set(re.findall(r"(n\d\.gpu\d+ pp\d tp\d+) \\u00b7 compute", text))  # JSON-escaped
    assert len(lanes) == 4, lanes
    assert "Showing 4 of 16 GPUs" in text  # was 3


def test_the_report_gantt_colours_a_moe_all_to_all_as_the_png_does() -> None:
    """Attention-DP 8 with EP 8: the PNG Gantt drew the dispatch and combine in their own
    colour, named 'all-to-all' in its legend; the report's drew the same bars orange under
    'collective'. The report takes the PNG's kinds."""
    from tpsim import Layout, Options, Workload, simulate
    from tpsim.experiments.plots.gantt_draw import A2A_KIND, gantt_figure
    from tpsim.experiments.plots.report_gantt import Run
    from tpsim.experiments.plots.report_gantt import gantt_figure as report_figure

    r = simulate(
        "qwen3-30b-a3b", "dgx-h100", Layout(1, attention_dp=8, ep=8), Workload(8), Options()
    )
    crit = frozenset(r.critical_path)
    png = gantt_figure(r.records, critical=crit)
    legend = [t.get_text() for t in png.ax.get_legend().get_texts()]
    fig, _, _ = report_figure(Run(None, r.records, crit, {}))  # type: ignore[arg-type]
    assert A2A_KIND in legend and A2A_KIND in {t.name for t in fig.data}
