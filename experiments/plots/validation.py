"""The figures of the validation reports (tpsim.experiments.validation): collectives, custom
all-reduce, serving engines end to end, the kernel study and kernel accuracy. Each report
computes its numbers and passes them here with its labels."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.figure import Figure
from tpsim.experiments.plots.save import save_figure
from tpsim.topologies.gpus import get_gpu

Row = dict[str, Any]
Rows = Sequence[dict[str, float | str]]


def busbw_axes(
    ax: Any,
    rows: Rows,
    ranks: int,
    err: float,
    measured: str,
    title: str,
) -> None:
    """Measured and simulated all-reduce busbw over size (log axes) on ``ax``."""
    sizes = [int(r["bytes"]) for r in rows]
    factor = 2 * (ranks - 1) / ranks / 1e3  # busbw GB/s from bytes / us
    meas = [int(r["bytes"]) / float(r["measured_us"]) * factor for r in rows]
    sim = [int(r["bytes"]) / float(r["simulated_us"]) * factor for r in rows]
    ax.plot(sizes, meas, "o-", color="#000000", label=measured)
    ax.plot(sizes, sim, "s--", color="#D55E00", label=f"tpsim (geomean error {err:.0%})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("all-reduce busbw (GB/s)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def collective_busbw(panels: Sequence[tuple[Rows, float, str]], path: Path) -> None:
    """One panel per 8-GPU curve (its rows, geomean error and name): measured and simulated
    busbw over size."""
    fig = Figure(figsize=(12, 4.8))
    axes = fig.subplots(1, 2)
    for ax, (rows, err, name) in zip(axes, panels, strict=True):
        busbw_axes(ax, rows, 8, err, "measured", name)
    fig.tight_layout()
    save_figure(fig, path)


def multinode_busbw(rows: Rows, err: float, title: str, path: Path) -> None:
    """A 16-rank (2 nodes x 8 GPUs) curve: measured and simulated busbw over size."""
    fig = Figure(figsize=(6.4, 4.8))
    busbw_axes(
        fig.subplots(), rows, 16, err, "measured (nccl-tests, out of place)", title,
    )  # fmt: skip
    fig.tight_layout()
    save_figure(fig, path)


def launch_floors(
    floors: Sequence[tuple[int, float]],
    simulated: Sequence[tuple[Rows, str, tuple[str, str]]],
    path: Path,
) -> None:
    """Measured one-channel launch floors against GPUs per thread, and each simulated
    variant (its rows, legend label and line style)."""
    fig = Figure(figsize=(6.4, 4.8))
    ax = fig.subplots()
    ax.plot([n for n, _ in floors], [us for _, us in floors], "o-", color="#000000",
            label="measured (nccl-tests issue 123, NCCL_MAX_NCHANNELS=1)")  # fmt: skip
    for rows, label, style in simulated:
        ax.plot([int(r["bytes"]) for r in rows], [float(r["simulated_us"]) for r in rows],
                style[0], color=style[1], label=label)  # fmt: skip
    ax.set_xlabel("GPUs driven by one thread (-g N)")
    ax.set_ylabel("8-128 B all-reduce, us per iteration")
    ax.set_title("8x A100: one-channel launch floors", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def custom_allreduce_scatter(
    series: Sequence[tuple[Sequence[tuple[float, float]], str]],
    colors: Sequence[str],
    markers: Sequence[str],
    total: float,
    path: Path,
) -> None:
    """Simulated against measured time per all-reduce (µs), one series per group (its
    (measured, simulated) points and legend label), with the ±15 % band."""
    fig = Figure(figsize=(8, 7))
    ax = fig.subplots()
    for (pts, label), color, marker in zip(series, colors, markers, strict=True):
        ax.scatter(
            [m for m, _ in pts],
            [s for _, s in pts],
            color=color,
            marker=marker,
            s=28,
            label=label,
        )
    lo, hi = 2.0, 150.0
    line = [lo, hi]
    ax.plot(line, line, color="#444444", lw=1)
    ax.fill_between(line, [x * 0.85 for x in line], [x * 1.15 for x in line], color="#999999",
                    alpha=0.25, label="±15 %")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured time per all-reduce (µs)")
    ax.set_ylabel("simulated time per all-reduce (µs)")
    ax.set_title(f"Custom all-reduce: tpsim against measurements (overall {total:.0%})",
                 fontsize=10)  # fmt: skip
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    save_figure(fig, path)


def engine_calibration_scatter(
    results: Sequence[tuple[str, float, float]],
    errors: Mapping[str, float],
    bound: float,
    path: Path,
) -> None:
    """Simulated against measured step time, one marker per measurement file (each result:
    its file, measured and simulated seconds; ``errors``: each file's geomean error), with
    the ``bound`` band dotted."""
    markers = {"lmdeploy": ("o", "#0072B2"), "tgi": ("s", "#D55E00"), "vllm-2023": ("^", "#009E73")}
    fig = Figure(figsize=(6.5, 6))
    ax = fig.subplots()
    lo = min(min(m, s) for _, m, s in results) * 1e3 / 1.5
    hi = max(max(m, s) for _, m, s in results) * 1e3 * 1.5
    ax.plot([lo, hi], [lo, hi], "-", color="#000000", lw=1, label="simulated = measured")
    for f in (1 - bound, 1 + bound):
        ax.plot([lo, hi], [lo * f, hi * f], ":", color="#999999", lw=1)
    for file, (marker, colour) in markers.items():
        pts = [(m * 1e3, s * 1e3) for f, m, s in results if f == file]
        if pts:
            err = errors[file]
            ax.scatter([m for m, _ in pts], [s for _, s in pts], marker=marker, color=colour,
                       label=f"{file} ({len(pts)}, geomean error {err:.0%})")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured (ms)")
    ax.set_ylabel("simulated (ms)")
    ax.set_title(f"serving engines end to end (dotted: ±{bound:.0%})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def kernel_study(
    rows: Sequence[Row],
    phase: str,
    path: Path,
    models: Sequence[str],
    topologies: Sequence[str],
    tps: Sequence[int],
    context: int,
    prompt: int,
) -> None:
    """Step time, achieved HBM bandwidth and MFU against batch for up to two models, a row
    of panels per topology."""
    metrics = (
        ("latency_ms", "step time (ms)", True),
        ("hbm_TBps", "achieved HBM (TB/s, all kernels / step)", False),
        ("mfu", "MFU (step FLOPs / step x peak)", False),
    )
    fig = Figure(figsize=(16, 9), dpi=110)
    axes = fig.subplots(len(topologies), 3, squeeze=False)
    colors = {1: "tab:blue", 2: "tab:orange", 4: "tab:green", 8: "tab:red"}
    styles = dict(zip(models, ("-", "--"), strict=False))
    for i, topo in enumerate(topologies):
        for j, (key, label, log) in enumerate(metrics):
            ax = axes[i][j]
            for model in models:
                for tp in tps:
                    pts = sorted(
                        (r["batch"], r[key])
                        for r in rows
                        if (r["model"], r["topology"], r["phase"], r["tp"])
                        == (model, topo, phase, tp)
                    )
                    if pts:
                        ax.plot(
                            *zip(*pts, strict=True),
                            styles[model],
                            color=colors[tp],
                            marker="o",
                            ms=3,
                            label=f"{model} TP{tp}",
                        )
            if key == "hbm_TBps":
                peak = get_gpu("a100-sxm-80gb" if "a100" in topo else "h100-sxm").hbm_Bps / 1e12
                ax.axhline(peak, color="k", lw=0.8, ls=":", label="HBM peak")
            ax.set_xscale("log", base=2)
            if log:
                ax.set_yscale("log")
            ax.set_xlabel("batch (sequences)")
            ax.set_ylabel(label)
            ax.set_title(f"{topo}, {phase}")
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(models) * len(tps), fontsize=8)
    what = f"context {context}" if phase == "decode" else f"prompts of {prompt}"
    fig.suptitle(f"Kernel study: {phase} ({what}), default options (graph launch, fused)")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    save_figure(fig, path)


def kernel_accuracy(
    path: Path,
    p: Mapping[str, Sequence[float]],
    e: Mapping[str, Mapping[str, float]],
    measured: Sequence[Any],
    families: Sequence[str],
    extra: Collection[str],
    variants: Sequence[str],
) -> None:
    """Measured against simulated, log-log, one panel per variant (``p[variant]``: a time per
    ``measured`` case, each with ``measured_s``, ``family`` and ``gpu``; ``e``: the geomean
    error per variant and family), a colour per family (hollow: those in ``extra``), +-15%
    dashed."""
    fig = Figure(figsize=(22, 5.6), dpi=100)
    colours = [colormaps["tab20"](i / 20) for i in range(0, 2 * len(families), 2)]
    markers = {"a100-sxm-80gb": "o", "h100-sxm": "^"}
    for j, v in enumerate(variants):
        ax = fig.add_subplot(1, len(variants), j + 1)
        for f, colour in zip(families, colours, strict=True):
            for gpu, marker in markers.items():
                pts = [(c.measured_s * 1e6, p[v][i] * 1e6) for i, c in enumerate(measured)
                       if c.family == f and c.gpu == gpu]  # fmt: skip
                if not pts:
                    continue
                label = f"{f} ({100 * e[v][f]:.0f}%)" if gpu == "a100-sxm-80gb" else None
                hollow = "none" if f in extra else colour
                xs, ys = [m for m, _ in pts], [t for _, t in pts]
                ax.scatter(xs, ys, s=9, marker=marker, facecolors=hollow, edgecolors=colour,
                           linewidths=0.6, label=label)  # fmt: skip
        lo, hi = 0.8, 2.5e4
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)
        for band in (0.85, 1.15):
            ax.plot([lo, hi], [lo * band, hi * band], color="grey", linewidth=0.5, ls="--")
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
               xlabel="measured kernel time (us, Vidur)", ylabel="simulated (us)")  # fmt: skip
        title = {"today": "analytic, shipped calibration", "refit": "analytic, _kernels refit",
                 "tables": "shipped kernel tables",
                 "between": "tables, each point left out (interpolated)"}[v]  # fmt: skip
        ax.set_title(f"{title}", fontsize=10)
        ax.legend(fontsize=6, loc="upper left", title="geomean error (o A100, ^ H100)",
                  title_fontsize=6)  # fmt: skip
        ax.grid(True, which="major", linewidth=0.3)
    fig.tight_layout()
    save_figure(fig, path)
