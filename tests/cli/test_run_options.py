"""Each run option declared once (tpsim.core.run_options.RUN_OPTIONS): run's flags, the
sweep's axis flags and the grid's keys are generated from the table."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from tpsim.cli.run import add_run_parser
from tpsim.cli.studies import add_axis_flags
from tpsim.core.config import Layout, Options, Workload
from tpsim.core.errors import ConfigError
from tpsim.core.option_checks import int_check
from tpsim.core.run_options import BY_NAME, RUN_OPTIONS, RunOption, sweepable
from tpsim.experiments.sweep.grid import AXES, POINT_FIELDS, axes_of

#: run's flags that are outputs of the command, not options of the run.
OUTPUTS = {"help", "gantt", "gantt_ranks", "gantt_layers", "trace", "json"}


def _run_parser(table: tuple[RunOption, ...] = RUN_OPTIONS) -> argparse.ArgumentParser:
    import tpsim.cli.run as run

    saved = run.RUN_OPTIONS
    run.RUN_OPTIONS = table  # type: ignore[misc]
    try:
        sub = argparse.ArgumentParser().add_subparsers()
        return add_run_parser(sub)
    finally:
        run.RUN_OPTIONS = saved  # type: ignore[misc]


def _sweep_flags(table: tuple[RunOption, ...] = RUN_OPTIONS) -> set[str]:
    p = argparse.ArgumentParser()
    add_axis_flags(p, table)
    return {a.dest for a in p._actions} - {"help"}


def test_every_run_flag_is_in_the_table_and_every_option_a_flag() -> None:
    run = _run_parser()
    dests = {a.dest for a in run._actions} - OUTPUTS
    assert dests == set(BY_NAME)
    for a in run._actions:
        if a.dest in BY_NAME:
            assert a.option_strings[0] == BY_NAME[a.dest].flag


def test_sweepable_options_are_sweep_flags_grid_keys_and_point_fields() -> None:
    names = [o.name for o in sweepable()]
    assert _sweep_flags() == set(names)
    assert list(AXES) == names  # the grid's expansion order
    assert set(POINT_FIELDS) == set(names)


def test_defaults_come_from_the_dataclasses() -> None:
    where = {"layout": Layout(), "workload": Workload(), "options": Options()}
    for o in RUN_OPTIONS:
        if o.belongs == "simulate" or o.required:
            continue
        field = o.field or o.name
        assert field in {f.name for f in dataclasses.fields(where[o.belongs])}, o.name
        value = getattr(where[o.belongs], field)
        if o.own_default is not None:  # the commands' own: micro_batches 0, the engine's split
            assert (o.name, o.own_default, value) == ("micro_batches", 0, 1)
            continue
        assert o.default == (value / o.scale if o.scale != 1.0 else value), o.name
    for name, (_, default) in AXES.items():
        assert default == BY_NAME[name].default


def test_an_option_added_to_the_table_is_a_run_flag_a_sweep_axis_and_a_grid_key() -> None:
    fake = RunOption(
        "fake_knob", "int", "simulate", "a knob", int_check("fake_knob", 1), own_default=3
    )
    table = (*RUN_OPTIONS, fake)
    run = _run_parser(table)
    (action,) = [a for a in run._actions if a.dest == "fake_knob"]
    assert action.option_strings == ["--fake-knob"] and action.default == 3
    assert "fake_knob" in _sweep_flags(table)
    axes = axes_of(table)
    assert list(axes)[-1] == "fake_knob" and axes["fake_knob"][1] == 3
    assert axes["fake_knob"][0]("5") == 5
    with pytest.raises(ConfigError, match="fake_knob='x'"):
        axes["fake_knob"][0]("x")
    # not sweepable: a run flag only
    quiet = dataclasses.replace(fake, sweepable=False)
    table = (*RUN_OPTIONS, quiet)
    assert "fake_knob" in {a.dest for a in _run_parser(table)._actions}
    assert "fake_knob" not in _sweep_flags(table) and "fake_knob" not in axes_of(table)


def test_a_skew_beyond_what_top_k_allows_warns(capsys: pytest.CaptureFixture[str]) -> None:
    """Mixtral's 8 experts, top 2: the hottest expert can take at most half the pairs, four
    times the mean; --expert-skew 100 runs as 4 and says so."""
    from tpsim.cli import main

    args = ["run", "--model", "mixtral-8x7b", "--topology", "dgx-h100", "--tp", "1"]
    args += ["--attention-dp", "8", "--ep", "8", "--batch", "8"]
    assert main([*args, "--expert-skew", "100"]) == 0
    held = capsys.readouterr()
    assert "--expert-skew=100: held to 4 (8 experts / top-2" in held.err
    assert main([*args, "--expert-skew", "4"]) == 0
    four = capsys.readouterr()
    # the same run: its text differs only where the experts line names the flag as given
    assert four.err == "" and "(--expert-skew 100)" in held.out
    assert four.out == held.out.replace("(--expert-skew 100)", "(--expert-skew 4)")
