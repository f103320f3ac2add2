"""The named study ``tp_vs_pp_vs_dp``: on the same GPUs, all tensor parallelism (across
nodes where the GPUs span nodes) against tensor x pipeline parallelism and against
replicas (data parallelism).

Cases: Llama-3.1-70B on 16 H100s over two DGX nodes and on 8 A100s in one, GPT-3 175B on
16 H100s over two nodes and Llama-3.1-405B on 32 H100s over four. Workloads hold the same
number of sequences in flight on every layout: decode at a total batch B (each of ``dp``
replicas runs B / dp; a pipeline keeps up to ``pp`` batches of them in flight, as serving
engines do, each getting a token per :func:`~tpsim.core.metrics.pipelined_tpot` of one such
batch's simulated step, which is the row the study's CSV holds), and the prefill of one
2048-token prompt per replica (its latency is the TTFT). "Speed" relative to all-TP is the
ratio of total tokens/s for decode and the inverse ratio of TTFT for prefill: above 1 the
layout beats all-TP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpsim.core.metrics import pipeline_batches, pipelined_tpot
from tpsim.experiments.studies.base import Row, Study, StudyEntry, good, save
from tpsim.experiments.sweep.grid import GridPoint, expand
from tpsim.experiments.sweep.run import run_points

NAME = "tp_vs_pp_vs_dp"
CONTEXT, PROMPT = 1024, 2048


@dataclass(frozen=True)
class LayoutCase:
    key: str  # short name in the summary
    model: str
    topology: str
    nodes: int
    layouts: tuple[tuple[int, int, int], ...]  # (tp, pp, dp); the first is all-TP

    @property
    def gpus(self) -> int:
        tp, pp, dp = self.layouts[0]
        return tp * pp * dp

    def title(self) -> str:
        where = f"{self.nodes} x {self.topology}" if self.nodes > 1 else self.topology
        return f"{self.model} on {self.gpus} GPUs ({where})"


CASES: tuple[LayoutCase, ...] = (
    LayoutCase("70b_h100x16", "llama-3.1-70b", "dgx-h100", 2, ((16, 1, 1), (8, 2, 1), (8, 1, 2))),
    LayoutCase("70b_a100x8", "llama-3.1-70b", "dgx-a100", 1, ((8, 1, 1), (4, 2, 1), (4, 1, 2))),
    LayoutCase("175b_h100x16", "gpt3-175b", "dgx-h100", 2, ((16, 1, 1), (8, 2, 1), (8, 1, 2))),
    LayoutCase(
        "405b_h100x32",
        "llama-3.1-405b",
        "dgx-h100",
        4,
        ((32, 1, 1), (16, 2, 1), (8, 4, 1), (16, 1, 2), (8, 2, 2)),
    ),
)
#: (name, phase, total sequences in flight)
WORKLOADS: tuple[tuple[str, str, int], ...] = (
    ("decode b2", "decode", 2),
    ("decode b16", "decode", 16),
    ("decode b64", "decode", 64),
    ("prefill 2K", "prefill", 1),
)


def label(tp: int, pp: int, dp: int) -> str:
    """``TP 16``, ``TP 8 x PP 2``, ``2 x TP 8`` (replicas first, as in the issue)."""
    text = f"TP {tp}" + (f" x PP {pp}" if pp > 1 else "")
    return f"{dp} x {text}" if dp > 1 else text


def _point(case: LayoutCase, lay: tuple[int, int, int], phase: str, total: int) -> GridPoint:
    tp, pp, dp = lay
    batch = total if phase == "prefill" else pipeline_batches(max(1, total // dp), pp)[1]
    grid: dict[str, Any] = {
        "model": case.model,
        "topology": case.topology,
        "nodes": case.nodes,
        "tp": tp,
        "pp": pp,
        "dp": dp,
        "micro_batches": 1,
        "batch": batch,
        "phase": phase,
        "context_len": CONTEXT,
        "prompt_len": PROMPT,
    }
    (p,) = expand(grid, "tp_vs_pp_vs_dp")
    return p


def _tokens_per_s(r: Row, total: int) -> float:
    """Decode tokens/s of a row's layout: its replicas' pipelines with their batches in
    flight (one batch, the row's step, without a pipeline)."""
    pp, dp = int(r["pp"]), int(r["dp"])
    if pp == 1:
        return float(r["tokens_per_s"])
    k, each = pipeline_batches(max(1, total // dp), pp)
    # the sweep's rows hold the bubble, not each stage's time: the last stage's share stands
    # for the slowest (the study splits the layers evenly, the LM head on the last stage)
    latency = float(r["latency_s"])
    return dp * k * each / pipelined_tpot(latency, latency - float(r["bubble_s"]), k)


def _speed(r: Row, base: Row, phase: str, total: int) -> float:
    if phase == "prefill":
        return float(base["latency_s"] / r["latency_s"])
    return _tokens_per_s(r, total) / _tokens_per_s(base, total)


def tp_vs_pp_vs_dp(
    out: Path | None = None,
    *,
    jobs: int = 1,
    cases: Sequence[LayoutCase] = CASES,
    workloads: Sequence[tuple[str, str, int]] = WORKLOADS,
) -> Study:
    """Run the study (``cases`` and ``workloads`` narrow it, as the tests do)."""

    plan = [
        (case, lay, wl) for case in cases for wl in workloads for lay in case.layouts
    ]  # fmt: skip
    pts = [_point(c, lay, wl[1], wl[2]) for c, lay, wl in plan]
    rows = run_points(list(dict.fromkeys(pts)), jobs=jobs)
    by_id = {r["point_id"]: r for r in rows}
    at = {(c.key, lay, wl[0]): by_id[p.point_id] for (c, lay, wl), p in zip(plan, pts, strict=True)}
    speed: dict[str, dict[str, dict[str, float | None]]] = {}
    best: dict[str, dict[str, str]] = {}
    lines = [
        f"{NAME}: all-TP against TP x PP and against replicas on the same GPUs "
        f"(decode: context {CONTEXT}, same sequences in flight; prefill: one {PROMPT}-token "
        "prompt per replica, TTFT)"
    ]
    for case in cases:
        lines.append(f"{case.title()}: speed relative to {label(*case.layouts[0])} (>1 beats it)")
        head = f"  {'':<18}" + "".join(f"{label(*lay):>16}" for lay in case.layouts)
        lines.append(head)
        speed[case.key], best[case.key] = {}, {}
        for name, phase, total in workloads:
            base = at[case.key, case.layouts[0], name]
            cells, row = {}, f"  {name:<18}"
            for lay in case.layouts:
                r = at[case.key, lay, name]
                ok = good(r) and good(base)
                v = _speed(r, base, phase, total) if ok else None
                cells[label(*lay)] = v
                row += (
                    f"{v:>15.2f}x" if v is not None else f"{'no fit' if not good(r) else '-':>16}"
                )
            speed[case.key][name] = cells
            fit = {k: v for k, v in cells.items() if v is not None}
            if fit:
                best[case.key][name] = max(fit, key=lambda k: (fit[k], k))
            lines.append(row)
        for name, _, _ in workloads:
            if name in best[case.key]:
                w = best[case.key][name]
                lines.append(f"    {name}: {w} is fastest ({speed[case.key][name][w]:.2f}x)")
    summary: dict[str, Any] = {"speed_vs_all_tp": speed, "fastest": best}
    save(NAME, out, rows, summary)
    plots: list[Path] = []
    if out is not None:
        from tpsim.experiments.plots.studies import layout_speed_bars

        panels = [
            (case.title(), [label(*lay) for lay in case.layouts], speed[case.key]) for case in cases
        ]
        names = [w[0] for w in workloads]
        plots = [layout_speed_bars(panels, names, out / f"{NAME}.png")]
    return Study(NAME, lines, summary, rows, plots)


STUDY = StudyEntry(
    "tp_vs_pp_vs_dp",
    5,
    "all-TP across nodes against TP x PP and replicas on the same GPUs",
    tp_vs_pp_vs_dp,
)
