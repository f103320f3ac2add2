"""The measured points of ``tpsim calibrate`` simulated under candidate parameter values.

Each candidate is a profile file that extends the base exactly as the written profile will
(:func:`tpsim.experiments.calibrate.knobs.profile_yaml`), named after its own content, so a
path always means one calibration (the loader caches profiles by path). Every point is one
``tpsim.simulate`` call; with ``jobs > 1`` the points of a candidate run in worker
processes (forked from a server that has imported tpsim once), which hold the points from
their start and receive only (point index, profile path).
"""

from __future__ import annotations

import hashlib
import signal
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import TracebackType

import numpy as np
from tpsim import calibration
from tpsim.core.api import simulate
from tpsim.core.config import Layout, Options
from tpsim.core.errors import INPUT_ERRORS, ConfigError
from tpsim.experiments.calibrate.knobs import KNOBS, profile_yaml
from tpsim.experiments.calibrate.measurements import MeasuredPoint
from tpsim.experiments.sweep import forkserver
from tpsim.experiments.sweep.pool import quiet_cancel_race
from tpsim.outputs.export import write_text

#: The points a worker process simulates (set once, when the worker starts).
_WORKER_POINTS: list[MeasuredPoint] = []


def _start_worker(points: list[MeasuredPoint]) -> None:
    """Workers leave Ctrl-C to the parent, which stops the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER_POINTS[:] = points


def step_time(point: MeasuredPoint, profile: str) -> float | str:
    """The point's simulated time (s) under the profile file: its step, or its prefill and
    decode steps; or the one-line reason tpsim refuses it."""
    options = Options(
        engine=profile, dtype=point.dtype, allow_oom=True, allreduce_algo=point.allreduce
    )
    layout = Layout(point.tp)
    try:
        t = simulate(point.spec, point.graph, layout, point.workload, options).latency_s
        if point.decode_steps:
            step = simulate(point.spec, point.graph, layout, point.decode, options).latency_s
            t += point.decode_steps * step
        return t
    except INPUT_ERRORS as e:
        return str(e).splitlines()[0]


def fits(point: MeasuredPoint, profile: str) -> bool:
    """Whether every step the point prices (its step, or its prefill and decode step) fits
    its GPUs' memory under the profile: weights, KV cache, activations and the runtime."""
    options = Options(
        engine=profile, dtype=point.dtype, allow_oom=True, allreduce_algo=point.allreduce
    )
    steps = [point.workload, point.decode] if point.decode_steps else [point.workload]
    try:
        return all(
            simulate(point.spec, point.graph, Layout(point.tp), w, options).summary["memory"][
                "fits"
            ]
            for w in steps
        )
    except INPUT_ERRORS:
        return True  # refused for another reason, which the fit names


def _worker_step_time(task: tuple[int, str]) -> float | str:
    return step_time(_WORKER_POINTS[task[0]], task[1])


class Simulator:
    """Predicts the points' step times with every knob at given values (a context manager:
    the worker processes end with it)."""

    def __init__(
        self, points: Sequence[MeasuredPoint], base: str, folder: Path, source: str, jobs: int = 1
    ) -> None:
        self.points, self.base, self.folder, self.source = list(points), base, folder, source
        self.calib = calibration.profile(base)
        self.cache: dict[tuple[float, ...], np.ndarray] = {}
        self.simulations = 0
        self.pool: ProcessPoolExecutor | None = None
        if jobs > 1 and len(self.points) > 1:
            ctx = forkserver.context(["tpsim.experiments.calibrate.simulate"])
            self.pool = ProcessPoolExecutor(
                min(jobs, len(self.points)), ctx, _start_worker, (self.points,)
            )

    def __enter__(self) -> Simulator:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.pool is not None:
            if kind is not None:  # interrupted: the pool's manager thread may race the cancel
                quiet_cancel_race(self.pool)
            self.pool.shutdown(wait=kind is None, cancel_futures=True)

    def predict(self, values: Sequence[float], only: Sequence[int] | None = None) -> np.ndarray:
        """Step times (s) of the points (or of those ``only``), knob ``k`` at ``values[k]``."""
        key = (*values, *(only if only is not None else (-1,)))
        if key in self.cache:
            return self.cache[key]
        entries = [
            (k, v, "candidate")
            for k, v in zip(KNOBS, values, strict=True)
            if v != k.base(self.calib)
        ]
        text = profile_yaml("candidate", "", self.base, self.calib, entries)
        path = self.folder / f"candidate-{hashlib.sha256(text.encode()).hexdigest()[:20]}.yaml"
        if not path.exists():
            write_text(path, text)
        idx = list(range(len(self.points)) if only is None else only)
        if self.pool is not None and len(idx) > 1:
            times = list(self.pool.map(_worker_step_time, [(i, str(path)) for i in idx]))
        else:
            times = [step_time(self.points[i], str(path)) for i in idx]
        self.simulations += len(idx)
        for i, t in zip(idx, times, strict=True):
            if isinstance(t, str):
                raise ConfigError(f"{self.source} row {self.points[i].row}: {t}")
        self.cache[key] = np.array(times, dtype=float)
        return self.cache[key]


__all__ = ["Simulator", "fits", "step_time"]
