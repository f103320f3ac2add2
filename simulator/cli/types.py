"""argparse types shared by the sub-commands."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from tpsim.core.config import parse_tokens
from tpsim.core.errors import ConfigError


def tokens(flag: str) -> Callable[[str], int]:
    """A token count with an optional K/M suffix (``4096``, ``4K``, ``4k``; K = 1024)."""

    def parse(text: str) -> int:
        try:
            return parse_tokens(text, flag)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e).partition("=")[2]) from None

    return parse


def number(low: float, high: float, *, low_open: bool = True) -> Callable[[str], float]:
    """A float flag checked once, as every number read from the command line is: finite,
    not a denormal, within the physical bounds ``(low, high]`` (``[low, high]`` with
    ``low_open=False``). ``--nic-gbps 1e-320`` is refused here, never divided by."""
    shown = f"{'above' if low_open else 'at least'} {low:g} and at most {high:g}"

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number")
        if value != 0 and abs(value) < 1e-30:
            raise argparse.ArgumentTypeError(f"{text!r}: too small to mean anything ({shown})")
        if value < low or (low_open and value == low) or value > high:
            raise argparse.ArgumentTypeError(f"{text!r}: must be {shown}")
        return value

    return parse


_LAYERS = re.compile(r"^\s*(emb|-?\d+)\s*(?:-\s*(emb|-?\d+)\s*)?$", re.IGNORECASE)


def parse_layers(text: str) -> tuple[int, int]:
    """``A-B`` or ``A``: layer indices, the embedding ``-1`` (or ``emb``: ``emb-0``,
    ``-1-0``)."""
    m = _LAYERS.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(f"invalid layers {text!r} (e.g. 0-1, 3 or emb-0)")
    lo, hi = (-1 if x.lower() == "emb" else int(x) for x in (m[1], m[2] or m[1]))
    if hi < lo:
        raise argparse.ArgumentTypeError(f"invalid layers {text!r}: empty range")
    return lo, hi


def parse_gantt_layers(text: str) -> tuple[int, int] | str:
    """``--gantt-layers``: a range as :func:`parse_layers` reads it, or ``all`` (the whole
    step, no layers collapsed)."""
    if text.strip().lower() == "all":
        return "all"
    return parse_layers(text)


def check_gantt_layers(layers: tuple[int, int] | str | None, last: int) -> None:
    """Refuse a ``--gantt-layers`` range that holds none of a model's layers -1 (the
    embedding) to ``last`` (the head), naming the flag and the range."""
    if isinstance(layers, tuple):
        lo, hi = layers
        if lo > last or hi < -1:
            raise ConfigError(f"--gantt-layers={lo}-{hi}: the model has layers -1 to {last}")


_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str) -> int:
    """Bytes from ``8``, ``8K``, ``1M``, ``16G`` (binary multiples, as nccl-tests reads them)."""
    t = text.strip().upper().removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    number = t[: len(t) - len(unit)]
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (e.g. 8, 64K, 1M, 16G)") from None
    if not 1 <= value <= 1 << 50 or value != int(value):  # also NaN and infinities
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: a whole number of bytes >= 1")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    sizes = [parse_size(s) for s in text.split(",") if s.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError(f"invalid sizes {text!r}: give at least one (e.g. 8K,1M)")
    return sizes


def parse_ranks(text: str) -> list[int]:
    try:
        ranks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid ranks {text!r} (e.g. 0,1,7)") from None
    if not ranks or min(ranks) < 0:
        raise argparse.ArgumentTypeError(f"invalid ranks {text!r}: non-negative integers")
    return ranks


def parse_counts(text: str) -> tuple[int, ...]:
    """``--pp-layers 40,40``: positive integers, comma separated."""
    try:
        out = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: want counts like 40,40") from None
    if any(n < 1 for n in out):
        raise argparse.ArgumentTypeError(f"{text!r}: every stage needs at least one layer")
    return out
