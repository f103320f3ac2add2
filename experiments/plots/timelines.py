"""Timelines that explain where time goes: launch modes and overlap modes side by side.

    python -m tpsim.experiments.plots.timelines --out DIR

1. Llama-2-7B decode, batch 1, TP 8 on dgx-a100 with ``--launch eager`` against
   ``graph`` (and ``compiled``): eager kernels wait for the host, graphs do not.
2. Llama-3.1-70B prefill, batch 4 x 2048 tokens, TP 8 on dgx-h100 with ``--overlap none``
   against ``chunked`` and ``microbatch``: the all-reduces hide behind compute.

Prints step times, regimes and breakdowns, and draws a Gantt chart of one layer for each.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from tpsim import Options, Workload, simulate
from tpsim.core.result import Result
from tpsim.experiments.plots.gantt import gantt
from tpsim.outputs.export import make_folder
from tpsim.outputs.text import seconds, title

LAUNCH_CASE = ("llama-2-7b", "dgx-a100", 8, Workload(1, "decode", context_len=256))
OVERLAP_CASE = ("llama-3.1-70b", "dgx-h100", 8, Workload(4, "prefill", prompt_len=2048))
LAYER = (1, 1)  # the layer drawn (layer 0 follows the embedding's collective)


def _run(case: tuple, options: Options) -> Result:  # type: ignore[type-arg]
    model, topo, tp, workload = case
    return simulate(model, topo, tp, workload, options)


def _line(label: str, r: Result) -> str:
    b = r.typed.breakdown.to_dict()
    parts = ", ".join(f"{k} {seconds(v)}" for k, v in b.items() if v > 0)
    return f"  {label:<11} {seconds(r.latency_s):>11}  {r.typed.regime:<20} {parts}"


def run(out: Path) -> Iterator[str]:
    make_folder(out)
    studies = (
        ("launch", LAUNCH_CASE, [(m, Options(launch=m)) for m in ("eager", "graph", "compiled")]),
        (
            "overlap",
            OVERLAP_CASE,
            [(m, Options(overlap=m)) for m in ("none", "chunked", "microbatch")],
        ),
    )
    for study, case, variants in studies:
        model, topo, tp, w = case
        yield f"{study}: {model} {w.phase} batch {w.batch} on {topo}, TP {tp}"
        results = []
        for label, options in variants:
            r = _run(case, options)
            results.append((label, r))
            yield _line(label, r)
            path = out / f"gantt_{study}_{label}.png"
            gantt(
                r.records,
                path,
                title=f"{title(r.summary)}, overlap {options.overlap}",
                layers=LAYER,
                critical=r.critical_path,
                rank_labels=r.rank_labels,
            )
            yield f"  wrote {path}"
        base = results[0][1].latency_s
        for label, r in results[1:]:
            yield f"  {results[0][0]} / {label} step time: {base / r.latency_s:.2f}x"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("tpsim-timelines"))
    for line in run(p.parse_args(argv).out):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
