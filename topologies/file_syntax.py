"""Topology files' text: the bounded read and the JSON or YAML parse, before any schema.

Nesting is limited and duplicate keys are refused before a tree is built (YAML's event
stream is walked first); every error is a one-line TopologyError naming the file, and for a
syntax error the line and column. :mod:`tpsim.topologies.io` reads files through here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from tpsim.calibration.bounded import ReadRefused, read_text, yaml_load
from tpsim.topologies.errors import TopologyError, show
from tpsim.topologies.errors import field_error as _err

MAX_FILE_BYTES = 10 * 10**6
MAX_DEPTH = 50


def _read_text(path: Path, file: str) -> str:
    try:
        return read_text(path, MAX_FILE_BYTES)
    except ReadRefused as e:
        raise TopologyError(f"topology file {file}: {e}") from None


_JSON_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def _parse_json(text: str, file: str) -> Any:
    depth = 0
    for m in _BRACKETS.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_DEPTH:
            raise _err("file", file, f"nested deeper than {MAX_DEPTH} levels")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise _err(f"key {key!r}", file, "duplicate key in a JSON object")
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as e:
        raise TopologyError(
            f"JSON syntax error in {file} at line {e.lineno}, column {e.colno}: {e.msg}"
        ) from None
    except TopologyError:
        raise
    except ValueError as e:  # an integer literal past Python's 4300-digit limit
        raise _err("file", file, f"unreadable number ({show(str(e))})") from None


def _yaml_error(e: yaml.YAMLError, file: str) -> TopologyError:
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(e, "problem", None) or str(e)
    return TopologyError(f"YAML syntax error in {file}{where}: {' '.join(problem.split())}")


def _scan_yaml(text: str, file: str) -> None:
    """Walk the event stream (no tree is built): limit nesting, reject duplicate keys."""
    stack: list[list[Any]] = []  # [is_mapping, expecting_key, seen keys]

    def finished(key: object, line: int) -> None:
        if stack and stack[-1][0]:
            frame = stack[-1]
            if frame[1] and key is not None:
                if key in frame[2]:
                    raise _err(f"key {key!r}", file, f"duplicate key at line {line + 1}")
                frame[2].add(key)
            frame[1] = not frame[1]

    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            stack.append([isinstance(ev, yaml.MappingStartEvent), True, set()])
            if len(stack) > MAX_DEPTH:
                raise _err("file", file, f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(ev, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            stack.pop()
            finished(None, ev.start_mark.line)
        elif isinstance(ev, yaml.ScalarEvent | yaml.AliasEvent):
            finished(getattr(ev, "value", None), ev.start_mark.line)


def _parse(text: str, path: Path, file: str) -> Any:
    suffix = path.suffix.lower()
    looks_json = text.strip()[:1] in ("{", "[")
    if suffix == ".json" or (suffix not in (".yaml", ".yml") and looks_json):
        return _parse_json(text, file)
    try:
        _scan_yaml(text, file)  # before building any tree
        return yaml_load(text, max_depth=MAX_DEPTH)  # safe: no tag is ever evaluated
    except ReadRefused as e:
        raise _err("file", file, str(e)) from None
    except yaml.YAMLError as e:
        raise _yaml_error(e, file) from None
    except TopologyError:
        raise
    except ValueError as e:  # an integer literal past Python's 4300-digit limit
        raise _err("file", file, f"unreadable number ({show(str(e))})") from None
