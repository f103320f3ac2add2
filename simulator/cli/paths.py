"""Checks of an output file named on the command line, before anything is simulated."""

from __future__ import annotations

import os
from pathlib import Path

from tpsim.core.errors import ConfigError


def check_output(path: Path | None, flag: str, suffixes: tuple[str, ...]) -> None:
    if path is None:
        return
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
