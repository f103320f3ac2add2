"""The import contracts hold: [tool.importlinter] in pyproject.toml, checked by import-linter.

- ``layers``: top to bottom tpsim.cli; tpsim.experiments (studies: grid, sweep, plots, claim,
  bench); tpsim.outputs (trace, CSV, report text); tpsim.core (lowering, costs, collectives,
  engine, metrics); tpsim.models | tpsim.topologies (independent of each other);
  tpsim.calibration. A module may import only from layers below its own.
- ``acyclic``: no import cycle between the children of any package, at any depth (and, by
  :func:`test_no_module_is_in_an_import_cycle` here, none anywhere in the module graph).
- ``simpy``, ``plotting``, ``networkx``: SimPy only in tpsim.core.engine; matplotlib and
  plotly only in tpsim.experiments.plots and tpsim.experiments.report; networkx only in
  tpsim.topologies and tpsim.core.comm.

import-linter's graph builder (grimp) finds a package by walking its directory, so it does not
see the folders that package-dir maps into tpsim from the editable install. It runs here on the
installed layout instead: the session's wheel unpacked (``tpsim_tree`` in conftest.py), first on
the path of a fresh interpreter, with the same pyproject.toml a person would use. Each contract
is shown failing on a deliberately wrong import written into a copy of the tree.
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


CONTRACTS = {
    "layers": "tpsim layers: cli > studies > outputs > core > models | topologies > calibration",
    "acyclic": "no import cycles between sibling modules or packages",
    "simpy": "simpy only in the engine (tpsim.core.engine)",
    "plotting": "matplotlib and plotly only in tpsim.experiments.plots and .report",
    "networkx": "networkx only in tpsim.topologies and tpsim.core.comm (others: TopologyGraph)",
}


def test_the_contracts_are_the_ones_in_pyproject(pyproject: dict) -> None:
    config = pyproject["tool"]["importlinter"]
    assert config["root_package"] == "tpsim"
    assert config["include_external_packages"] is True  # the protected contracts name them
    assert config["exclude_type_checking_imports"] is True
    contracts = {c["id"]: c for c in config["contracts"]}
    assert {k: c["name"] for k, c in contracts.items()} == CONTRACTS
    assert contracts["layers"]["type"] == "layers"
    assert contracts["layers"]["layers"] == [
        "tpsim.cli",
        "tpsim.experiments",
        "tpsim.outputs",
        "tpsim.core",
        "tpsim.models | tpsim.topologies",
        "tpsim.calibration",
    ]
    assert contracts["acyclic"]["type"] == "acyclic_siblings"
    assert contracts["acyclic"]["ancestors"] == ["tpsim"]
    protected = {k: c for k, c in contracts.items() if c["type"] == "protected"}
    assert {k: (c["protected_modules"], c["allowed_importers"]) for k, c in protected.items()} == {
        "simpy": (["simpy"], ["tpsim.core.engine"]),
        "plotting": (
            ["matplotlib", "plotly"],
            ["tpsim.experiments.plots", "tpsim.experiments.report"],
        ),
        "networkx": (["networkx"], ["tpsim.topologies", "tpsim.core.comm"]),
    }
    for c in contracts.values():  # no exceptions papering over real imports
        assert "ignore_imports" not in c


def test_the_tree_keeps_the_contracts(tpsim_tree: Path, tmp_path: Path) -> None:
    done = lint(tpsim_tree, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(CONTRACTS)} kept, 0 broken" in done.stdout


CYCLES = """
    import sys
    import grimp
    import networkx as nx
    graph = grimp.build_graph("tpsim", exclude_type_checking_imports=True, cache_dir=None)
    g = nx.DiGraph()
    for m in graph.modules:
        g.add_edges_from((m, i) for i in graph.find_modules_directly_imported_by(m))
    for cycle in sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1):
        print(" <-> ".join(cycle))
"""


def cycles(tree: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Every set of tpsim modules that import each other in a cycle, one line each."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CYCLES)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_module_is_in_an_import_cycle(tpsim_tree: Path, tmp_path: Path) -> None:
    """The whole module graph (module-level and function-level imports) has no cycle,
    including between a package's __init__ and its children, which acyclic_siblings does
    not see; shown failing on such a cycle written into a copy of the tree."""
    done = cycles(tpsim_tree, tmp_path)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
    tree = tmp_path / "tree"
    shutil.copytree(tpsim_tree / "tpsim", tree / "tpsim")
    with (tree / "tpsim/experiments/studies/base.py").open("a") as f:
        f.write("\n\ndef _registry():\n    from tpsim.experiments.studies import STUDIES\n")
    with (tree / "tpsim/experiments/studies/__init__.py").open("a") as f:
        f.write("\nimport tpsim.experiments.studies.base\n")
    done = cycles(tree, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "tpsim.experiments.studies <-> tpsim.experiments.studies.base\n"


# Each a deliberately wrong import, written into a copy of the tree, the contracts it breaks
# and how import-linter names it.
WRONG = {
    "the core imports the plots": (
        "tpsim/core/metrics.py",
        "import tpsim.experiments.plots.gantt",
        {"layers", "acyclic"},  # experiments imports the core, so also a cycle
        "tpsim.core.metrics -> tpsim.experiments.plots.gantt",
    ),
    "the report imports the command line": (
        "tpsim/outputs/text.py",
        "from tpsim.cli import main",
        {"layers", "acyclic"},
        "tpsim.outputs.text -> tpsim.cli",
    ),
    "a model imports a topology": (
        "tpsim/models/spec.py",
        "import tpsim.topologies.gpus",
        {"layers"},
        "tpsim.models.spec -> tpsim.topologies.gpus",
    ),
    "two core modules import each other": (
        "tpsim/core/result.py",
        "def _late():\n    from tpsim.core import api",  # a function-level import counts
        {"acyclic"},
        "- .result -> .api (1 import)",
    ),
    "a sub-package's modules import each other": (
        "tpsim/experiments/calibrate/knobs.py",
        "from tpsim.experiments.calibrate.fit import Calibrated",  # fit imports the knobs
        {"acyclic"},
        "No cycles are allowed in tpsim.experiments.calibrate.",
    ),
    "the metrics import SimPy": (
        "tpsim/core/metrics.py",
        "import simpy",
        {"simpy"},
        "tpsim.core.metrics -> simpy",
    ),
    "the comm code imports SimPy": (
        "tpsim/core/comm/schedules.py",
        "from simpy import Environment",
        {"simpy"},
        "tpsim.core.comm.schedules -> simpy",
    ),
    "a study draws with matplotlib": (
        "tpsim/experiments/studies/launch_overhead.py",
        "from matplotlib.figure import Figure",
        {"plotting"},
        "tpsim.experiments.studies.launch_overhead -> matplotlib",
    ),
    "the comparison imports plotly": (
        "tpsim/experiments/compare.py",
        "import plotly.graph_objects",
        {"plotting"},
        "tpsim.experiments.compare -> plotly",
    ),
    "the API imports networkx for a type": (
        "tpsim/core/api.py",
        "import networkx as nx",
        {"networkx"},
        "tpsim.core.api -> networkx",
    ),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_a_wrong_import_breaks_its_contract(tpsim_tree: Path, tmp_path: Path, case: str) -> None:
    module, wrong_import, broken, named = WRONG[case]
    tree = tmp_path / "tree"
    shutil.copytree(tpsim_tree / "tpsim", tree / "tpsim")
    with (tree / module).open("a") as f:
        f.write(f"\n{wrong_import}\n")
    done = lint(tree, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    kept = len(CONTRACTS) - len(broken)
    assert f"{kept} kept, {len(broken)} broken" in done.stdout, done.stdout
    status = {  # "NAME KEPT" or "NAME BROKEN", no space after a long name
        line.removesuffix(word).rstrip(): word
        for line in done.stdout.splitlines()
        for word in ("KEPT", "BROKEN")
        if line.endswith(word)
    }
    assert status == {n: "BROKEN" if k in broken else "KEPT" for k, n in CONTRACTS.items()}
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
