"""Shared fixtures: the headline study runs once per session (the demo and its golden test)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpsim.experiments.demo import run_demo


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """``tpsim demo --out DIR`` as the README runs it: the folder and the printed lines."""
    out = tmp_path_factory.mktemp("demo")
    return out, list(run_demo(out, jobs=2))
