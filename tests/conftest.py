"""Shared fixtures: the headline study runs once per session (the demo and its golden test), and
the wheel is built once per session (the packaging and the layer tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from tpsim.experiments.demo import run_demo

REPO = Path(__file__).resolve().parent.parent

# The hostile-input refusal test is written in hostile_corpus.py (not a test file): rewrite
# its asserts as pytest does a test file's, so a failure shows the values.
pytest.register_assert_rewrite("hostile_corpus")

#: Session fixtures that make a test slow by themselves (the demo run, the wheel build, the
#: reference sweep of the kill tests): a test that uses one, directly or through another
#: fixture, is marked ``slow`` here, so ``pytest -m "not slow"`` leaves it out unasked.
SLOW_FIXTURES = frozenset({"demo_run", "tpsim_wheel", "tpsim_tree", "kill_reference"})


class _GroupIds:
    """--dist loadgroup schedules a test by the group its id ends with (``id@group``), which
    pytest-xdist's worker appends from the ``xdist_group`` markers by setting the item's
    ``_nodeid``. pytest 9 keeps the id in ``_id`` (a NodeId) instead, so with pytest-xdist
    3.8 the append does nothing: every worker that drew a test of a session fixture built
    the fixture itself (the demo twice, 25-55 s each). Where the id has no group after
    pytest-xdist's hook, this appends it as that hook means to."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            mark = item.get_closest_marker("xdist_group")
            if mark is None or "@" in item.nodeid.rpartition("]")[2]:
                continue
            grouped = f"{item.nodeid}@{mark.args[0] if mark.args else mark.kwargs['name']}"
            node_id = getattr(item, "_id", None)
            if node_id is not None and hasattr(node_id, "parse"):
                item._id = type(node_id).parse(grouped)  # type: ignore[attr-defined]
            else:
                item._nodeid = grouped  # type: ignore[attr-defined]


def pytest_configure(config: pytest.Config) -> None:
    """Benchmarks time themselves: they run in this one process, never beside other tests
    on the pytest-xdist workers (``-n auto`` of pyproject's addopts)."""
    if getattr(config.option, "loadgroup", False):  # a pytest-xdist worker under loadgroup
        config.pluginmanager.register(_GroupIds(), "tpsim-xdist-group-ids")
    if "benchmark" in (config.getoption("markexpr") or "") and hasattr(
        config.option, "numprocesses"
    ):
        config.option.numprocesses = 0
        config.option.dist = "no"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        used = sorted(SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())))
        if used:
            item.add_marker(pytest.mark.slow)
            # one worker builds the session fixture once for all its tests (--dist loadgroup);
            # the unpacked tree is the wheel's, so its tests join the wheel's group
            group = "tpsim_wheel" if used[0] == "tpsim_tree" else used[0]
            item.add_marker(pytest.mark.xdist_group(group))
    # benchmarks (whole studies and the full validation run: minutes each) stay out of the
    # suite unless asked for by marker (pytest -m benchmark), so plain pytest fits CI's budget
    if "benchmark" not in (config.getoption("markexpr") or ""):
        kept = [i for i in items if i.get_closest_marker("benchmark") is None]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[i for i in items if i not in kept])
            items[:] = kept


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """``tpsim demo --out DIR`` as the README runs it: the folder and the printed lines."""
    out = tmp_path_factory.mktemp("demo")
    return out, list(run_demo(out, jobs=2))


@pytest.fixture(scope="session")
def kill_reference(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The row lines of an uninterrupted sweep of kill_loop's grid, which every killed and
    resumed sweep must end with (one reference for the pool and the Dask kill tests)."""
    import kill_loop

    return kill_loop.reference(tmp_path_factory.mktemp("reference"))


@pytest.fixture(scope="session")
def pyproject() -> dict:
    with (REPO / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


@pytest.fixture(scope="session")
def tpsim_wheel(tmp_path_factory: pytest.TempPathFactory, pyproject: dict) -> Path:
    """The wheel ``pip wheel .`` builds from this checkout, offline (no index, no build isolation,
    so the installed setuptools builds it).

    It is built from a copy of what the build reads (the files at the repository root and the
    folders that package-dir maps), so that setuptools' build/ and egg-info stay out of the
    checkout and no stale build/lib from an earlier build can slip into the wheel.
    """
    src = tmp_path_factory.mktemp("wheel-src")
    for item in REPO.iterdir():
        if item.is_file():
            shutil.copy2(item, src / item.name)
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for folder in set(pyproject["tool"]["setuptools"]["package-dir"].values()):
        shutil.copytree(REPO / folder, src / folder, ignore=junk)
    out = tmp_path_factory.mktemp("wheel")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    cmd += ["--no-index", "--no-cache-dir", "-q", "-w", str(out), str(src)]
    done = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True, timeout=300)
    wheels = sorted(out.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        pytest.fail(
            f"pip wheel failed ({done.returncode}); setuptools>=70.1 (the test extra) builds "
            f"wheels offline:\n{done.stdout}\n{done.stderr}"
        )
    return wheels[0]


@pytest.fixture(scope="session")
def tpsim_tree(tmp_path_factory: pytest.TempPathFactory, tpsim_wheel: Path) -> Path:
    """The wheel unpacked: the installed layout (tpsim/, tpsim/models/, ...), read-only use."""
    tree = tmp_path_factory.mktemp("tpsim-tree")
    with zipfile.ZipFile(tpsim_wheel) as whl:
        whl.extractall(tree)
    return tree
