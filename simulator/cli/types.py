"""argparse types shared by the sub-commands."""

from __future__ import annotations

import argparse
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


def parse_layers(text: str) -> tuple[int, int]:
    a, sep, b = text.strip().partition("-") if not text.startswith("-") else (text, "", "")
    try:
        lo = int(a)
        hi = int(b) if sep else lo
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid layers {text!r} (e.g. 0-1 or 3)") from None
    if hi < lo:
        raise argparse.ArgumentTypeError(f"invalid layers {text!r}: empty range")
    return lo, hi
