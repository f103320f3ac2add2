"""Packaging: one import name, tpsim, over the repository's folders.

The wheel installs one top-level module, ``tpsim`` (with its package data and its console
script); a fresh venv holding only that wheel cannot ``import models`` (nor simulator,
topologies, experiments); and the folders at the repository root refuse to be imported under
their own names, so no module is importable under two names. The wheel is built once per session
(``tpsim_wheel`` in conftest.py).
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import textwrap
import venv
import zipfile
from fnmatch import fnmatch
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the wheel built, fresh venvs

REPO = Path(__file__).resolve().parents[2]

# The folders' own names, and the sub-packages' names without the tpsim prefix.
WRONG_NAMES = ["models", "simulator", "topologies", "experiments", "core", "outputs", "cli"]
WRONG_NAMES += ["calibration"]


def top_level(names: list[str]) -> set[str]:
    return {name.split("/")[0] for name in names}


def dist_info(names: list[str]) -> str:
    (info,) = {n for n in top_level(names) if n.endswith(".dist-info")}
    return info


def source_folder(package: str, package_dir: dict[str, str]) -> Path:
    """The repository folder that setuptools' package-dir maps a package name onto."""
    parts = package.split(".")
    for n in range(len(parts), 0, -1):
        if (prefix := ".".join(parts[:n])) in package_dir:
            return REPO / package_dir[prefix] / Path(*parts[n:])
    return REPO / Path(*parts)


def test_the_wheel_installs_one_top_level_module(tpsim_wheel: Path) -> None:
    with zipfile.ZipFile(tpsim_wheel) as whl:
        names = whl.namelist()
        info = dist_info(names)
        assert top_level(names) == {"tpsim", info}
        assert info.startswith("tpsim-")
        assert whl.read(f"{info}/top_level.txt").decode().split() == ["tpsim"]


def test_the_wheel_holds_every_module_and_the_package_data(
    tpsim_wheel: Path, pyproject: dict
) -> None:
    setuptools = pyproject["tool"]["setuptools"]
    package_dir = setuptools["package-dir"]
    with zipfile.ZipFile(tpsim_wheel) as whl:
        names = set(whl.namelist())
    # every module of every folder that package-dir maps in (a sub-package left out of the
    # explicit packages list would be missing here)
    for package, folder in package_dir.items():
        for py in (REPO / folder).rglob("*.py"):
            rel = py.relative_to(REPO / folder).as_posix()
            assert f"{package.replace('.', '/')}/{rel}" in names, f"{folder}/{rel} not in wheel"
    # the package data, by pyproject's own globs over the source folders
    assert "tpsim/py.typed" in names
    expected = set()
    for package, patterns in setuptools["package-data"].items():
        folder = source_folder(package, package_dir)
        for pattern in patterns:
            for found in folder.glob(pattern):
                if found.is_file():
                    rel = found.relative_to(folder).as_posix()
                    expected.add(f"{package.replace('.', '/')}/{rel}")
    assert expected <= names, sorted(expected - names)
    # and every data file the wheel holds is one of those (nothing swept in by accident)
    data = {n for n in names if n.startswith("tpsim/") and not n.endswith(".py")}
    assert data == expected
    calibration = {n for n in names if fnmatch(n, "tpsim/calibration/data/*")}
    assert calibration == {n for n in expected if n.startswith("tpsim/calibration/data/")}


def test_the_console_script_is_tpsim_cli_main(tpsim_wheel: Path, pyproject: dict) -> None:
    assert pyproject["project"]["scripts"] == {"tpsim": "tpsim.cli:main"}
    with zipfile.ZipFile(tpsim_wheel) as whl:
        text = whl.read(f"{dist_info(whl.namelist())}/entry_points.txt").decode()
    entry_points = configparser.ConfigParser()
    entry_points.read_string(text)
    assert dict(entry_points["console_scripts"]) == {"tpsim": "tpsim.cli:main"}


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory, tpsim_wheel: Path) -> tuple[Path, Path]:
    """A fresh venv (no pip, no system site-packages) with only the wheel installed, unpacked
    into its site-packages as an installer would (a pure-Python wheel): (python, site-packages)."""
    root = tmp_path_factory.mktemp("wheel-venv")
    venv.create(root, with_pip=False, symlinks=os.name != "nt")
    python = root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run(
        [python, "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with zipfile.ZipFile(tpsim_wheel) as whl:
        whl.extractall(purelib)
    return python, Path(purelib)


def run_json(python: Path, script: str, *args: str, cwd: Path) -> dict:
    """``python -I -c script args`` (-I: no PYTHONPATH, no user site, not the current folder)."""
    done = subprocess.run(
        [python, "-I", "-c", textwrap.dedent(script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


TRY_IMPORTS = """
    import importlib, importlib.util, json, sys
    seen = {}
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
            seen[name] = "imported"
        except Exception as exc:
            seen[name] = f"{type(exc).__name__}: {exc}"
    spec = importlib.util.find_spec("tpsim")
    print(json.dumps({"imports": seen, "tpsim": spec and spec.origin}))
"""


def test_a_fresh_venv_with_only_tpsim_cannot_import_models(
    wheel_venv: tuple[Path, Path], tmp_path: Path
) -> None:
    python, purelib = wheel_venv
    installed = [p.name for p in purelib.iterdir()]
    assert set(installed) == {"tpsim", dist_info(installed)}
    seen = run_json(python, TRY_IMPORTS, *WRONG_NAMES, cwd=tmp_path)
    assert seen["imports"] == {
        name: f"ModuleNotFoundError: No module named '{name}'" for name in WRONG_NAMES
    }
    assert Path(seen["tpsim"]) == purelib / "tpsim" / "__init__.py"


RUN_INSTALLED = """
    import importlib.metadata, json, sys
    sys.path.extend(json.loads(sys.argv[1]))  # the dependencies, after the venv's own
    import tpsim, tpsim.calibration, tpsim.cli, tpsim.experiments, tpsim.outputs
    from tpsim.models import get_model
    from tpsim.topologies import get_topology
    result = tpsim.simulate("llama-2-7b", "dgx-a100", 2, tpsim.Workload(batch=1, context_len=128))
    dist = importlib.metadata.distribution("tpsim")
    (script,) = [ep for ep in dist.entry_points if ep.group == "console_scripts"]
    print(json.dumps({
        "heads_per_gpu": result.summary["model_split"]["heads_per_gpu"],
        "dist": str(dist.locate_file("")),
        "script": [script.name, script.value, script.load() is tpsim.cli.main],
        "model": get_model("llama-2-7b").name,
        "files": sorted(
            m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)
        ),
        "tpsim": sorted(name for name in sys.modules if name.split(".")[0] == "tpsim"),
        "tpsim_files": {
            name: m.__file__
            for name, m in sorted(sys.modules.items())
            if name.split(".")[0] == "tpsim" and getattr(m, "__file__", None)
        },
        "roots": sorted({name.split(".")[0] for name in sys.modules}),
    }))
"""


def _installed(path: str) -> bool:
    """Whether ``path`` lies in an installed-packages folder (a venv's site-packages)."""
    return bool({"site-packages", "dist-packages"} & set(Path(path).parts))


def test_the_installed_wheel_runs_with_nothing_from_the_checkout(
    wheel_venv: tuple[Path, Path], tmp_path: Path
) -> None:
    """The venv's interpreter, with this environment's site-packages appended for the
    dependencies (without their .pth files, so an editable install of tpsim stays inactive),
    runs a simulation, and every module it loaded comes from the venv, none from the checkout."""
    python, purelib = wheel_venv
    deps = [p for p in sys.path if p and Path(p).is_dir()]
    # not the checkout's folders; a virtual environment inside the checkout (.venv) is fine
    deps = [p for p in deps if _installed(p) or not Path(p).resolve().is_relative_to(REPO)]
    seen = run_json(python, RUN_INSTALLED, json.dumps(deps), cwd=tmp_path)
    assert seen["heads_per_gpu"] == 16
    assert seen["model"] == "llama-2-7b"
    assert Path(seen["dist"]) == purelib
    assert seen["script"] == ["tpsim", "tpsim.cli:main", True]
    from_checkout = [
        f for f in seen["files"] if Path(f).resolve().is_relative_to(REPO) and not _installed(f)
    ]
    assert not from_checkout
    # tpsim's own modules, known by their package name (never by a folder called tpsim: the
    # checkout itself is usually cloned into one, with its .venv of dependencies inside)
    tpsim_files = seen["tpsim_files"]
    assert "tpsim" in tpsim_files and "tpsim.core.engine.simulation" in tpsim_files
    elsewhere = {
        name: f for name, f in tpsim_files.items() if not Path(f).is_relative_to(purelib / "tpsim")
    }
    assert not elsewhere
    assert {"tpsim.models", "tpsim.topologies", "tpsim.core.engine.simulation"} <= set(
        seen["tpsim"]
    )
    assert not set(WRONG_NAMES) & set(seen["roots"])


def test_the_editable_install_maps_each_folder() -> None:
    import tpsim

    if not Path(tpsim.__file__).resolve().is_relative_to(REPO):
        pytest.skip("tpsim is not the editable install of this checkout")
    import tpsim.calibration
    import tpsim.cli
    import tpsim.core
    import tpsim.experiments
    import tpsim.models
    import tpsim.outputs
    import tpsim.topologies

    packages = [tpsim, tpsim.calibration, tpsim.cli, tpsim.core, tpsim.outputs]
    packages += [tpsim.experiments, tpsim.models, tpsim.topologies]
    where = {
        m.__name__: Path(m.__file__).resolve().parent.relative_to(REPO).as_posix() for m in packages
    }
    assert where == {
        "tpsim": "simulator",
        "tpsim.calibration": "simulator/calibration",
        "tpsim.cli": "simulator/cli",
        "tpsim.core": "simulator/core",
        "tpsim.outputs": "simulator/outputs",
        "tpsim.experiments": "experiments",
        "tpsim.models": "models",
        "tpsim.topologies": "topologies",
    }


GUARDED = ["simulator", "models", "topologies", "simulator.core.engine", "models.spec"]
GUARDED += ["topologies.builders"]


def try_from_the_repository_root(names: list[str]) -> dict[str, str]:
    """``python -c 'import NAME'`` run in the repository root (so the root is on sys.path)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TRY_IMPORTS), *names],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])["imports"]


def test_the_folders_refuse_their_own_names_from_the_repository_root() -> None:
    seen = try_from_the_repository_root(GUARDED)
    for name in GUARDED:
        assert seen[name].startswith("ImportError: "), (name, seen[name])
        assert "import tpsim" in seen[name], (name, seen[name])


def test_experiments_refuses_its_own_name_from_the_repository_root() -> None:
    seen = try_from_the_repository_root(["experiments", "experiments.grid"])
    for name, outcome in seen.items():
        assert outcome.startswith("ImportError: "), (name, outcome)
