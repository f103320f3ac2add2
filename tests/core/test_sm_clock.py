"""NCCL's latencies at the GPU's SM clock (``nccl.yaml`` ``reference_clock_GHz``): the fixed
latency and the NVLink hop are the kernel's own work, as many SM cycles on any GPU, so they
hold as written at the reference clock (the H100's 1.98 GHz) and take ``reference / clock``
times as long elsewhere; a PCI hop (the PCIe round trip) and a network hop (the NIC's) do not
change."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpsim import calibration
from tpsim.calibration.entries import CalibrationError
from tpsim.calibration.profiles import profile
from tpsim.core.collective_bench import collective_sweep
from tpsim.core.comm.group import tp_group
from tpsim.topologies.errors import TopologyError
from tpsim.topologies.gpus import GPUS, gpu_from_dict, gpu_to_dict
from tpsim.topologies.io import get_topology

A100 = 1.98 / 1.41  # the H100's clock over the A100's


def _protocol_us(topology: str, ranks: int, proto: str, nodes: int = 1, ideal: bool = False):
    calib = calibration.ideal() if ideal else calibration.default()
    fab = tp_group(get_topology(topology, nodes), ranks).fabric(calib)
    p = fab.tuning.protocols[proto]
    return {k: v * 1e6 for k, v in p.base_s.items()}, {k: v * 1e6 for k, v in p.hop_s.items()}


def test_the_catalog_clocks() -> None:
    assert GPUS["a100-sxm-80gb"].sm_clock_Hz == 1.41e9
    assert GPUS["h100-sxm"].sm_clock_Hz == GPUS["h200-sxm"].sm_clock_Hz == 1.98e9
    assert all(s.sm_clock_Hz is not None and 1e9 < s.sm_clock_Hz < 3e9 for s in GPUS.values())
    assert calibration.default().collectives.reference_clock_Hz == 1.98e9


def test_at_the_reference_clock_nccls_table_holds_as_written() -> None:
    base, hop = _protocol_us("dgx-h100", 8, "LL")
    assert base["ring"] == pytest.approx(6.6) and hop["nvlink"] == pytest.approx(0.6)
    c = calibration.default().collectives
    assert c.at_clock(1.98e9) is c and c.at_clock(None) is c  # unknown clock: as written


def test_on_an_a100_the_fixed_and_intra_host_latencies_take_the_clock_ratio() -> None:
    base, hop = _protocol_us("dgx-a100", 8, "LL")
    assert base["ring"] == pytest.approx(6.6 * A100)
    assert base["tree"] == pytest.approx(6.8 * A100)
    assert hop["nvlink"] == pytest.approx(0.6 * A100)
    assert hop["pci"] == pytest.approx(1.0)  # the PCIe round trip, not the SM's
    assert hop["net"] == pytest.approx(2.7)  # the NIC's
    base, hop = _protocol_us("dgx-a100", 8, "Simple")
    assert (base["ring"], hop["nvlink"]) == (pytest.approx(8.4 * A100), pytest.approx(3.4 * A100))


def test_a_faster_clock_shortens_them() -> None:
    c = calibration.default().collectives.at_clock(2.52e9)  # an L40S or RTX 4090
    assert c.protocols["LL"].base_s["ring"] == pytest.approx(6.6e-6 * 1.98 / 2.52)


def test_the_ideal_calibration_has_no_latency_to_scale() -> None:
    base, hop = _protocol_us("dgx-a100", 8, "ideal", ideal=True)
    assert set(base.values()) == {0.0} and set(hop.values()) == {0.0}
    assert calibration.ideal().collectives.reference_clock_Hz == 0.0


def test_a_small_all_gather_floor_follows_the_clock() -> None:
    """512 B on 2 GPUs, device-bound (one process a GPU): the floor is almost all latency,
    so the A100's is the H100's times the clock ratio, within 1%: its few bytes stream at
    the links' rate, which the clock does not set; measured (nccl-tests, NCCL 2.27.3):
    8.98 and 5.43 us."""

    def floor_us(topology: str) -> float:
        (row,) = collective_sweep(topology, 2, [512], op="all_gather", algo="nccl")
        return float(row["time_s"]) * 1e6

    a100, h100 = floor_us("dgx-a100"), floor_us("dgx-h100")
    assert a100 / h100 == pytest.approx(A100, rel=0.01)
    assert 8.98 * 0.85 < a100 < 8.98 * 1.15


def test_a_topology_file_gpu_gives_its_clock_or_inherits_the_catalogs() -> None:
    spec = gpu_from_dict(
        {"bf16_tflops": 100, "hbm_TBps": 1.5, "hbm_GB": 16, "sm_clock_GHz": 1.5}, "gpus.x"
    )
    assert spec.sm_clock_Hz == 1.5e9
    assert gpu_from_dict(gpu_to_dict(spec), "gpus.x") == spec
    plain = gpu_from_dict({"bf16_tflops": 100, "hbm_TBps": 1.5, "hbm_GB": 16}, "gpus.x")
    assert plain.sm_clock_Hz is None  # not known: NCCL's latencies as written
    same = gpu_from_dict(
        {"name": "a100-sxm-80gb", "bf16_tflops": 312, "hbm_TBps": 2.0, "hbm_GB": 80}, "gpus.g"
    )
    assert same.sm_clock_Hz == 1.41e9
    for bad in (0, -1, 11, "fast", True):
        with pytest.raises(TopologyError, match=r"^gpus\.x\.sm_clock_GHz="):
            gpu_from_dict(
                {"bf16_tflops": 1, "hbm_TBps": 1, "hbm_GB": 1, "sm_clock_GHz": bad}, "gpus.x"
            )


def test_a_profile_may_move_the_reference_within_bounds(tmp_path: Path) -> None:
    f = tmp_path / "clock.yaml"
    f.write_text(
        "name: x\nextends: vllm\noverrides:\n  nccl:\n"
        "    reference_clock_GHz: {value: 1.41, source: test}\n"
    )
    assert profile(str(f)).collectives.reference_clock_Hz == 1.41e9
    f = tmp_path / "no-clock.yaml"
    f.write_text(
        "name: x\nextends: vllm\noverrides:\n  nccl:\n"
        "    reference_clock_GHz: {value: 0, source: test}\n"
    )
    with pytest.raises(CalibrationError, match=r"reference_clock_GHz=0"):
        profile(str(f))
