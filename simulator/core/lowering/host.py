"""The serving engine's host work in a step, as ops the launch thread runs.

What happens on the host around the kernels of one step (:class:`tpsim.calibration.Engine`):
before the forward, scheduling, input preparation and TP worker coordination (the driver
hands the step to its workers); in an eager step, Python per layer; after the logits,
sampling and output processing. An engine that overlaps host work with the GPU (vLLM V1's
asynchronous scheduling) does that share of it for the *next* step while this step's
kernels run: it occupies the host thread but waits for nothing on the GPU. Each piece is a
``host`` op on the ``cpu`` stream, so a host-bound step shows the host lane on the critical
path. The ideal engine does no host work and adds no op.

The step's pieces (scheduling, inputs, coordination, sampling, outputs) are the engine's
scheduler's work (vLLM's driver or engine core, SGLang's and TensorRT-LLM's scheduler in
lockstep): ``driver`` ops, which every rank waits for alike. Python per layer and kernel
launches are each rank's own thread's, and host jitter (:mod:`tpsim.core.engine.jitter`)
makes the slowest rank set the pace there.
"""

from __future__ import annotations

from tpsim.calibration import Engine
from tpsim.core.lowering.opbuild import OpBuilder

PRE_STEP = ("schedule", "prepare_inputs")
POST_STEP = ("sample", "process_outputs")


def step_mode(engine: Engine, launch: str, phase: str, tokens: int) -> str:
    """The launch mode a step really runs in: ``--launch`` where the engine has a CUDA graph
    for it, else eager (vLLM runs prefill, and steps above its largest captured size,
    eagerly)."""
    if launch == "eager" or engine.graphs(phase, tokens):
        return launch
    return "eager"


def before_step(build: OpBuilder, engine: Engine, tp: int, batch: int) -> None:
    """Host work before the first launch: the serial share of scheduling and input
    preparation, then handing the step to the TP workers."""
    serial = 1.0 - engine.host_overlap
    for piece in PRE_STEP:
        seconds = serial * engine.step_host[piece].seconds(batch)
        build.host(piece, -1, seconds, f"engine {engine.name}: {piece}, batch {batch}",
                   driver=True)  # fmt: skip
    build.host("tp_coordination", -1, engine.tp_coordination.seconds(tp, batch),
               f"engine {engine.name}: the step to {tp} workers", driver=True)  # fmt: skip


def layer_python(build: OpBuilder, engine: Engine, layer: int) -> None:
    """Python work of one layer in an eager step (module calls, argument handling)."""
    build.host(f"python layer {layer}", layer, engine.layer_host_s,
               f"engine {engine.name}: Python per layer, eager")  # fmt: skip


def after_step(build: OpBuilder, engine: Engine, batch: int, last_layer: int) -> None:
    """Host work after the last launch: the overlapped share of the whole step's host work
    (for the next step, alongside this one's kernels), then, once the GPU is done, the
    serial share of sampling and output processing."""
    gpu = tuple(build.last.values())  # every chain's last op: the logits are ready
    total = sum(c.seconds(batch) for c in engine.step_host.values())
    build.host("next_step_host", last_layer, engine.host_overlap * total,
               f"engine {engine.name}: host work overlapped with the GPU", driver=True)  # fmt: skip
    serial = 1.0 - engine.host_overlap
    for piece in POST_STEP:
        seconds = serial * engine.step_host[piece].seconds(batch)
        build.host(piece, last_layer, seconds, f"engine {engine.name}: {piece}, batch {batch}",
                   deps=gpu, driver=True)  # fmt: skip


__all__ = ["after_step", "before_step", "layer_python", "step_mode"]
