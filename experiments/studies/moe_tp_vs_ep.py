"""The named study ``moe_tp_vs_ep``: a mixture-of-experts model's experts split tensor-parallel
(every GPU holds a slice of every expert), expert-parallel over the TP group (whole experts
per GPU, vLLM's ``--enable-expert-parallel``) and expert-parallel under attention data
parallelism (TP-1 attention groups sharing EP MoE layers, tokens dispatched by all-to-all).

Cases: DeepSeek-V3 on 8 H200s and on 16 H100s over two nodes (fp8), Mixtral-8x7B on 8 A100s
(bf16), Qwen3-235B-A22B on 8 H100s (fp8). Every layout carries the same sequences per step:
decode at a total of N sequences (each of ``attention_dp`` groups runs N / attention_dp),
prefill of as many prompts as the widest attention-DP layout has groups. "Speed" is total
tokens/s relative to the all-TP layout: above 1 the layout beats it (where all-TP does not
fit, the others' tokens/s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpsim.experiments.studies.base import Study, StudyEntry, good, save
from tpsim.experiments.sweep.grid import GridPoint, expand
from tpsim.experiments.sweep.run import run_points
from tpsim.models.catalog import MODELS

NAME = "moe_tp_vs_ep"
CONTEXT = 2048

#: (tp, attention_dp, ep): the first is all-TP (tensor-parallel experts)
Split = tuple[int, int, int]


@dataclass(frozen=True)
class MoECase:
    key: str
    model: str
    topology: str
    nodes: int
    dtype: str
    splits: tuple[Split, ...]

    @property
    def gpus(self) -> int:
        tp, adp, _ = self.splits[0]
        return tp * adp

    @property
    def groups(self) -> int:
        """The most attention data-parallel groups of any split (sequences come in
        multiples of it, so every split carries the same load)."""
        return max(adp for _, adp, _ in self.splits)

    def title(self) -> str:
        where = f"{self.nodes} x {self.topology}" if self.nodes > 1 else self.topology
        return f"{self.model} on {self.gpus} GPUs ({where}, {self.dtype})"


def _splits(gpus: int) -> tuple[Split, ...]:
    """All-TP, TP + EP, and attention-DP + EP over ``gpus`` GPUs (and half and half)."""
    half = (gpus // 2, 2, gpus) if gpus >= 4 else None
    return tuple(s for s in ((gpus, 1, 1), (gpus, 1, gpus), (1, gpus, gpus), half) if s)


CASES: tuple[MoECase, ...] = (
    MoECase("dsv3_h200x8", "deepseek-v3", "hgx-h200", 1, "fp8", _splits(8)),
    MoECase("dsv3_h100x16", "deepseek-v3", "dgx-h100", 2, "fp8", _splits(16)),
    MoECase("mixtral_a100x8", "mixtral-8x7b", "dgx-a100", 1, "bf16", _splits(8)),
    MoECase("qwen3_235b_h100x8", "qwen3-235b-a22b", "dgx-h100", 1, "fp8", _splits(8)),
)
#: (name, phase, sequences per step in units of the case's attention-DP groups, prompt)
WORKLOADS: tuple[tuple[str, str, int, int], ...] = (
    ("decode 1/group", "decode", 1, 0),
    ("decode 8/group", "decode", 8, 0),
    ("decode 32/group", "decode", 32, 0),
    ("prefill 2K", "prefill", 1, 2048),
    ("prefill 8K", "prefill", 1, 8192),
)


def label(split: Split) -> str:
    """``TP 8``, ``TP 8 EP 8``, ``ADP 8 EP 8``, ``TP 4 x ADP 2 EP 8``."""
    tp, adp, ep = split
    parts = ([f"TP {tp}"] if tp > 1 or adp == 1 else []) + ([f"ADP {adp}"] if adp > 1 else [])
    return " x ".join(parts) + (f" EP {ep}" if ep > 1 else "")


def _point(case: MoECase, split: Split, phase: str, per_group: int, prompt: int) -> GridPoint:
    tp, adp, ep = split
    total = per_group * case.groups  # sequences per step, the same for every split
    grid: dict[str, Any] = {
        "model": case.model,
        "topology": case.topology,
        "nodes": case.nodes,
        "tp": tp,
        "attention_dp": adp,
        "ep": ep,
        "batch": total // adp,
        "phase": phase,
        "dtype": case.dtype,
        "context_len": CONTEXT,
        "prompt_len": prompt or 512,
    }
    (p,) = expand(grid, NAME)
    return p


def moe_tp_vs_ep(
    out: Path | None = None,
    *,
    jobs: int = 1,
    cases: Sequence[MoECase] = CASES,
    workloads: Sequence[tuple[str, str, int, int]] = WORKLOADS,
) -> Study:
    """Run the study (``cases`` and ``workloads`` narrow it, as the tests do)."""
    cases = [c for c in cases if c.model in MODELS]  # a catalog without one: the others
    plan = [(c, s, w) for c in cases for w in workloads for s in c.splits]
    pts = [_point(c, s, w[1], w[2], w[3]) for c, s, w in plan]
    rows = run_points(list(dict.fromkeys(pts)), jobs=jobs)
    by_id = {r["point_id"]: r for r in rows}
    at = {(c.key, s, w[0]): by_id[p.point_id] for (c, s, w), p in zip(plan, pts, strict=True)}
    speed: dict[str, dict[str, dict[str, float | None]]] = {}
    best: dict[str, dict[str, str]] = {}
    lines = [
        f"{NAME}: tensor-parallel experts against expert parallelism, with and without "
        f"attention data parallelism (decode context {CONTEXT}; every layout carries the same "
        "sequences per step)"
    ]
    for case in cases:
        base_split = case.splits[0]
        lines.append(f"{case.title()}: tokens/s relative to {label(base_split)} (>1 beats it)")
        lines.append(f"  {'':<18}" + "".join(f"{label(s):>19}" for s in case.splits))
        speed[case.key], best[case.key] = {}, {}
        for name, _, _, _ in workloads:
            base = at[case.key, base_split, name]
            cells: dict[str, float | None] = {}
            row = f"  {name:<18}"
            alone: dict[str, float] = {}  # tokens/s of splits that fit where the base does not
            for s in case.splits:
                r = at[case.key, s, name]
                ok = good(r) and good(base)
                v = float(r["tokens_per_s"] / base["tokens_per_s"]) if ok else None
                cells[label(s)] = v
                if v is not None:
                    row += f"{v:>18.2f}x"
                elif good(r):  # the base does not fit: its tokens/s
                    alone[label(s)] = float(r["tokens_per_s"])
                    row += f"{r['tokens_per_s'] / 1e3:>12,.1f}k tok/s"
                else:
                    row += f"{'no fit':>19}"
            speed[case.key][name] = cells
            fit = {k: v for k, v in cells.items() if v is not None} or alone
            if fit:
                best[case.key][name] = max(fit, key=lambda k: (fit[k], k))
            lines.append(row)
        for name, _, _, _ in workloads:
            if name in best[case.key]:
                w = best[case.key][name]
                v = speed[case.key][name][w]
                how = f"{v:.2f}x" if v is not None else f"{label(base_split)} does not fit"
                lines.append(f"    {name}: {w} is fastest ({how})")
    summary: dict[str, Any] = {"speed_vs_tp_experts": speed, "fastest": best}
    save(NAME, out, rows, summary)
    plots: list[Path] = []
    if out is not None and cases:
        from tpsim.experiments.plots.studies import layout_speed_bars

        panels = [(c.title(), [label(s) for s in c.splits], speed[c.key]) for c in cases]
        plots = [
            layout_speed_bars(
                panels,
                [w[0] for w in workloads],
                out / f"{NAME}.png",
                "total tokens/s at equal sequences per step, relative to tensor-parallel "
                "experts: above 1 beats it",
            )
        ]
    return Study(NAME, lines, summary, rows, plots)


STUDY = StudyEntry(
    NAME,
    6,
    "MoE: tensor-parallel experts against EP and attention-DP + EP, decode and prefill",
    moe_tp_vs_ep,
)
