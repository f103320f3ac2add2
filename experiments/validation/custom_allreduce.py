"""Serving engines' custom (peer-memory) all-reduce against published measurements.

    python -m tpsim.experiments.validation.custom_allreduce --out DIR

Judge: ``measured/allreduce_small_and_custom.csv``. Prints, per source and implementation,
each point measured against simulated, the geometric-mean error and the worst point, the
overall geomean, and writes ``custom_allreduce.png`` (measured against simulated, log axes,
the ±15 % band).

Each row is simulated the way it was taken (:data:`GROUPS`): its kernels (the calibration's
``custom_allreduce.kernels``), its algorithm (the engine's one-shot/two-shot switch, or the
one the benchmark forced), its size in bytes (decided per source from its code, below), and
its timing:

- ``eager``: a Python loop of calls timed on the host without a CUDA graph and without a
  synchronize (sglang ``test_trt_reduce.py``: ``time.time()`` around 5000 calls). Each call
  costs the host its ``host_us`` and queues, when the kernels copy unregistered input, the
  copy of the input into the shared buffer (a ``cudaMemcpyAsync`` kernel for vLLM, inside
  the kernel for TensorRT-LLM's); the loop runs at the slower of host and device.
- ``graph``: back-to-back calls replayed from a CUDA graph, timed on the device (registered
  buffers: no copy, no host work).

Size units, decided from each source's code:

- sglang PR 2904 (H100) and PR 2688 (A100), ``test_trt_reduce.py``: the size is a number of
  **float32 elements** (``torch.randint(1, 16, (sz,), dtype=torch.float32)``): bytes = 4 x
  size. (It also explains why PR 2688 has 2097152 only at 2 ranks: 8 MiB exceeds the 8e6 B
  workspace TensorRT-LLM's port allows above 2 ranks, GetMaxRequiredWorkspaceSize.)
- vLLM PR 24532 (``benchmark_device_communicators.py``): tensors (tokens, 8192) in bf16,
  "0.50 MB" for (32, 8192): **MiB**, bytes = size x 2**20.
- pytorch/helion PR 245 (kraken helion_bench): the shape is a number of **bf16 elements**,
  "4k" = 4096: bytes = 2 x 1024 x k.

Rows left out (and why) are :data:`EXCLUDED`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tpsim import calibration
from tpsim.calibration import Calibration
from tpsim.calibration.loader import read
from tpsim.core.comm.group import connect, run_programs
from tpsim.core.program import CollectiveCall, Op, Program, Programs
from tpsim.experiments.plots.validation import custom_allreduce_scatter
from tpsim.experiments.validation.collectives import geomean_error
from tpsim.topologies.io import get_topology

FILE = "allreduce_small_and_custom.csv"
#: Calls simulated per point; the time per call is the spacing of the last ones' ends.
CALLS = 6
#: The acceptance bound on a group's geomean error (issue #14).
BOUND = 0.15


@dataclass(frozen=True)
class CustomAllReduceGroup:
    """One implementation as one source measured it, and how to simulate its rows."""

    name: str
    gpu: str  # the CSV's gpu column
    implementation: str  # the CSV's implementation column
    source: str  # the CSV's source column
    topology: str
    kernels: str  # custom_allreduce.kernels entry
    timing: str  # "eager" | "graph"
    unit: str  # "fp32" | "MiB" | "bf16k": how the size column converts to bytes
    algo: str = "auto"  # "auto": the kernels' one-shot/two-shot switch; or forced
    host: str = ""  # custom_allreduce.bench_hosts entry when not the kernels' own host_us
    copy: str = ""  # the copy mode of that older code, when not the kernels' own


SGL_2904 = "https://github.com/sgl-project/sglang/pull/2904"
SGL_2688 = "https://github.com/sgl-project/sglang/pull/2688"
VLLM_24532 = "https://github.com/vllm-project/vllm/pull/24532"
HELION = "https://github.com/pytorch/helion/pull/245"
TRT_SGL = "SGLang custom allreduce (TRT-LLM-derived kernels, copy-input mode)"

GROUPS = (
    CustomAllReduceGroup("H100 vLLM, eager (sglang #2904)",
        "H100", "vLLM custom allreduce", SGL_2904,
        "dgx-h100", "vllm", "eager", "fp32"),
    CustomAllReduceGroup("H100 TRT-LLM via SGLang, eager (#2904)", "H100", TRT_SGL, SGL_2904,
        "dgx-h100", "trtllm", "eager", "fp32"),
    CustomAllReduceGroup("A100 vLLM, eager (sglang #2688)",
        "A100", "vLLM custom allreduce", SGL_2688,
        "dgx-a100", "vllm", "eager", "fp32", host="a100-sglang-2688"),
    CustomAllReduceGroup("A100 TRT-LLM via SGLang, eager (#2688)", "A100",
        "SGLang custom allreduce incl. TRT-LLM two-shot", SGL_2688,
        "dgx-a100", "trtllm", "eager", "fp32", host="a100-sglang-2688", copy="memcpy"),
    CustomAllReduceGroup("vLLM ca_1stage, graph (vllm #24532)",
        "unknown (NVIDIA, symm-mem capable)",
        "ca_1stage", VLLM_24532, "dgx-h100", "vllm", "graph", "MiB", algo="oneshot"),
    CustomAllReduceGroup("vLLM ca_2stage, graph (vllm #24532)",
        "unknown (NVIDIA, symm-mem capable)",
        "ca_2stage", VLLM_24532, "dgx-h100", "vllm", "graph", "MiB", algo="twoshot"),
    CustomAllReduceGroup("vLLM symm_mem_multimem, graph (vllm #24532)",
        "unknown (NVIDIA, symm-mem capable)",
        "symm_mem_multimem", VLLM_24532, "dgx-h100", "vllm", "graph", "MiB", algo="multimem"),
    CustomAllReduceGroup("8x H100 triton one-shot (helion #245)", "H100", "triton one-shot", HELION,
        "dgx-h100", "symm_mem", "graph", "bf16k", algo="oneshot"),
    CustomAllReduceGroup("8x H100 helion one-shot (helion #245)", "H100", "helion one-shot", HELION,
        "dgx-h100", "symm_mem", "graph", "bf16k", algo="oneshot"),
    CustomAllReduceGroup("8x H100 torch symm-mem one-shot (helion #245)", "H100",
        "torch.distributed one-shot (symm mem)", HELION,
        "dgx-h100", "symm_mem", "graph", "bf16k", algo="oneshot"),
)  # fmt: skip

#: Rows of the file not simulated here, and why.
EXCLUDED = (
    "NCCL rows checked by collective_calibration: helion #245 NCCL (the numbers of "
    "nccl_allreduce_h100_8gpu_small.csv) and the one-channel floors of nccl-tests issue 123",
    "NCCL rows not simulated: vllm #24532 pynccl/pynccl-symm (the GPU is not stated), H20 "
    "NVLSTree (no H20 in the catalog), NCCL issue 1984 (-m 100 aggregates 100 collectives "
    "into one kernel, not modelled), NCCL 2.27 symmetric-memory best cases (user-tuned), "
    "torch.distributed megatron (timed from Python per call); and NCCL issue 1259, NVLSTree "
    "forced on 2 H100s under CUDA graphs: about 6 us, where tpsim prices NVLS at NCCL's own "
    "tuning latency (25 us), the figure NCCL chooses by, so a forced small NVLS is 4x slow",
    "symm_mem_two_shot (vllm #24532): torch's symmetric-memory two-shot, kernels not modelled "
    "(grid and barriers unknown here)",
    "fused all-reduce + RMSNorm (vllm #22086, FlagGems #773): a fused kernel with the norm, "
    "not a plain all-reduce",
    "AMD Instinct rows (EmbeddedLLM/vllmtests): the GPU model is not stated, so the catalog's "
    "MI300X cannot be assumed; out of scope",
)


def to_bytes(size: str, unit: str) -> int:
    """The row's size in bytes under the source's unit (module docstring)."""
    if unit == "fp32":
        return 4 * int(size)
    if unit == "MiB":
        return round(float(size) * 2**20)
    if unit == "bf16k":
        k = {"k": 2**10, "m": 2**20}[size[-1]]
        return 2 * int(size[:-1]) * k
    raise ValueError(f"unit={unit!r}")


def rows(path: Path) -> list[dict[str, str]]:
    return calibration.csv_rows(path)


def points(
    group: CustomAllReduceGroup, table: Sequence[dict[str, str]]
) -> list[tuple[int, int, float]]:
    """(ranks, bytes, measured seconds) of the group's rows, in file order."""
    out = []
    for r in table:
        if (r["gpu"], r["implementation"], r["source"]) == (
            group.gpu,
            group.implementation,
            group.source,
        ):
            out.append((int(r["ranks"]), to_bytes(r["size"], group.unit), float(r["time_us"])))
    return [(p, n, t * 1e-6) for p, n, t in out]


def bench_host_s(name: str) -> float:
    """Host time per eager call of a benchmark machine (``custom_allreduce.bench_hosts``)."""
    hosts = read("nccl.yaml")["custom_allreduce"]["bench_hosts"]["value"]
    return float(hosts[name]) * 1e-6


def group_calibration(group: CustomAllReduceGroup) -> Calibration:
    """The shipped calibration running the group's kernels and their one-shot/two-shot
    switch."""
    calib = calibration.default()
    c = calib.collectives
    symm = calibration.profile("vllm").collectives.symm_mem if group.algo == "multimem" else None
    return replace(
        calib,
        collectives=replace(
            c, custom_implementation=group.kernels, custom_switch=True, symm_mem=symm
        ),
    )


def simulate(
    group: CustomAllReduceGroup, ranks: int, nbytes: int, calib: Calibration | None = None
) -> float:
    """Seconds per call of the group's benchmark loop at one size (module docstring)."""
    calib = calib or group_calibration(group)
    graph = get_topology(group.topology, 1)
    comms = connect(graph, ranks, calib=calib, algo=group.algo)
    kernel = calib.collectives.custom
    gpu = comms.group.gpu
    eager = group.timing == "eager"
    host_s = (bench_host_s(group.host) if group.host else kernel.host_s) if eager else 0.0
    copy = group.copy or kernel.copy
    # the eager input's copy into the shared buffer: HBM read + write (and, as its own
    # kernel, the GPU's fixed cost per kernel)
    copy_s = 2 * nbytes / (gpu.hbm_Bps * gpu.hbm_efficiency)
    copy_s += gpu.kernel_overhead_s if copy == "memcpy" else 0.0
    ops: list[Op] = []
    for i in range(CALLS):
        if eager:
            ops.append(_op("copy", i, host_s, copy_s, nbytes, None))
        ops.append(_op("all_reduce", i, 0.0, 0.0, nbytes, nbytes))
    ran = run_programs(comms, Programs.same(Program(tuple(ops)), ranks))
    ends = [0.0] * CALLS
    for r in ran.records:
        if r.kind == "collective":
            ends[r.layer] = max(ends[r.layer], r.end_s)
    return (ends[-1] - ends[-3]) / 2


def _op(name: str, i: int, launch_s: float, seconds: float, nbytes: int, coll: int | None) -> Op:
    return Op(
        name=name,
        kind="collective" if coll is not None else "elementwise",
        layer=i,
        site="all_reduce" if coll is not None else "",
        stream="comm",
        launch_s=launch_s,
        seconds=seconds,
        flops=0.0,
        bytes=nbytes,
        category="communication" if coll is not None else "memory",
        detail="",
        deps=(),
        collective=CollectiveCall("all_reduce", coll) if coll is not None else None,
    )


@dataclass(frozen=True)
class AllReducePoint:
    ranks: int
    bytes: int
    measured_s: float
    simulated_s: float
    algorithm: str

    @property
    def error(self) -> float:
        return self.simulated_s / self.measured_s - 1


def compare(
    group: CustomAllReduceGroup, table: Sequence[dict[str, str]]
) -> tuple[list[AllReducePoint], float]:
    """The group's points, measured against simulated, and its geomean error."""
    calib = group_calibration(group)
    out = []
    for p, n, t in points(group, table):
        graph = get_topology(group.topology, 1)
        sched = connect(graph, p, calib=calib, algo=group.algo).planner(
            CollectiveCall("all_reduce", n)
        )
        out.append(AllReducePoint(p, n, t, simulate(group, p, n, calib), sched.algorithm))
    return out, geomean_error([(q.simulated_s, q.measured_s) for q in out])


COLORS = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#D55E00", "#0072B2", "#CC79A7",
          "#999999", "#F0E442")  # fmt: skip
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "<", ">")


def run(out: Path) -> Iterator[str]:
    out.mkdir(parents=True, exist_ok=True)
    table = rows(calibration.measured(FILE))
    everything: list[AllReducePoint] = []
    series: list[tuple[list[tuple[float, float]], str]] = []
    for g in GROUPS:
        pts, err = compare(g, table)
        everything += pts
        worst = max(pts, key=lambda q: abs(math.log(q.simulated_s / q.measured_s)))
        yield f"{g.name}: kernels {g.kernels}, {g.timing} timing, on {g.topology}"
        yield f"  {'ranks':>5} {'bytes':>9} {'measured us':>12} {'simulated us':>13} {'error':>7}"
        for q in pts:
            yield (
                f"  {q.ranks:>5} {q.bytes:>9} {q.measured_s * 1e6:>12.1f} "
                f"{q.simulated_s * 1e6:>13.1f} {q.error:>+7.1%}  {q.algorithm}"
            )
        verdict = "within" if err < BOUND else "OUTSIDE"
        yield (
            f"  geomean error {err:.1%} ({verdict} {BOUND:.0%}); worst {worst.error:+.1%} "
            f"at {worst.ranks} ranks, {worst.bytes} B"
        )
        series.append(
            ([(q.measured_s * 1e6, q.simulated_s * 1e6) for q in pts], f"{g.name}: {err:.0%}")
        )
    total = geomean_error([(q.simulated_s, q.measured_s) for q in everything])
    yield f"overall geomean error {total:.1%} over {len(everything)} points"
    for reason in EXCLUDED:
        yield f"excluded: {reason}"
    custom_allreduce_scatter(series, COLORS, MARKERS, total, out / "custom_allreduce.png")
    yield f"wrote {out / 'custom_allreduce.png'}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("tpsim-calibration"))
    for line in run(p.parse_args(argv).out):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
