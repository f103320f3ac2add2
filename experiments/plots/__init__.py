"""Figures: Gantt charts, sweep plots, the regime map, Pareto fronts, and their words.

The only package that imports matplotlib (the import contracts hold it), so matplotlib's
config folder is checked here, once, before any of its modules imports matplotlib."""

import os as _os
import sys as _sys
import tempfile as _tempfile


def _writable_folder(path: str) -> bool:
    try:
        _os.makedirs(path, exist_ok=True)
    except OSError:
        return False
    return _os.path.isdir(path) and _os.access(path, _os.W_OK | _os.X_OK)


def _matplotlib_config() -> None:
    """Before matplotlib is first imported: if its config folder (``MPLCONFIGDIR``, else
    the default under the home folder) cannot be written, point ``MPLCONFIGDIR`` at a folder
    of this user's under the temporary folder, kept between runs (its font cache is built
    once), so matplotlib prints no warning about it on every plot. An error of matplotlib's
    own still shows."""
    if "matplotlib" in _sys.modules:
        return
    given = _os.environ.get("MPLCONFIGDIR")
    if given:
        wanted = [given]
    else:
        home = _os.path.expanduser("~")
        config = _os.environ.get("XDG_CONFIG_HOME") or _os.path.join(home, ".config")
        cache = _os.environ.get("XDG_CACHE_HOME") or _os.path.join(home, ".cache")
        wanted = [_os.path.join(config, "matplotlib"), _os.path.join(cache, "matplotlib")]
    if all(_writable_folder(p) for p in wanted):
        return
    uid = _os.getuid() if hasattr(_os, "getuid") else 0
    ours = _os.path.join(_tempfile.gettempdir(), f"tpsim-matplotlib-{uid}")
    try:
        _os.makedirs(ours, mode=0o700, exist_ok=True)
        st = _os.lstat(ours)
        if st.st_uid != uid or not _os.path.isdir(ours) or _os.path.islink(ours):
            ours = _tempfile.mkdtemp(prefix="tpsim-matplotlib-")
    except OSError:
        return  # no temporary folder either: matplotlib says so itself
    _os.environ["MPLCONFIGDIR"] = ours


_matplotlib_config()
