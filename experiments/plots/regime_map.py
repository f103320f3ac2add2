"""The regime map of sweep rows: TP (or layout) by batch, each cell coloured by its regime and
labelled with tokens/s and the regime's share, near ties, points that do not fit and failed
points each shown apart. A pipeline's cell is its stages kept full (tokens/s and regime as
``compare`` and ``plan`` count them: :func:`~tpsim.experiments.plots.figure.rate`,
:func:`~tpsim.experiments.plots.words.row_regime`). Drawn on a bare ``Figure`` by
:func:`draw_regime_map` and written atomically by :func:`regime_map`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from textwrap import fill

from matplotlib.colors import ListedColormap, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from tpsim.experiments.plots import figure as shared
from tpsim.experiments.plots.save import save_figure
from tpsim.experiments.plots.words import near_tie, regime_margin, row_regime
from tpsim.experiments.sweep.rows import kept_full
from tpsim.outputs.text import NEAR_TIE, is_near_tie

REGIME_COLOURS = {
    "compute-bound": "#0072B2",
    "memory-bound": "#56B4E9",
    "communication-bound": "#D55E00",
    "overhead-bound": "#999999",
    "bubble-bound": "#CC79A7",  # a pipeline's fill: its own colour, not the error grey
}


def _lighter(colour: str, by: float = 0.55) -> tuple[float, float, float]:
    r, g, b = to_rgb(colour)
    return (r + (1 - r) * by, g + (1 - g) * by, b + (1 - b) * by)


def _short(regime: str) -> str:
    return regime.removesuffix("-bound")


def draw_regime_map(rows: Sequence[shared.Row], *, title: str) -> Figure:
    tps = sorted({shared.layout_of(r) for r in rows})  # one column per layout, by TP degree first
    batches = sorted({r["batch"] for r in rows})
    regimes = list(REGIME_COLOURS)
    n = len(regimes)
    # Colours: each regime, then its lighter shade (a near tie), then error, then empty.
    shades: list[str | tuple[float, float, float]] = [*REGIME_COLOURS.values()]
    shades += [_lighter(c) for c in REGIME_COLOURS.values()]
    cmap = ListedColormap([*shades, "#DDDDDD", "#FFFFFF"])
    failed, empty = 2 * n, 2 * n + 1
    grid = [[empty] * len(tps) for _ in batches]
    # one row per cell: a run that fits over one that does not over an error, then the
    # placement over the fewest hosts (the others are in throughput_vs_tp and breakdown)
    ordered = sorted(rows, key=lambda r: (shared.outcome(r), r.get("hosts") or 1), reverse=True)
    cells = {(r["batch"], shared.layout_of(r)): r for r in ordered}
    hidden = sum(
        1
        for r in rows
        if not r.get("error")
        and (r.get("hosts") or 1) > (cells[r["batch"], shared.layout_of(r)].get("hosts") or 1)
    )
    fig = shared.bare_figure(1.6 * len(tps) + 5.0, 0.75 * len(batches) + 2.5)
    ax = fig.subplots()
    present: set[str] = set()
    ties = False
    for (batch, tp), r in cells.items():
        y, x = batches.index(batch), tps.index(tp)
        regime = row_regime(r) if shared.ok(r) else r.get("regime")
        if not shared.rated(r) and shared.ok(r):  # its batches in flight do not fit
            grid[y][x] = empty
        elif r.get("fits") is False and not r.get("error"):
            grid[y][x] = empty  # white, hatched: no regime of a layout that cannot run
        elif regime in regimes and not r.get("error"):
            tie = near_tie(r)
            ties |= tie
            grid[y][x] = regimes.index(regime) + (n if tie else 0)
            present.add(regime)
        else:
            grid[y][x] = failed
    ax.imshow(grid, cmap=cmap, vmin=0, vmax=empty, aspect="auto", origin="lower")
    for (batch, tp), r in sorted(cells.items()):
        y, x = batches.index(batch), tps.index(tp)
        regime = row_regime(r) if shared.ok(r) else r.get("regime")
        tie = False
        if r.get("error"):
            text = "error"
        elif not shared.rated(r):  # no tokens/s: a reviewer must not quote an impossible one
            full = shared.ok(r)  # the pipeline fits, its batches in flight do not
            needs = r.get("in_flight_bytes_per_gpu" if full else "total_bytes_per_gpu")
            text = ("full: " if full else "") + "does not fit"
            text += f"\nneeds {needs / 1e9:.0f} GB/GPU" if needs else ""
            ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, hatch="///", linewidth=0))
        else:
            share, second, share2 = regime_margin(r)
            tie = is_near_tie(share, share2)
            kept = " (full)" if kept_full(r) else ""
            rate = shared.compact(shared.rate(r)[0])
            text = f"{rate} tok/s{kept}\n{_short(str(regime))} {share:.0%}"
            if tie:
                text += f"\n{_short(second)} {share2:.0%}"
                ax.add_patch(
                    Rectangle(
                        (x - 0.5, y - 0.5), 1, 1, fill=False, hatch="..", linewidth=0, gid="tie"
                    )
                )
        dark = regime in ("compute-bound", "communication-bound") and not tie
        plain = not shared.rated(r) or tie
        box = {"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1.5}
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=shared.FONT - 3,
            color="white" if dark and r.get("fits") else "black",
            bbox=box if plain else None,
        )
    plain_tp = all(k[1:] == shared.PLAIN for k in tps)
    # a column is 1.6 inches: about 20 characters of its tick label a line
    names = [str(k[0]) if plain_tp else shared.layout_lines(k, 20) for k in tps]
    ax.set_xticks(range(len(tps)), names)
    ax.set_yticks(range(len(batches)), [str(b) for b in batches])
    ax.set_xlabel("TP degree (GPUs)" if plain_tp else "layout", fontsize=shared.FONT)
    ax.set_ylabel("batch (sequences)", fontsize=shared.FONT)
    ax.tick_params(labelsize=shared.FONT - 1)
    handles = [Patch(facecolor=c, label=k) for k, c in REGIME_COLOURS.items() if k in present]
    if ties:
        handles.append(
            Patch(
                facecolor=_lighter("#777777"),
                hatch="..",
                label=f"lighter, dotted: runner-up\nwithin {NEAR_TIE * 100:.0f} points",
            )
        )
    if any(not shared.rated(r) and not r.get("error") for r in rows):
        handles.append(
            Patch(facecolor="white", edgecolor="#444444", hatch="///", label="does not fit")
        )
    if any(r.get("error") for r in rows):
        handles.append(Patch(facecolor="#DDDDDD", label="error"))
    shared.legend_outside(ax, handles=handles, fontsize=shared.FONT - 2)
    note = (
        f"\n{hidden} placement{'s' if hidden > 1 else ''} over more hosts not drawn "
        "(throughput_vs_tp and breakdown show them)"
        if hidden > 0
        else ""
    )
    text = title + note + shared.pipeline_note(list(cells.values()))
    # a map of few layouts is narrower than its title: each line wrapped to the axes (the
    # figure less the legend's strip; about 11 characters an inch), not cut off at its edges
    fit = max(40, int(11 * (fig.get_figwidth() - 2.8)))
    ax.set_title("\n".join(fill(line, fit) for line in text.split("\n")), fontsize=shared.FONT)
    fig.tight_layout()
    return fig


def regime_map(rows: Sequence[shared.Row], path: str | Path, *, title: str) -> None:
    """TP (x) by batch (y), each cell coloured by its regime and labelled with tokens/s and
    the regime's share of the critical path; a cell whose runner-up is within 15 points is a
    lighter, dotted shade naming the runner-up; layouts that do not fit are hatched, failed
    points grey. The legend lists only what the map shows."""
    save_figure(draw_regime_map(rows, title=title), path)
