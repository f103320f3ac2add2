"""Engine profiles: the host side of a step as events on the CPU lane, each shipped profile
loading with sources, and ``ideal`` reproducing the model without engine host work."""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest
from tpsim import Layout, Options, Result, Workload, simulate
from tpsim.calibration import CalibrationError, default, engines, profile
from tpsim.calibration.profiles import PROFILE_KEYS
from tpsim.cli import main
from tpsim.core import metrics
from tpsim.core.lowering.step import passes

SHIPPED = [
    "ideal", "fastertransformer", "gpt-fast", "sglang", "tgi-v1", "trtllm", "vllm", "vllm-v0",
]  # fmt: skip
SMALL = Workload(batch=16, phase="decode", context_len=1024)
ENGINE = "name: x\noverrides:\n  engine:\n"
IDEAL_FILE = resources.files("tpsim.calibration").joinpath(
    "engines", "ideal.yaml"
)  # a profile overriding engine.yaml entries


def test_every_shipped_profile_loads_and_ideal_is_the_default_data() -> None:
    assert engines() == SHIPPED
    assert profile("ideal") is default()
    for name in SHIPPED[1:]:
        c = profile(name)
        assert c.engine.name == name and c.name == f"engine {name}"


def test_ideal_engine_adds_no_host_work_and_changes_nothing() -> None:
    plain = simulate("llama-3.1-8b", "dgx-h100", 4, SMALL, Options(engine="ideal"))
    file = simulate("llama-3.1-8b", "dgx-h100", 4, SMALL, Options(engine=str(IDEAL_FILE)))
    assert plain.records == file.records  # the shipped ideal.yaml overrides nothing
    assert not [r for r in plain.records if r.kind == "host"]
    assert plain.summary["breakdown_s"]["host"] == 0.0


def test_host_work_sits_on_the_cpu_lane_in_step_order() -> None:
    r = simulate("llama-3.1-8b", "dgx-h100", 2, SMALL, Options(engine="vllm-v0"))
    host = [x for x in r.records if x.rank == 0 and x.kind == "host"]
    assert [x.name for x in host] == [
        "schedule",
        "prepare_inputs",
        "tp_coordination",
        "sample",
        "process_outputs",
    ]
    assert all(x.stream == "cpu" and x.category == "host" for x in host)
    c = profile("vllm-v0").engine
    # schedule: base + per sequence, serial (V0 overlaps nothing)
    sched = c.step_host["schedule"]
    assert host[0].duration_s == pytest.approx(sched.base_s + 16 * sched.per_seq_s)
    # sampling waits for the logits: it starts after the last GPU record of the step
    gpu_end = max(x.end_s for x in r.records if x.rank == 0 and x.stream != "cpu")
    assert host[3].start_s >= gpu_end - 1e-12
    assert r.latency_s == pytest.approx(host[-1].end_s)


def test_a_host_bound_engine_gains_nothing_from_more_tp_and_the_path_says_why() -> None:
    def step(tp: int, engine: str) -> float:
        return simulate("llama-3.1-8b", "dgx-h100", tp, SMALL, Options(engine=engine)).latency_s

    assert step(8, "vllm-v0") >= step(4, "vllm-v0")  # Ray coordination grows with workers
    # (0.80 before the custom all-reduce was calibrated: an 8-rank small all-reduce costs
    # ~0.7 us more, its barriers waiting on 7 peers)
    assert step(8, "ideal") < 0.82 * step(4, "ideal")
    r = simulate("llama-3.1-8b", "dgx-h100", 4, SMALL, Options(engine="vllm-v0"))
    path = [r.records[i] for i in r.critical_path]
    assert sum(x.duration_s for x in path if x.category == "host") > 0.5 * r.latency_s
    assert r.summary["regime"] == "overhead-bound"


def test_overlapped_host_work_runs_beside_the_gpu() -> None:
    r = simulate("llama-3.1-8b", "dgx-h100", 4, SMALL, Options(engine="vllm"))
    (nxt,) = [x for x in r.records if x.rank == 0 and x.name == "next_step_host"]
    first_kernel = min(x.start_s for x in r.records if x.rank == 0 and x.stream == "compute")
    last_kernel = max(x.end_s for x in r.records if x.rank == 0 and x.stream == "compute")
    assert first_kernel <= nxt.start_s < last_kernel  # while the GPU runs this step
    c = profile("vllm").engine
    total = sum(h.seconds(16) for h in c.step_host.values())
    assert nxt.duration_s == pytest.approx(c.host_overlap * total)


def test_steps_beyond_the_captured_graphs_run_eager() -> None:
    # vllm-v0 captures decode graphs up to 256 sequences and runs prefill eager
    big = simulate("llama-2-7b", "dgx-a100", 2, Workload(batch=512, context_len=128),
                   Options(engine="vllm-v0"))  # fmt: skip
    small = simulate("llama-2-7b", "dgx-a100", 2, Workload(batch=8, context_len=128),
                     Options(engine="vllm-v0"))  # fmt: skip
    prefill = simulate("llama-2-7b", "dgx-a100", 2, Workload(batch=1, phase="prefill",
                       prompt_len=128), Options(engine="vllm-v0"))  # fmt: skip
    for r, eager in ((big, True), (small, False), (prefill, True)):
        names = {x.name for x in r.records if x.rank == 0}
        assert ("graph_replay" not in names) == eager
        assert any(n.startswith("python layer") for n in names) == eager
        assert any(n.startswith("dispatch ") for n in names) == eager


def test_eager_dispatch_counts_as_launch_overhead_not_memory() -> None:
    wl = Workload(batch=1, context_len=1024)
    eager = simulate("llama-3.1-70b", "dgx-h100", 8, wl, Options(launch="eager", engine="ideal"))
    graph = simulate("llama-3.1-70b", "dgx-h100", 8, wl, Options(launch="graph", engine="ideal"))
    b_e, b_g = eager.summary["breakdown_s"], graph.summary["breakdown_s"]
    assert b_e["memory"] <= b_g["memory"] * 1.02  # the gaps are no longer memory time
    assert b_e["launch_overhead"] > 0.19 * eager.latency_s  # 0.198 (2.07 of 10.45 ms)
    assert metrics.breakdown(eager.records)["launch_overhead"] == b_e["launch_overhead"]


def test_nccl_only_engines_never_pick_a_peer_memory_all_reduce() -> None:
    for engine in ("gpt-fast", "fastertransformer"):
        r = simulate("llama-3.1-8b", "dgx-h100", 8, SMALL, Options(engine=engine))
        algos = {x.detail.split("; ")[1].split()[0] for x in r.records if x.kind == "collective"
                 and "; " in x.detail}  # fmt: skip
        assert not {a for a in algos if a.startswith(("oneshot", "twoshot"))}, engine


def test_a_profile_file_overrides_and_extends(tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text(
        "name: mine\nabout: vllm-v0 with a faster scheduler\nextends: vllm-v0\n"
        "overrides:\n  engine:\n    step_host_us:\n"
        "      value: {schedule: [5, 1]}\n      source: my measurement\n"
    )
    c = profile(str(f))
    base = profile("vllm-v0").engine
    assert c.engine.name == "mine"
    assert c.engine.step_host["schedule"].base_s == 5e-6
    assert c.engine.step_host["sample"] == base.step_host["sample"]  # rows not named stay
    assert c.engine.tp_coordination == base.tp_coordination


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "name: x\noverrides:\n  engine:\n    nope: {value: 1, source: s}\n",
            "unknown calibration entry",
        ),
        (
            "name: x\noverrides:\n  engine:\n    host_overlap: {value: 2, source: s}\n",
            "between 0 and 1",
        ),
        ("name: x\noverrides:\n  engine:\n    host_overlap: 0.5\n", "value and a source"),
        (
            "name: x\noverrides:\n  engine:\n    host_overlap_sync: {value: 1.5, source: s}\n",
            "host_overlap_sync=1.5: must be between 0 and 1",
        ),
        (
            "name: x\noverrides:\n  nccl:\n    custom_allreduce:\n      symm_mem:\n"
            "        value: {base_us: 1, efficiency: 2, max_MiB: {}, multimem_ranks: {}}\n"
            "        source: s\n",
            "symm_mem.efficiency=2: must be in",
        ),
        (
            "name: x\noverrides:\n  nccl:\n    custom_allreduce:\n      max_MiB_by_gpu:\n"
            "        value: {volta: {8: 1}}\n        source: s\n",
            "'volta' is not a GPU architecture",
        ),
        ("name: x\noverrides:\n  gpus: {}\n", "unknown data file"),
        ("name: x\nfoo: 1\n", "unknown key"),
        ("name: x\nextends: nowhere\n", "unknown engine"),
        (
            "name: x\noverrides:\n  kernels:\n"
            "    hbm_efficiency_scale: {value: 1.0e+297, source: s}\n",
            "outside the physical range",
        ),
        (
            "name: x\noverrides:\n  engine:\n    host_overlap: {value: 4.9e-324, source: s}\n",
            "outside the physical range",
        ),
        ("overrides: {}\n", "name=None"),
        ("name: [\n", "not valid YAML"),
    ],
)
def test_a_bad_profile_is_one_line_naming_the_field(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    profile.cache_clear()
    with pytest.raises(CalibrationError, match=needle):
        profile(str(f))


def test_cli_engine_flag_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "2"]
    assert main([*args, "--engine", "vllm", "--json"]) == 0
    assert '"engine": "vllm"' in capsys.readouterr().out
    assert main([*args, "--engine", "vllm-v9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "engine='vllm-v9': unknown engine" in err
    assert main(["list", "engines"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == SHIPPED
    assert PROFILE_KEYS == ("name", "about", "extends", "overrides")


# ------------------------------------------------------ where the first token comes from
def test_first_token_passes_follow_the_engine() -> None:
    ft = profile("fastertransformer").engine
    vllm = profile("vllm").engine
    prefill = Workload(2, "prefill", prompt_len=128)
    assert ft.first_token == "decode_step" and vllm.first_token == "prefill"
    assert passes(prefill, vllm) == [prefill]
    assert passes(SMALL, ft) == [SMALL]  # a decode step is itself
    assert passes(prefill, ft) == [
        Workload(2, "prefill", prompt_len=127),
        Workload(2, "decode", prompt_len=128, context_len=128),
    ]
    one = Workload(2, "prefill", prompt_len=1)
    assert passes(one, ft) == [Workload(2, "decode", prompt_len=1, context_len=1)]


def _mine(tmp_path: Path, first: str) -> str:
    f = tmp_path / f"ft-{first}.yaml"
    f.write_text(
        f"name: ft-{first}\nextends: fastertransformer\noverrides:\n  engine:\n"
        f"    first_token: {{value: {first}, source: test}}\n"
    )
    return str(f)


@pytest.mark.parametrize("pp", [1, 2])
def test_a_decode_step_first_token_costs_one_more_step(tmp_path: Path, pp: int) -> None:
    """FasterTransformer's first token: all but the last prompt token through the layers
    with no logits, then a decode step of the last one; every layer runs twice, the LM head
    once, and the first token costs about one decode step more than a plain prefill (less
    in a pipeline, whose stages overlap the two passes)."""
    prompt = Workload(1, "prefill", prompt_len=128)
    step = Workload(1, "decode", context_len=128)

    def run(engine: str, w: Workload):  # type: ignore[no-untyped-def]
        return simulate("llama-2-7b", "dgx-a100", Layout(tp=2, pp=pp), w, Options(engine=engine))

    plain = run(_mine(tmp_path, "prefill"), prompt)
    first = run(_mine(tmp_path, "decode_step"), prompt)
    decode = run(_mine(tmp_path, "prefill"), step)
    qkv = [r for r in first.records if r.name == "qkv_proj" and r.rank == 0]
    heads = [r for r in first.records if r.name == "lm_head" and r.rank == pp * 2 - 1]
    assert len(qkv) == 2 * 32 // pp and len(heads) == 1
    extra = first.latency_s - plain.latency_s
    # in a pipeline the first stage's decode pass runs while the last stage still prefills
    low = 0.7 if pp == 1 else 0.3
    assert low * decode.latency_s < extra < 1.1 * decode.latency_s


def test_the_summary_says_which_launch_mode_ran() -> None:
    """--launch graph is what was asked; an engine without a CUDA graph for the step runs it
    eagerly, and the summary and its text say so."""
    from tpsim.outputs.text import summary_text

    def ran(engine: str, w: Workload) -> Result:
        return simulate("llama-3.1-8b", "dgx-h100", 1, w, Options(engine=engine))

    decode, prefill = Workload(1, "decode", context_len=1024), Workload(1, "prefill", 2048)
    assert ran("vllm", decode).summary["config"]["launch_effective"] == "graph"
    eager = ran("vllm", prefill)  # vLLM captures graphs up to 512 tokens
    c = eager.summary["config"]
    assert (c["options"]["launch"], c["launch_effective"]) == ("graph", "eager")
    assert eager.typed.config.launch_effective == "eager"
    assert "launch eager (no CUDA graph for this step in the engine)" in summary_text(eager.typed)
    assert ran("tgi-v1", decode).summary["config"]["launch_effective"] == "eager"
    assert "launch graph," in summary_text(ran("vllm", decode).typed)


@pytest.mark.parametrize(
    ("given", "engine"),
    [
        ("vLLM", "vllm"),
        ("VLLM-V0", "vllm-v0"),
        ("vllm_v0", "vllm-v0"),
        ("TensorRT-LLM", "trtllm"),
        ("tensorrt_llm", "trtllm"),
        ("TRT-LLM", "trtllm"),
        ("gpt_fast", "gpt-fast"),
        ("SGLang", "sglang"),
        ("FasterTransformer", "fastertransformer"),
    ],
)
def test_engine_names_ignore_case_and_take_common_aliases(
    given: str, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert Options(engine=given).engine == engine
    args = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "2"]
    assert main([*args, "--engine", given, "--json"]) == 0
    assert f'"engine": "{engine}"' in capsys.readouterr().out


def test_an_unknown_engine_suggests_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "2"]
    assert main([*args, "--engine", "tgi"]) == 2
    err = capsys.readouterr().err
    assert "engine='tgi': unknown engine (did you mean 'tgi-v1'?)" in err


def test_a_relative_extends_is_the_profiles_own_neighbour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """extends: base.yaml means the base beside the profile, not in the current folder."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "base.yaml").write_text(
        "name: base\nextends: vllm-v0\noverrides:\n  engine:\n    step_host_us:\n"
        "      value: {schedule: [7, 1]}\n      source: my measurement\n"
    )
    (tmp_path / "p" / "mine.yaml").write_text("name: mine\nextends: base.yaml\n")
    monkeypatch.chdir(tmp_path)  # no base.yaml here
    profile.cache_clear()
    c = profile("p/mine.yaml")
    assert c.engine.name == "mine"
    assert c.engine.step_host["schedule"].base_s == 7e-6


def test_list_engines_name_shows_the_whole_description(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue #27: the list cuts each description with [...]; ``list engines NAME`` shows it
    whole (any spelling of the name), and an unknown one exits 2."""
    assert main(["list", "engines"]) == 0
    assert "[...]" in capsys.readouterr().out
    assert main(["list", "engines", "TensorRT-LLM"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("trtllm\n") and "[...]" not in out
    from tpsim.calibration.profiles import about

    assert " ".join(out.split()[1:]) == " ".join(about("trtllm").split())
    assert main(["list", "engines", "nope"]) == 2
    assert main(["list", "models", "llama-3.1-70b"]) == 0
    assert "llama-3.1-70b" in capsys.readouterr().out


def test_a_profile_file_is_named_by_its_own_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "mine-v2.yaml"
    f.write_text("name: my-vllm\nextends: vllm\n")
    argv = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "2"]
    assert main([*argv, "--engine", str(f)]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith(f"engine my-vllm ({f})"), head


def test_an_engine_without_its_async_scheduling_overlaps_less_host_work() -> None:
    """vLLM's profile overlaps 0.9 of a step's host work with the GPU as it schedules by
    default (one step ahead, since v0.14) and 0.5 with async scheduling off (V1 up to v0.13,
    ``--no-async-scheduling``): the exposed host work of a small, host-heavy step grows by
    the difference, and nothing else changes. An engine with no such mode is the same
    either way."""
    on, off = Options(engine="vllm"), Options(engine="vllm", async_scheduling=False)
    assert (on.calibration.engine.host_overlap, off.calibration.engine.host_overlap) == (0.9, 0.5)
    assert replace(off.calibration, engine=on.calibration.engine) == on.calibration
    a = simulate("llama-3.1-8b", "dgx-h100", Layout(1), SMALL, on)
    b = simulate("llama-3.1-8b", "dgx-h100", Layout(1), SMALL, off)
    c = profile("vllm").engine
    serial = {
        name: sum(x.duration_s for x in r.records if x.name in ("schedule", "sample"))
        for name, r in (("on", a), ("off", b))
    }
    want = (0.9 - 0.5) * (c.step_host["schedule"].seconds(16) + c.step_host["sample"].seconds(16))
    assert serial["off"] - serial["on"] == pytest.approx(want)
    assert b.latency_s > a.latency_s
    ft = Options(engine="fastertransformer", async_scheduling=False)
    assert ft.calibration == Options(engine="fastertransformer").calibration


def test_a_profile_file_is_read_as_it_is_now(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An edited profile file, or a relative path meaning another file from another folder,
    is read again: the cache by the path's text kept the first for the life of the process
    (a notebook that edits its profile saw none of it)."""
    from tpsim import Options, Workload, simulate

    def write(path, us):  # type: ignore[no-untyped-def]
        head = "name: mine\nextends: vllm\noverrides:\n  engine:\n    step_host_us:\n"
        path.write_text(f"{head}      value:\n        schedule: [{us}, 1.5]\n      source: x\n")

    for folder, us in (("a", 40), ("b", 40000)):
        (tmp_path / folder).mkdir()
        write(tmp_path / folder / "p.yaml", us)

    def step() -> float:
        opts = Options(engine="p.yaml", launch="eager")
        return simulate("llama-3.1-8b", "dgx-h100", 1, Workload(batch=16), opts).latency_s

    monkeypatch.chdir(tmp_path / "a")
    fast = step()
    monkeypatch.chdir(tmp_path / "b")
    slow = step()
    assert slow > 4 * fast
    write(tmp_path / "b" / "p.yaml", 40)
    assert step() == fast
