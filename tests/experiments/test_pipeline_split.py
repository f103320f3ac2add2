"""An engine that splits each batch into micro-batches itself when it runs a pipeline
(FasterTransformer's ``getLocalBatchSize``: ``pipeline_split_tokens``), against the engines
that keep one batch per stage in flight (vLLM's virtual engines): the rule, what ``run``,
``plan`` and ``serve`` make of it."""

from __future__ import annotations

import json

import pytest
from tpsim.calibration.profiles import profile
from tpsim.cli import main
from tpsim.core.config import Layout, Options, Workload
from tpsim.core.lowering.mixed import MixedStep
from tpsim.core.plan import resolve
from tpsim.experiments.serve.pipeline import SplitPass, split_step
from tpsim.experiments.serve.run import ServeSetup, serve
from tpsim.experiments.serve.workload import Lengths

FT = profile("fastertransformer").engine


@pytest.mark.parametrize(
    ("batch", "per_seq", "stages", "micro"),
    [
        (256, 1, 3, 1),  # 256 is no multiple of 3 and 256 tokens fit 1024: the whole batch
        (256, 60, 3, 16),  # halved while over 1024 tokens: 16 of 16 sequences (960 tokens)
        (255, 60, 3, 3),  # 85 a stage, odd: never halved
        (48, 1, 3, 3),  # 16 a stage
        (64, 128, 2, 8),  # 32 a stage, halved to 8 (1024 tokens)
        (7, 2048, 4, 1),  # odd and no multiple: one micro-batch however long
        (256, 60, 1, 1),  # no pipeline: nothing to split
    ],
)
def test_fastertransformers_rule(batch: int, per_seq: int, stages: int, micro: int) -> None:
    assert FT.pipeline_micro_batches(batch, per_seq, stages) == micro


def test_in_flight_engines_split_nothing() -> None:
    for name in ("vllm", "sglang", "trtllm", "ideal"):
        engine = profile(name).engine
        assert engine.pipeline_split_tokens is None
        assert engine.pipeline_micro_batches(256, 60, 3) == 1


def _resolved(engine: str, phase: str, micro: int = 0) -> int:
    plan = resolve("llama-2-70b", "dgx-a100", Layout(8, pp=3, micro_batches=micro),
                   Workload(96, phase, 60, 80), Options(engine=engine), nodes=3)  # fmt: skip
    return plan.layout.micro_batches


def test_resolve_takes_the_engines_split_unless_given() -> None:
    """micro_batches=0 is the engine's split of the step; a number given is kept."""
    assert _resolved("fastertransformer", "prefill") == 6  # 32 a stage, halved to 16 (960)
    assert _resolved("fastertransformer", "decode") == 3
    assert _resolved("vllm", "prefill") == 1
    assert _resolved("fastertransformer", "prefill", micro=4) == 4


def test_a_split_step_keeps_every_sequence_in_order() -> None:
    step = MixedStep.of((10, 11, 12), ((60, 0), (59, 0)))
    parts = split_step(step, 2)
    assert [p.decodes for p in parts] == [(10, 11), (12,)]
    assert [p.chunks for p in parts] == [(), ((60, 0), (59, 0))]
    assert sum(p.batch for p in parts) == step.batch


def test_a_split_pass_pipelines_the_micro_batches() -> None:
    """16 micro-batches of a 3 s pass over 3 stages (1 s a stage each, no sends): the last
    leaves after (16 + 3 - 1) stage times = 18 s, against 3 s x 16 = 48 s for one batch
    at a time; a decode of 256 on 3 stages is one micro-batch, its whole pass."""
    seen: list[int] = []

    def pass_s(step: MixedStep) -> tuple[float, tuple[float, ...]]:
        seen.append(step.batch)
        return 3.0, (0.0, 0.0)

    split = SplitPass(3, FT, pass_s)
    prefill = MixedStep.of((), tuple((60, 0) for _ in range(256)))
    assert split(prefill) == pytest.approx(18.0)
    assert seen == [16] * 16
    assert split(MixedStep.of(tuple([70] * 256), ())) == pytest.approx(3.0)


def test_serve_runs_one_instance_that_splits_its_batches() -> None:
    """FasterTransformer with two stages: one instance (no virtual engines, the whole
    cache); its 8-request batch's context split 4 a stage, then halved while over 1024
    tokens: 8 micro-batches of one 600-token prompt, 0.5 ms a stage each, so the first
    token comes after (8 + 2 - 1) x 0.5 = 4.5 ms and one send (not the 8 ms of the whole
    batch at once)."""
    work = (0, Lengths("fixed", 600), Lengths("fixed", 3))

    def timer(step: MixedStep) -> float:
        return 0.001 * step.batch  # 1 ms a sequence a pass

    setup = ServeSetup("llama-3.1-8b", "dgx-h100", 1, pp=2,
                       options=Options(engine="fastertransformer"))  # fmt: skip
    out = serve(setup, lengths=work, concurrency=8, count=8, timer=timer)
    assert out.instance == "instance" and len(out.steps) == 1
    assert 4.5 < out.summary()["mean_ttft_ms"] < 4.6
    flat = serve(ServeSetup("llama-3.1-8b", "dgx-h100", 1, pp=2), lengths=work,
                 concurrency=8, count=8, timer=timer)  # fmt: skip
    assert flat.instance == "virtual engine" and len(flat.steps) == 2


def test_run_takes_the_engines_split(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --micro-batches, run splits as the engine does; given, as told. The split
    depends on the batch, the prompt, the stages and the engine only (a TP of 2 on one node
    here: 2 s; TP 8 over 3 nodes simulated for 40 s to say the same)."""
    args = ["run", "--model", "llama-2-70b", "--topology", "dgx-a100",
            "--tp", "2", "--pp", "3", "--batch", "96", "--phase", "prefill",
            "--prompt-len", "60", "--engine", "fastertransformer", "--json"]  # fmt: skip
    for extra, micro in (([], 6), (["--micro-batches", "2"], 2)):
        assert main([*args, *extra]) == 0
        assert json.loads(capsys.readouterr().out)["config"]["layout"]["micro_batches"] == micro


@pytest.mark.parametrize("value", ["-1", "4097"])
def test_micro_batches_out_of_range_is_one_line(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """0 asks for the engine's split; a negative count or one past the limit is refused with
    the field and the value, exit 2."""
    args = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "2",
            "--pp", "2", "--micro-batches", value]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"micro_batches={value}" in err[0].replace("'", "")
