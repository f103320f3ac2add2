"""One palette and one set of font sizes for every chart tpsim draws: the PNG/SVG Gantt,
the sweep charts and the HTML report's plotly figures import their colours from here, so a
category has one colour wherever it appears.

Colours are Okabe-Ito (colour-blind safe). A record's *kind* takes the colour of the
breakdown *category* it usually falls in: a GEMM is compute blue, an elementwise kernel
memory sky blue, a collective communication vermillion, host work brown, a launch grey.
No matplotlib or plotly here: plain data, importable from anywhere in the plots layer.
"""

from __future__ import annotations

#: One colour per critical-path category (``Record.category``, the summary's breakdown).
CATEGORY_COLOURS: dict[str, str] = {
    "compute": "#0072B2",  # blue
    "memory": "#56B4E9",  # sky blue
    "communication": "#D55E00",  # vermillion
    "launch_overhead": "#999999",  # grey
    "host": "#8C6D31",  # brown: engine host work (schedule, sample, Python per layer)
    "bubble": "#F0E442",  # yellow: a pipeline stage waiting for its neighbour
    "idle": "#DDDDDD",  # light grey
}

#: One colour per record kind, in the colour of the category the kind stands for.
KIND_COLOURS: dict[str, str] = {
    "launch": CATEGORY_COLOURS["launch_overhead"],
    "host": CATEGORY_COLOURS["host"],
    "dispatch": "#CCCCCC",  # light grey: the GPU's gap before an eagerly launched kernel
    "gemm": CATEGORY_COLOURS["compute"],
    "attention": "#CC79A7",  # reddish purple
    "elementwise": CATEGORY_COLOURS["memory"],
    "collective": CATEGORY_COLOURS["communication"],
    "collective (network)": "#882255",  # wine: a collective step whose sends cross hosts
    "all-to-all": "#F0E442",  # yellow: MoE token dispatch and combine
    "p2p": "#E69F00",  # orange: pipeline sends and receives
}
#: A kind not listed above.
OTHER_COLOUR = "#009E73"  # bluish green
#: The critical path (the Gantt's rail under a bar).
CRITICAL_COLOUR = "#000000"
#: Kinds whose bars are dark enough for white text.
DARK_KINDS = frozenset({"gemm", "host", "attention", "collective", "collective (network)"})

#: Lines of a chart with one line per configuration, in order.
LINE_COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]

#: Font sizes in points, for a figure 12 inches wide shown on a 16:9 slide: nothing under
#: ``MIN_FONT_PT``.
MIN_FONT_PT = 9.0
TITLE_PT = 13.0
LABEL_PT = 11.0  # axis titles, lane names, legend, layer labels
TICK_PT = 10.0
BAR_NAME_PT = 9.0  # op names written inside bars

#: The style sheet of the HTML reports (tpsim report, tpsim report --serve).
REPORT_CSS = """
*, *::before, *::after { box-sizing: border-box; }
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222;
  padding: 0 1.5em; line-height: 1.4; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
.verdict { font-size: 1.1em; background: #f3f6fa; border-left: 4px solid #0072B2;
  padding: .8em 1em; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; }
table td, table th { padding: .25em .8em; text-align: left; border-bottom: 1px solid #ddd;
  vertical-align: top; }
table.side td { text-align: right; font-variant-numeric: tabular-nums; }
table.side tr.section th { padding-top: .8em; border-bottom: 1px solid #999; }
table.side th.sub { padding-left: 1.6em; font-weight: normal; }
table.facts th { white-space: nowrap; }
code { font-size: .9em; overflow-wrap: anywhere; }
.note { color: #666; font-size: .9em; }
"""
