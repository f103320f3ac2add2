"""Calibration: every published or fitted constant of the cost models, as data with sources.

The lowest layer of tpsim: YAML files in ``data/`` (each value with its source) are read into
one frozen :class:`Calibration` (kernels, launch costs, NCCL tuning, link efficiencies,
memory reserve) and into the hardware figures the topology catalog is built from.
``--ideal`` is :meth:`Calibration.ideal`; engine profiles are further variants of the same
object. ``measured/`` holds the published measurements the calibration is checked against.
"""

from tpsim.calibration.commented_csv import csv_rows
from tpsim.calibration.entries import CalibrationError, measured, tables
from tpsim.calibration.loader import default
from tpsim.calibration.model import Calibration, Engine, HostCost, LaunchCost, Links, Memory
from tpsim.calibration.model_collectives import Collectives, Launcher
from tpsim.calibration.model_kernels import Kernels, TileShape
from tpsim.calibration.model_protocols import Protocol
from tpsim.calibration.profiles import engines, for_options, ideal, profile

__all__ = [
    "Calibration",
    "CalibrationError",
    "Collectives",
    "Engine",
    "HostCost",
    "Kernels",
    "LaunchCost",
    "Launcher",
    "Links",
    "Memory",
    "Protocol",
    "TileShape",
    "csv_rows",
    "default",
    "engines",
    "for_options",
    "ideal",
    "measured",
    "profile",
    "tables",
]
