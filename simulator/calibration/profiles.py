"""Engine profiles: variants of the calibration as YAML overrides of its data files.

A profile (``engines/NAME.yaml`` shipped with the package, or any file) has a ``name``, an
``about`` line, an optional ``extends`` (another profile, applied first) and ``overrides``:
per data file, entries ``{value, source}`` that replace the shipped ones (a table replaces
only the rows it names). :func:`profile` builds its :class:`Calibration`; :func:`for_options`
is what a run uses, the profile's or its first-principles variant (``--ideal``).
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from tpsim.calibration.bounded import (
    ReadRefused,
    UniqueKeyLoader,
    did_you_mean,
    read_text,
    shorten,
    show,
    squash,
    yaml_load,
)
from tpsim.calibration.loader import FILES, CalibrationError, build, default, read_all
from tpsim.calibration.model import Calibration


def is_entry(node: object) -> bool:
    return isinstance(node, dict) and set(node) == {"value", "source"}


def merge(base: dict[str, Any], overrides: Mapping[str, Any], where: str) -> None:
    """Put ``overrides`` (a nested mapping whose leaves are ``{value, source}`` entries) into
    ``base`` in place. Every path must exist in ``base``; a table replaces only the rows it
    names; each replaced entry keeps the override's source."""
    for key, new in overrides.items():
        field = f"{where}.{key}"
        if not isinstance(base, dict) or key not in base:
            raise CalibrationError(f"{field}: unknown calibration entry")
        old = base[key]
        if is_entry(old):
            if not is_entry(new):
                raise CalibrationError(f"{field}: must be an entry with a value and a source")
            value = new["value"]
            if isinstance(old["value"], dict) and isinstance(value, dict):
                value = {**old["value"], **value}
            base[key] = {"value": value, "source": new["source"]}
        elif isinstance(new, dict) and not is_entry(new):
            merge(old, new, field)
        else:
            raise CalibrationError(f"{field}: is a group of entries, not one entry")


#: Folder of the shipped engine profiles (``--engine NAME``).
ENGINES = "engines"
#: How deep ``extends`` may chain (a profile extending itself would never end).
MAX_EXTENDS = 8


def engines() -> list[str]:
    """The shipped engine profiles, by name (``ideal`` first; fragments starting with ``_``
    are for ``extends`` only)."""
    folder = resources.files("tpsim.calibration").joinpath(ENGINES)
    names = sorted(
        f.name.removesuffix(".yaml")
        for f in folder.iterdir()
        if f.name.endswith(".yaml") and not f.name.startswith("_")
    )
    return ["ideal", *(n for n in names if n != "ideal")]


#: Other names people give the shipped engines (compared without case or punctuation).
ALIASES = {
    "tensorrt-llm": "trtllm",
    "trt-llm": "trtllm",
    "vllm-v1": "vllm",
    "faster-transformer": "fastertransformer",
    "ft": "fastertransformer",
    "sglang-srt": "sglang",
}


def is_profile_file(name_or_path: str) -> bool:
    """Whether ``--engine`` names a profile file rather than a shipped engine."""
    return "/" in name_or_path or name_or_path.endswith((".yaml", ".yml"))


def canonical(name_or_path: str) -> str:
    """The shipped engine a name means, whatever its case or punctuation (``vLLM``,
    ``TensorRT-LLM``, ``gpt_fast``); a profile file's path, or an unknown name, unchanged
    (an unknown name is refused where the profile is read, with the known ones)."""
    if not isinstance(name_or_path, str) or is_profile_file(name_or_path):
        return name_or_path
    known = {squash(n): n for n in engines()}
    known.update({squash(a): n for a, n in ALIASES.items()})
    return known.get(squash(name_or_path), name_or_path)


def _profile_text(name_or_path: str) -> tuple[str, str]:
    """(the profile's text, where it comes from) for a shipped name or a file path."""
    if len(name_or_path) > 1000:
        raise CalibrationError(f"engine={show(name_or_path)}: name too long")
    folder = resources.files("tpsim.calibration").joinpath(ENGINES)
    shipped = folder.joinpath(f"{name_or_path}.yaml")
    if not is_profile_file(name_or_path):
        try:
            found = shipped.is_file()
        except OSError:  # a name longer than the file system allows
            found = False
        if not found:
            hint = did_you_mean(squash(name_or_path), engines())
            raise CalibrationError(
                f"engine={name_or_path!r}: unknown engine{hint}; known: {', '.join(engines())} "
                "(or a profile file .yaml)"
            )
        return shipped.read_text("utf-8"), f"engines/{name_or_path}.yaml"
    path = Path(name_or_path)
    if not path.exists():
        raise CalibrationError(f"engine={show(name_or_path)}: no such profile file")
    try:  # bounded: a regular file of at most 1 MB, UTF-8
        return read_text(path, 10**6), str(path)
    except ReadRefused as e:
        raise CalibrationError(f"engine={show(name_or_path)}: {e}") from None


PROFILE_KEYS = ("name", "about", "extends", "overrides")


def about(name_or_path: str) -> str:
    """What an engine profile models, in its own words (its ``about``)."""
    data = yaml.safe_load(_profile_text(name_or_path)[0])
    return str(data.get("about", "")).strip() if isinstance(data, dict) else ""


def _parsed(text: str) -> Any:
    """A profile's text parsed (bounded, unique keys): a copy of its own, the parse kept for
    the texts read last. A profile is read several times a run (its ``extends`` chain, each
    data file it overrides, the scheduler check), and ``tpsim calibrate`` reads each shipped
    base again under every candidate it writes."""
    return copy.deepcopy(_parsed_once(text))


@functools.lru_cache(maxsize=64)
def _parsed_once(text: str) -> Any:
    return yaml_load(text, UniqueKeyLoader, max_nodes=100_000)


def _overrides(
    name_or_path: str, depth: int = 0, seen: tuple[str, ...] = ()
) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """The profile's name and its overrides, those of what it extends first (``seen``: the
    files extending it, resolved, to name a loop)."""
    if depth > MAX_EXTENDS:
        raise CalibrationError(f"engine={name_or_path!r}: extends more than {MAX_EXTENDS} deep")
    here = str(Path(name_or_path).resolve()) if is_profile_file(name_or_path) else name_or_path
    if here in seen:
        loop = " -> ".join(Path(f).name for f in (*seen[seen.index(here) :], here))
        raise CalibrationError(f"engine={show(name_or_path)}: extends itself ({loop})")
    text, where = _profile_text(name_or_path)
    try:
        data = _parsed(text)
    except (ReadRefused, ValueError) as e:  # aliases past the bound, a 5000-digit number
        raise CalibrationError(f"{where}: {shorten(str(e))}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise CalibrationError(f"{where}{line}: not valid YAML") from None
    if not isinstance(data, dict):
        raise CalibrationError(f"{where}: must be a mapping with name, about, overrides")
    for key in data:
        if key not in PROFILE_KEYS:
            raise CalibrationError(f"{where}: {key}: unknown key; keys: {', '.join(PROFILE_KEYS)}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        raise CalibrationError(
            f"{where}: name={shorten(repr(name), 60)}: must be a non-empty string on one line "
            "(no control characters)"
        )
    if not isinstance(data.get("about", ""), str):
        raise CalibrationError(f"{where}: about={shorten(repr(data['about']), 60)}: must be text")
    chain: list[tuple[str, dict[str, Any]]] = []
    if "extends" in data:
        base = data["extends"]
        if not isinstance(base, str):
            raise CalibrationError(f"{where}: extends={base!r}: must name a profile")
        if is_profile_file(base) and not Path(base).is_absolute() and is_profile_file(where):
            # a relative path is the profile's own neighbour, wherever tpsim runs from
            base = str(Path(where).parent / base)
        chain = _overrides(base, depth + 1, (*seen, here))[1]
    overrides = data.get("overrides", {})
    if not isinstance(overrides, dict):
        raise CalibrationError(f"{where}: overrides must be a mapping of data files")
    for file in overrides:
        if file not in FILES:
            raise CalibrationError(
                f"{where}: overrides.{file}: unknown data file; one of {', '.join(FILES)}"
            )
    chain.append((where, overrides))
    return name, chain


def chain_files(name_or_path: str) -> list[Path]:
    """The profile files a profile reads: itself and those its ``extends`` chain names
    (shipped profiles are no files of the user's and are left out)."""
    return [Path(w) for w, _ in _overrides(name_or_path)[1] if Path(w).is_file()]


def _stamp(files: tuple[str, ...]) -> tuple[tuple[int, int], ...] | None:
    """Each file's modification time and size (None when one cannot be read)."""
    try:
        return tuple((st.st_mtime_ns, st.st_size) for st in map(os.stat, files))
    except OSError:
        return None


def by_file(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Cache ``fn(name_or_path, *rest)`` by the profile's resolved path and the files its
    ``extends`` chain read, as they are now: a profile file edited, or a relative path
    meaning another file from another folder, is read again (a bare ``@cache`` by the
    path's text kept the first for the life of the process)."""
    store: dict[tuple[Any, ...], tuple[tuple[str, ...], Any, Any]] = {}

    @functools.wraps(fn)
    def cached(name_or_path: str, *rest: Any) -> Any:
        file = is_profile_file(name_or_path)
        key = (str(Path(name_or_path).resolve()) if file else name_or_path, *rest)
        hit = store.get(key)
        if hit is not None and (not hit[0] or _stamp(hit[0]) == hit[1]):
            return hit[2]
        # the files of the chain (a shipped profile is not edited under tpsim)
        files = tuple(str(w.resolve()) for w in chain_files(name_or_path)) if file else ()
        stamps = _stamp(files)
        value = fn(name_or_path, *rest)
        if stamps is not None:
            store[key] = (files, stamps, value)
        return value

    cached.cache_clear = store.clear  # type: ignore[attr-defined]  # as functools.cache's
    return cached


@by_file
def profile(name_or_path: str) -> Calibration:
    """The calibration of an engine profile: the shipped data with the profile's overrides
    (and those of the profiles it ``extends``) put in. ``ideal`` is the data unchanged."""
    if name_or_path == "ideal":
        return default()
    name, chain = _overrides(name_or_path)
    data = read_all()
    for where, overrides in chain:
        for file, entries in overrides.items():
            merge(data[file], entries, f"{where}: overrides.{file}")
    try:
        return build(data, f"engine {name}", name)
    except CalibrationError as e:  # a value of the profile's: name the profile, not the data
        raise CalibrationError(f"engine={show(name_or_path)}: {e}") from None


@by_file
def merged_file(name_or_path: str, file: str) -> dict[str, Any]:
    """One data file (``scheduler``: what ``tpsim serve`` reads) with the profile's overrides
    (and those of what it extends) put in; ``ideal`` is the file unchanged."""
    data = read_all()[file]
    if name_or_path != "ideal":
        for where, overrides in _overrides(name_or_path)[1]:
            if file in overrides:
                merge(data, overrides[file], f"{where}: overrides.{file}")
    return data


def ideal(engine: str = "ideal") -> Calibration:
    """The first-principles variant of an engine's calibration (``--ideal``)."""
    return _ideal(engine)


@by_file
def _ideal(engine: str) -> Calibration:
    return profile(engine).ideal()


def for_options(ideal_mode: bool, engine: str = "ideal", synchronous: bool = False) -> Calibration:
    """The calibration a run uses: the engine profile's, or its first-principles variant;
    ``synchronous``: the engine with its asynchronous scheduling off
    (:meth:`~tpsim.calibration.model.Engine.synchronous`)."""
    if ideal_mode:
        return ideal(engine)
    return _synchronous(engine) if synchronous else profile(engine)


@by_file
def _synchronous(engine: str) -> Calibration:
    c = profile(engine)
    return replace(c, engine=c.engine.synchronous())
