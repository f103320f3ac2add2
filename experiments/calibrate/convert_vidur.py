"""Convert Vidur's measured kernel times into tpsim's shipped kernel tables (run once).

    python -m tpsim.experiments.calibrate.convert_vidur [--out DIR]

Reads ``tpsim/calibration/measured/vidur_mlp_per_op.csv`` and
``vidur_attention_a100_tp2.csv`` with the kernel-table reader
(:mod:`tpsim.core.kernels.table_formats`:
Vidur's operators as the lowering's kernels, Vidur's GPU names as the catalog's) and writes
one table per GPU in tpsim's ``ops`` layout, ``vidur-a100.csv`` and ``vidur-h100.csv``
(default: the package's ``tables/`` folder), each with its sources in its ``#`` header.
Repeated points become their median, as the reader takes them from Vidur's own files, so
``--kernel-table vidur-a100`` and ``--kernel-table measured/vidur_*.csv`` price alike.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from statistics import median

from tpsim.calibration import measured, tables
from tpsim.core.kernels.table_formats import OPS_COLUMNS, VIDUR_GPUS, VIDUR_OPS, OpPoint, parse
from tpsim.outputs.export import write_text

SOURCES = ("vidur_mlp_per_op.csv", "vidur_attention_a100_tp2.csv")
#: Shipped table name per catalog GPU.
NAMES = {gpu: f"vidur-{sku}" for sku, gpu in VIDUR_GPUS.items()}
#: Order of the operators in a table: the layer's order.
ORDER = ("embedding", "input_norm", "qkv_proj", "rotary", "attn_prefill", "attn_decode",
         "o_proj", "residual", "post_attn_norm", "mlp_up", "act", "mlp_down")  # fmt: skip


def _header(gpu: str, cited: Sequence[str], measured_lines: Sequence[str]) -> str:
    mapping = ", ".join(f"{v} = {k}" for k, v in VIDUR_OPS.items())
    lines = [
        f"tpsim kernel table, ops layout (README, 'Kernel tables'): Vidur's measured kernel "
        f"times on {gpu}, one row per operator, model shape, TP and token count.",
        "Converted by experiments/calibrate/convert_vidur.py from tpsim/calibration/measured/"
        + " and ".join(SOURCES)
        + " (unchanged copies of the project's calibration measurements), which cite:",
        *(f"  {c}" for c in cited),
        "What those files say was measured:",
        *(f"  {ln}" for ln in measured_lines),
        f"Operators (tpsim = Vidur): {mapping}; attn_decode = the decode attention kernel "
        "(tokens = batch, kv_len = cached tokens per sequence), attn_prefill = the prefill "
        "attention kernel of one request (tokens = chunk, kv_len = tokens already cached).",
        "The final norm reads input_norm's rows; a fused residual add + RMSNorm is priced as "
        "norm + residual (Vidur measured them apart). Attention rows hold for any MLP width "
        "(intermediate '-').",
        "Repeated points (token-grid boundaries; Llama-2-70B and Llama-3-70B share a shape) are "
        "their median. time_us: median CUDA kernel time, microseconds, fp16.",
    ]
    return "".join(f"# {ln}\n" for ln in lines)


def _cited(text: str) -> list[str]:
    """The distinct source references in a measurement file's ``source`` column."""
    return sorted(set(re.findall(r"github:\S+?\.csv(?: \([^)]*\))?", text)))


def convert(out: Path) -> list[Path]:
    """Write one table per GPU into ``out``; the paths written."""
    points: dict[tuple[object, ...], list[float]] = {}
    cited: dict[str, set[str]] = {}
    headers: list[str] = []
    for name in SOURCES:
        text = measured(name).read_text()
        headers += [ln[1:].strip() for ln in text.splitlines() if ln.startswith("#")]
        _, found = parse(name, text)
        for p in found:
            assert isinstance(p, OpPoint)
            s = p.shape
            key = (p.gpu, p.dtype, s.n_embd, s.heads, s.kv_heads, s.intermediate, s.tp, p.op,
                   p.x, p.y)  # fmt: skip
            points.setdefault(key, []).append(p.seconds)
        for line in text.splitlines():
            gpu_field = line.split(",", 1)[0].lower()
            if gpu_field in VIDUR_GPUS:
                cited.setdefault(VIDUR_GPUS[gpu_field], set()).update(_cited(line))
    written = []
    for gpu, name in sorted(NAMES.items(), key=lambda kv: kv[1]):
        rows = sorted(
            (k for k in points if k[0] == gpu),
            key=lambda k: (k[2], k[3], k[4], k[5], k[6], ORDER.index(str(k[7])), k[8], k[9]),
        )
        body = [",".join(OPS_COLUMNS)]
        for k in rows:
            gpu_, dtype, d, h, kv, inter, tp, op, x, y = k
            t_us = round(float(median(points[k])) * 1e6, 4)
            cells = [gpu_, dtype, d, h, kv, inter if inter else "-", tp, op, x, y, f"{t_us:g}"]
            body.append(",".join(str(c) for c in cells))
        path = out / f"{name}.csv"
        write_text(path, _header(gpu, sorted(cited.get(gpu, ())), headers) + "\n".join(body) + "\n")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=tables(), help="folder for the tables")
    a = ap.parse_args(argv)
    for path in convert(a.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
