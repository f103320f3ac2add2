"""The ``vllm-v0`` profile's host time per step against the CPU overheads it was fitted to:
Vidur's profiling of a vLLM-derived engine (sarathi-serve's ``LLMEngine``, scheduler
``vllm``) on an A100 node (``measured/vidur_cpu_overheads_a100.csv``).

    python -m tpsim.experiments.validation.host_overheads

Each row of the file is one (model, TP, batch) run; its pieces per step are what the profile
prices apart: scheduling (``schedule_median``), preparing the inputs and launching the model
(``prepare_inputs_e2e_median`` plus ``model_execution_e2e_median``: the host side of the
model call), sampling (``sampler_e2e_median``), output processing
(``process_model_outputs_median``) and, with TP workers, handing the step to them over Ray
(``ray_comm_time_median``). The profile prices each as ``base + per sequence x batch``
(``engines/vllm-v0.yaml`` ``step_host_us``, ``tp_coordination_us``), least-squares fits to
this file's 2024-01-11 Llama-2-7B and 70B rows. Compared here: the host time per step (the
pieces summed) of every 2024-01-11 row, the fitted Llama-2 rows and the CodeLlama-34B rows
the fit left out; the file's 2024-05-09 collection (another runner and workload, whose
output processing costs a quarter as much a sequence) is compared apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from tpsim.calibration import csv_rows, measured
from tpsim.calibration.profiles import profile

FILE = "vidur_cpu_overheads_a100.csv"
PROFILE = "vllm-v0"
#: The collection the profile was fitted to, and the models of it the fit used.
FITTED_VERSION = "2024-01-11"
FITTED_MODELS = ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-70b-hf")
#: The file's columns summed into each piece the profile prices.
PIECES = {
    "schedule": ("schedule_median",),
    "prepare_inputs": ("prepare_inputs_e2e_median", "model_execution_e2e_median"),
    "sample": ("sampler_e2e_median",),
    "process_outputs": ("process_model_outputs_median",),
}


@dataclass(frozen=True)
class HostRow:
    """One row of the file: its host time per step, piece by piece (seconds)."""

    version: str
    model: str
    tp: int
    batch: int
    pieces: tuple[tuple[str, float], ...]

    @property
    def fitted(self) -> bool:
        return self.version == FITTED_VERSION and self.model in FITTED_MODELS

    @property
    def label(self) -> str:
        short = self.model.split("/")[-1]
        return f"{short} TP {self.tp} batch {self.batch}{'' if self.fitted else ' (held out)'}"

    @property
    def measured_s(self) -> float:
        return sum(s for _, s in self.pieces)


@cache
def cases(version: str = FITTED_VERSION) -> tuple[HostRow, ...]:
    """The rows of one collection, in the file's order."""
    out = []
    for r in csv_rows(measured(FILE)):
        if r["data_version"] != version:
            continue
        tp = int(r["tensor_parallel_degree"])
        pieces = [(k, sum(float(r[c] or 0) for c in cols) / 1e3) for k, cols in PIECES.items()]
        if tp > 1 and r["ray_comm_time_median"]:
            pieces.append(("tp_coordination", float(r["ray_comm_time_median"]) / 1e3))
        out.append(HostRow(version, r["model_name"], tp, int(r["batch_size"]), tuple(pieces)))
    return tuple(out)


def price(case: HostRow) -> float:
    """The profile's host time for the step of ``case``: the same pieces, summed."""
    engine = profile(PROFILE).engine
    total = 0.0
    for piece, _ in case.pieces:
        if piece == "tp_coordination":
            total += engine.tp_coordination.seconds(case.tp, case.batch)
        else:
            total += engine.step_host[piece].seconds(case.batch)
    return total


def geomean_error(among: tuple[HostRow, ...]) -> float:
    """``exp(mean |ln(priced / measured)|) - 1`` over ``among``."""
    logs = [abs(math.log(price(c) / c.measured_s)) for c in among]
    return math.exp(sum(logs) / len(logs)) - 1


def main() -> None:
    for version in (FITTED_VERSION, "2024-05-09"):
        rows = cases(version)
        for c in rows:
            t = price(c)
            print(f"{version} {c.label:48s} {c.measured_s * 1e3:7.3f} ms {t * 1e3:7.3f} ms "
                  f"{t / c.measured_s - 1:+7.1%}")  # fmt: skip
        print(f"{version}: geomean error {geomean_error(rows):.1%} over {len(rows)} rows")


if __name__ == "__main__":
    main()
