"""Measure one GPU's kernels the way tpsim prices them, with PyTorch: a kernel table to read
with ``--kernel-table`` and the GPU's facts for ``gpus.yaml``.

Run it where a GPU is (it needs PyTorch and nothing of tpsim, so it runs as a bare file)::

    python3 experiments/measure_kernels.py --out DIR [--gpu h200-sxm] [--quick]

It writes, in ``DIR``:

- ``kernels.csv``: tpsim's ``ops`` kernel-table layout (docs/guide.md, "Kernel tables"), one row per
  decoder GEMM (``qkv_proj``, ``o_proj``, ``mlp_up``, ``mlp_down``) of a model shape
  (default Llama-3.1-70B's) at TP 1, 2, 4 and 8 and 1 to 8192 tokens, in bf16
  (``torch.matmul``, cuBLAS as ``nn.Linear`` calls it) and in fp8 (``torch._scaled_mm``,
  e4m3 with per-tensor scales, cuBLASLt), and the residual add;
- ``facts.csv``: ``name,value,unit,method``: the achievable HBM bandwidth (a copy, a read),
  the best matmul rate in bf16 and fp8 (the MAMF), the host cost of one eager PyTorch launch,
  a kernel's time in a CUDA graph replay, the clocks;
- ``log.txt``: versions, clocks and every row as it was measured.

How it times (as a decode step meets its kernels): each GEMM reads its weights from HBM, not
from L2 — the calls cycle through copies of the weights that together hold at least 4x the
L2 — and the calls are captured in a CUDA graph so the host's launch cost is not in the
kernel time; CUDA events around graph replays; the median of 9 replays, each divided by the
calls it holds. Inputs are random normal values (zeros run faster: the tensor cores draw
less power).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from typing import Any

SHAPE = {"n_embd": 8192, "heads": 64, "kv_heads": 8, "head_dim": 128, "intermediate": 28672}
TPS = (1, 2, 4, 8)
TOKENS = (1, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
QUICK_TOKENS = (1, 8, 64, 512, 4096)
L2_MULTIPLE = 4
REPLAYS = 9
REPLAY_TARGET_S = 2e-3


def gemm_shapes(tp: int) -> dict[str, tuple[int, int]]:
    """The decoder GEMMs of one rank as (n, k): output features by input features."""
    h, d = SHAPE["n_embd"], SHAPE["head_dim"]
    qkv = (SHAPE["heads"] + 2 * SHAPE["kv_heads"]) * d // tp
    inter = SHAPE["intermediate"] // tp
    return {
        "qkv_proj": (qkv, h),
        "o_proj": (h, SHAPE["heads"] * d // tp),
        "mlp_up": (2 * inter, h),
        "mlp_down": (h, inter),
    }


class Log:
    def __init__(self, path: str) -> None:
        self.file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - kept open for the run

    def close(self) -> None:
        self.file.close()

    def __call__(self, *parts: object) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def smi(query: str) -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"n/a ({exc})"


def graph_time_s(torch: Any, calls: list[Any]) -> float:
    """Seconds per call of ``calls`` (closures) captured in one CUDA graph, replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls[: min(3, len(calls))]:  # warm-up outside the capture (cuBLAS picks)
            call()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / len(calls))
    del graph
    return statistics.median(times)


def eager_time_s(torch: Any, call: Any, n: int = 3) -> float:
    """Seconds per call of ``call`` launched eagerly ``n`` times (after one warm-up)."""
    call()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def l2_bytes(torch: Any) -> int:
    props = torch.cuda.get_device_properties(0)
    return int(getattr(props, "L2_cache_size", 0) or 64 << 20)


def gemm_calls(torch: Any, dtype: str, m: int, n: int, k: int) -> list[Any]:
    """Closures, one per weight copy, each running the GEMM [m, k] x [k, n] once."""
    dev = "cuda"
    w_bytes = n * k * (1 if dtype == "fp8" else 2)
    copies = max(1, math.ceil(L2_MULTIPLE * l2_bytes(torch) / w_bytes))
    x16 = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    calls = []
    if dtype == "bf16":
        for _ in range(copies):
            w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
            calls.append(lambda w=w: torch.matmul(x16, w.t(), out=out))
    else:
        f8 = torch.float8_e4m3fn
        x8 = x16.to(f8)
        one = torch.ones((), device=dev, dtype=torch.float32)
        for _ in range(copies):
            w = torch.randn(n, k, device=dev, dtype=torch.bfloat16).to(f8)
            calls.append(
                lambda w=w: torch._scaled_mm(
                    x8, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, out=out
                )
            )
    return calls


def repeat_to_target(torch: Any, calls: list[Any]) -> list[Any]:
    """The closures cycled so one replay runs for about REPLAY_TARGET_S (at least a cycle)."""
    once = eager_time_s(torch, calls[0])
    reps = max(len(calls), min(400, math.ceil(REPLAY_TARGET_S / max(once, 1e-6))))
    return [calls[i % len(calls)] for i in range(reps)]


def measure_gemms(
    torch: Any, gpu: str, tokens: tuple[int, ...], log: Log, emit: Any, deadline: float
) -> None:
    """Each GEMM and the residual add, every row handed to ``emit`` as it is measured; past
    ``deadline`` (``time.perf_counter``) the rest is left out, and the log says so."""
    for tp in TPS:
        for op, (n, k) in gemm_shapes(tp).items():
            for m in tokens:
                for dtype in ("bf16", "fp8"):
                    if time.perf_counter() > deadline:
                        log("budget spent: left out from", dtype, tp, op, m)
                        return
                    try:
                        t, note = gemm_time_s(torch, dtype, m, n, k), ""
                    except Exception as exc:  # a shape a library refuses is logged
                        log("refused", dtype, tp, op, m, n, k, type(exc).__name__, str(exc)[:160])
                        if dtype != "fp8" or m % 16 == 0:
                            continue
                        padded = 16 * math.ceil(m / 16)  # as an engine pads fp8 GEMM inputs
                        try:
                            t = gemm_time_s(torch, dtype, padded, n, k)
                        except Exception as again:  # fp8 not run at all: say so, go on
                            log("refused", dtype, m, "padded", padded, type(again).__name__)
                            continue
                        note = f" (padded to {padded})"
                    finally:
                        torch.cuda.empty_cache()
                    w_bytes = n * k * (1 if dtype == "fp8" else 2)
                    log(
                        f"{dtype} tp{tp} {op:8s} m={m:5d} n={n:5d} k={k:5d} {t * 1e6:9.2f} us "
                        f"{w_bytes / t / 1e12:6.2f} TB/s(w) {2 * m * n * k / t / 1e12:7.1f} TFLOP/s"
                        + note
                    )
                    emit(row(gpu, dtype, tp, op, m, t))
    for m in tokens:  # the residual add [m, n_embd] + [m, n_embd] in 16-bit, as a step meets
        h = SHAPE["n_embd"]  # it: its operands just written, in L2 where they fit
        b = [torch.randn(m, h, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        add = [lambda b=b: torch.add(b[0], b[1], out=b[2])]
        t = graph_time_s(torch, repeat_to_target(torch, add))
        log(f"bf16 residual m={m:5d} {t * 1e6:8.2f} us {3 * m * h * 2 / t / 1e12:6.2f} TB/s")
        for tp in TPS:
            for dtype in ("bf16", "fp8"):
                emit(row(gpu, dtype, tp, "residual", m, t))
        b = add = []
        torch.cuda.empty_cache()


def gemm_time_s(torch: Any, dtype: str, m: int, n: int, k: int) -> float:
    calls = repeat_to_target(torch, gemm_calls(torch, dtype, m, n, k))
    try:
        return graph_time_s(torch, calls)
    except RuntimeError:  # a capture refused: back-to-back launches, events around them
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for call in calls:
            call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / len(calls)


def cupti_time_s(torch: Any, calls: list[Any]) -> tuple[float, int]:
    """Kernel time per call as the profiler (CUPTI) sees it, the way Vidur measured its
    kernels: each call launched eagerly, its kernels' durations summed; and the kernels a
    call runs. The gaps between kernels are not in it."""
    from torch.profiler import ProfilerActivity, profile  # only where a GPU is

    for call in calls[:3]:
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for call in calls:
            call()
        torch.cuda.synchronize()
    total, kernels = 0.0, 0
    for evt in prof.events():
        if str(getattr(evt, "device_type", "")).endswith("CUDA"):
            us = getattr(evt, "device_time", None)
            total += float(us if us is not None else evt.cuda_time)
            kernels += 1
    return total / 1e6 / len(calls), round(kernels / len(calls))


def measure_profiled(torch: Any, log: Log, emit: Any) -> None:
    """Small kernels two ways: CUPTI durations of eager launches and graph replay per call;
    their difference is what a kernel costs beyond its own run in a CUDA graph."""
    h = SHAPE["n_embd"]
    for tp in TPS:
        for op, (n, k) in gemm_shapes(tp).items():
            for m in (1, 8, 64):
                for dtype in ("bf16", "fp8"):
                    calls = gemm_calls(torch, dtype, m, n, k)
                    cycle = [calls[i % len(calls)] for i in range(max(50, len(calls)))]
                    kern, count = cupti_time_s(torch, cycle)
                    graph = graph_time_s(torch, cycle)
                    log(f"profiled {dtype} tp{tp} {op:8s} m={m:3d} cupti {kern * 1e6:7.2f} us "
                        f"x{count} kernels, graph {graph * 1e6:7.2f} us")  # fmt: skip
                    emit([op, dtype, tp, m, count, f"{kern * 1e6:.2f}", f"{graph * 1e6:.2f}"])
                    calls = cycle = []
                    torch.cuda.empty_cache()
    for m in (1, 8, 64, 512):
        b = [torch.randn(m, h, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        add = [lambda b=b: torch.add(b[0], b[1], out=b[2])] * 200
        kern, count = cupti_time_s(torch, add)
        graph = graph_time_s(torch, add)
        log(f"profiled residual m={m:3d} cupti {kern * 1e6:7.2f} us graph {graph * 1e6:7.2f} us")
        emit(["residual", "bf16", 0, m, count, f"{kern * 1e6:.2f}", f"{graph * 1e6:.2f}"])
    x = torch.zeros(1, device="cuda")
    tiny = [lambda: torch.add(x, 1, out=x)] * 1000
    kern, count = cupti_time_s(torch, tiny)
    graph = graph_time_s(torch, tiny)
    log(f"profiled tiny add cupti {kern * 1e6:7.2f} us graph {graph * 1e6:7.2f} us")
    emit(["tiny_add", "fp32", 0, 1, count, f"{kern * 1e6:.2f}", f"{graph * 1e6:.2f}"])


def measure_attention(torch: Any, log: Log, emit: Any) -> None:
    """Decode attention through PyTorch's fused SDPA kernels, one new query a sequence over a
    dense KV cache (``enable_gqa``: KV heads shared by query heads): per backend, batch, heads
    of one rank and cache length, CUPTI kernel time and CUDA-graph time per call."""
    from torch.nn.attention import SDPBackend, sdpa_kernel  # only where a GPU is

    f = torch.nn.functional.scaled_dot_product_attention
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}  # fmt: skip
    d = SHAPE["head_dim"]
    for name, backend in backends.items():
        for hq, hkv in ((64, 8), (8, 1)):
            for batch in (1, 8, 64):
                for ctx in (128, 2048, 8192):
                    copies = max(1, math.ceil(L2_MULTIPLE * l2_bytes(torch)
                                              / (2 * batch * hkv * ctx * d * 2)))  # fmt: skip
                    copies = min(copies, 64)
                    q = torch.randn(batch, hq, 1, d, device="cuda", dtype=torch.bfloat16)
                    kv: list[Any] = [
                        [torch.randn(batch, hkv, ctx, d, device="cuda", dtype=torch.bfloat16)
                         for _ in range(2)] for _ in range(copies)]  # fmt: skip
                    out = torch.empty_like(q)

                    def call(kv_: Any, q: Any = q, out: Any = out, be: Any = backend) -> None:
                        with sdpa_kernel(be):
                            out.copy_(f(q, kv_[0], kv_[1], enable_gqa=True))

                    calls = [lambda kv_=kv_: call(kv_) for kv_ in kv]
                    cycle = [calls[i % len(calls)] for i in range(max(50, len(calls)))]
                    try:
                        kern, count = cupti_time_s(torch, cycle)
                        graph = graph_time_s(torch, cycle)
                    except Exception as exc:  # a backend that refuses the shape
                        log("attention refused", name, hq, hkv, batch, ctx, type(exc).__name__,
                            str(exc)[:120])  # fmt: skip
                        continue
                    finally:
                        kv, calls, cycle = [], [], []  # freed before the next shape
                        torch.cuda.empty_cache()
                    k_us, g_us = f"{kern * 1e6:.2f}", f"{graph * 1e6:.2f}"
                    log(f"attention {name:9s} hq={hq:2d} hkv={hkv} b={batch:2d} ctx={ctx:5d} "
                        f"cupti {k_us} us x{count} graph {g_us} us")  # fmt: skip
                    emit([name, hq, hkv, batch, ctx, count, k_us, g_us])


def row(gpu: str, dtype: str, tp: int, op: str, tokens: int, t: float) -> list[Any]:
    s = SHAPE
    return [gpu, dtype, s["n_embd"], s["heads"], s["kv_heads"], s["intermediate"], tp, op,
            tokens, 0, f"{t * 1e6:.2f}"]  # fmt: skip


def measure_facts(torch: Any, log: Log) -> list[list[Any]]:
    facts: list[list[Any]] = []

    def fact(name: str, value: float, unit: str, method: str) -> None:
        log(f"fact {name} = {value:.4g} {unit} ({method})")
        facts.append([name, f"{value:.4g}", unit, method])

    # Clocks up first (an idle H200 sits at 345 MHz): 2 s of large matmuls.
    w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + 2
    while time.perf_counter() < end:
        for _ in range(20):
            w @ w
        torch.cuda.synchronize()
    w = None
    # HBM: a 4 GiB copy (bytes read + written) and a read (sum) of 4 GiB.
    n = 1 << 31
    a = torch.empty(n, device="cuda", dtype=torch.bfloat16).normal_()
    b = torch.empty_like(a)
    t = graph_time_s(torch, [lambda a=a, b=b: b.copy_(a)] * 10)
    fact("hbm_copy_TBps", 2 * a.numel() * 2 / t / 1e12, "TB/s",
         "b.copy_(a) of 4 GiB bf16, bytes read + written, graph of 10, median of 9")  # fmt: skip
    t = graph_time_s(torch, [lambda a=a: a.sum(dtype=torch.float32)] * 10)
    fact("hbm_read_TBps", a.numel() * 2 / t / 1e12, "TB/s", "torch.sum of 4 GiB bf16 (reads)")
    a = b = None
    torch.cuda.empty_cache()

    # The best matmul (MAMF): the fastest of a few large shapes, random normal inputs.
    best16, best8 = 0.0, 0.0
    for m, n, k in ((8192, 8192, 8192), (16384, 8192, 8192), (8192, 16384, 8192),
                    (4096, 4096, 4096), (8192, 8192, 16384)):  # fmt: skip
        for dtype in ("bf16", "fp8"):
            try:
                calls = gemm_calls(torch, dtype, m, n, k)
                t = graph_time_s(torch, [calls[i % len(calls)] for i in range(max(10, len(calls)))])
            except Exception as exc:  # fp8 refused: the bf16 rate still stands
                log("mamf refused", dtype, m, n, k, type(exc).__name__, str(exc)[:160])
                continue
            rate = 2 * m * n * k / t / 1e12
            log(f"mamf {dtype} {m}x{n}x{k}: {rate:.1f} TFLOP/s")
            if dtype == "bf16":
                best16 = max(best16, rate)
            else:
                best8 = max(best8, rate)
            del calls
            torch.cuda.empty_cache()
    fact("best_matmul_bf16_tflops", best16, "TFLOP/s", "fastest of 5 large torch.matmul shapes")
    fact("best_matmul_fp8_tflops", best8, "TFLOP/s", "fastest of 5 large torch._scaled_mm shapes")

    # Launches: a one-element add, eager (host cost per launch, GPU keeps up) and in a graph.
    x = torch.zeros(1, device="cuda")
    y = torch.zeros(1, device="cuda")
    for _ in range(100):
        torch.add(x, 1, out=y)
    torch.cuda.synchronize()
    n_launch = 20000
    t0 = time.perf_counter()
    for _ in range(n_launch):
        torch.add(x, 1, out=y)
    host = (time.perf_counter() - t0) / n_launch
    torch.cuda.synchronize()
    fact("eager_launch_host_us", host * 1e6, "us",
         "host time per torch.add(x, 1, out=y) of one element, 20000 in a Python loop")  # fmt: skip
    t = graph_time_s(torch, [lambda: torch.add(x, 1, out=y)] * 1000)
    fact("graph_kernel_us", t * 1e6, "us",
         "GPU time per one-element add in a CUDA graph of 1000 (kernel and gap)")  # fmt: skip
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(1000):
            torch.add(x, 1, out=y)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        g.replay()
    host = (time.perf_counter() - t0) / 20
    torch.cuda.synchronize()
    fact("graph_replay_host_us", host * 1e6, "us",
         "host wall time of graph.replay() for a graph of 1000 kernels")  # fmt: skip
    one = torch.zeros(1, device="cuda")
    t0 = time.perf_counter()
    for _ in range(2000):
        one.item()
    fact("sync_roundtrip_us", (time.perf_counter() - t0) / 2000 * 1e6, "us",
         "host wall time of tensor.item() on an idle GPU (launch, copy, synchronise)")  # fmt: skip
    del g
    return facts


def write_rows(path: str, log: Log, header: list[str], measure: Any, comment: str = "") -> None:
    """Run ``measure(emit)``, each row it emits written to the CSV ``path`` as it comes (a
    run cut short keeps what it measured; an error is logged, not raised)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        if comment:
            f.write(comment + "\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)

        def emit(r: list[Any]) -> None:
            w.writerow(r)
            f.flush()

        try:
            measure(emit)
        except Exception:  # what was measured stays in the file
            log(traceback.format_exc())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for kernels.csv, facts.csv, log.txt")
    parser.add_argument("--gpu", default="", help="catalog name for the table's gpu column")
    parser.add_argument("--quick", action="store_true", help="5 token counts instead of 13")
    parser.add_argument("--profiled", action="store_true",
                        help="also small kernels under the profiler (profiled.csv)")  # fmt: skip
    parser.add_argument("--attention", action="store_true",
                        help="also decode attention via PyTorch SDPA (attention.csv)")  # fmt: skip
    parser.add_argument("--skip-gemms", action="store_true", help="no kernels.csv")
    parser.add_argument("--budget-s", type=float, default=0, help="stop the GEMMs after this")
    args = parser.parse_args(argv)
    try:
        import torch  # only where a GPU is
    except ImportError as exc:
        print(f"measure_kernels: needs PyTorch on a machine with a GPU ({exc})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("measure_kernels: PyTorch sees no CUDA GPU", file=sys.stderr)
        return 2

    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, "log.txt"))
    props = torch.cuda.get_device_properties(0)
    gpu = args.gpu or props.name.lower().replace(" ", "-")
    log("device", props.name, "SMs", props.multi_processor_count, "L2", l2_bytes(torch))
    log("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])
    log("smi", smi("name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit"))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    t0 = time.perf_counter()
    try:
        facts = [] if args.skip_gemms else measure_facts(torch, log)
    except Exception:  # the GEMMs are still worth measuring: the log keeps the reason
        log(traceback.format_exc())
        facts = []
    with open(os.path.join(args.out, "facts.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["name", "value", "unit", "method"])
        w.writerows(facts)
    log("facts done in", round(time.perf_counter() - t0, 1), "s")
    log("smi after facts", smi("clocks.sm,clocks.mem,temperature.gpu,power.draw"))
    deadline = t0 + args.budget_s if args.budget_s > 0 else math.inf
    if args.skip_gemms:
        deadline = -math.inf
    tokens = QUICK_TOKENS if args.quick else TOKENS
    comment = (f"# tpsim kernel table, ops layout: {props.name}, torch {torch.__version__}, "
               f"CUDA {torch.version.cuda}; experiments/measure_kernels.py")  # fmt: skip
    write_rows(os.path.join(args.out, "kernels.csv"), log,
               ["gpu", "dtype", "n_embd", "heads", "kv_heads", "intermediate", "tp", "op",
                "tokens", "kv_len", "time_us"],
               lambda emit: measure_gemms(torch, gpu, tokens, log, emit, deadline),
               comment)  # fmt: skip
    if args.profiled:
        write_rows(os.path.join(args.out, "profiled.csv"), log,
                   ["op", "dtype", "tp", "tokens", "kernels", "cupti_us", "graph_us"],
                   lambda emit: measure_profiled(torch, log, emit))  # fmt: skip
    if args.attention:
        write_rows(os.path.join(args.out, "attention.csv"), log,
                   ["backend", "heads", "kv_heads", "batch", "kv_len", "kernels", "cupti_us",
                    "graph_us"],
                   lambda emit: measure_attention(torch, log, emit))  # fmt: skip
    log("smi end", smi("clocks.sm,clocks.mem,temperature.gpu,power.draw"))
    log("all done in", round(time.perf_counter() - t0, 1), "s")
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
