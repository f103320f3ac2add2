"""Inputs that were read otherwise than written, silently (a fourth adversarial round): a key
given twice in an engine profile or a grid, an architecture name no GPU has, a profile name
that breaks the header, a header-only kernel table, a trace whose columns are ambiguous or
whose times run for millennia, an empty results file under ``report``, ``--moe-tp`` on a
dense model. Each exits 2 with one line naming the field and the value, and writes nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tpsim.cli import main

RUN = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "2"]
SERVE = ["serve", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1"]
PROFILE = "name: my\nextends: vllm\noverrides:\n"

CASES = {
    "profile extends twice": (
        "p.yaml", "name: my\nextends: vllm\nextends: trtllm\noverrides: {}\n",
        [*RUN, "--engine", "{f}"], "key 'extends' appears twice (line 3)",
    ),
    "profile entry twice": (
        "p.yaml", PROFILE + "  engine:\n    host_overlap: {value: 0.1, source: a}\n"
        "    host_overlap: {value: 0.9, source: b}\n",
        [*RUN, "--engine", "{f}"], "key 'host_overlap' appears twice (line 6)",
    ),
    "grid key twice": (
        "g.yaml", "model: [llama-3.1-8b]\nmodel: [llama-3.1-70b]\n",
        ["sweep", "--grid", "{f}", "--out", "{d}/o.csv"], "key 'model' appears twice",
    ),
    "host_enqueue architecture typo": (
        "p.yaml", PROFILE + "  nccl:\n    host_enqueue:\n      value: {hoper: {gpu_us: 400, "
        "channel_us: 0.3, ring_channels: 24}}\n      source: x\n",
        [*RUN, "--engine", "{f}"], "host_enqueue: unknown architecture 'hoper'",
    ),
    "pdl architecture unknown": (
        "p.yaml", PROFILE + "  engine:\n    pdl_archs: {value: [banana], source: x}\n",
        [*RUN, "--engine", "{f}"], "pdl_archs: unknown architecture 'banana'",
    ),
    "profile name on two lines": (
        "p.yaml", 'name: "a\\nb"\nextends: vllm\noverrides: {}\n',
        [*RUN, "--engine", "{f}"], "name='a\\nb': must be a non-empty string on one line",
    ),
    "scheduler flag not a flag": (
        "p.yaml", PROFILE + "  scheduler:\n    async_scheduling: {value: maybe, source: x}\n",
        [*RUN, "--engine", "{f}"], "scheduler.async_scheduling='maybe': must be true or false",
    ),
    "profile about not text": (
        "p.yaml", "name: x\nabout: 5\nextends: vllm\noverrides: {}\n",
        [*RUN, "--engine", "{f}"], "about=5: must be text",
    ),
    "kernel table header only": (
        "k.csv", "gpu,op,dtype,m,n,k,time_us\n",
        [*RUN, "--kernel-table", "{f}"], "a header and no rows",
    ),
    "trace column twice": (
        "t.csv", "arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0,100,10,5000\n",
        [*SERVE, "--trace", "{f}"], "column 'prompt_tokens' appears twice",
    ),
    "trace two prompt columns": (
        "t.csv", "arrival_s,ContextTokens,prompt_tokens,output_tokens\n0,100,100,10\n",
        [*SERVE, "--trace", "{f}"], "columns ContextTokens and prompt_tokens both give",
    ),
    "trace for millennia": (
        "t.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,10\n1e300,100,10\n",
        [*SERVE, "--trace", "{f}"], "row 2: arrives 1e+300 s after the first",
    ),
    "report of an empty results file": (
        "r.csv", "", ["report", "{f}", "--out", "{d}/r.html"], "has no rows",
    ),
    "moe-tp on a dense model": (
        "", "", [*RUN, "--moe-tp", "2"], "moe_tp=2: llama-3.1-8b has no experts",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_input_read_otherwise_than_written_is_refused(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, text, argv, says = CASES[case]
    work = tmp_path / "in"
    work.mkdir()
    f = work / name if name else work / "unused"
    f.write_text(text)
    before = sorted(p.name for p in work.iterdir())
    args = [a.replace("{f}", str(f)).replace("{d}", str(work)) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tpsim: error: ") and says in err, err
    assert sorted(p.name for p in work.iterdir()) == before  # nothing written


def test_a_kernel_table_with_no_row_for_the_gpu_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt GPU (h100-sxn) matched nothing: the run was the modelled one, unsaid."""
    f = tmp_path / "k.csv"
    f.write_text("gpu,op,dtype,m,n,k,time_us\nh100-sxn,mlp_up,bf16,1,28672,4096,43\n")
    assert main([*RUN, "--kernel-table", str(f)]) == 0
    err = capsys.readouterr().err
    assert "has no rows for h100-sxm (its GPUs: h100-sxn): every kernel is modelled" in err


def test_a_list_as_a_key_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("name: x\nabout: y\nextends: vllm\n? [a, b]\n: 1\n")
    assert main([*RUN, "--engine", str(f)]) == 2
    assert "a list as a key (line 4)" in capsys.readouterr().err


def test_the_json_names_the_network_as_configured() -> None:
    """16 NICs of 200 Gb/s per host pool two a GPU: said as 16 of 200, not 8 of 400."""
    from tpsim import Layout, Workload, simulate
    from tpsim.topologies.io import get_topology
    from tpsim.topologies.network import Network

    g = get_topology("dgx-h100", 2, Network(nic_Bps=25e9, nics_per_node=16))
    r = simulate("llama-3.1-8b", g, Layout(16), Workload(8))
    assert r.summary["config"]["network"] == {"nics_per_node": 16, "nic_gbps": 200.0,
                                              "latency_us": 1.2}  # fmt: skip


def test_flags_that_do_nothing_or_change_the_weights_are_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--overlap-chunks without chunked overlap was accepted silently; serve's header did not
    say the dtype it ran, so an int4 and a bf16 result could not be told apart."""
    assert main([*RUN, "--overlap-chunks", "3"]) == 0
    assert "--overlap-chunks 3 applies to --overlap chunked only" in capsys.readouterr().err
    assert main([*SERVE, "--dtype", "int4", "--requests", "20", "--rate", "5"]) == 0
    assert "llama-3.1-8b on dgx-h100, tp 1, dtype int4, engine vllm" in capsys.readouterr().out


def test_plan_prices_the_dtype_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    """plan had no --dtype: an fp8 70B could be planned only from an fp8 config.json."""
    argv = ["plan", "--model", "llama-3.1-70b", "--topology", "dgx-h100", "--slo-tpot-ms", "40",
            "--gpus", "2", "--json"]  # fmt: skip
    import json

    assert main(argv) == 0
    j = json.loads(capsys.readouterr().out)
    bf16 = j["layouts"]  # and the recommendation the text gives, the first layout's
    best = j["recommendation"]
    assert [best[k] for k in ("tp", "pp", "dp", "batch")] == [
        bf16[0][k] for k in ("tp", "pp", "dp", "batch")
    ]
    assert j["recommendation"]["text"].startswith(("Recommended: ", "No layout meets"))
    assert main([*argv, "--dtype", "fp8"]) == 0
    fp8 = json.loads(capsys.readouterr().out)["layouts"]
    assert fp8[0]["tokens_per_s"] > 1.3 * bf16[0]["tokens_per_s"]


def test_collective_auto_follows_an_engine_without_custom_kernels(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """gpt-fast runs NCCL only: collective --algo auto gave it one-shot kernels run never uses."""
    argv = ["collective", "--topology", "dgx-h100", "--ranks", "8", "--algo", "auto", "--sizes",
            "16K"]  # fmt: skip
    assert main([*argv, "--engine", "gpt-fast"]) == 0
    assert "oneshot" not in capsys.readouterr().out
    assert main([*argv, "--engine", "vllm"]) == 0
    assert "oneshot" in capsys.readouterr().out


def test_an_uneven_routing_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--expert-skew and --routing move every MoE step, but run's experts line and serve's
    setup line read as a uniform run's: two results could not be told apart. The skew shown
    is the one run (held to N/k: 128 experts / top-8 = 16)."""
    moe = ["--model", "qwen3-30b-a3b", "--topology", "dgx-h100", "--tp", "2", "--ep", "2"]
    hist = tmp_path / "hot.txt"
    hist.write_text(",".join(["2"] * 8 + ["1"] * 120) + "\n")
    assert main(["run", *moe, "--expert-skew", "100"]) == 0
    out = capsys.readouterr().out
    assert "top 8, the hottest expert at 16x the mean load (--expert-skew 100); all-reduce" in out
    assert main(["run", *moe, "--routing", str(hist)]) == 0
    assert "top 8, each expert's share as hot.txt gives (--routing); all-reduce" in (
        capsys.readouterr().out
    )
    assert main(["run", *moe]) == 0
    assert "top 8; all-reduce after" in capsys.readouterr().out
    serve = ["serve", *moe, "--rate", "5", "--requests", "10"]
    assert main([*serve, "--expert-skew", "4"]) == 0
    assert "qwen3-30b-a3b on dgx-h100, tp 2, ep 2, expert-skew 4, engine vllm" in (
        capsys.readouterr().out
    )
    assert main([*serve, "--routing", str(hist)]) == 0
    assert "qwen3-30b-a3b on dgx-h100, tp 2, ep 2, routing hot.txt, engine vllm" in (
        capsys.readouterr().out
    )
