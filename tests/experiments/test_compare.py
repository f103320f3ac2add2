"""`tpsim compare`: configurations zipped from comma lists, the table, the verdict."""

from __future__ import annotations

import json

import pytest
from tpsim.cli import main
from tpsim.outputs.text import NEAR_TIE, regime_shares, regime_text

QUESTION_NODES = [
    "compare", "--model", "llama-3.1-70b", "--topology", "dgx-h100", "--tp", "8,16",
    "--nodes", "1,2", "--batch", "8", "--context-len", "2048",
]  # fmt: skip
QUESTION_GRAPHS = [
    "compare", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "4",
    "--launch", "eager,graph", "--batch", "8",
]  # fmt: skip


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(c))


def test_one_node_against_two_answers_in_a_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(QUESTION_NODES) == 0
    out = capsys.readouterr().out
    *_, sentence = out.strip().splitlines()
    assert "x the tokens/s of" in sentence and sentence.endswith(".")
    # the cause names communication and the network the second configuration crosses
    assert "communication" in sentence and "NICs per host" in sentence
    assert "TP 8, 1 node" in out and "TP 16, 2 nodes" in out
    for assumption in ("gpu", "links", "network", "engine", "launch"):
        assert f"  {assumption}" in out


def test_the_verdict_follows_the_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    j = _json(capsys, QUESTION_GRAPHS)
    eager, graph = j["configurations"]
    assert eager["label"] == "eager launch" and graph["label"] == "graph launch"
    faster = max(j["configurations"], key=lambda c: c["summary"]["tokens_per_s"])
    slower = min(j["configurations"], key=lambda c: c["summary"]["tokens_per_s"])
    ratio = faster["summary"]["tokens_per_s"] / slower["summary"]["tokens_per_s"]
    assert j["verdict"].startswith(f"{faster['label']} gives {ratio:.2f}x the tokens/s of")
    # eager loses on the host side: launch overhead is the part that changes most
    assert "less kernel launch overhead" in j["verdict"]
    assert graph["ratios"]["tokens_per_s"] == pytest.approx(
        graph["summary"]["tokens_per_s"] / eager["summary"]["tokens_per_s"]
    )
    assert eager["ratios"]["latency_s"] == 1.0


def test_per_gpu_efficiency_is_named_when_it_disagrees(capsys: pytest.CaptureFixture[str]) -> None:
    j = _json(capsys, QUESTION_NODES)
    per_gpu = [c["summary"]["tokens_per_s_per_gpu"] for c in j["configurations"]]
    total = [c["summary"]["tokens_per_s"] for c in j["configurations"]]
    disagree = (per_gpu[0] > per_gpu[1]) != (total[0] > total[1])
    assert ("tokens/s per GPU" in j["verdict"]) == disagree


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--tp", "8,16", "--nodes", "1,2,3"], "--tp=8,16: 2 values, but --nodes has 3"),
        (["--tp", "8"], "give two or more values"),
        (["--tp", "8,8"], "two configurations are the same"),
        (["--tp", "8,"], "an empty value"),
        (["--tp", "8,x"], "invalid int value"),
        (["--tp", "8,16", "--engine", "nope,vllm"], "nope"),
    ],
)
def test_bad_comparisons_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    base = ["compare", "--model", "llama-3.1-8b", "--topology", "dgx-h100"]
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err


def _summary(parts: dict[str, float], regime: str) -> dict:
    return {"latency_s": sum(parts.values()), "breakdown_s": parts, "regime": regime}


def test_regime_comes_with_its_share_and_a_near_runner_up() -> None:
    tie = _summary({"memory": 0.53, "communication": 0.47}, "memory-bound")
    assert regime_text(tie) == "memory-bound (53%; communication 47%)"
    clear = _summary({"memory": 0.80, "communication": 0.20}, "memory-bound")
    assert regime_text(clear) == "memory-bound (80%)"
    # host work and launches count together, as the regime does
    over = _summary({"host": 0.3, "launch_overhead": 0.3, "memory": 0.4}, "overhead-bound")
    assert regime_shares(over)[0] == ("overhead-bound", pytest.approx(0.6))
    edge = _summary({"memory": 0.5 + NEAR_TIE / 2, "compute": 0.5 - NEAR_TIE / 2}, "memory-bound")
    assert "; compute" in regime_text(edge)


def test_compare_gantt_puts_configurations_on_one_time_axis(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tpsim.experiments.plots.gantt import gantt_compare, gantt_figure  # noqa: F401

    out = tmp_path / "cmp.svg"
    assert main([*QUESTION_GRAPHS, "--gantt", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    svg = out.read_text()
    assert "graph launch · CPU" in svg  # lanes by configuration
    # eager: its GPU 0 and GPU 3, which its critical path runs on (the last rank to launch)
    assert "eager launch · GPU 0 · CPU" in svg and "eager launch · GPU 3 · CPU" in svg
    assert svg.count("<title>") > 100  # tooltips on the bars of both
    assert main([*QUESTION_GRAPHS, "--gantt", str(tmp_path / "x.txt")]) == 2


def test_compare_rows_of_a_results_file(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    import csv

    out = tmp_path / "s.csv"
    sweep = ["sweep", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "2,4"]
    assert main([*sweep, "--batch", "8", "--out", str(out), "--quiet", "--jobs", "1"]) == 0
    capsys.readouterr()
    with out.open() as f:
        rows = list(csv.DictReader(f))
    ids = ",".join(r["point_id"] for r in rows)
    j = _json(capsys, ["compare", "--results", str(out), "--rows", ids])
    assert [c["summary"]["tokens_per_s"] for c in j["configurations"]] == [
        float(r["tokens_per_s"]) for r in rows
    ]
    assert "x the tokens/s of" in j["verdict"]
    for argv, needle in (
        (["--rows", ids], "--results and --rows go together"),
        (["--results", str(out), "--rows", "nope,other"], "point_id='nope' is not in"),
        (["--results", str(out), "--rows", rows[0]["point_id"]], "two or more different"),
    ):
        assert main(["compare", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err


UNEQUAL = [
    "compare", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "8,16,8",
    "--nodes", "1,2,2", "--dp", "1,1,2", "--batch", "1",
]  # fmt: skip


def test_unequal_loads_are_said_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #27: batch is per replica, so TP 8 x DP 2 carried twice the load of the others
    and 'won' 2.00x; the comparison says the loads differ, by how much, and how to compare at
    equal load, and it names no one configuration's TP and batch as everyone's."""
    assert main(UNEQUAL) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[0]
    assert head.startswith("# compare: llama-3.1-8b") and "TP 8" not in head
    assert "batch 1 per replica" in head
    loads = next(line for line in out.splitlines() if line.startswith("sequences per step"))
    assert loads.split()[3:] == ["1", "1", "2"]
    note = next(line for line in out.splitlines() if "different loads" in line)
    assert "1 (TP 8, DP 1, 1 node), 1 (TP 16, DP 1, 2 nodes), 2 (TP 8, DP 2, 2 nodes)" in note
    assert "--load 2" in note
    j = _json(capsys, UNEQUAL)
    assert j["equal_load"] is False and "different loads" in j["load_note"]


def test_load_compares_at_equal_load(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*UNEQUAL[: UNEQUAL.index("--batch")], "--load", "2"]
    j = _json(capsys, argv)
    assert j["equal_load"] is True and j["load_note"] == ""
    batches = [c["summary"]["config"]["workload"]["batch"] for c in j["configurations"]]
    assert batches == [2, 2, 1]  # 2 sequences per step each, split over the replicas
    assert main([*argv]) == 0
    out = capsys.readouterr().out
    assert "2 sequences per step" in out.splitlines()[0] and "different loads" not in out
    # no tie of a configuration with itself: "gives 1.00x the tokens/s per GPU"
    assert "1.00x the tokens/s per GPU" not in out


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--load", "3"], "--load=3: configuration 3 has 2 replicas"),
        (["--load", "2", "--batch", "4"], "--load: give the load or --batch"),
        (["--load", "0"], "--load=0: must be between 1"),
    ],
)
def test_bad_loads_exit_2(
    extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = UNEQUAL[: UNEQUAL.index("--batch")] + extra
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


TWO_HOSTS = """name: two-hosts
gpus: {g: h100-sxm}
nodes:
  - {id: a0, kind: gpu, type: g, host: 0}
  - {id: a1, kind: gpu, type: g, host: 0}
  - {id: b0, kind: gpu, type: g, host: 1}
  - {id: b1, kind: gpu, type: g, host: 1}
  - {id: swa, kind: nvswitch, host: 0}
  - {id: swb, kind: nvswitch, host: 1}
  - {id: nica, kind: nic, host: 0}
  - {id: nicb, kind: nic, host: 1}
  - {id: ib, kind: switch}
links:
  - {src: a0, dst: swa, bandwidth_GBps: 450, latency_us: 0.5, duplex: true, link: nvlink}
  - {src: a1, dst: swa, bandwidth_GBps: 450, latency_us: 0.5, duplex: true, link: nvlink}
  - {src: b0, dst: swb, bandwidth_GBps: 450, latency_us: 0.5, duplex: true, link: nvlink}
  - {src: b1, dst: swb, bandwidth_GBps: 450, latency_us: 0.5, duplex: true, link: nvlink}
  - {src: a0, dst: nica, bandwidth_GBps: 50, latency_us: 1, duplex: true, link: pcie}
  - {src: a1, dst: nica, bandwidth_GBps: 50, latency_us: 1, duplex: true, link: pcie}
  - {src: b0, dst: nicb, bandwidth_GBps: 50, latency_us: 1, duplex: true, link: pcie}
  - {src: b1, dst: nicb, bandwidth_GBps: 50, latency_us: 1, duplex: true, link: pcie}
  - {src: nica, dst: ib, bandwidth_GBps: 25, latency_us: 1, duplex: true, link: infiniband}
  - {src: nicb, dst: ib, bandwidth_GBps: 25, latency_us: 1, duplex: true, link: infiniband}
"""


def test_a_file_s_own_hosts_are_told_apart(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """A topology file with two hosts (``host:`` on its nodes, GPU ids without a copy's
    prefix): TP 4 crosses the network and says so; TP 2 stays in one host."""
    path = tmp_path / "two.yaml"
    path.write_text(TWO_HOSTS)
    args = ["--model", "llama-3.1-8b", "--topology", str(path), "--batch", "32"]
    assert main(["run", *args, "--tp", "4"]) == 0
    out = capsys.readouterr().out
    assert "two-hosts (2 hosts), TP 4" in out and "network 1 NIC per host at 200 Gb/s" in out
    assert main(["run", *args, "--tp", "2"]) == 0
    assert "network not used (within one host)" in capsys.readouterr().out


def test_compare_gantt_names_each_lane_s_hidden_layers(tmp_path) -> None:
    """Two runs of different speeds on one time axis: the collapsed stretch hides different
    layers of each, and each lane says which (one label would be right for neither)."""
    from tpsim import Layout, Workload, simulate
    from tpsim.experiments.plots.gantt_view import gantt_view

    fast = simulate("llama-3.1-8b", "dgx-h100", Layout(8), Workload(8))
    slow = simulate("llama-3.1-8b", "dgx-h100", Layout(1), Workload(8))
    merged = [r._replace(rank=0) for r in fast.records if r.rank == 0]
    stride = 1 + max(r.id for r in merged)
    merged += [r._replace(rank=1, id=r.id + stride) for r in slow.records if r.rank == 0]
    view = gantt_view(merged)
    assert view.gap_s is not None and len(view.gap_layers_by_rank) == 2
    (_, a0, b0), (_, a1, b1) = view.gap_layers_by_rank
    assert (a0, b0) != (a1, b1)
    assert b0 > b1  # the faster run got further through its layers in the same stretch


def test_compare_gantt_lanes_hide_the_same_layers_each_in_its_own_time() -> None:
    """The default: every lane hides layers 1..L-2, its own stretch of time, and its last
    layer starts at the gap's end; with layers (a, b) each lane's layer a starts at 0.
    (One shared stretch hid layers 2-78 of a TP 8 lane and 1-55 of a TP 16 one.)"""
    from tpsim import Layout, Workload, simulate
    from tpsim.experiments.plots.gantt_lanes import align_lanes

    fast = simulate("llama-3.1-8b", "dgx-h100", Layout(8), Workload(8))
    slow = simulate("llama-3.1-8b", "dgx-h100", Layout(1), Workload(8))
    merged = [r._replace(rank=0) for r in fast.records if r.rank == 0]
    stride = 1 + max(r.id for r in merged)
    merged += [r._replace(rank=1, id=r.id + stride) for r in slow.records if r.rank == 0]
    last = 31
    out, view = align_lanes(merged, [0, 1], None)
    assert view.gap_s is not None and view.gap_layers == (1, last - 1)
    assert not {r.layer for r in out} & set(range(1, last))
    for lane in (0, 1):
        first = min(r.start_s for r in out if r.rank == lane and r.layer == last
                    and r.stream == "compute")  # fmt: skip
        assert first == pytest.approx(view.gap_s[1], abs=1e-12)
    (_, h0), (_, h1) = view.hidden_s_by_rank
    assert h1 > 2 * h0  # TP 1's hidden layers take longer
    # the head's host work that ran beside the first layers stays where it ran, in both
    # lanes (moved with the last layer, the faster lane's fell into the gap, out of view)
    for lane, src in ((0, fast), (1, slow)):
        host = [r for r in out if r.rank == lane and r.name == "next_step_host"]
        ran = [r for r in src.records if r.rank == 0 and r.name == "next_step_host"]
        assert host and [r.start_s for r in host] == [r.start_s for r in ran]
    out, view = align_lanes(merged, [0, 1], (2, 3))
    assert {r.layer for r in out} == {2, 3} and view.t0_s == 0.0
    for lane in (0, 1):
        assert min(r.start_s for r in out if r.rank == lane and r.stream != "cpu") == 0.0
    assert "from the start of layer 2" in view.axis_note


def test_a_cell_wider_than_the_labels_keeps_its_column(capsys) -> None:  # type: ignore[no-untyped-def]
    """The share row's runner-up ("57%; communication 43%") ran into the next cell: columns
    were sized from the labels and assumptions only. The verdict says kernel time, not
    traffic: an eager step's kernels hidden behind its launches read no fewer bytes."""
    from tpsim.cli import main

    argv = ["compare", "--model", "llama-3.1-70b", "--topology", "hgx-h200", "--tp", "8",
            "--batch", "64", "--context-len", "2048", "--dtype", "fp8",
            "--engine", "vllm,trtllm,ideal"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    share = next(ln for ln in out.splitlines() if ln.startswith("  share"))
    assert "%5" not in share and "%4" not in share and "%3" not in share, share
    assert "memory traffic" not in out


def test_a_pipeline_kept_full_is_shown_beside_its_step(capsys: pytest.CaptureFixture[str]) -> None:
    """A PP layout's step is one batch crossing its stages (half the GPUs idle at PP 2);
    serving engines keep a batch in each stage, which plan prices: compare shows that rate
    and its verdict names the best so, from each configuration's JSON in_flight."""
    argv = ["compare", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "2,1",
            "--pp", "1,2", "--batch", "8"]  # fmt: skip
    j = _json(capsys, [*argv, "--json"])
    tp2, pp2 = (c["summary"] for c in j["configurations"])
    assert "in_flight" not in tp2 and pp2["in_flight"]["batches"] == 2
    full = pp2["in_flight"]["tokens_per_s"]
    assert full > 1.5 * pp2["tokens_per_s"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("tokens/s, pipelines full"))
    assert f"{tp2['tokens_per_s']:,.0f}" in row and f"{full:,.0f}" in row
    assert "with each pipeline kept full, as serving engines run one" in j["verdict"]
    # TP 2 on 2 GPUs against TP 1 x PP 2 on 2: per GPU named beside the totals
    assert "per GPU" in j["verdict"].split("kept full")[1]
    assert "  per GPU" in out


def test_a_zoomed_pipeline_keeps_its_stages_apart_in_time() -> None:
    """compare --gantt zoomed on layers across a stage boundary moved each GPU's lane to
    start at 0 on its own, drawing stage 1's layer 16 beside stage 0's layer 14; a run's
    lanes now move together, stage 1 after stage 0 as it ran."""
    from tpsim import Layout, Workload, simulate
    from tpsim.experiments.plots.gantt import compare_ranks
    from tpsim.experiments.plots.gantt_lanes import align_lanes

    r = simulate("llama-3.1-8b", "dgx-h100", Layout(1, pp=2), Workload(4))
    ranks = compare_ranks(r.records, r.critical_path, (14, 17))
    assert ranks == [0, 1]
    recs = [x for x in r.records if x.rank in ranks]
    out, _ = align_lanes(recs, ranks, (14, 17), {0: 0, 1: 0})

    def first(rank: int, layer: int, records: list) -> float:
        return min(x.start_s for x in records if x.rank == rank and x.layer == layer
                   and x.stream == "compute")  # fmt: skip

    assert first(0, 14, out) == 0.0
    assert first(1, 16, out) - first(0, 14, out) == pytest.approx(
        first(1, 16, recs) - first(0, 14, recs)
    )
    assert first(1, 16, out) > first(0, 15, out)  # after stage 0's last layer began


def test_the_verdict_credits_the_tp_group_in_one_host_not_the_nics(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """TP 8 x PP 2 at 200 Gb/s beat TP 16 at 400 Gb/s by less communication, and the verdict
    said '200 Gb/s against 400 Gb/s', crediting the slower NICs: the cause is that its TP
    group stays in one host."""
    j = _json(capsys, ["compare", "--model", "llama-3.1-8b", "--topology", "dgx-h100",
                       "--nodes", "2", "--tp", "16,8", "--pp", "1,2", "--nic-gbps", "400,200",
                       "--batch", "8", "--json"])  # fmt: skip
    assert "TP group all-reduces across hosts;" in j["verdict"]
    assert "200 Gb/s against" not in j["verdict"]


def test_a_winner_by_under_half_a_percent_is_not_shown_at_1_00x() -> None:
    from tpsim.experiments.compare import ratio_text

    assert ratio_text(15.06 / 15.0) == "1.004x"  # 15.0 ms against 15.06: one leads
    assert ratio_text(1.0) == "1.000x"
    assert ratio_text(1.26) == "1.26x"
