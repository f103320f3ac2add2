"""The README's worked commands with the output it shows for each, and a refresher.

A ``console`` or ``console-slow`` block of README.md whose lines start with ``$ tpsim`` shows
commands and, under each, what it printed. ``examples()`` reads them as (command, shown
output, slow); ``printed()`` runs a command in-process, as a user's shell would, and returns
its standard output. tests/package/test_readme.py holds the two equal, so the README never
shows numbers tpsim no longer prints. After a change that moves them on purpose:

    python tests/support/readme_outputs.py           # rewrite README.md's outputs
    python tests/support/readme_outputs.py --check   # list the stale ones, exit 1 if any
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
FENCE = re.compile(r"^```(console|console-slow)\n(.*?)^```[ \t]*$", re.S | re.M)


@dataclass(frozen=True)
class Example:
    command: str  # as typed after "$ ", continuation lines joined
    shown: str  # the lines under it in the README, up to the next prompt or the fence
    slow: bool  # in a console-slow block (run by pytest -m slow)


def examples(text: str) -> list[Example]:
    out = []
    for lang, body in FENCE.findall(text):
        command, shown = "", []
        for line in body.splitlines():
            if line.startswith("$ tpsim "):
                if command:
                    out.append(Example(command, "\n".join(shown), lang == "console-slow"))
                command, shown = line.removeprefix("$ ").strip(), []
            elif command and command.endswith("\\"):
                command = command[:-1].rstrip() + " " + line.strip()
            elif command:
                shown.append(line)
        if command:
            out.append(Example(command, "\n".join(shown), lang == "console-slow"))
    return out


def printed(command: str) -> str:
    """What ``command`` shows on a terminal, run in-process: standard output and error in the
    order written, less the progress bar's redrawn lines (each holds a carriage return)."""
    from tpsim.cli import main

    args = shlex.split(command, comments=True)
    assert args[0] == "tpsim", command
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = main(args[1:])
    assert rc == 0, f"`{command}` exited {rc}"
    lines = out.getvalue().rstrip("\n").split("\n")
    return "\n".join(line for line in lines if "\r" not in line)


def refresh(text: str, stale: list[tuple[Example, str]]) -> str:
    for example, now in stale:
        old = f"$ {example.command}\n{example.shown}"
        assert text.count(old) == 1, f"`{example.command}` is shown more than once"
        text = text.replace(old, f"$ {example.command}\n{now}")
    return text


def main(argv: list[str]) -> int:
    text = README.read_text()
    with tempfile.TemporaryDirectory() as folder:
        cwd = os.getcwd()
        os.chdir(folder)  # the commands' own files (s.csv) land here, as in the docs test
        try:
            stale = [(e, now) for e in examples(text) if (now := printed(e.command)) != e.shown]
        finally:
            os.chdir(cwd)
    for example, _ in stale:
        print(f"stale: {example.command}")
    if "--check" in argv:
        return 1 if stale else 0
    if stale:
        README.write_text(refresh(text, stale))
        print(f"rewrote {len(stale)} output(s) in {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
