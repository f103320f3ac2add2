"""The rows of a ``#``-commented CSV file: the published measurements in ``measured/``.

Such a file opens with ``#`` lines (its source, what was measured) before or between its
rows; :func:`csv_rows` drops those and the empty lines and reads the rest with
:class:`csv.DictReader`, the first remaining line its header.
"""

from __future__ import annotations

import csv
from pathlib import Path

__all__ = ["csv_rows"]


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of the CSV file ``path`` as dicts keyed by its header, ``#`` lines and empty
    lines left out. Errors of reading the file (a missing one: FileNotFoundError) propagate."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return list(csv.DictReader(lines))
