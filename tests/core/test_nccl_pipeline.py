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
