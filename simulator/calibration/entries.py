"""The pieces every reader of the calibration data files builds on.

Every constant in the files is an entry ``{value: ..., source: "..."}``: a number (or an exact
ratio written ``a/b``, as NCCL's tuning code writes them), a table of them, and where it
comes from. Units are those of the file's key (``_us``, ``_GBps``, ``_GiB``); conversion to SI
is exact in decimal (0.35 us is 0.35e-6 s, as the literal). A malformed file is a
:class:`CalibrationError` naming the file, the field and the value.

:func:`read` parses a shipped data file, :func:`entry` takes an entry's value, :func:`number`
and :func:`scale` turn it into SI; :func:`measured` and :func:`tables` name the shipped
measurements and kernel tables. Read by :mod:`tpsim.calibration.loader` and
:mod:`tpsim.calibration.hardware`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from decimal import Decimal
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from tpsim.calibration.bounded import InputError, show


class CalibrationError(InputError):
    """A calibration data file or profile that cannot be read; one line naming the value."""


#: The sizes a calibrated constant can have, in its file's units (seconds to hours, bytes to
#: petabytes, FLOP/s, ratios): a denormal or a 1e297 is a typo or an attack, never a value
#: whose products stay finite.
PHYSICAL = (1e-30, 1e30)


def scale(x: float, exponent: int) -> float:
    """``x * 10**exponent``, exact in decimal (0.35 us -> 0.35e-6 s, like the literal)."""
    return float(Decimal(repr(float(x))).scaleb(exponent))


def number(value: object, field: str) -> float:
    """A finite number, or an exact ratio ``"a/b"`` of two numbers."""
    if isinstance(value, str) and value.count("/") == 1:
        a, b = (number(_float_text(part, field), field) for part in value.split("/"))
        if b == 0:
            raise CalibrationError(f"{field}={value!r}: division by zero")
        return a / b
    huge = isinstance(value, int) and value.bit_length() > 1000  # no float holds it
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or huge
        or not math.isfinite(value)
    ):
        raise CalibrationError(f"{field}={show(value)}: must be a finite number or a ratio a/b")
    if value != 0 and not PHYSICAL[0] <= abs(value) <= PHYSICAL[1]:
        raise CalibrationError(
            f"{field}={show(value)}: outside the physical range of any constant "
            f"({PHYSICAL[0]:g} to {PHYSICAL[1]:g} in size, or 0)"
        )
    return value


def _float_text(text: str, field: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise CalibrationError(f"{field}={text!r}: not a number") from None


def measured(name: str = "") -> Path:
    """A published measurement shipped in ``measured/`` (or the folder itself): the data the
    calibration is checked against, each file with its source in its ``#`` header."""
    return Path(str(resources.files("tpsim.calibration").joinpath("measured", name)))


def tables(name: str = "") -> Path:
    """A measured kernel table shipped in ``tables/`` (or the folder itself): per-operator
    times converted from the files in ``measured/``, each with its sources in its header."""
    return Path(str(resources.files("tpsim.calibration").joinpath("tables", name)))


def read(name: str) -> dict[str, Any]:
    """The parsed data file ``name`` (e.g. ``"nccl.yaml"``) shipped with the package: a copy
    of its own, which the caller may change (an engine profile's overrides are merged into
    it in place)."""
    return copy.deepcopy(_parsed(name))


@cache
def _parsed(name: str) -> dict[str, Any]:
    """A shipped data file parsed once per process (the package's files are not edited
    under tpsim): every engine profile and every candidate of ``tpsim calibrate`` starts
    from all of them, and parsing them (pure-Python YAML, about 0.3 s for the set) had
    been most of the time it took to read a profile."""
    text = resources.files("tpsim.calibration").joinpath("data", name).read_text("utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise CalibrationError(f"{name}: must be a mapping of entries")
    return data


def entry(data: Mapping[str, Any], key: str, where: str) -> Any:
    """The ``value`` of entry ``key``, which must also cite its ``source``."""
    field = f"{where}.{key}"
    item = data.get(key)
    if not isinstance(item, dict) or set(item) != {"value", "source"}:
        raise CalibrationError(f"{field}: must be an entry with a value and a source")
    if not isinstance(item["source"], str) or not item["source"].strip():
        raise CalibrationError(f"{field}.source={item['source']!r}: must say where it comes from")
    return item["value"]


def _table(value: object, field: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise CalibrationError(f"{field}={value!r}: must be a table")
    return value


def _numbers(value: object, field: str, exponent: int = 0) -> dict[str, float]:
    return {
        str(k): scale(number(v, f"{field}.{k}"), exponent)
        if exponent
        else number(v, f"{field}.{k}")
        for k, v in _table(value, field).items()
    }


#: The longest fixed time any entry may give (us): a second per kernel, launch, collective
#: or step's host work is far beyond any engine; more is a slip of units.
MAX_FIXED_US = 1e6


def _nonnegative_us(value: object, field: str) -> float:
    """A time in us, 0 to :data:`MAX_FIXED_US`, in seconds."""
    x = number(value, field)
    if x < 0:
        raise CalibrationError(f"{field}={value!r}: must not be negative")
    if x > MAX_FIXED_US:
        raise CalibrationError(f"{field}={value!r}: more than a second (in us); check the units")
    return scale(x, -6)


def _fields(spec: object, keys: tuple[str, ...], field: str) -> dict[str, Any]:
    """A table with exactly ``keys``."""
    if not isinstance(spec, dict) or set(spec) != set(keys):
        raise CalibrationError(f"{field}: needs exactly {', '.join(keys)}")
    return spec


def _count(value: object, field: str) -> int:
    """A positive whole number."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CalibrationError(f"{field}={value!r}: must be a positive whole number")
    return value


def _flag(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise CalibrationError(f"{field}={value!r}: must be true or false")
    return value
