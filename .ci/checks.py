#!/usr/bin/env python3
"""The static checks CI runs before the tests: mypy and import-linter over the tpsim package.

Both tools find a package by walking its directory, so neither sees the folders that
setuptools' package-dir maps into tpsim (simulator/ is tpsim, models/ is tpsim.models, ...), and
the editable install's import hook is no directory either. So the installed layout is built
here first, a copy of each mapped folder's files under one tpsim/ (as the wheel lays them out),
and both tools run on that tree with pyproject.toml's settings; mypy's messages name the
repository's files again.

    python .ci/checks.py            # both
    python .ci/checks.py mypy       # one of them
    python .ci/checks.py imports
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "pyproject.toml"

# lint-imports with pyproject.toml's contracts (the config file as the one argument)
LINT_IMPORTS = (
    "import sys; from importlinter.cli import lint_imports_command; "
    "lint_imports_command.main([sys.argv[1], '--no-cache', '--no-logo'], prog_name='lint-imports')"
)


def build_tree(root: Path) -> dict[Path, Path]:
    """tpsim's installed layout under ``root``; returns each copied folder -> its source."""
    with CONFIG.open("rb") as f:
        package_dir: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    copied = {}
    # parents before their sub-packages, so that tpsim/ exists before tpsim/models/ goes in
    for package, folder in sorted(package_dir.items(), key=lambda item: item[0].count(".")):
        dest = root.joinpath(*package.split("."))
        shutil.copytree(REPO / folder, dest, ignore=junk, dirs_exist_ok=True)
        copied[dest] = REPO / folder
    return copied


def repo_paths(text: str, copied: dict[Path, Path], cwd: Path) -> str:
    """The tree's paths in a tool's output written as the repository's (longest first)."""
    for dest in sorted(copied, key=lambda p: len(str(p)), reverse=True):
        source = f"{os.path.relpath(copied[dest], REPO)}{os.sep}"
        # mypy names a file relative to its working directory, the tree's parent
        for written in (dest, dest.relative_to(cwd)):
            text = text.replace(f"{written}{os.sep}", source)
    return text


def run(name: str, cmd: list[str], tree: Path, copied: dict[Path, Path]) -> int:
    env = {**os.environ, "MYPYPATH": str(tree), "PYTHONPATH": str(tree)}
    done = subprocess.run(cmd, cwd=tree.parent, env=env, capture_output=True, text=True)
    out = repo_paths(done.stdout + done.stderr, copied, tree.parent)
    print(f"--- {name}: {'ok' if done.returncode == 0 else 'FAILED'}")
    print(out.rstrip())
    return done.returncode


def main(argv: list[str]) -> int:
    wanted = argv or ["mypy", "imports"]
    if unknown := set(wanted) - {"mypy", "imports"}:
        sys.exit(f"unknown check(s): {', '.join(sorted(unknown))} (mypy, imports)")
    with tempfile.TemporaryDirectory(prefix="tpsim-checks-") as tmp:
        tree = Path(tmp) / "tree"
        copied = build_tree(tree)
        commands = {
            # the cache stays with the repository's .mypy_cache (git-ignored), so a rerun is fast
            "mypy": [
                sys.executable,
                "-m",
                "mypy",
                "--config-file",
                str(CONFIG),
                "--cache-dir",
                str(REPO / ".mypy_cache"),
                "-p",
                "tpsim",
            ],
            "imports": [sys.executable, "-c", LINT_IMPORTS, str(CONFIG)],
        }
        failed = [name for name in wanted if run(name, commands[name], tree, copied) != 0]
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
