"""The determinism capture of a restructure: run a fixed set of commands and write every output
(stdout, files) under one folder, so two trees can be compared byte for byte.

    python tests/support/capture.py OUT_DIR
    diff -r OUT_BEFORE OUT_AFTER

JSON output drops ``engine`` (events and wall time, the only keys allowed to differ); help texts
are left out (they name modules). Each command runs in its own folder under OUT_DIR.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

L8 = ["--model", "llama-3.1-8b"]
L70 = ["--model", "llama-3.1-70b"]
CASES: dict[str, list[str]] = {
    "run_tp8_h100": ["run", *L70, "--topology", "dgx-h100", "--tp", "8", "--batch", "16"],
    "run_json": ["run", *L70, "--topology", "dgx-h100", "--tp", "8", "--json"],
    "run_prefill_outputs": [
        "run",
        *L8,
        "--topology",
        "dgx-h100",
        "--nodes",
        "2",
        "--tp",
        "4",
        "--gpus-per-node",
        "2",
        "--batch",
        "4",
        "--launch",
        "eager",
        "--overlap",
        "chunked",
        "--phase",
        "prefill",
        "--prompt-len",
        "512",
        "--trace",
        "t.json",
        "--gantt",
        "g.png",
    ],
    "run_layout_json": [
        "run",
        *L70,
        "--topology",
        "dgx-h100",
        "--nodes",
        "2",
        "--tp",
        "4",
        "--pp",
        "2",
        "--dp",
        "2",
        "--batch",
        "8",
        "--json",
    ],
    "run_layout_text": [
        "run",
        *L70,
        "--topology",
        "dgx-h100",
        "--tp",
        "2",
        "--pp",
        "2",
        "--dp",
        "2",
        "--batch",
        "8",
        "--gantt",
        "g.svg",
    ],
    "run_engine": ["run", *L70, "--topology", "dgx-a100", "--tp", "4", "--engine", "vllm-v0"],
    "run_ideal": ["run", "--model", "llama-2-7b", "--topology", "dgx-a100", "--tp", "2", "--ideal"],
    "collective": ["collective", "--topology", "dgx-h100", "--ranks", "8", "--sizes", "8K,1M,64M"],
    "collective_json": [
        "collective",
        "--topology",
        "dgx-a100",
        "--nodes",
        "2",
        "--ranks",
        "16",
        "--json",
        "--min-bytes",
        "1K",
        "--max-bytes",
        "16M",
    ],
    "sweep": [
        "sweep",
        *L8,
        "--topology",
        "dgx-h100",
        "--tp",
        "1,2,4,8",
        "--batch",
        "1,16",
        "--out",
        "s.csv",
        "--plots",
        "plots",
        "--jobs",
        "1",
    ],
    "compare": [
        "compare",
        *L70,
        "--topology",
        "dgx-h100",
        "--tp",
        "4,8",
        "--batch",
        "8",
        "--gantt",
        "c.png",
    ],
    "compare_json": ["compare", *L70, "--topology", "dgx-h100", "--tp", "4,8", "--json"],
    "plan": ["plan", *L70, "--topology", "dgx-h100", "--nodes", "2", "--jobs", "1"],
    "plan_json": ["plan", *L8, "--topology", "dgx-a100", "--json", "--jobs", "1"],
    "report": ["report", *L70, "--topology", "dgx-h100", "--tp", "4,8", "--out", "r.html"],
    "check_claim": [
        "check-claim",
        *L70,
        "--topology",
        "dgx-h100",
        "--tp",
        "8",
        "--tokens-per-s",
        "5000",
    ],
    "study_worked": ["study", "worked_examples", "--out", "study"],
    "study_engines": ["study", "engines", "--out", "study"],
    "list_models": ["list", "models"],
    "list_engines": ["list", "engines"],
}


def run(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg"}
    for name, argv in CASES.items():
        folder = out / name
        folder.mkdir()
        p = subprocess.run(
            [sys.executable, "-m", "tpsim", *argv],
            cwd=folder,
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
        stdout = p.stdout
        if "--json" in argv and p.returncode == 0:
            data = json.loads(stdout)
            if isinstance(data, dict):
                data.pop("engine", None)
                for v in data.get("configurations", []) or []:
                    if isinstance(v, dict):
                        v.pop("engine", None)
            stdout = json.dumps(data, sort_keys=True, indent=1)
        (folder / "_stdout").write_text(stdout)
        (folder / "_stderr").write_text(p.stderr)
        (folder / "_rc").write_text(str(p.returncode))
        print(name, p.returncode, flush=True)


if __name__ == "__main__":
    run(Path(sys.argv[1]))
