"""Kernel study: decode and prefill step times of catalog models as the GPU sees them.

    python -m tpsim.experiments.validation.kernel_ceilings --out DIR

Runs Llama-3.1-8B and Llama-2-70B on dgx-a100 and dgx-h100 at TP 1, 2, 4, 8 and batch 1 to
256, decode (context 1024) and prefill (prompts of 512), and writes ``kernel_study.csv`` and
two plots (step time, achieved HBM bandwidth and MFU against batch, one per phase). Layouts
that do not fit in memory are listed and skipped.

Definitions (rank 0, the ranks are symmetric):
- ``hbm_TBps``: HBM bytes of every kernel of the step / step time (time includes
  communication and launches, so this under-states what the kernels stream);
- ``gemm_TBps``: bytes of the GEMMs / their summed kernel time: the fair per-kernel figure;
- ``mfu``: FLOPs of the step / (step time x dense peak of the dtype);
- ``weights_TBps``: weight bytes per GPU / step time (decode reads every weight once).

The sanity lines at the end check the calibration README's ceilings: batch-1 decode of
Llama-2-70B at TP 8 streams its weights at 75-90% of peak HBM (per GEMM, and per step), and
large prefill GEMMs reach 70-87% of the dense peak.
"""

from __future__ import annotations

import argparse
import csv
import io
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tpsim import ConfigError, Result, Workload, simulate
from tpsim.experiments.plots.validation import kernel_study
from tpsim.models.catalog import MODELS as CATALOG
from tpsim.outputs.export import write_text
from tpsim.topologies.gpus import get_gpu

MODELS = ("llama-3.1-8b", "llama-2-70b")
TOPOLOGIES = ("dgx-a100", "dgx-h100")
TPS = (1, 2, 4, 8)
BATCHES = (1, 4, 16, 64, 256)
CONTEXT, PROMPT = 1024, 512


def measure(r: Result) -> dict[str, Any]:
    """Per-rank (rank 0) bandwidth and FLOP figures of one simulated step."""
    s = r.typed
    gpu = get_gpu(s.config.gpu)
    dtype = s.config.dtype
    peak = gpu.fp8_flops if dtype == "fp8" and gpu.fp8_flops else gpu.bf16_flops
    kernels = [x for x in r.records if x.rank == 0 and x.stream == "compute"]
    gemms = [x for x in kernels if x.kind == "gemm"]
    gemm_s = sum(x.duration_s for x in gemms)
    lat = s.latency_s
    big = max(gemms, key=lambda x: x.flops)
    return {
        "latency_ms": lat * 1e3,
        "tokens_per_s": s.tokens_per_s,
        "regime": s.regime,
        "hbm_TBps": sum(x.bytes for x in kernels) / lat / 1e12,
        "gemm_TBps": sum(x.bytes for x in gemms) / gemm_s / 1e12,
        "weights_TBps": s.memory.weights_bytes_per_gpu / lat / 1e12,
        "hbm_peak_TBps": gpu.hbm_Bps / 1e12,
        "mfu": sum(x.flops for x in kernels) / (lat * peak),
        "gemm_mfu": sum(x.flops for x in gemms) / (gemm_s * peak),
        "largest_gemm": f"{big.name} {big.detail}",
        "largest_gemm_mfu": big.flops / (big.duration_s * peak),
    }


def run_study(out: Path, models: Sequence[str] = MODELS) -> Iterator[str]:
    """Run the grid, write the CSV and plots under ``out``, yield report lines."""
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    yield (
        f"{'model':<13} {'topology':<9} {'phase':<7} {'TP':>2} {'batch':>5} {'step ms':>9} "
        f"{'HBM TB/s':>8} {'GEMM TB/s':>9} {'MFU':>6}  regime"
    )
    for model in models:
        for topo in TOPOLOGIES:
            for phase in ("decode", "prefill"):
                for tp in TPS:
                    for batch in BATCHES:
                        wl = Workload(batch, phase, prompt_len=PROMPT, context_len=CONTEXT)
                        head = f"{model:<13} {topo:<9} {phase:<7} {tp:>2} {batch:>5}"
                        try:
                            r = simulate(model, topo, tp, wl)
                        except ConfigError as exc:
                            yield f"{head}  skipped: {str(exc).split(': ', 1)[1][:60]}"
                            continue
                        m = measure(r)
                        rows.append(
                            {
                                "model": model,
                                "topology": topo,
                                "phase": phase,
                                "tp": tp,
                                "batch": batch,
                                **m,
                            }
                        )
                        yield (
                            f"{head} {m['latency_ms']:>9.3f} {m['hbm_TBps']:>8.2f} "
                            f"{m['gemm_TBps']:>9.2f} {m['mfu']:>6.1%}  {m['regime']}"
                        )
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    write_text(out / "kernel_study.csv", buf.getvalue())
    yield from sanity(rows)
    for phase in ("decode", "prefill"):
        path = out / f"kernel_study_{phase}.png"
        kernel_study(rows, phase, path, models[:2], TOPOLOGIES, TPS, CONTEXT, PROMPT)
        yield f"wrote {path}"
    yield f"wrote {out / 'kernel_study.csv'}"


def sanity(rows: Sequence[dict[str, Any]]) -> Iterator[str]:
    yield "sanity:"
    for topo in TOPOLOGIES:
        (d,) = [
            r
            for r in rows
            if (r["model"], r["topology"], r["phase"], r["tp"], r["batch"])
            == ("llama-2-70b", topo, "decode", 8, 1)
        ]
        peak = d["hbm_peak_TBps"]
        yield (
            f"  llama-2-70b decode TP8 batch 1 on {topo}: per GEMM {d['gemm_TBps']:.2f} TB/s "
            f"= {d['gemm_TBps'] / peak:.0%} of {peak:.2f} TB/s peak; weights/step time "
            f"{d['weights_TBps']:.2f} TB/s = {d['weights_TBps'] / peak:.0%} (step includes "
            "communication and launches)"
        )
        big = [
            r
            for r in rows
            if r["topology"] == topo and r["phase"] == "prefill" and r["batch"] * PROMPT >= 8192
        ]
        lo = min(big, key=lambda r: r["gemm_mfu"])
        hi = max(big, key=lambda r: r["largest_gemm_mfu"])
        yield (
            f"  prefill of >= 8192 tokens on {topo}: all GEMMs of a step at "
            f"{lo['gemm_mfu']:.0%} ({lo['model']} TP{lo['tp']} batch {lo['batch']}) to "
            f"{max(r['gemm_mfu'] for r in big):.0%} of the dense peak; best single GEMM "
            f"{hi['largest_gemm']} ({hi['model']} TP{hi['tp']}) at {hi['largest_gemm_mfu']:.0%}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("kernel-study"))
    p.add_argument(
        "--models",
        default=",".join(MODELS),
        help="comma list of catalog models, or 'all' (the plots show the first two)",
    )
    a = p.parse_args(argv)
    models = sorted(CATALOG) if a.models == "all" else a.models.split(",")
    for line in run_study(a.out, models):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
