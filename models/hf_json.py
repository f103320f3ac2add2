"""Reading a Hugging Face ``config.json`` file strictly, before any field is read: its size
and encoding, valid JSON, no key given twice and no NaN or Infinity (which Python's json
accepts and JSON does not), a JSON object at the top level; and the model's name it implies.
Every refusal is a ModelError with a one-line message naming the file (and the key).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tpsim.calibration.bounded import ReadRefused, read_text, shorten
from tpsim.models.errors import ModelError
from tpsim.models.hf_reader import show, where_of

#: A config.json is a few KB; anything above this is not one (and is not read into memory).
MAX_CONFIG_BYTES = 10 * 10**6


class _NonFinite:
    """Stands in for NaN, Infinity or -Infinity, which Python's json accepts and JSON does not."""

    def __init__(self, token: str) -> None:
        self.token = token


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict, refusing a key given twice (Python's json keeps the last)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _key(name: str) -> str:
    return name if name.isprintable() and len(name) <= 60 else show(name)


def _find_non_finite(cfg: Any) -> tuple[str, str] | None:
    """(key path, token) of the first NaN/Infinity in a parsed document, else None."""
    stack: list[tuple[str, Any]] = [("", cfg)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, _NonFinite):
            return key or "value", value.token
        if isinstance(value, dict):
            items = [(f"{key}.{_key(k)}" if key else _key(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed(items))
    return None


def read_config_json(file: Path) -> dict[str, Any]:
    """The JSON object in the config file ``file`` (refused: see the module's docstring)."""
    where = where_of(file)
    try:
        text = read_text(file, MAX_CONFIG_BYTES, bom=False)
    except ReadRefused as exc:
        reason = str(exc)
        if reason.startswith("larger than"):
            reason += "; not a config.json"
        head = where if reason.startswith(("larger", "not UTF-8")) else f"model={show(str(file))}"
        raise ModelError(f"{head}: {reason}") from None
    try:
        cfg = json.loads(text, parse_constant=_NonFinite, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ModelError(
            f"{_key(exc.key)} in {where}: given twice (JSON readers disagree on which wins)"
        ) from None
    except json.JSONDecodeError as exc:
        raise ModelError(
            f"{where}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:  # e.g. an integer with too many digits
        raise ModelError(f"{where}: not valid JSON: {str(exc)[:80]}") from None
    except RecursionError:
        raise ModelError(f"{where}: not valid JSON: nested too deeply") from None
    bad = _find_non_finite(cfg)
    if bad is not None:
        key, token = bad
        raise ModelError(f"{key}={token} in {where}: not a finite number (JSON has no {token})")
    if not isinstance(cfg, dict):
        raise ModelError(f"{where}: top level must be a JSON object, got {type(cfg).__name__}")
    return cfg


def model_name(cfg: Any, path: Path) -> str:
    """``_name_or_path``'s last component, else the folder of a config.json, else the stem."""
    if isinstance(cfg, dict):
        hinted = cfg.get("_name_or_path")
        if isinstance(hinted, str):
            last = hinted.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].strip()
            if last:  # control characters escaped: the name is printed to a terminal
                return shorten(last, 80)
    if path.name == "config.json" and path.parent.name:
        return path.parent.name
    return path.stem or "model"
