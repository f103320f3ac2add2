"""Errors that mean "bad input" (exit code 2), as opposed to bugs (exit code 1)."""

from __future__ import annotations

from tpsim.calibration import CalibrationError
from tpsim.calibration.bounded import InputError
from tpsim.models.errors import ModelError
from tpsim.topologies.errors import TopologyError


class ConfigError(InputError):
    """A layout, workload or option the simulator cannot accept; one line naming the value."""


class ProgramError(InputError):
    """Per-rank programs that do not fit together: a receive with no matching send, ranks
    that issue different collectives, a peer that is not another rank."""


#: Every exception type the CLI reports as bad input: one line on stderr, exit code 2.
INPUT_ERRORS: tuple[type[Exception], ...] = (InputError,)

__all__ = [
    "INPUT_ERRORS",
    "CalibrationError",
    "ConfigError",
    "InputError",
    "ModelError",
    "ProgramError",
    "TopologyError",
]
