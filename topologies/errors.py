"""The one exception type of the topologies package."""

from __future__ import annotations

import reprlib

from tpsim.calibration.bounded import InputError, did_you_mean

__all__ = ["TopologyError", "did_you_mean", "field_error", "show"]


class TopologyError(InputError):
    """Bad topology input: ONE line naming the field and value, e.g.
    "links[2].bandwidth_GBps=-5 in ring.yaml: must be a positive finite number"."""


# Containers are rendered with bounded depth and width: a YAML alias bomb (billion laughs)
# is a small tree of shared lists whose plain str() would take exponential time and memory.
_BOUNDED = reprlib.Repr()
_BOUNDED.maxlevel, _BOUNDED.maxlist, _BOUNDED.maxtuple = 3, 8, 8
_BOUNDED.maxdict, _BOUNDED.maxset, _BOUNDED.maxstring = 8, 8, 60


def show(value: object, limit: int = 60) -> str:
    """A short one-line rendering of a bad value for an error message."""
    if isinstance(value, str):
        text = repr(value[: limit + 1])
    elif isinstance(value, list | tuple | dict | set | frozenset):
        text = _BOUNDED.repr(value)
    else:
        text = str(value)
    text = " ".join(text.split())  # never more than one line
    return text if len(text) <= limit else text[: limit - 3] + "..."


_MISSING = object()


def field_error(field: str, file: str, msg: str, value: object = _MISSING) -> TopologyError:
    """The error of a topology file's ``field`` (with its ``value``, where given) in ``file``."""
    shown = "" if value is _MISSING else f"={show(value)}"
    return TopologyError(f"{field}{shown} in {file}: {msg}")
