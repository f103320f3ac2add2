"""NCCL's chunk pipelines in closed form: the NVLS chunk per size (enqueue.cc
calcCollChunking), and the fill its three warp-group stages add to an NVLS all-reduce."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tpsim.calibration import default as default_calibration
from tpsim.core.comm.algorithms.nvls import nvls, pipeline_fill_s
from tpsim.core.comm.group import tp_group
from tpsim.core.comm.schedules import predict
from tpsim.topologies.io import get_topology

KiB, MiB = 1024, 1024**2


@pytest.mark.parametrize(
    ("nbytes", "heads", "chunk"),
    [
        (2 * 1024 * MiB, 8, 128 * KiB),  # >= 64 x 16 x 8 x 128 KiB (1 GiB): full chunk
        (512 * MiB, 8, 64 * KiB),  # < 1 GiB: 64 KiB; >= 8 x 128 x 64 KiB (64 MiB)
        (64 * MiB, 8, 64 * KiB),
        (32 * MiB, 8, 32 * KiB),  # < 8 x 128 x 64 KiB (64 MiB): 32 KiB
        (16 * MiB, 8, 32 * KiB),  # < 64 MiB: 32 KiB; >= 2 x 128 x 32 KiB (8 MiB)
        (8 * MiB, 8, 32 * KiB),
        (4 * MiB, 8, 16 * KiB),  # < 8 MiB: 16 KiB
        (512 * MiB, 4, 128 * KiB),  # four heads: 64 x 64 x 128 KiB = 512 MiB, not below
        (16 * MiB, 4, 32 * KiB),
    ],
)
def test_nvls_chunk_follows_nccls_rule(nbytes: int, heads: int, chunk: int) -> None:
    pipe = default_calibration().collectives.nvls_pipeline
    assert pipe is not None
    assert pipe.chunk(nbytes, 16, heads) == chunk


def test_the_fill_is_two_loops_at_one_channels_rate() -> None:
    calib = default_calibration()
    fab = tp_group(get_topology("dgx-h100"), 8).fabric(calib)
    pipe, channels = calib.collectives.nvls_pipeline, calib.collectives.nvls_channels
    assert pipe is not None and pipe.stages == 3 and channels == 16
    rate = 300e9
    # 16 MiB on 8 ranks: a 32 KiB chunk per head, a loop of 256 KiB per channel
    assert pipeline_fill_s(fab, 16 * MiB, rate) == pytest.approx(2 * 256 * KiB / (rate / 16))
    # 1 MiB: a channel's whole share (64 KiB) is smaller than a loop (8 x 16 KiB)
    assert pipeline_fill_s(fab, 1 * MiB, rate) == pytest.approx(2 * 64 * KiB / (rate / 16))


def test_the_nvls_schedule_carries_the_fill_and_the_ideal_one_none() -> None:
    calib = default_calibration()
    fab = tp_group(get_topology("dgx-h100"), 8).fabric(calib)
    bare = tp_group(get_topology("dgx-h100"), 8).fabric(
        replace(calib, collectives=replace(calib.collectives, nvls_pipeline=None))
    )
    n = 16 * MiB
    up = fab.nvswitch[0][0]
    eff = calib.collectives.nvls_efficiency_of(fab.gpu.scaleup_kind)
    rate = fab.capacities[up] * eff * 8 / 9
    extra = predict(fab, nvls(fab, n)) - predict(bare, nvls(bare, n))
    assert extra == pytest.approx(pipeline_fill_s(fab, n, rate))
    assert extra > 20e-6  # the middle sizes' missing tens of microseconds
    ideal = tp_group(get_topology("dgx-h100"), 8).fabric(calib.ideal())
    assert pipeline_fill_s(ideal, n, rate) == 0.0


def test_nvls_middle_sizes_against_nccl_tests_on_8_h100() -> None:
    """nccl-tests all_reduce on 8 H100 (single-node file, NCCL 2.27 and 2.29), 16-512 MiB
    where NCCL runs NVLS: within 15% at every size and 8% in geomean with the fill; without
    it 16-32 MiB came out 27-30% fast."""
    import math

    from tpsim.calibration import measured
    from tpsim.core.collective_bench import collective_sweep
    from tpsim.experiments.validation.collectives import SINGLE_NODE_FILE, read_alltoall

    points = read_alltoall(measured(SINGLE_NODE_FILE), "h100_sxm/", "all_reduce")[8]
    big = [(n, us) for n, us, _ in points if 16 * MiB <= n]
    sizes = sorted({n for n, _ in big})
    rows = {r["bytes"]: r for r in collective_sweep("dgx-h100", 8, sizes, algo="nccl")}
    logs = []
    for n, us in big:
        assert rows[n]["algorithm"] == "nvls"
        ratio = rows[n]["time_s"] * 1e6 / us
        assert 0.85 < ratio < 1.15, (n, ratio)
        logs.append(abs(math.log(ratio)))
    assert math.exp(sum(logs) / len(logs)) - 1 < 0.08
