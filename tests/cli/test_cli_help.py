"""The CLI explains itself: a purpose line for every command, help and defaults for every
flag, no documentation markup, K/M suffixes on every token length, and a warning for a
flag the phase does not use."""

from __future__ import annotations

import argparse

import pytest
from tpsim.cli import _parser, main


def _commands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = (a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_command_and_flag_has_help() -> None:
    (sub,) = (a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    for name, parser in _commands().items():
        assert helps.get(name), f"{name}: no one-line purpose"
        for action in parser._actions:
            flag = action.option_strings[0] if action.option_strings else action.dest
            assert action.help, f"{name} {flag}: no help"


@pytest.mark.parametrize("command", sorted(_commands()))
def test_help_shows_defaults_and_no_markup(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for markup in ("``", ":mod:", ":func:", ":class:"):
        assert markup not in text
    parser = _commands()[command]
    for action in parser._actions:
        worth = action.option_strings and action.nargs != 0
        if worth and action.default not in (None, False, 0, 0.0, (), "", argparse.SUPPRESS):
            # its help line ends with the default (argparse may wrap it across lines)
            assert "default" in (action.help or "") or f"default: {action.default}" in " ".join(
                text.split()
            ), f"{command} {action.option_strings[0]}: default not shown"


def test_top_level_help_has_no_markup(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out and ":mod:" not in out and "tensor-parallel" in out


@pytest.mark.parametrize(("text", "tokens"), [("4k", 4096), ("4K", 4096), ("2048", 2048)])
def test_token_lengths_take_suffixes(
    text: str, tokens: int, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1", "--json"]
    assert main([*argv, "--context-len", text]) == 0
    assert f'"context_len": {tokens}' in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["4x", "0", "-1k", "1.5"])
def test_bad_token_lengths_exit_2(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1"]
    assert main([*argv, "--context-len", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--context-len" in err


@pytest.mark.parametrize(
    ("phase", "flag", "uses"),
    [("decode", "--prompt-len", "--context-len"), ("prefill", "--context-len", "--prompt-len")],
)
def test_a_flag_the_phase_ignores_is_warned(
    phase: str, flag: str, uses: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1"]
    assert main([*argv, "--phase", phase, flag, "256"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {flag} does not apply to {phase} (it uses {uses})" in err
    assert main([*argv, "--phase", phase]) == 0
    assert "warning" not in capsys.readouterr().err


def test_api_errors_name_the_api_keyword() -> None:
    """Too few GPUs from the API: the message names nodes= (the keyword), not only --nodes."""
    from tpsim import Layout, simulate
    from tpsim.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"nodes= in the API"):
        simulate("llama-3.1-8b", "dgx-h100", Layout(16))


def test_one_default_context_and_prompt_everywhere_stated_in_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue #27: run said 1024, plan 2048, check-claim 512 (prompt); one default now, the
    Workload's, and every --help states it, compare's and report's copies included."""
    from tpsim.core.config import Workload

    for name, parser in _commands().items():
        for action in parser._actions:
            if action.dest not in ("context_len", "prompt_len"):
                continue
            with pytest.raises(SystemExit):
                main([name, "--help"])
            text = " ".join(capsys.readouterr().out.split())
            want = getattr(Workload, action.dest)
            assert f"default: {want}" in text, f"{name} {action.option_strings[0]}"
            if action.default is not None:
                assert action.default == want, f"{name} {action.option_strings[0]}"
