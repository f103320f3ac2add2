"""How an option's value is checked, from a flag (text) or a YAML grid (typed): each check
returns the value, read and bounded, or raises :class:`~tpsim.core.errors.ConfigError` with
one line naming the field and the value (:data:`tpsim.core.run_options.RUN_OPTIONS` says
which option takes which)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tpsim import calibration
from tpsim.calibration.bounded import show
from tpsim.core.config import parse_tokens
from tpsim.core.errors import ConfigError


def name_check(kind: str) -> Callable[[object], str]:
    """A model or topology name (or file); catalog names are lower-cased."""

    def check(value: object) -> str:
        from tpsim.models.catalog import MODELS, get_model
        from tpsim.topologies.builders import TOPOLOGIES
        from tpsim.topologies.io import get_topology

        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{kind}={show(value)}: must be a catalog name or a path")
        if kind == "model":
            get_model(value)
            known: Iterable[str] = MODELS
        else:
            get_topology(value)
            known = TOPOLOGIES
        return value.strip().lower() if value.strip().lower() in set(known) else value

    return check


def int_check(field: str, lo: int, hi: int | None = None) -> Callable[[object], int]:
    def check(value: object) -> int:
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ConfigError(f"{field}={show(value)}: must be an integer") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{field}={show(value)}: must be an integer")
        if hi is None and value < lo:
            raise ConfigError(f"{field}={show(value)}: must be a positive integer")
        if hi is not None and not lo <= value <= hi:
            raise ConfigError(f"{field}={show(value)}: must be an integer in {lo}..{hi}")
        return value

    return check


def float_check(field: str, lo: float, hi: float) -> Callable[[object], float]:
    def check(value: object) -> float:
        try:
            v = float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ConfigError(f"{field}={show(value)}: must be a number") from None
        if isinstance(value, bool) or not lo <= v <= hi:  # NaN fails too
            raise ConfigError(f"{field}={show(value)}: must be a number in {lo:g}..{hi:g}")
        return v

    return check


def choice_check(
    field: str, allowed: tuple[str, ...], optional: bool = False
) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if optional and value in (None, "", "auto", "model"):
            return None
        if value not in allowed:
            raise ConfigError(f"{field}={show(value)}: must be one of {', '.join(allowed)}")
        return str(value)

    return check


def engine_check(value: object) -> str:
    """An engine profile: a shipped name or a profile file (loaded once here to check it)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"engine={show(value)}: must name an engine or a profile file")
    try:
        calibration.profile(value.strip())
    except calibration.CalibrationError as e:
        raise ConfigError(str(e)) from None
    return value.strip()


def bool_check(field: str) -> Callable[[object], bool]:
    words = {"true": True, "on": True, "yes": True, "false": False, "off": False, "no": False}

    def check(value: object) -> bool:
        if isinstance(value, str) and value.strip().lower() in words:
            return words[value.strip().lower()]
        if not isinstance(value, bool):
            raise ConfigError(f"{field}={show(value)}: must be true or false")
        return value

    return check


def via_check(
    field: str, make: Callable[[int], object], positive: bool = True
) -> Callable[[object], int]:
    """An integer the config dataclasses check themselves (their message names the field),
    refused here first unless positive (``positive=False``: the dataclass alone says which
    values it takes); token lengths as text may carry a K/M suffix (4K = 4096)."""
    as_int = int_check(field, 1 if positive else -(2**63))

    def check(value: object) -> int:
        if isinstance(value, str) and field.endswith("_len"):
            value = parse_tokens(value, field)
        v = as_int(value)
        make(v)
        return v

    return check


def text_check(field: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{field}={show(value)}: must be a non-empty text")
        return value.strip()

    return check


def counts_check(field: str) -> Callable[[object], tuple[int, ...]]:
    def check(value: object) -> tuple[int, ...]:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{field}={show(value)}: must be counts like 40,40")
        return tuple(int_check(field, 1)(v) for v in items)

    return check


__all__ = [
    "bool_check",
    "choice_check",
    "counts_check",
    "engine_check",
    "float_check",
    "int_check",
    "name_check",
    "text_check",
    "via_check",
]
