"""The calibration object: data files with sources, exact unit conversion, the ideal variant."""

from __future__ import annotations

import dataclasses
from importlib import resources

import pytest
import yaml
from tpsim import Options, Workload, simulate
from tpsim.calibration import CalibrationError, default, ideal, measured
from tpsim.calibration.hardware import gpu_catalog, link_figures
from tpsim.calibration.loader import entry, number, scale
from tpsim.topologies.gpus import GPUS

DATA = resources.files("tpsim.calibration").joinpath("data")


def _leaves(node: object, path: str) -> list[str]:
    """Paths of every {value, source} entry under ``node``."""
    if isinstance(node, dict) and "value" in node:
        return [path]
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _leaves(v, f"{path}.{k}")]
    return []


@pytest.mark.parametrize("name", ["kernels", "launch", "links", "memory", "nccl", "gpus"])
def test_every_constant_cites_its_source(name: str) -> None:
    data = yaml.safe_load(DATA.joinpath(f"{name}.yaml").read_text("utf-8"))
    if name == "gpus":
        for gpu, row in data["gpus"].items():
            assert row["source"].strip(), gpu
        data = {"defaults": data["defaults"]}
    leaves = _leaves(data, name)
    assert leaves
    for path in leaves:
        node = data
        for key in path.split(".")[1:]:
            node = node[key]
        assert set(node) == {"value", "source"}, path
        assert isinstance(node["source"], str) and len(node["source"]) > 10, path


def test_units_convert_exactly_in_decimal() -> None:
    c = default()
    assert c.collectives.protocols["LL"].base_s["ring"] == 6.6e-6  # not 6.6 * 1e-6
    assert c.launch["eager"].gpu_gap_s == 2.75e-6
    assert c.launch["graph"].replay_s == 15e-6
    assert c.collectives.custom_max_bytes == 8 * 2**20
    assert c.memory.runtime_bytes == 2**30
    assert link_figures().upi_Bps == 67.2e9
    assert scale(0.35, -6) == 0.35e-6
    assert number("7/9", "x") == 7 / 9
    assert c.collectives.shares is not None and c.collectives.shares.tree_ll == 1 / 3.8


def test_catalog_gpus_are_the_data_files() -> None:
    rows = gpu_catalog()
    assert set(GPUS) == set(rows)
    assert GPUS["a100-sxm-80gb"].matmul_efficiency == 271.2 / 312
    assert GPUS["a100-sxm-80gb"].hbm_efficiency == (1.61 + 1.75) / 2 / 2.0
    assert GPUS["h100-sxm"].arch == "hopper" and GPUS["mi300x"].arch == "cdna3"
    assert all(dataclasses.asdict(GPUS[n]) == rows[n] for n in rows)


def test_ideal_is_every_efficiency_one_and_every_overhead_zero() -> None:
    i = ideal()
    assert i.name == "ideal"
    k = i.kernels
    assert (k.matmul_efficiency, k.hbm_efficiency, k.kernel_overhead_s) == (1.0, 1.0, 0.0)
    assert k.attention_efficiency == k.attention_fp8_efficiency == 1.0
    assert k.tile("hopper") is None  # no tile or wave quantisation
    assert all(dataclasses.astuple(cost) == (0.0, 0.0, 0.0, 0.0) for cost in i.launch.values())
    c = i.collectives
    (proto,) = c.protocols.values()
    assert set(proto.base_s.values()) == set(proto.hop_s.values()) == {0.0}
    assert proto.wire_factor == 1.0 and not proto.max_busbw_Bps
    assert c.payload_share("LL", "ring", "all_reduce", True) == 1.0
    assert (c.nvls_latency_s, c.nvls_efficiency_of("nvlink4")) == (0.0, 1.0)
    assert (c.custom_base_s, c.custom_hop_s, c.comm_sms) == (0.0, 0.0, 0)
    assert all(la.call_s == 0.0 for la in c.launchers.values()) and not c.host_enqueue
    assert {i.links.efficiency_of(k, "nvlink3") for k in ("nvlink", "pcie", "infiniband")} == {1.0}
    assert i.memory == default().memory  # what fits is not a roofline question
    assert Options(ideal=True, engine="ideal").calibration is i
    assert Options(engine="ideal").calibration is default()


def test_the_default_is_not_ideal() -> None:
    d = default()
    assert d.kernels.tile("hopper") is not None and d.kernels.tile("unknown-arch") is not None
    assert d.launch["eager"].kernel_s > 0 and d.collectives.comm_sms > 0
    assert 0 < d.links.efficiency_of("nvlink", "nvlink4") < 1


def test_ideal_run_prices_by_the_roofline_only() -> None:
    wl = Workload(batch=1, context_len=128)
    real = simulate("llama-2-7b", "dgx-h100", 2, wl)
    napkin = simulate("llama-2-7b", "dgx-h100", 2, wl, Options(ideal=True))
    assert napkin.latency_s < real.latency_s
    assert napkin.summary["breakdown_s"]["launch_overhead"] == 0.0


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "gpt-fast"])
def test_ideal_collectives_are_the_same_under_every_engine(engine: str) -> None:
    """--ideal zeroes every engine's collective overheads: vLLM's symmetric-memory
    all-reduce kept its 10.6 us and 0.68 (70B TP 8 on H200: 1.93 ms of a 3.97 ms 'ideal'
    step was its all-reduces, against 0.175 ms under --engine ideal)."""
    wl = Workload(batch=16, context_len=2048)
    args = ("llama-3.1-70b", "hgx-h200", 8, wl)
    base = simulate(*args, Options(ideal=True, engine="ideal", dtype="fp8"))
    run = simulate(*args, Options(ideal=True, engine=engine, dtype="fp8"))
    comm = run.summary["breakdown_s"]["communication"]
    assert comm == pytest.approx(base.summary["breakdown_s"]["communication"], rel=1e-9)
    symm = Options(ideal=True, engine=engine).calibration.collectives.symm_mem
    assert symm is None or (symm.base_s, symm.efficiency) == (0.0, 1.0)


def test_skew_and_ideal_are_refused_together() -> None:
    with pytest.raises(ValueError, match="launch_skew_s=1e-05: cannot be combined with ideal"):
        Options(ideal=True, launch_skew_s=1e-5)


def test_a_constant_without_a_source_is_refused() -> None:
    with pytest.raises(CalibrationError, match=r"x\.k: must be an entry with a value and a source"):
        entry({"k": {"value": 1}}, "k", "x")
    with pytest.raises(CalibrationError, match="must say where it comes from"):
        entry({"k": {"value": 1, "source": " "}}, "k", "x")
    with pytest.raises(CalibrationError, match="division by zero"):
        number("1/0", "x")
    with pytest.raises(CalibrationError, match="finite number"):
        number(float("nan"), "x")


def test_the_measurements_ship_with_the_package() -> None:
    names = {p.name for p in measured().iterdir()}
    assert {"nccl_allreduce_a100_8gpu.csv", "collective_peaks.csv", "gemm.csv"} <= names
    for name in names:
        assert measured(name).read_text().startswith("#"), name  # a header says its source
