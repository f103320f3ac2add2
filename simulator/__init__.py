"""tpsim: a discrete-event simulator of a tensor-parallel transformer forward pass.

>>> from tpsim import simulate, Workload
>>> result = simulate("llama-2-7b", "dgx-a100", 2, Workload(batch=1, context_len=128))
>>> result.summary["model_split"]["heads_per_gpu"]
16
"""

if __name__ != "tpsim":  # one name per module
    import sys as _sys

    if __name__ == "simulator" and _sys.argv[:1] == ["-m"]:  # `python -m simulator`
        import importlib as _importlib  # in the repository's root: the installed tpsim's CLI

        _sys.exit(_importlib.import_module("tpsim.cli").main())
    raise ImportError(f"{__name__}: this folder is tpsim; import tpsim")

import sys as _sys
from types import TracebackType as _TracebackType


def _out_of_memory_at_import(
    kind: type[BaseException], exc: BaseException, tb: _TracebackType | None
) -> None:
    """A ``MemoryError`` raised while tpsim's modules were being imported (the ``tpsim``
    command starting on a machine without free memory) ends in one line, exit 1, not a
    traceback; any other uncaught exception goes to the hook that was there before."""
    frames, at = [], tb
    while at is not None:
        frames.append(at.tb_frame)
        at = at.tb_next
    importing = any(
        f.f_code.co_name == "<module>" and str(f.f_globals.get("__name__", "")).startswith("tpsim")
        for f in frames
    )
    if issubclass(kind, MemoryError) and importing:
        print("tpsim: error: out of memory while starting (importing tpsim)", file=_sys.stderr)
        return
    _previous_hook(kind, exc, tb)


_previous_hook = _sys.excepthook
_sys.excepthook = _out_of_memory_at_import


from tpsim.core.api import simulate  # noqa: E402 (the hook above first)
from tpsim.core.collective_bench import collective_sweep  # noqa: E402 (the hook above first)
from tpsim.core.config import Layout, Options, Workload  # noqa: E402 (the hook above first)
from tpsim.core.errors import ConfigError, InputError  # noqa: E402 (the hook above first)
from tpsim.core.records import Record  # noqa: E402 (the hook above first)
from tpsim.core.result import Result  # noqa: E402 (the hook above first)
from tpsim.core.summary import Summary  # noqa: E402 (the hook above first)

__all__ = [
    "ConfigError",
    "InputError",
    "Layout",
    "Options",
    "Record",
    "Result",
    "Summary",
    "Workload",
    "collective_sweep",
    "simulate",
]
