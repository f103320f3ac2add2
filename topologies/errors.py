"""The one exception type of the topologies package."""

from __future__ import annotations

import difflib

__all__ = ["TopologyError", "did_you_mean", "show"]


class TopologyError(ValueError):
    """Bad topology input: ONE line naming the field and value, e.g.
    "links[2].bandwidth_GBps=-5 in ring.yaml: must be a positive finite number"."""


def show(value: object, limit: int = 60) -> str:
    """A short one-line rendering of a bad value for an error message."""
    text = repr(value) if isinstance(value, str) else str(value)
    text = " ".join(text.split())  # never more than one line
    return text if len(text) <= limit else text[: limit - 3] + "..."


def did_you_mean(word: object, choices: list[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    close = difflib.get_close_matches(str(word), choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
