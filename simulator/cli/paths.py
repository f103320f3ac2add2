"""Checks of an output file named on the command line, before anything is simulated."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tpsim.core.errors import ConfigError

#: The flags whose values name files a command reads (a catalog name is no file).
INPUT_FLAGS = ("model", "topology", "kernel_table", "engine", "results", "measurements", "grid")


def input_files(args: argparse.Namespace | None) -> list[tuple[str, Path]]:
    """(flag, file) for every file a command's flags name that exists: a model's folder
    stands for its config.json, comma-separated lists for each of their parts."""
    found: list[tuple[str, Path]] = []
    for name in INPUT_FLAGS:
        value = getattr(args, name, None)
        values = value if isinstance(value, list | tuple) else [value]
        for v in values:
            if v is None:
                continue
            for part in str(v).split(",") if isinstance(v, str) else [str(v)]:
                path = Path(part.strip())
                try:
                    if path.is_dir():
                        path = path / "config.json"
                    if path.is_file():
                        found.append(("--" + name.replace("_", "-"), path))
                except (OSError, ValueError):  # a name too long, a NUL: no file it could be
                    continue
    return found


def check_not_an_input(path: Path, flag: str, args: argparse.Namespace | None) -> None:
    """Refuse an output that is one of the command's inputs (it would be overwritten)."""
    for in_flag, source in input_files(args):
        try:
            same = path.exists() and os.path.samefile(path, source)
        except OSError:
            same = False
        if same:
            raise ConfigError(
                f"{flag}={path}: is the {in_flag} file this command reads; write it elsewhere"
            )


def check_output(
    path: Path | None,
    flag: str,
    suffixes: tuple[str, ...],
    args: argparse.Namespace | None = None,
) -> None:
    """Refuse, before anything runs, an output file that could not be written whole or that
    would overwrite one of the command's inputs (``args``: the parsed flags)."""
    if path is None:
        return
    check_not_an_input(path, flag, args)
    if path.suffix.lower() not in suffixes:
        raise ConfigError(f"{flag}={path}: must end in {' or '.join(suffixes)}")
    if not path.parent.is_dir():
        raise ConfigError(f"{flag}={path}: folder {path.parent} does not exist")
    # room for the temporary name the atomic write uses beside it (".NAME.<12 hex>.tmp")
    if len(os.fsencode(path.name)) + 18 > _name_max(path.parent):
        raise ConfigError(f"{flag}={str(path)[:60]}...: file name too long")
    if path.is_dir():
        raise ConfigError(f"{flag}={path}: is a folder, not a file")
    if not os.access(path.parent, os.W_OK):
        raise ConfigError(f"{flag}={path}: folder {path.parent} is not writable")


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255
