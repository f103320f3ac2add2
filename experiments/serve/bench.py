"""How fast ``tpsim serve`` simulates (a benchmark, not a test): Llama-3.1-70B at TP 8 on one
DGX H100, 2,000 requests of 1K prompt and 1K output tokens at 10 req/s (Poisson), vLLM's
scheduler. Prints the simulated duration, the wall time and their ratio (the issue's target:
at least 100x faster than real time on 2 cores), the process's CPU time for the run, and the
box's bare SimPy rate (timeout events per second of a process doing nothing else), so that
runs on boxes of different speeds can be told apart from changes of the code.

    python -m tpsim.experiments.serve.bench [--requests N] [--exact]
"""

from __future__ import annotations

import argparse
import time

from tpsim.core.engine.baseline import bare_simpy_rate
from tpsim.experiments.serve.run import ServeSetup, serve
from tpsim.experiments.serve.workload import Lengths, arrival_times, streams, synthetic


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--rate", type=float, default=10.0)
    p.add_argument("--exact", action="store_true", help="no iteration cache")
    a = p.parse_args(argv)
    times = arrival_times(streams(0)[0], a.rate, "poisson", 1.0, requests=a.requests)
    reqs = synthetic(0, Lengths("fixed", 1024), Lengths("fixed", 1024), count=a.requests,
                     arrival_s=times)  # fmt: skip
    floor = bare_simpy_rate()
    wall, cpu = time.perf_counter(), time.process_time()
    r = serve(ServeSetup("llama-3.1-70b", "dgx-h100", 8, exact=a.exact), requests=reqs)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    s = r.summary()
    print(f"requests {len(r.requests)}, iterations {r.iterations}, forward passes simulated "
          f"{r.simulated_steps}")  # fmt: skip
    print(f"simulated {r.duration_s:.1f} s of serving in {wall:.1f} s of wall time: "
          f"{r.duration_s / wall:.1f}x real time ({cpu:.1f} s of CPU)")  # fmt: skip
    print(f"this box: bare SimPy {floor / 1e6:.2f} M timeouts/s")
    print(f"mean TTFT {s['mean_ttft_ms']:.1f} ms, mean TPOT {s['mean_tpot_ms']:.2f} ms, "
          f"saturated: {s['saturated']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
