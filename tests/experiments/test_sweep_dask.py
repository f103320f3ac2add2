"""The same sweep on a real (local, in-process) Dask cluster gives the same rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpsim.experiments.sweep.grid import grid_from_flags
from tpsim.experiments.sweep.reading import read_rows
from tpsim.experiments.sweep.run import run_sweep

pytestmark = pytest.mark.slow  # a local Dask cluster

distributed = pytest.importorskip("distributed")


def test_sweep_on_a_local_dask_cluster(tmp_path: Path) -> None:
    points = grid_from_flags(
        {"model": "llama-3.1-8b", "topology": "dgx-h100", "tp": "1,2,3", "batch": "1,8"}
    )
    local, dask = tmp_path / "local.jsonl", tmp_path / "dask.jsonl"
    run_sweep(points, local, jobs=1, progress=False)
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        report = run_sweep(points, dask, scheduler=cluster.scheduler_address, progress=False)
    assert report.ran == 6 and report.errors == 2  # tp=3 does not divide 32 heads
    assert sorted(local.read_text().splitlines()) == sorted(dask.read_text().splitlines())
    assert {r["point_id"] for r in read_rows(dask)} == {p.point_id for p in points}
