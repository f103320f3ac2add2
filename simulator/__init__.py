"""tpsim: a discrete-event simulator of a tensor-parallel transformer forward pass.

>>> from simulator import simulate, Workload
>>> result = simulate("llama-2-7b", "dgx-a100", 2, Workload(batch=1, context_len=128))
>>> result.summary["model_split"]["heads_per_gpu"]
16
"""

from simulator.api import Result, simulate
from simulator.collective_sweep import collective_sweep
from simulator.config import Layout, Options, Workload
from simulator.errors import ConfigError
from simulator.records import Record

__all__ = [
    "ConfigError",
    "Layout",
    "Options",
    "Record",
    "Result",
    "Workload",
    "collective_sweep",
    "simulate",
]
