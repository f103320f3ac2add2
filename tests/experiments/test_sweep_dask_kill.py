"""A real local Dask cluster (scheduler and worker as processes) killed mid-sweep: the sweep
exits 3 within seconds saying how many points remain, and after ``--resume`` on the restored
cluster the rows equal an uninterrupted run's (tests/support/kill_loop.py loops this)."""

from __future__ import annotations

import random
from pathlib import Path

import kill_loop
import pytest

pytestmark = pytest.mark.slow  # Dask clusters of separate processes, killed

pytest.importorskip("distributed")


def test_dask_scheduler_killed(tmp_path: Path, kill_reference: list[str]) -> None:
    outcome = kill_loop.dask_scheduler_killed(tmp_path, kill_reference, random.Random(1))
    assert outcome.ok, outcome.detail


def test_dask_workers_all_killed(tmp_path: Path, kill_reference: list[str]) -> None:
    outcome = kill_loop.dask_workers_killed(tmp_path, kill_reference, random.Random(2))
    assert outcome.ok, outcome.detail
