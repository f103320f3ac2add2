"""Sweep rows of a pipeline kept full (the ``in_flight_*`` columns): written as ``run
--json``'s ``in_flight``, read back (files written before them too), and what the plots, the
words of a sweep, ``compare --results``, ``report`` and the studies' tables make of them: a
pipeline's tokens/s with a batch in every stage, as ``compare`` and ``plan`` count it, not
one batch crossing the stages (about half of it)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from tpsim.cli import main
from tpsim.core.api import simulate
from tpsim.core.errors import ConfigError
from tpsim.experiments.compare_assumptions import tp_spans_hosts
from tpsim.experiments.compare_rows import config_from_row
from tpsim.experiments.plots import figures
from tpsim.experiments.plots.figure import compact
from tpsim.experiments.plots.regime_map import draw_regime_map
from tpsim.experiments.plots.report_charts import sweep_figure
from tpsim.experiments.plots.sweep import draw_throughput_vs_tp
from tpsim.experiments.plots.words import best_summary, regime_summary
from tpsim.experiments.studies.base import table
from tpsim.experiments.sweep.grid import grid_from_flags, point_from_row
from tpsim.experiments.sweep.reading import read_rows
from tpsim.experiments.sweep.rows import (
    COLUMNS,
    IN_FLIGHT,
    IN_FLIGHT_COLUMNS,
    full_row,
    results_text,
    served,
)
from tpsim.experiments.sweep.run import run_point
from tpsim.topologies.io import get_topology

BASE = {"model": "llama-3.1-8b", "topology": "dgx-h100", "tp": "2", "batch": "4",
        "context_len": "256"}  # fmt: skip
#: The header of a results file written before the in_flight columns (its order is fixed).
BEFORE = (
    "point_id,model,topology,nodes,gpus_per_node,tp,batch,phase,prompt_len,context_len,"
    "dtype,kv_dtype,launch,overlap,allreduce_algo,sequence_parallel,ideal,engine,gpu,hosts,"
    "latency_s,tokens_per_s,tokens_per_s_per_gpu,regime,compute_s,memory_s,"
    "communication_s,launch_overhead_s,host_s,idle_s,fits,weights_bytes_per_gpu,"
    "kv_cache_bytes_per_gpu,activation_bytes_per_gpu,total_bytes_per_gpu,"
    "capacity_bytes_per_gpu,collectives,comm_bytes_per_gpu,error,pp,dp,micro_batches,"
    "bubble_s,ep,attention_dp,expert_skew"
)
Row = dict[str, Any]


@pytest.fixture(scope="module")
def rows() -> dict[int, Row]:
    """TP 2 and TP 2 x PP 2, decode of 4 sequences: pp -> its row."""
    return {p.pp: full_row(run_point(p)) for p in grid_from_flags(BASE | {"pp": "1,2"})}


def _old_csv(rows: list[Row]) -> str:
    """``rows`` as a file of the version before the in_flight columns wrote them."""
    names = BEFORE.split(",")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for r in rows:
        cells = [r[c] for c in names]
        writer.writerow(["" if v is None else str(v).lower() if isinstance(v, bool)
                         else repr(v) if isinstance(v, float) else v for v in cells])  # fmt: skip
    return BEFORE + "\n" + buf.getvalue()


def test_a_pipeline_row_carries_run_jsons_in_flight(rows: dict[int, Row]) -> None:
    one, piped = rows[1], rows[2]
    assert all(one[c] is None for c in IN_FLIGHT_COLUMNS)  # one stage: nothing kept full
    p = point_from_row(piped)
    graph = get_topology(p.topology, p.nodes)
    flight = simulate(p.model, graph, p.layout(), p.workload(), p.options()).summary["in_flight"]
    assert {k: piped[f"in_flight_{k}"] for k in IN_FLIGHT} == flight
    # the step's columns keep their meaning: one batch of 4 crossing the stages
    assert piped["tokens_per_s"] == pytest.approx(4 / piped["latency_s"])
    # kept full: 2 batches of 4 in flight, a token each per TPOT, over 2 x 2 GPUs
    assert piped["in_flight_batches"] == 2 and piped["in_flight_fits"] is True
    rate = 2 * 4 / piped["in_flight_tpot_s"]
    assert piped["in_flight_tokens_per_s"] == pytest.approx(rate)
    assert served(piped) == pytest.approx((rate, rate / 4))
    assert served(one) == (one["tokens_per_s"], one["tokens_per_s_per_gpu"])
    assert served(piped)[0] > 1.9 * piped["tokens_per_s"]  # the step alone shows about half


def test_a_prefill_pipeline_has_no_in_flight_columns() -> None:
    (p,) = grid_from_flags(BASE | {"pp": "2", "phase": "prefill", "prompt_len": "64",
                                   "batch": "1"})  # fmt: skip
    r = run_point(p)
    assert not r.get("error") and not any(c in r for c in IN_FLIGHT_COLUMNS)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_rows_round_trip(rows: dict[int, Row], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"s.{fmt}"
    out.write_text(results_text(rows.values(), fmt))
    assert read_rows(out) == list(rows.values())


def test_a_row_with_part_of_the_in_flight_figures_is_refused(
    rows: dict[int, Row], tmp_path: Path
) -> None:
    out = tmp_path / "s.jsonl"
    out.write_text(json.dumps(rows[2] | {"in_flight_fits": None}) + "\n")
    with pytest.raises(ConfigError, match=r"line 1 .*in_flight_fits=empty"):
        read_rows(out)


def test_a_csv_written_before_the_in_flight_columns_is_read_not_resumed(
    rows: dict[int, Row], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "old.csv"
    out.write_text(_old_csv(list(rows.values())))
    back = read_rows(out)
    assert back == [r | dict.fromkeys(IN_FLIGHT_COLUMNS) for r in rows.values()]
    assert served(back[1]) == (back[1]["tokens_per_s"], back[1]["tokens_per_s_per_gpu"])
    # plotted, saying its pipeline is one batch crossing the stages
    title = draw_throughput_vs_tp(back, title="t")._suptitle.get_text()
    assert "1 pipeline from a file without in_flight columns: one batch crossing" in title
    ids = ",".join(r["point_id"] for r in back)
    assert main(["compare", "--results", str(out), "--rows", ids]) == 0
    assert "pipelines full" not in capsys.readouterr().out  # not known, not made up
    args = [x for k, v in BASE.items() for x in ("--" + k.replace("_", "-"), v)]
    before = out.read_bytes()
    assert main(["sweep", *args, "--pp", "1,2", "--out", str(out), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "older tpsim, without the columns in_flight_*" in err[0]
    assert out.read_bytes() == before


def test_jsonl_rows_without_the_in_flight_keys_are_read_not_resumed(
    rows: dict[int, Row], tmp_path: Path
) -> None:
    out = tmp_path / "old.jsonl"
    old = [{k: v for k, v in r.items() if k not in IN_FLIGHT_COLUMNS} for r in rows.values()]
    out.write_text("".join(json.dumps(r) + "\n" for r in old))
    assert [r["in_flight_tokens_per_s"] for r in read_rows(out)] == [None, None]
    args = [x for k, v in BASE.items() for x in ("--" + k.replace("_", "-"), v)]
    assert main(["sweep", *args, "--out", str(out), "--resume", "--quiet"]) == 2


def test_throughput_plot_draws_a_pipeline_kept_full(rows: dict[int, Row]) -> None:
    fig = draw_throughput_vs_tp(list(rows.values()), title="t")
    total, per_gpu = fig.axes[:2]
    lines = {ln.get_label(): ln for ln in total.get_lines()}
    piped = lines["batch 4, PP 2, 2 batches in flight"]
    assert list(piped.get_ydata()) == [rows[2]["in_flight_tokens_per_s"]]
    assert list(lines["batch 4"].get_ydata()) == [rows[1]["tokens_per_s"]]
    per = {ln.get_label(): ln for ln in per_gpu.get_lines()}
    assert list(per[piped.get_label()].get_ydata()) == [rows[2]["in_flight_tokens_per_s_per_gpu"]]
    assert "pipelines full" in total.get_ylabel() and "pipelines full" in per_gpu.get_ylabel()
    assert "as compare and plan count them" in fig._suptitle.get_text()


def test_regime_map_cells_of_a_pipeline_kept_full(rows: dict[int, Row]) -> None:
    unfit = rows[2] | {"batch": 8, "point_id": "x", "in_flight_fits": False,
                       "in_flight_bytes_per_gpu": 90e9}  # fmt: skip
    fig = draw_regime_map([*rows.values(), unfit], title="t")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert f"{compact(rows[2]['in_flight_tokens_per_s'])} tok/s (full)\nmemory" in "".join(texts)
    assert "full: does not fit\nneeds 90 GB/GPU" in texts
    assert not any("bubble" in t for t in texts)  # the other batches fill it


def test_words_of_a_sweep_with_a_pipeline(rows: dict[int, Row]) -> None:
    words = regime_summary(list(rows.values()))
    assert "bubble-bound" not in words and "pipelines kept full" in words
    best = best_summary(list(rows.values()))
    rate = rows[2]["in_flight_tokens_per_s"]
    assert best.startswith(f"most tokens/s, pipelines full: TP 2 x PP 2 batch 4 each, 2 in "
                           f"flight: {rate:,.0f} tokens/s")  # fmt: skip
    assert best_summary([rows[1]]) == ""  # no pipeline: nothing to add


def test_gantt_best_is_the_fastest_with_pipelines_full(
    rows: dict[int, Row], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[Row] = []

    def record(row: Row, path: Path) -> Path:
        drawn.append(row)
        path.write_bytes(b"")
        return path

    monkeypatch.setattr(figures, "draw_gantt", record)
    figures.plot_results(list(rows.values()), tmp_path)
    assert [r["pp"] for r in drawn] == [2]  # its step alone is slower than TP 2's
    assert "fits (pipelines full" in (tmp_path / "index.html").read_text()


def test_compare_results_shows_pipelines_full(
    rows: dict[int, Row], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.csv"
    out.write_text(results_text(rows.values(), "csv"))
    ids = [rows[p]["point_id"] for p in (1, 2)]
    assert main(["compare", "--results", str(out), "--rows", ",".join(ids)]) == 0
    text = capsys.readouterr().out
    assert "TP 2 x PP 2" in text
    (full,) = [ln for ln in text.splitlines() if ln.startswith("tokens/s, pipelines full")]
    assert full.split()[-1] == f"{rows[2]['in_flight_tokens_per_s']:,.0f}"
    (gpus,) = [ln for ln in text.splitlines() if ln.startswith("GPUs")]
    assert gpus.split()[1:] == ["2", "4"]


def test_report_and_study_table_count_a_pipeline_kept_full(rows: dict[int, Row]) -> None:
    fig = sweep_figure(list(rows.values()))
    ys = sorted(y for trace in fig.data for y in trace.y)
    assert ys == sorted(
        [rows[1]["tokens_per_s_per_gpu"], rows[2]["in_flight_tokens_per_s_per_gpu"]]
    )
    assert "pipelines full" in fig.layout.yaxis.title.text
    lines = table(list(rows.values()), lambda r: f"PP {r['pp']}")
    (piped,) = [ln for ln in lines if ln.strip().startswith("PP 2")]
    assert f"{rows[2]['in_flight_tokens_per_s']:,.0f}" in piped and "bubble" not in piped
    assert "pipelines full" in lines[-1]


def test_columns_are_documented() -> None:
    guide = (Path(__file__).parents[2] / "docs" / "guide.md").read_text()
    assert all(f"`{c}`" in guide for c in COLUMNS if c.startswith("in_flight_"))


def test_a_narrow_regime_map_wraps_its_title_inside_the_figure(rows: dict[int, Row]) -> None:
    """Two layouts and the pipelines' note: the title was centred over the axes and ran off
    the figure's left edge."""
    title = "llama-3.1-70b decode on dgx-h100 (context 8192, launch graph, engine vllm): regime"
    fig = draw_regime_map([rows[2]], title=title)
    box = fig.axes[0].title.get_window_extent(renderer=fig.canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1


def test_a_results_rows_tp_group_over_hosts_is_read_from_its_hosts(rows: dict[int, Row]) -> None:
    """A row names no GPU: compare's note on which TP group all-reduces across hosts reads
    its ``hosts`` (it read no GPU and said none did)."""
    assert not tp_spans_hosts(config_from_row(rows[2]))
    assert tp_spans_hosts(config_from_row(rows[2] | {"hosts": 2}))
