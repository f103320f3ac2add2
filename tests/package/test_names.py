"""No two public classes of tpsim share a name: each says what it is (``GridPoint``,
``MeasuredPoint``, ``KernelCase``...), so that a name read anywhere (a traceback, a type hint,
the docs) means one thing. The top-level API's names (``tpsim.Layout``...) are among them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections import defaultdict

import tpsim


def public_classes(packages: list[str]) -> dict[str, list[str]]:
    """Every public class defined in a tpsim module (not imported into it): name -> where.

    Each package's own modules, package by package (pyproject's list): from the editable
    install a package's __path__ is its own folder alone, without the folders package-dir
    maps under it, so a recursive walk would miss tpsim.models, tpsim.experiments...
    """
    where: dict[str, list[str]] = defaultdict(list)
    modules = []
    for package in packages:
        modules.append(package)
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
            if not info.ispkg and info.name != "__main__":  # running __main__ is the CLI
                modules.append(f"{package}.{info.name}")
    for name in modules:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if attr.startswith("_") or not inspect.isclass(value):
                continue
            if value.__module__ == name:
                where[attr].append(name)
    return where


def test_no_two_public_classes_share_a_name(pyproject: dict) -> None:
    where = public_classes(pyproject["tool"]["setuptools"]["packages"])
    assert len(where) > 50  # the walk reached the sub-packages
    assert {"GridPoint", "MeasuredPoint", "KernelCase", "Layout", "StudyEntry"} <= set(where)
    shared = {name: mods for name, mods in where.items() if len(mods) > 1}
    assert shared == {}


def test_the_top_level_names_are_the_public_api() -> None:
    from tpsim.core.config import Layout

    assert tpsim.Layout is Layout  # the user-facing parallel layout keeps its name
