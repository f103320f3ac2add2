"""A plotly figure as an HTML ``<div>``, the same bytes wherever it is written.

plotly serialises a figure's data with orjson when orjson is installed and with the
standard library's json otherwise ("auto"), and the two write different bytes: orjson keeps
"·" as UTF-8 where json writes ``\\u00b7``, and their floats are spelt differently. A report
written on a machine that happens to have orjson differed from the same report written
without it (CI's first failure of the report's lane test). Every HTML figure tpsim writes
goes through :func:`figure_div`, which pins the standard library's json.
"""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

__all__ = ["figure_div"]

#: The chart's toolbar: no plotly logo; the chart follows the page's width.
CONFIG = {"displaylogo": False, "responsive": True}


def figure_div(fig: go.Figure, div_id: str, include_plotlyjs: bool) -> str:
    """``fig`` as an HTML fragment with id ``div_id``, its data written by the standard
    library's json whatever plotly would pick; ``include_plotlyjs`` inlines plotly.js
    (the first figure of a page)."""
    config = pio.json.config
    engine = config.default_engine
    config.default_engine = "json"
    try:
        return str(
            fig.to_html(
                full_html=False,
                include_plotlyjs=include_plotlyjs,
                div_id=div_id,
                config=CONFIG,
            )
        )
    finally:
        config.default_engine = engine
