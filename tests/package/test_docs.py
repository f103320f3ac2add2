"""The docs run: every command they show succeeds, every relative link resolves, and the CLI
reference is the one its generator writes today.

How commands are found. In README.md and docs/*.md, a fenced block whose language (the first
word of its info string) is ``console``, ``bash`` or ``sh`` is read line by line; a line
starting ``tpsim `` or ``$ tpsim `` (with ``\\``-continued lines joined) is a command, as is
``python -m tpsim...``; in a block with ``$ `` prompts only the prompted lines are (the rest
is their output). Other lines (``pip ...``, comments) are not run.

How they run. The commands of one page run in page order in one temporary folder (so the
sweep that writes ``s.csv`` feeds a ``tpsim plot s.csv`` after it), ``tpsim`` in-process
through ``tpsim.cli.main(shlex.split(...))``, and each must exit 0. A fenced block whose info
string names a file, `` ```yaml file=grid.yaml ``, is written into that folder first, so
commands can read the grids, profiles and measurements the page shows.

Slow commands. A block whose language is ``console-slow`` holds commands too slow for the
fast loop (whole studies, the demo, ``tpsim calibrate``, ``tpsim plan`` over two nodes,
plots, validation and calibration scripts): the fast test only parses them with tpsim's own
parser (an unknown flag or a typo fails), and ``test_slow_commands_run`` runs them under
``pytest -m slow`` (``python -m`` commands in a subprocess). ```` ```python ```` blocks of
the docs run too (the README's has its own test in test_readme.py).
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from tpsim.cli import main
from tpsim.cli.reference import render

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "ARCHITECTURE.md"]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
RUN = {"console", "bash", "sh"}
SLOW = {"console-slow"}


def fences(page: Path) -> list[tuple[str, str, str]]:
    """(language, the rest of the info string, body) of every fenced block of a page."""
    out = []
    for info, body in FENCE.findall(page.read_text()):
        lang, _, rest = info.strip().partition(" ")
        out.append((lang, rest.strip(), body))
    return out


def commands(body: str) -> list[str]:
    lines, out, cur = body.splitlines(), [], ""
    prompted = any(line.startswith("$ ") for line in lines)  # then the rest is output
    starts = ("$ tpsim ", "$ python -m tpsim")
    if not prompted:
        starts += ("tpsim ", "python -m tpsim")
    for line in lines:
        if cur:
            cur += " " + line.strip()
        elif line.startswith(starts):
            cur = line.removeprefix("$ ").strip()
        else:
            continue
        if cur.endswith("\\"):
            cur = cur[:-1].rstrip()
        else:
            out.append(cur)
            cur = ""
    return out


def page_commands(page: Path, langs: set[str]) -> list[str]:
    return [c for lang, _, body in fences(page) if lang in langs for c in commands(body)]


def write_files(page: Path, folder: Path) -> None:
    for _, rest, body in fences(page):
        named = re.search(r"\bfile=(\S+)", rest)
        if named:
            (folder / named.group(1)).write_text(body)


def run(command: str, folder: Path) -> tuple[int, str]:
    args = shlex.split(command, comments=True)
    if args[0] == "tpsim":
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(args[1:])
        return rc, err.getvalue()
    done = subprocess.run(
        [sys.executable, *args[1:]], cwd=folder, capture_output=True, text=True, timeout=3600
    )
    return done.returncode, done.stderr[-2000:]


def ids(pages: list[Path]) -> list[str]:
    return [p.relative_to(REPO).as_posix() for p in pages]


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_commands_run(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    write_files(page, tmp_path)
    for command in page_commands(page, RUN):
        rc, err = run(command, tmp_path)
        assert rc == 0, f"{page.name}: `{command}` exited {rc}: {err}"
    for command in page_commands(page, SLOW):  # too slow to run here: at least they parse
        if command.startswith("tpsim "):
            from tpsim.cli import _parser

            _parser().parse_args(shlex.split(command, comments=True)[1:])
    for lang, _, body in fences(page):
        if lang == "python" and page.name != "README.md":
            exec(compile(body, str(page), "exec"), {})


#: Pages whose slow commands take minutes (whole studies; calibrate, plan over two nodes and
#: the validation reports in the guide): a benchmark (pytest -m benchmark), out of CI's budget;
#: the fast test still parses them, and each study has its own reduced test.
LONG = {"docs/studies.md", "docs/guide.md"}
SLOW_PAGES = [
    pytest.param(p, marks=pytest.mark.benchmark) if i in LONG else p
    for p, i in zip(PAGES, ids(PAGES), strict=True)
]


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW_PAGES, ids=ids(PAGES))
def test_slow_commands_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_files(page, tmp_path)
    for command in page_commands(page, SLOW):
        rc, err = run(command, tmp_path)
        assert rc == 0, f"{page.name}: `{command}` exited {rc}: {err}"


def test_every_page_runs_something() -> None:
    """The README and the guide show commands, and each is found (the parser above sees them)."""
    for name, least in (("README.md", 4), ("docs/guide.md", 10)):
        assert len(page_commands(REPO / name, RUN)) >= least, name


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_relative_links_resolve(page: Path) -> None:
    text = FENCE.sub("", page.read_text())
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#")[0]
        assert (page.parent / path).exists(), f"{page.name}: link to {target} is broken"


def test_cli_reference_is_current() -> None:
    """docs/cli.md is what `python -m tpsim.cli.reference --out docs/cli.md` writes."""
    committed = (REPO / "docs" / "cli.md").read_text()
    assert committed == render(), (
        "docs/cli.md is stale: python -m tpsim.cli.reference --out docs/cli.md"
    )


def test_the_serve_page_s_sample_output_is_current(capsys: pytest.CaptureFixture) -> None:
    """The abridged output docs/serve.md shows for its first command at 400 requests: every
    line it shows is a line the command prints today."""
    page = REPO / "docs" / "serve.md"
    text = page.read_text()
    lead = "With 400 requests instead of 100, the first prints"
    sample = next(body for _, _, body in fences(page) if text.index(body) > text.index(lead))
    command = next(c for c in page_commands(page, RUN) if "--rate 8" in c)
    args = shlex.split(command.replace("--requests 100", "--requests 400"))[1:]
    assert main(args) == 0
    printed = set(capsys.readouterr().out.splitlines())
    shown = [line for line in sample.splitlines() if line.strip() and line != "..."]
    assert len(shown) > 10 and [line for line in shown if line not in printed] == []


def test_the_calibrate_example_is_today_s_truth(tmp_path: Path) -> None:
    """The guide's measured.csv is what tests/support/calibrate_example.py writes today: the
    profile it stands for, priced as tpsim prices it now (a profile change that moves these
    points makes the example's fit read wrong until it is rewritten)."""
    sys.path.insert(0, str(REPO / "tests" / "support"))
    try:
        import calibrate_example
    finally:
        sys.path.pop(0)
    calibrate_example.main(tmp_path)
    page = REPO / "docs" / "guide.md"
    shown = next(body for lang, rest, body in fences(page) if rest == "file=measured.csv")
    assert shown == (tmp_path / "measured.csv").read_text()
