"""A report that can be circulated (#27): it names what it is about and how it was made,
its side-by-side section is a real table, and no text from an input file becomes a link."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from importlib.metadata import version
from pathlib import Path

import pytest
from tpsim.cli import main
from tpsim.experiments.plots.report_charts import log_ticks, sweep_figure

ARGV = [
    "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "2,4", "--batch", "8",
    "--context-len", "2048",
]  # fmt: skip


class _Page(HTMLParser):
    """The text of each table (by id) as rows of cells, the links, and the scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.links: list[dict[str, str | None]] = []
        self.scripts: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "a" or "href" in a:
            self.links.append(a)
        if tag == "table":
            self._table = a.get("id") or f"table{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        elif tag == "script":
            self._script = True
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "script":
            self._script = False

    def handle_data(self, data: str) -> None:
        if self._script:
            self.scripts[-1] += data
        elif self._cell is not None:
            self._cell.append(data)


def _page(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


DATA = Path(__file__).parents[1] / "data"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("circulated") / "r.html"
    assert main(["report", *ARGV, "--out", str(out)]) == 0
    return out


def test_report_names_what_it_is_about_and_how_it_was_made(report: Path) -> None:
    page = _page(report)
    facts = {row[0]: row[1] for row in page.tables["facts"]}
    assert facts["model"] == "llama-3.1-8b"
    assert facts["phase"] == "decode"
    assert facts["batch"] == "8"
    assert facts["context length"] == "2048 tokens"
    assert facts["prompt length"] == "512 tokens"
    assert facts["dtype"] == "bf16"
    assert facts["engine"] == "vllm"
    assert facts["topology"] == "dgx-h100"
    assert facts["tpsim version"] == version("tpsim")
    command = facts["command"]
    assert command.startswith("tpsim report ") and command.endswith(f"--out {report}")
    for flag, value in zip(ARGV[::2], ARGV[1::2], strict=True):
        assert f"{flag} {value}" in command
    text = report.read_text(encoding="utf-8")
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text.split("<script")[0])  # no date


def test_side_by_side_is_a_real_table(report: Path) -> None:
    page = _page(report)
    assert "<pre>" not in report.read_text(encoding="utf-8")
    rows = page.tables["side-by-side"]
    assert rows[0] == ["", "TP 2", "TP 4"]
    by_name = {r[0]: r[1:] for r in rows[1:] if len(r) == 3}
    assert set(by_name) >= {"latency per step", "tokens/s", "tokens/s per GPU", "GPUs", "regime"}
    assert by_name["GPUs"] == ["2", "4"]
    assert all(re.fullmatch(r"[\d.]+ ms", c) for c in by_name["latency per step"])
    assert ["critical path"] in rows and ["assumptions"] in rows  # section headings


def test_report_differs_only_in_its_command_line(report: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.html"
    assert main(["report", *ARGV, "--out", str(other)]) == 0
    a = report.read_text(encoding="utf-8").replace(str(report), "OUT")
    b = other.read_text(encoding="utf-8").replace(str(other), "OUT")
    assert a == b


EVIL = '<a href="https:evil.example">click</a> http:evil.example'


def test_input_text_never_becomes_a_link(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    cfg = json.loads((DATA / "models" / "tiny-llama" / "config.json").read_text())
    cfg["_name_or_path"] = EVIL.replace("/", "")
    (model / "config.json").write_text(json.dumps(cfg))
    topo = tmp_path / "topo.yaml"
    text = (DATA / "topologies" / "pair.yaml").read_text()
    topo.write_text(text.replace("name: two-gpus", f"name: '{EVIL} http://evil.example'"))
    out = tmp_path / "r.html"
    argv = [
        "--model",
        str(model),
        "--topology",
        str(topo),
        "--tp",
        "1,2",
        "--batch",
        "1",
        "--context-len",
        "32",
    ]
    assert main(["report", *argv, "--out", str(out)]) == 0
    page = _page(out)
    assert page.links == []  # no <a> or href anywhere in the page's markup
    html_text = out.read_text(encoding="utf-8")
    assert "evil.example" in html_text  # the names are there, as text
    # plotly reads <a href> in figure labels: the figures' data carry the names escaped
    figures = [s for s in page.scripts if "Plotly.newPlot" in s]
    assert figures
    for script in figures:
        decoded = script.encode().decode("unicode_escape", errors="ignore")
        assert not re.search(r"<a\b|href=", decoded, re.IGNORECASE)
    facts = {row[0]: row[1] for row in page.tables["facts"]}
    assert facts["model"] == EVIL.replace("/", "")


def test_sweep_chart_merges_identical_lines_and_labels_few_ticks() -> None:
    row = {"model": "m", "topology": "t", "nodes": 1, "phase": "decode", "engine": "vllm"}
    rows = [
        {**row, "tp": tp, "batch": b, "tokens_per_s_per_gpu": rate * b, "latency_s": 0.01}
        for tp, rate in ((1, 100.0), (2, 100.0), (4, 60.0))
        for b in (1, 2, 4, 8, 16)
    ]
    fig = sweep_figure(rows)
    names = [t.name for t in fig.data]
    assert names == ["TP 1 = TP 2 (the same points)", "TP 4"]
    assert "model m" in fig.layout.title.text and "TP" not in fig.layout.title.text
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 4, 8, 16]
    assert list(fig.layout.yaxis.tickvals) == log_ticks(60.0, 1600.0)
    assert log_ticks(60.0, 1600.0) == [50.0, 100.0, 200.0, 500.0, 1000.0]
    assert len(log_ticks(1.0, 1e9)) <= 10


def test_every_line_of_a_sweep_chart_has_its_own_look() -> None:
    """Eight series: the 7-colour palette wrapped round and gave two the same colour and
    marker; past it, lines differ in dash and marker."""
    row = {"model": "m", "topology": "t", "nodes": 1, "phase": "decode", "engine": "vllm"}
    rows = [
        {**row, "tp": tp, "batch": b, "tokens_per_s_per_gpu": tp * 10.0 + b, "latency_s": 0.01}
        for tp in range(1, 9)
        for b in (1, 2)
    ]
    fig = sweep_figure(rows)
    looks = {(t.line.color, t.line.dash, t.marker.symbol) for t in fig.data}
    assert len(fig.data) == 8 and len(looks) == 8


def test_sweep_chart_leaves_out_points_that_do_not_fit() -> None:
    """A point whose step does not fit its GPUs' memory was drawn as if it ran (the sweep's
    PNG plots already left it out)."""
    row = {"model": "m", "topology": "t", "nodes": 1, "phase": "decode", "engine": "vllm"}
    rows = [
        {**row, "tp": tp, "batch": 8, "tokens_per_s_per_gpu": 10.0 * tp, "latency_s": 0.01,
         "fits": tp > 1}
        for tp in (1, 2, 4)
    ]  # fmt: skip
    fig = sweep_figure(rows)
    assert [t.name for t in fig.data] == ["TP 2", "TP 4"]
    assert [list(t.y) for t in fig.data] == [[20.0], [40.0]]


def test_sweep_note_counts_a_pipeline_whose_batches_in_flight_do_not_fit() -> None:
    """A pipeline whose one batch fits but whose batches in flight do not is left out of the
    chart (its tokens/s kept full do not run); the note counted it neither with the errors
    nor among the points not fitting ('2 points, 0 with errors, 0 not fitting')."""
    from tpsim.experiments.report import html_report
    from tpsim.experiments.sweep.rows import COLUMNS

    row = {c: None for c in COLUMNS} | {
        "model": "m", "topology": "t", "nodes": 1, "phase": "decode", "engine": "vllm",
        "batch": 8, "latency_s": 0.01, "fits": True, "tp": 2, "pp": 1,
        "tokens_per_s": 40.0, "tokens_per_s_per_gpu": 20.0,
    }  # fmt: skip
    flight = {"in_flight_batches": 2, "in_flight_tpot_s": 0.01, "in_flight_tokens_per_s":
              1600.0, "in_flight_tokens_per_s_per_gpu": 400.0, "in_flight_bytes_per_gpu": 10,
              "in_flight_fits": False, "in_flight_largest_batch": 4}  # fmt: skip
    rows = [row, {**row, "pp": 2, "tokens_per_s_per_gpu": 10.0, **flight}]
    assert len(sweep_figure(rows).data) == 1  # the PP 1 line alone
    text = html_report([], question="q", sweep_rows=rows)
    assert "2 points, 0 with errors, 1 not fitting in memory (neither drawn)" in text


def test_a_report_is_the_same_bytes_with_or_without_orjson(monkeypatch) -> None:
    """plotly writes a figure's data with orjson when it is installed ("auto"): "·" stayed
    UTF-8 where json writes \\u00b7, so a report made on a machine with orjson differed from
    the same report made without it (and CI's lane test failed). figure_div pins json,
    whatever the engine is set to, and puts the setting back."""
    import plotly.graph_objects as go
    import plotly.io as pio
    from tpsim.experiments.plots.plotly_html import figure_div

    fig = go.Figure(go.Bar(x=[1.0 / 3.0], y=["gpu0 \u00b7 compute"]))
    plain = figure_div(fig, "d", include_plotlyjs=False)
    assert "gpu0 \\u00b7 compute" in plain and "0.3333333333333333" in plain
    try:
        import orjson  # noqa: F401
    except ImportError:
        engines = ["json"]
    else:
        engines = ["json", "orjson", "auto"]
    for engine in engines:
        monkeypatch.setattr(pio.json.config, "default_engine", engine)
        assert figure_div(fig, "d", include_plotlyjs=False) == plain
        assert pio.json.config.default_engine == engine
