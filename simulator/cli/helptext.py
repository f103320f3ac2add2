"""The help line of a flag, where several sub-commands share it: ``run``'s flags copied as
comma lists by ``compare`` and ``report`` say what they mean, their choices and their
defaults, as ``run --help`` does."""

from __future__ import annotations

import argparse

from tpsim.core.run_options import RUN_OPTIONS

#: Help for flags that several sub-commands share, filled in where a parser gave none: each
#: option of ``run`` says it once, in its table (tpsim.core.run_options); the lines below are
#: the flags of other commands, and the few whose shorter wording those commands keep.
COMMON_HELP = {
    **{o.name: o.help for o in RUN_OPTIONS if isinstance(o.help, str)},
    "ranks": "GPUs taking part in the collective",
    "gpus_per_node": "GPUs of the group on each host (0: fill each host first)",
    "prompt_len": "prefill: tokens per sequence (K = 1024: 2K)",
    "context_len": "decode: keys each new token attends to (K = 1024: 4K)",
    "op": "the collective",
    "min_bytes": "smallest size; sizes double up to --max-bytes",
    "max_bytes": "largest size",
    "json": "print JSON instead of text",
    "what": "which catalog to list",
    "out": "where to write the outputs",
    "name": "the study to run",
    "engine": "serving engine profile (tpsim list engines) or a profile file .yaml",
    "slo_ttft_ms": "time-to-first-token target (ms): layouts that miss it are marked",
    "slo_tpot_ms": "time-per-output-token target (ms): the batch is cut until it holds",
}


def base(action: argparse.Action) -> str:
    """The flag's own help, else the shared one, else its name."""
    return action.help or COMMON_HELP.get(action.dest, action.dest.replace("_", " "))


def described(action: argparse.Action) -> str:
    """The help with the choices and the default spelled out (for a copy of the flag that
    takes neither from argparse)."""
    text = base(action)
    if action.choices and "one of" not in text:
        text += f"; one of {', '.join(map(str, action.choices))}"
    default = action.default
    if "default" not in text and default not in (None, False, (), "", argparse.SUPPRESS):
        text += f" (default: {default})"
    return text
