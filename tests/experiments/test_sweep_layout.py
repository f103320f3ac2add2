"""Sweep axes pp, dp and micro_batches: grid, point ids, columns, rows, old files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpsim.cli import main
from tpsim.experiments.sweep.grid import grid_from_flags, grid_from_yaml, point_from_row
from tpsim.experiments.sweep.reading import read_rows
from tpsim.experiments.sweep.rows import COLUMNS, IN_FLIGHT_COLUMNS
from tpsim.experiments.sweep.run import run_point

BASE = {"model": "llama-3.1-8b", "topology": "dgx-h100", "context_len": "256", "batch": "4"}

#: The columns of the results file before the layout axes (their order may not change).
OLD_HEAD = (
    "point_id,model,topology,nodes,gpus_per_node,tp,batch,phase,prompt_len,context_len,"
    "dtype,kv_dtype,launch,overlap,allreduce_algo,sequence_parallel,ideal,engine,gpu,hosts,"
    "latency_s,tokens_per_s,tokens_per_s_per_gpu,regime,compute_s,memory_s,"
    "communication_s,launch_overhead_s,host_s,idle_s,fits,weights_bytes_per_gpu,"
    "kv_cache_bytes_per_gpu,activation_bytes_per_gpu,total_bytes_per_gpu,"
    "capacity_bytes_per_gpu,collectives,comm_bytes_per_gpu,error"
)


def test_new_columns_are_appended_after_the_old_ones() -> None:
    assert ",".join(COLUMNS).startswith(OLD_HEAD + ",")
    # in the versions that added them: test_sweep_in_flight.py, test_sweep_moe_axes.py
    assert COLUMNS[len(OLD_HEAD.split(",")) :] == (
        *("pp", "dp", "micro_batches", "bubble_s", "ep", "attention_dp", "expert_skew"),
        *IN_FLIGHT_COLUMNS,
        *("moe_tp", "moe_a2a"),
    )


def test_single_group_points_keep_their_old_ids() -> None:
    (p,) = grid_from_flags(BASE | {"tp": "2"})
    (q,) = grid_from_flags(BASE | {"tp": "2", "pp": "1", "dp": "1", "micro_batches": "1"})
    assert p == q and p.point_id == "c9993bcb8b4cac4e"  # the id before these axes existed
    (r,) = grid_from_flags(BASE | {"tp": "2", "dp": "2"})
    assert r.point_id != p.point_id
    (m,) = grid_from_flags(BASE | {"tp": "2", "ep": "1", "attention_dp": "1", "expert_skew": "0"})
    assert m.point_id == p.point_id  # the MoE axes at their defaults keep the id too


def test_axes_expand_and_each_point_runs_its_layout() -> None:
    points = grid_from_flags(BASE | {"tp": "2", "pp": "1,2", "dp": "1,2", "micro_batches": "2"})
    assert [(p.pp, p.dp) for p in points] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    rows = {(p.pp, p.dp): run_point(p) for p in points}
    assert not any(r.get("error") for r in rows.values())
    for (pp, dp), r in rows.items():
        assert r["tokens_per_s_per_gpu"] == pytest.approx(r["tokens_per_s"] / (2 * pp * dp))
        assert point_from_row(r).layout().pp == pp
    # two replicas on disjoint NVLink ports: twice the tokens at the same step time
    assert rows[1, 2]["tokens_per_s"] == pytest.approx(2 * rows[1, 1]["tokens_per_s"], rel=1e-6)
    assert rows[2, 1]["bubble_s"] > 0 and rows[1, 1]["bubble_s"] == 0
    assert rows[2, 1]["weights_bytes_per_gpu"] < rows[1, 1]["weights_bytes_per_gpu"]


def test_yaml_keys_and_bad_values(tmp_path: Path) -> None:
    g = tmp_path / "g.yaml"
    g.write_text("{model: llama-3.1-8b, topology: dgx-h100, tp: 2, pp: [1, 2], dp: 2}\n")
    assert [(p.pp, p.dp) for p in grid_from_yaml(g)] == [(1, 2), (2, 2)]
    g.write_text("{model: llama-3.1-8b, topology: dgx-h100, tp: 2, micro_batches: -1}\n")
    with pytest.raises(Exception, match="micro_batches=-1"):
        grid_from_yaml(g)


def test_micro_batches_default_to_the_engines_split_resolved_in_each_point() -> None:
    """As in ``tpsim run``: without the axis a point takes its engine's split, stored as the
    number it resolves to (so an in-flight engine's pipeline keeps the id it had with 1)."""
    base = {"model": "llama-2-70b", "topology": "dgx-a100", "nodes": "3", "tp": "8",
            "batch": "256", "phase": "prefill", "prompt_len": "60"}  # fmt: skip
    ft = grid_from_flags(base | {"pp": "1,3", "engine": "fastertransformer"})
    assert [(p.pp, p.micro_batches) for p in ft] == [(1, 1), (3, 16)]
    (given,) = grid_from_flags(base | {"pp": "3", "engine": "fastertransformer",
                                       "micro_batches": "0,16"})  # fmt: skip
    assert given == ft[1]  # 0 and 16 are the same point
    (vllm,) = grid_from_flags(base | {"pp": "3"})
    (one,) = grid_from_flags(base | {"pp": "3", "micro_batches": "1"})
    assert vllm.micro_batches == 1 and vllm.point_id == one.point_id


def test_cli_bad_pp_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    assert main(["sweep", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "2",
                 "--pp", "0", "--out", str(out), "--quiet"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pp=" in err[0] and "0" in err[0]


def test_resume_of_a_csv_without_the_new_columns_says_start_anew(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "old.csv"
    out.write_text(OLD_HEAD + "\n")
    args = ["sweep"] + [x for k, v in BASE.items() for x in ("--" + k.replace("_", "-"), v)]
    assert main([*args, "--tp", "2", "--out", str(out), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "older tpsim" in err[0] and "start a new file" in err[0]
    assert "pp, dp, micro_batches" in err[0]
    assert read_rows(out) == []  # read (plot, compare, report), never resumed


def test_old_jsonl_rows_read_as_one_tp_group(tmp_path: Path) -> None:
    """JSON Lines rows name their keys: a row without the layout keys is pp = dp =
    micro_batches = 1, and its point id is the one the same point has now."""
    (p,) = grid_from_flags(BASE | {"tp": "2"})
    row = run_point(p)
    old = {k: v for k, v in row.items() if k not in ("pp", "dp", "micro_batches", "bubble_s")}
    out = tmp_path / "old.jsonl"
    out.write_text(json.dumps(old) + "\n")
    (back,) = read_rows(out)
    assert (back["pp"], back["dp"], back["micro_batches"]) == (1, 1, 1)
    assert point_from_row(back) == p and back["point_id"] == p.point_id
