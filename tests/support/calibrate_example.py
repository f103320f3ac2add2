"""Write the guide's ``tpsim calibrate`` example (docs/guide.md, "Calibrate your own engine
profile"): the step times a known profile gives, with seeded noise, so that the fit can be
checked to recover it.

    python tests/support/calibrate_example.py OUT_DIR

writes ``OUT_DIR/truth.yaml`` (``vllm`` with its kernel floors x 0.8, its host work x 0.7,
6 us per collective, HBM x 0.95 and GEMMs x 0.92) and ``OUT_DIR/measured.csv`` (the guide's
eight points at the truth's times, each times a normal draw of 1.5 % sd, seed 0), and prints
the truth's TP 8 batch 64 step (the guide's held-out point).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from tpsim.calibration.profiles import profile
from tpsim.experiments.calibrate.knobs import KNOBS, profile_yaml
from tpsim.experiments.calibrate.measurements import read_points
from tpsim.experiments.calibrate.simulate import step_time

TRUTH = {
    "kernel_floor_scale": 0.8,
    "step_host_scale": 0.7,
    "collective_latency_us": 6.0,
    "hbm_efficiency_scale": 0.95,
    "matmul_efficiency_scale": 0.92,
}
POINTS = """model,topology,tp,batch,phase,prompt_len,context_len,measured_ms
llama-3.1-8b,dgx-h100,1,1,decode,,2048,1
llama-3.1-8b,dgx-h100,1,64,decode,,2048,1
llama-3.1-8b,dgx-h100,2,1,decode,,2048,1
llama-3.1-8b,dgx-h100,2,64,decode,,2048,1
llama-3.1-8b,dgx-h100,4,1,decode,,2048,1
llama-3.1-8b,dgx-h100,4,64,decode,,2048,1
llama-3.1-8b,dgx-h100,1,1,prefill,2048,,1
llama-3.1-8b,dgx-h100,4,4,prefill,2048,,1
llama-3.1-8b,dgx-h100,8,64,decode,,2048,1
"""
NOISE = 0.015


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    knobs = {k.name: k for k in KNOBS}
    calib = profile("vllm")
    entries = [(knobs[n], v, "the guide's example: a known truth") for n, v in TRUTH.items()]
    truth = out / "truth.yaml"
    truth.write_text(profile_yaml("truth", "the guide's example", "vllm", calib, entries))
    grid = out / "grid.csv"
    grid.write_text(POINTS)
    points = read_points(grid)
    noise = np.random.default_rng(0).normal(1.0, NOISE, len(points))
    rows = POINTS.splitlines()
    lines = [rows[0]]
    for i, p in enumerate(points):
        t = step_time(p, str(truth))
        assert isinstance(t, float), t
        if i == len(points) - 1:  # the held-out point: the truth's time, no noise
            print(f"truth at TP 8 batch 64: {t * 1e3:.2f} ms")
            continue
        lines.append(rows[i + 1].rsplit(",", 1)[0] + f",{t * 1e3 * noise[i]:.2f}")
    (out / "measured.csv").write_text("\n".join(lines) + "\n")
    grid.unlink()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
