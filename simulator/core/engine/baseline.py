"""The floor ``tpsim bench`` measures the engine against: bare SimPy's rate of timeout
events on this machine (kept in the engine, the one package that imports SimPy)."""

from __future__ import annotations

import time
from typing import Any

import simpy


def bare_simpy_rate(n: int = 400_000) -> float:
    """Timeout events per second of one SimPy process doing nothing else."""
    env = simpy.Environment()

    def proc(env: simpy.Environment) -> Any:
        for _ in range(n):
            yield env.timeout(1)

    env.process(proc(env))
    t = time.perf_counter()
    env.run()
    return n / (time.perf_counter() - t)
