"""A figure to a file: PNG or SVG by the path's suffix, written atomically and without
volatile metadata, so the same figure gives the same bytes."""

from __future__ import annotations

from pathlib import Path

from matplotlib import rc_context
from matplotlib.figure import Figure
from tpsim.outputs.export import atomic_output

FORMATS = {".png": "png", ".svg": "svg"}


def figure_format(path: str | Path) -> str:
    """``png`` or ``svg`` for ``path``'s suffix (ValueError for any other)."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise ValueError(f"plot path {str(path)!r}: must end in .png or .svg")
    return fmt


def save_figure(fig: Figure, path: str | Path) -> None:
    """Write ``fig`` to ``path`` (.png or .svg) atomically, without volatile metadata, so
    the same figure gives the same bytes; then clear it."""
    fmt = figure_format(path)
    with rc_context({"svg.hashsalt": "tpsim"}), atomic_output(path) as tmp:
        metadata = {"Software": None} if fmt == "png" else {"Date": None}
        fig.savefig(tmp, format=fmt, metadata=metadata)
    fig.clear()
