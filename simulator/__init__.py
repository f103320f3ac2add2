"""tpsim: a discrete-event simulator of a tensor-parallel transformer forward pass.

>>> from tpsim import simulate, Workload
>>> result = simulate("llama-2-7b", "dgx-a100", 2, Workload(batch=1, context_len=128))
>>> result.summary["model_split"]["heads_per_gpu"]
16
"""

if __name__ != "tpsim":  # one name per module
    raise ImportError(f"{__name__}: this folder is tpsim; import tpsim")


from tpsim.core.api import simulate
from tpsim.core.collective_bench import collective_sweep
from tpsim.core.config import Layout, Options, Workload
from tpsim.core.errors import ConfigError
from tpsim.core.records import Record
from tpsim.core.result import Result
from tpsim.core.summary import Summary

__all__ = [
    "ConfigError",
    "Layout",
    "Options",
    "Record",
    "Result",
    "Summary",
    "Workload",
    "collective_sweep",
    "simulate",
]
