"""`tpsim report`: one self-contained HTML file, the same bytes for the same input, and
rendered by a real browser (Debian's chromium-headless-shell driven by Playwright)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from tpsim.cli import main

REVIEW = [
    "--model", "llama-3.1-70b", "--topology", "dgx-h100", "--tp", "8,16", "--nodes", "1,2",
    "--batch", "8", "--context-len", "2048",
]  # fmt: skip
# the second design-review question: eager against CUDA graphs for an 8B model at TP 4
EAGER = ["--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "4", "--batch", "8",
         "--launch", "eager,graph"]  # fmt: skip


def _report(tmp_path: Path, argv: list[str], name: str = "r.html") -> Path:
    out = tmp_path / name
    assert main(["report", *argv, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def review_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _report(tmp_path_factory.mktemp("report"), REVIEW)


@pytest.mark.slow
def test_report_is_self_contained_and_deterministic(review_html: Path, tmp_path: Path) -> None:
    text = review_html.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    # plotly.js inlined once; nothing fetched from the network when the file is opened
    assert not re.search(r"<script[^>]+src=", text)
    assert text.count("plotly.js v") <= 2  # the library's own banner, once
    assert "Which is better: TP 8, 1 node or TP 16, 2 nodes?" in text
    assert "x the tokens/s of" in text  # the verdict
    again = _report(tmp_path, REVIEW, "again.html")
    # the same bytes but for the command line, which names the file written
    assert again.read_bytes().replace(bytes(again), b"OUT") == review_html.read_bytes().replace(
        bytes(review_html), b"OUT"
    )


def test_report_of_a_sweep_file(tmp_path: Path) -> None:
    results = tmp_path / "s.csv"
    assert (
        main(
            [
                "sweep",
                "--model",
                "llama-3.1-8b",
                "--topology",
                "dgx-h100",
                "--tp",
                "1,2",
                "--batch",
                "1,8",
                "--out",
                str(results),
                "--quiet",
                "--jobs",
                "1",
            ]
        )
        == 0
    )
    out = _report(tmp_path, [str(results)])
    text = out.read_text(encoding="utf-8")
    assert 'id="sweep"' in text and "4 points, 0 with errors" in text


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["--out", "x.png", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1"],
            "--out=x.png: must end in .html",
        ),
        (["--out", "r.html"], "give a results file, or run's flags"),
        (
            [
                "--out",
                "/nonexistent/r.html",
                "--model",
                "llama-3.1-8b",
                "--topology",
                "dgx-h100",
                "--tp",
                "1",
            ],
            "does not exist",
        ),
    ],
)
def test_bad_reports_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    assert main(["report", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


def _chromium() -> str | None:
    return os.environ.get("TPSIM_CHROMIUM") or shutil.which("chromium-headless-shell")


@pytest.mark.skipif(_chromium() is None, reason="no chromium-headless-shell (.ci/run installs it)")
@pytest.mark.parametrize("case", ["review", "eager"])
@pytest.mark.slow
def test_report_renders_in_a_real_browser(case: str, review_html: Path, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    html = review_html if case == "review" else _report(tmp_path, EAGER)
    drawn = [
        int(n.replace(",", "")) for n in re.findall(r"([\d,]+) records drawn", html.read_text())
    ]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium())
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(html.as_uri())
        page.wait_for_selector("#gantt0 .plot-container")
        assert errors == []
        # one bar per record in view, in every Gantt
        for i, n in enumerate(drawn):
            bars = page.evaluate(f"document.querySelectorAll('#gantt{i} g.point').length")
            assert bars == n
        # hovering a bar shows its op name
        bar = page.locator("#gantt0 g.point path").nth(drawn[0] // 2)
        bar.scroll_into_view_if_needed()
        bar.hover(force=True)
        page.wait_for_selector("#gantt0 .hoverlayer .hovertext", timeout=5000)
        tip = page.evaluate(
            "[...document.querySelectorAll('#gantt0 .hoverlayer .hovertext text tspan')]"
            ".map(t => t.textContent)"
        )
        assert any("duration" in t for t in tip) and any("bytes" in t for t in tip)
        # the first line is the op's name, as the records name it
        ops = set(re.findall(r'\["([^"]+)","', html.read_text()))
        assert tip[0] in ops, tip
        start, duration = (
            float(t.split()[1].replace(",", "")) for t in tip if t.startswith(("start", "duration"))
        )
        assert 0 <= duration < start + duration
        shot = tmp_path / f"report-{case}.png"
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert shot.stat().st_size > 10_000
    keep = os.environ.get("TPSIM_REPORT_SHOTS")
    if keep:  # look at it: TPSIM_REPORT_SHOTS=/tmp pytest tests/experiments/test_report.py
        shutil.copy(shot, Path(keep) / shot.name)
