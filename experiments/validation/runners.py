"""The runner of each kind of validation entry: it calls the comparison module beside it
(:mod:`.collectives`, :mod:`.custom_allreduce`, :mod:`.deepep`, :mod:`.engines`,
:mod:`.serving`, :mod:`.calibrate_holdout`, :mod:`.kernels`, :mod:`.measured_kernels`,
:mod:`.llmcompass`, :mod:`.host_overheads`) and
returns a :class:`~.entry.Comparison`. :mod:`.registry` binds them to their files and
bounds."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

from tpsim import calibration
from tpsim.experiments.validation import calibrate_holdout as holdouts
from tpsim.experiments.validation import collectives as coll
from tpsim.experiments.validation import custom_allreduce as car
from tpsim.experiments.validation import (
    deepep,
    engines,
    host_overheads,
    kernels,
    llmcompass,
    measured_kernels,
)
from tpsim.experiments.validation import serving as srv
from tpsim.experiments.validation.entry import Comparison, Point


def _from_rows(rows: Sequence[dict[str, float | str]], unit: str = "B") -> Comparison:
    """A :mod:`.collectives` comparison (rows of bytes, measured and simulated us)."""
    points = tuple(
        Point(
            f"{r['bytes']} {unit}",
            float(r["simulated_us"]) / float(r["measured_us"]) - 1,
            float(r["measured_us"]),
            float(r["simulated_us"]),
            "us",
        )
        for r in rows
    )
    pairs = [(float(r["simulated_us"]), float(r["measured_us"])) for r in rows]
    return Comparison(len(points), coll.geomean_error(pairs), points)


def curve(name: str) -> Callable[[], Comparison]:
    def run() -> Comparison:
        (curve,) = [c for c in coll.CURVES if c.file == name]
        rows, _ = coll.compare(curve, coll.data_dir())
        return _from_rows(rows)

    return run


def multinode(slug: str) -> Callable[[], Comparison]:
    def run() -> Comparison:
        (curve,) = [c for c in coll.MULTINODE if c.slug == slug]
        rows, _, _ = coll.compare_multinode(curve, coll.data_dir())
        return _from_rows(rows)

    return run


def alltoall(slug: str, op: str = "all_to_all") -> Callable[[], Comparison]:
    def run() -> Comparison:
        (curve,) = [c for c in coll.ALLTOALL if c.slug == slug]
        rows, _ = coll.compare_alltoall(curve, coll.data_dir(), op)
        return _from_rows(rows)

    return run


def deepep_ll(multi_node: bool) -> Callable[[], Comparison]:
    def run() -> Comparison:
        return _from_rows(deepep.compare_ll(multi_node))

    return run


def deepep_normal() -> Comparison:
    return _from_rows(deepep.compare_normal())


def deepep_normal_nvlink() -> Comparison:
    return _from_rows(deepep.compare_normal_nvlink())


def floors(fitted: bool) -> Callable[[], Comparison]:
    def run() -> Comparison:
        calib = coll.floors_host(coll.data_dir())[1] if fitted else None
        rows, _ = coll.compare_floors(coll.data_dir(), calib)
        return _from_rows(rows, "GPUs")

    return run


def peaks() -> Comparison:
    want = coll.measured_peaks()
    got = coll.peaks(want)
    points = tuple(
        Point(f"{algo} at 16 GiB", got[algo] / w - 1, w, got[algo], "GB/s")
        for algo, w in want.items()
    )
    # busbw is the inverse of time: the same log ratio, so the same geomean error
    err = coll.geomean_error([(w, got[a]) for a, w in want.items()])
    return Comparison(len(points), err, points)


def custom(group: str) -> Callable[[], Comparison]:
    def run() -> Comparison:
        (g,) = [x for x in car.GROUPS if x.name == group]
        table = car.rows(calibration.measured(car.FILE))
        pts, err = car.compare(g, table)
        rows = tuple(
            Point(
                f"{q.ranks} ranks {q.bytes} B",
                q.error,
                q.measured_s * 1e6,
                q.simulated_s * 1e6,
                "us",
            )
            for q in pts
        )
        return Comparison(len(rows), err, rows)

    return run


def engine(file: str) -> Callable[[], Comparison]:
    def run() -> Comparison:
        cases = [c for c in engines.lmdeploy_cases() + engines.e2e_cases() if c.file == file]
        sims = [engines.simulate_case(c) for c in cases]
        rows = tuple(
            Point(c.label, s / c.measured_s - 1, c.measured_s * 1e3, s * 1e3, "ms")
            for c, s in zip(cases, sims, strict=True)
        )
        err = engines.geomean_error([(s, c.measured_s) for c, s in zip(cases, sims, strict=True)])
        return Comparison(len(rows), err, rows)

    return run


def serving(
    which: str, metric: str, kernel_table: str | None = None, saturated: bool = False
) -> Callable[[], Comparison]:
    """Mean TTFT or TPOT of the stages (:mod:`.serving`) the measured engine kept up with, as
    issue #25 holds them (TPOT within 15 %, TTFT within 30 % where the system is not
    saturated); with ``saturated`` the stages it could not keep up with instead (their
    latencies grow with the run's length). ``which``: ``h100``, ``workstation`` or ``both``
    files; ``kernel_table``: the H100 stages with their kernels priced from that table."""

    def run() -> Comparison:
        stages: tuple[srv.Stage, ...] = ()
        if which in ("h100", "both"):
            stages += srv.h100_stages(kernel_table)
        if which in ("workstation", "both"):
            stages += srv.workstation_stages()
        stages = tuple(s for s in stages if s.saturated == saturated)
        pairs = [(getattr(s, f"sim_{metric}_ms"), getattr(s, f"{metric}_ms")) for s in stages]
        rows = tuple(
            Point(
                s.label + (" (tpsim: saturated)" if s.sim_saturated else ""),
                sim / m - 1,
                m,
                sim,
                "ms",
            )
            for s, (sim, m) in zip(stages, pairs, strict=True)
        )
        return Comparison(len(rows), srv.geomean_error(pairs), rows)

    return run


def holdout(name: str) -> Callable[[], Comparison]:
    def run() -> Comparison:
        (h,) = [x for x in holdouts.HOLDOUTS if x.name == name]
        with tempfile.TemporaryDirectory(prefix="tpsim-validate-") as tmp:
            holdouts.write_base(Path(tmp))
            done = holdouts.holdout(h, Path(tmp))
        rows = tuple(
            Point(c.label, t / c.measured_s - 1, c.measured_s * 1e3, t * 1e3, "ms")
            for c, t in done.held
        )
        return Comparison(len(rows), done.error, rows)

    return run


@cache
def _kernel_prices() -> dict[str, list[float]]:
    return kernels.prices()


def kernel_families(variant: str) -> Callable[[], Comparison]:
    def run() -> Comparison:
        from tpsim.experiments.calibrate.vidur_cases import FAMILIES, cases

        errors = kernels.errors(_kernel_prices())[variant]
        counts = {f: sum(1 for c in cases() if c.family == f) for f in FAMILIES}
        rows = tuple(Point(f"{f} ({counts[f]} cases)", errors[f]) for f in FAMILIES)
        return Comparison(sum(counts.values()), max(errors[f] for f in FAMILIES), rows)

    return run


@cache
def _measured_families() -> dict[str, tuple[int, float, float]]:
    return measured_kernels.families(measured_kernels.predict())


def measured_kernel_families(gemms: bool) -> Callable[[], Comparison]:
    """The H200 kernel families of :mod:`.measured_kernels`: the GEMMs (``gemms``) or the
    residual add; the error held is the largest family's."""

    def run() -> Comparison:
        fams = {f: v for f, v in _measured_families().items() if (f != "add") == gemms}
        rows = tuple(
            Point(f"{f} ({n} cases, bias {bias:+.1%})", err) for f, (n, err, bias) in fams.items()
        )
        return Comparison(sum(n for n, _, _ in fams.values()), max(r.error for r in rows), rows)

    return run


def llmcompass_layer() -> Comparison:
    """LLMCompass's GPT-3 layer operators (:mod:`.llmcompass`): one row per operator."""
    rows = tuple(
        Point(c.op, s / c.measured_s - 1, c.measured_s * 1e6, s * 1e6, "us")
        for c, s in zip(llmcompass.cases(), llmcompass.predict(), strict=True)
    )
    return Comparison(len(rows), llmcompass.geomean_error(), rows)


def host_overheads_of(version: str) -> Callable[[], Comparison]:
    """The vllm-v0 profile's host time per step on one collection of Vidur's CPU overheads
    (:mod:`.host_overheads`): one row per (model, TP, batch)."""

    def run() -> Comparison:
        cases = host_overheads.cases(version)
        rows = tuple(
            Point(c.label, t / c.measured_s - 1, c.measured_s * 1e3, t * 1e3, "ms")
            for c, t in ((c, host_overheads.price(c)) for c in cases)
        )
        return Comparison(len(rows), host_overheads.geomean_error(cases), rows)

    return run
