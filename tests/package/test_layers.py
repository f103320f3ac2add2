"""The layers hold: import-linter's ``layers`` contract, [tool.importlinter] in pyproject.toml.

Top to bottom: tpsim.cli; tpsim.experiments (studies: grid, sweep, plots, claim, bench);
tpsim.outputs (trace, CSV, report text); tpsim.core (lowering, costs, collectives, engine,
metrics); tpsim.models | tpsim.topologies (independent of each other); tpsim.calibration. A
module may import only from layers below its own.

import-linter's graph builder (grimp) finds a package by walking its directory, so it does not
see the folders that package-dir maps into tpsim from the editable install. It runs here on the
installed layout instead: the session's wheel unpacked (``tpsim_tree`` in conftest.py), first on
the path of a fresh interpreter, with the same pyproject.toml a person would use.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the wheel built, import-linter in fresh interpreters

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "pyproject.toml"

LINT = """
    import importlib.util, sys
    tree, config = sys.argv[1:]
    origin = importlib.util.find_spec("tpsim").origin
    if not origin.startswith(tree):
        sys.exit(f"tpsim resolves to {origin}, not to the tree {tree}")
    from importlinter.cli import lint_imports_command
    lint_imports_command.main([config, "--no-cache", "--no-logo"], prog_name="lint-imports")
"""


def lint(tree: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports with pyproject.toml's contract over the tpsim package in ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LINT), str(tree), str(CONFIG)],
        cwd=cwd,  # not the repository root; --no-cache writes nothing there either
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_contract_is_the_layers_in_pyproject(pyproject: dict) -> None:
    config = pyproject["tool"]["importlinter"]
    assert config["root_package"] == "tpsim"
    (contract,) = config["contracts"]
    assert contract["type"] == "layers"
    assert contract["layers"] == [
        "tpsim.cli",
        "tpsim.experiments",
        "tpsim.outputs",
        "tpsim.core",
        "tpsim.models | tpsim.topologies",
        "tpsim.calibration",
    ]


def test_the_tree_keeps_the_layers(tpsim_tree: Path, tmp_path: Path) -> None:
    done = lint(tpsim_tree, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


# Each a deliberately wrong import, written into a copy of the tree, and how import-linter
# names it.
WRONG = {
    "the core imports the plots": (
        "tpsim/core/metrics.py",
        "import tpsim.experiments.plots.gantt",
        "tpsim.core.metrics -> tpsim.experiments.plots.gantt",
    ),
    "the report imports the command line": (
        "tpsim/outputs/text.py",
        "from tpsim.cli import main",
        "tpsim.outputs.text -> tpsim.cli",
    ),
    "a model imports a topology": (
        "tpsim/models/spec.py",
        "import tpsim.topologies.gpus",
        "tpsim.models.spec -> tpsim.topologies.gpus",
    ),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_a_wrong_import_breaks_the_contract(tpsim_tree: Path, tmp_path: Path, case: str) -> None:
    module, wrong_import, named = WRONG[case]
    tree = tmp_path / "tree"
    shutil.copytree(tpsim_tree / "tpsim", tree / "tpsim")
    with (tree / module).open("a") as f:
        f.write(f"\n{wrong_import}\n")
    done = lint(tree, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "0 kept, 1 broken" in done.stdout
    assert named in done.stdout, done.stdout


def test_the_ci_checks_see_the_installed_layout(tpsim_tree: Path, tmp_path: Path) -> None:
    """.ci/checks.py runs mypy and import-linter on its own copy of the mapped folders: the
    same modules, at the same places, as the wheel installs."""
    spec = importlib.util.spec_from_file_location("ci_checks", REPO / ".ci" / "checks.py")
    assert spec is not None and spec.loader is not None
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    checks.build_tree(tmp_path)
    ours = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.py")}
    wheel = {p.relative_to(tpsim_tree).as_posix() for p in (tpsim_tree / "tpsim").rglob("*.py")}
    assert ours == wheel
