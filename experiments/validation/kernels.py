"""Kernel accuracy: tpsim's kernel prices against Vidur's measured per-operator times.

    python -m tpsim.experiments.validation.kernels --out DIR

For every operator family (QKV, O, gate/up, down, attention decode, attention prefill,
norms, act, rotary, add; the embedding apart) and every GPU, TP and token count in Vidur's
files (:mod:`tpsim.experiments.calibrate.vidur_cases`), the geomean error ``exp(mean |ln(simulated /
measured)|) - 1`` of:

- ``today``: the analytic model with the shipped calibration (the best achievable kernels);
- ``refit``: the analytic model with the measured-kernel refit (``engines/_kernels.yaml``);
- ``tables``: the shipped kernel tables (``--kernel-table vidur-a100,vidur-h100``);
- ``between``: the tables with each measured point left out, interpolated from its
  neighbours (the refit model scaled beyond the ends): what a table does between points.

Writes ``kernel_accuracy.csv`` (every case and its four prices) and
``kernel_accuracy.png`` (measured against simulated, one panel per variant) under ``--out``,
and prints the table. Acceptance: ``refit`` within 15% and ``tables`` within 3% per family.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tpsim.calibration import Kernels, default
from tpsim.calibration.profiles import profile
from tpsim.core.kernels import kernel_table
from tpsim.core.kernels.kernel_table import KernelTable
from tpsim.core.kernels.table_formats import Shape
from tpsim.experiments.calibrate.vidur_cases import EXTRA, FAMILIES, KernelCase, cases, predict
from tpsim.experiments.plots.validation import kernel_accuracy
from tpsim.experiments.validation.collectives import geomean_error
from tpsim.outputs.export import write_text

VARIANTS = ("today", "refit", "tables", "between")
TABLES = "vidur-a100,vidur-h100"
ACCEPT = {"refit": 0.15, "tables": 0.03}


def refit_kernels() -> Kernels:
    """The measured-kernel refit (the ``_kernels`` profile fragment's kernels)."""
    return profile("_kernels").kernels


def _left_out(table: KernelTable, c: KernelCase, kernels: Kernels) -> float:
    """Case ``c`` priced by ``table`` without its own point, under ``kernels`` (which price
    beyond the remaining points)."""
    shape = Shape(c.n_embd, c.heads, c.kv_heads, c.intermediate, c.tp)
    key = (c.op, c.gpu, "fp16", shape)
    columns = []
    for x, pts in table.ops[key]:
        kept = tuple(p for p in pts if not (x == c.tokens and p[0] == c.kv_len))
        if kept:
            columns.append((x, kept))
    shrunk = replace(table, ops={**table.ops, key: tuple(columns)})
    return predict(kernels, shrunk, [c])[0]


def prices() -> dict[str, list[float]]:
    """Every case's price under each variant, in :func:`cases` order."""
    table = kernel_table.load(TABLES)
    refit = refit_kernels()
    today = default().kernels
    return {
        "today": predict(today),
        "refit": predict(refit),
        "tables": predict(today, table),
        "between": [_left_out(table, c, refit) for c in cases()],
    }


def errors(p: dict[str, list[float]], gpu: str = "") -> dict[str, dict[str, float]]:
    """Geomean error per variant and family (``gpu``: that GPU's cases only)."""
    out: dict[str, dict[str, float]] = {}
    for v in VARIANTS:
        by: dict[str, list[tuple[float, float]]] = {}
        for c, s in zip(cases(), p[v], strict=True):
            if not gpu or c.gpu == gpu:
                by.setdefault(c.family, []).append((s, c.measured_s))
        out[v] = {f: geomean_error(by[f]) for f in (*FAMILIES, *EXTRA) if f in by}
    return out


def report(p: dict[str, list[float]]) -> list[str]:
    """The per-family table, all GPUs together and per GPU."""
    e = errors(p)
    counts = {f: sum(1 for c in cases() if c.family == f) for f in (*FAMILIES, *EXTRA)}
    lines = [f"{'family':<18} {'cases':>5} " + " ".join(f"{v:>8}" for v in VARIANTS)]
    for f in (*FAMILIES, *EXTRA):
        cells = " ".join(f"{100 * e[v][f]:7.1f}%" for v in VARIANTS)
        lines.append(f"{f:<18} {counts[f]:>5} {cells}")
    worst = max(FAMILIES, key=lambda f: e["refit"][f])
    lines.append(f"worst family with the refit: {worst} ({100 * e['refit'][worst]:.1f}%)")
    for gpu in sorted({c.gpu for c in cases()}):
        g = errors(p, gpu)
        cells = ", ".join(f"{f} {100 * g['refit'][f]:.1f}%" for f in FAMILIES if f in g["refit"])
        lines.append(f"{gpu} refit: {cells}")
    for v, bound in ACCEPT.items():
        bad = [f for f in FAMILIES if e[v][f] > bound]
        verdict = "all within" if not bad else f"{', '.join(bad)} beyond"
        lines.append(f"acceptance {v}: {verdict} {100 * bound:.0f}%")
    return lines


def write_csv(path: Path, p: dict[str, list[float]]) -> None:
    head = "family,op,gpu,n_embd,heads,kv_heads,intermediate,tp,tokens,kv_len,measured_us,"
    rows = [head + ",".join(f"{v}_us" for v in VARIANTS)]
    for i, c in enumerate(cases()):
        sims = ",".join(f"{p[v][i] * 1e6:.4g}" for v in VARIANTS)
        rows.append(f"{c.family},{c.op},{c.gpu},{c.n_embd},{c.heads},{c.kv_heads},"
                    f"{c.intermediate},{c.tp},{c.tokens},{c.kv_len},"
                    f"{c.measured_s * 1e6:.4g},{sims}")  # fmt: skip
    write_text(path, "\n".join(rows) + "\n")


def plot(path: Path, p: dict[str, list[float]]) -> None:
    """Measured against simulated, log-log, one panel per variant, a colour per family
    (hollow: the embedding, outside the acceptance families), +-15% dashed."""
    kernel_accuracy(path, p, errors(p), cases(), (*FAMILIES, *EXTRA), EXTRA, VARIANTS)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the CSV and the plot")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    p = prices()
    write_csv(a.out / "kernel_accuracy.csv", p)
    plot(a.out / "kernel_accuracy.png", p)
    for line in report(p):
        print(line)
    print(f"wrote {a.out / 'kernel_accuracy.csv'} and {a.out / 'kernel_accuracy.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
