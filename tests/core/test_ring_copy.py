"""A ring's thread blocks bound it (``nccl.yaml`` ``ring_block_copy_GBps``): each channel is
one block that runs NCCL's ring primitives one after another, so per byte a rank sends its
blocks load and store (3p - 1)/(p - 1) bytes in an all-gather or reduce-scatter and
(3p - 2)/(p - 1) in an all-reduce; on few GPUs that, not the links, sets the busbw."""

from __future__ import annotations

import pytest
from tpsim import calibration
from tpsim.calibration.model_collectives import ring_copy_bytes
from tpsim.core.collective_bench import collective_sweep

KiB, MiB = 2**10, 2**20


def test_copy_bytes_per_byte_sent_count_the_primitives() -> None:
    # all-gather on 2: copySend (load, 2 stores) + recv (load, store) = 5 per byte sent
    assert ring_copy_bytes("all_gather", 2) == 5
    assert ring_copy_bytes("reduce_scatter", 2) == 5  # send 2 + recvReduceCopy 3
    assert ring_copy_bytes("all_gather", 8) == pytest.approx(23 / 7)
    # all-reduce on 2: send 2 + recvReduceCopySend 4 + recv 2 = 8 for 2 bytes sent
    assert ring_copy_bytes("all_reduce", 2) == 4
    assert ring_copy_bytes("all_reduce", 8) == pytest.approx(22 / 7)


def test_the_cap_is_the_blocks_rate_over_the_copy_bytes() -> None:
    c = calibration.default().collectives
    rate = c.ring_block_copy_Bps["nvlink3"]
    assert rate == pytest.approx(30.5e9)
    assert c.ring_copy_cap("Simple", "nvlink3", "all_gather", 2, 24) == pytest.approx(
        24 * 30.5e9 / 5
    )
    assert c.ring_copy_cap("LL128", "nvlink3", "all_reduce", 8, 24) == pytest.approx(
        24 * 30.5e9 * 7 / 22
    )
    assert c.ring_copy_cap("LL", "nvlink3", "all_gather", 2, 24) == float("inf")  # own cap
    assert c.ring_copy_cap("Simple", "nvlink5", "all_gather", 2, 24) == float("inf")  # unfitted
    assert calibration.ideal().collectives.ring_copy_cap(
        "Simple", "nvlink3", "all_gather", 2, 24
    ) == float("inf")


def _busbw(topology: str, ranks: int, n: int, op: str) -> tuple[float, str]:
    (row,) = collective_sweep(topology, ranks, [n], op=op, algo="ring")
    return float(row["busbw_GBps"]), str(row["protocol"])


def test_two_a100_gather_at_the_blocks_rate_eight_near_the_links() -> None:
    """512 MiB all-gather: on 2 A100 the 24 blocks give 24 x 30.5 / 5 = 146 GB/s busbw
    (measured 150); on 8, 24 x 30.5 x 7/23 = 223 GB/s of copy (measured 205), under the 235 GB/s
    of the links, less the ring's latencies at the A100's clock and its receives' pulls in
    P2P read mode (12 slices of 1 MiB a channel, 1.35 us each: together about 4% of the
    time)."""
    two, proto = _busbw("dgx-a100", 2, 512 * MiB, "all_gather")
    assert proto in ("Simple", "LL128")
    assert two == pytest.approx(146.4 * 0.98, rel=0.02)
    eight, _ = _busbw("dgx-a100", 8, 512 * MiB, "all_gather")
    cap = 24 * 30.5 * 7 / 23
    assert 0.95 * cap < eight < cap < 235


def test_the_h100_ring_all_reduce_on_eight_stays_link_bound() -> None:
    """32 blocks x 36.7 GB/s x 7/22 = 374 GB/s of copy, above the links' 370.8: the 16 GiB
    ring all-reduce peak stays at the links (measured 367-370)."""
    bw, _ = _busbw("dgx-h100", 8, 16 * 2**30, "all_reduce")
    assert bw == pytest.approx(370.8, rel=0.01)


def test_fewer_blocks_at_a_smaller_size() -> None:
    """NCCL runs 256 KiB under Simple on 8 of the 24 channels (one per 32 KiB): the cap is
    a third of the full one."""
    c = calibration.default().collectives
    from tpsim.core.comm.enqueue import nccl_channels

    blocks = nccl_channels(c, "ring", "Simple", 256 * KiB, 2, 24)
    assert blocks == 8
    assert c.ring_copy_cap("Simple", "nvlink3", "all_gather", 2, blocks) == pytest.approx(
        c.ring_copy_cap("Simple", "nvlink3", "all_gather", 2, 24) / 3
    )


# ------------------------------------------------ the last receive: one more Simple hop
def _ring_base_us(
    topology: str, ranks: int, proto: str, nodes: int = 1, ideal: bool = False
) -> float:
    from tpsim.calibration import default
    from tpsim.calibration import ideal as ideal_calibration
    from tpsim.core.comm.group import tp_group
    from tpsim.core.comm.schedules import ring
    from tpsim.topologies.io import get_topology

    calib = ideal_calibration() if ideal else default()
    fab = tp_group(get_topology(topology, nodes), ranks).fabric(calib)
    (pr,) = [p for p in fab.tuning.protocols_over(True) if p.name == proto]
    return ring(fab, "all_gather", MiB, pr, [list(range(ranks))]).base_s * 1e6


def test_a_simple_ring_pays_its_last_receive_as_one_more_hop() -> None:
    """NCCL's base 8.4 us plus the final directRecv's Simple NVLink hop, 3.4 us; the p - 1
    send steps keep their own hops in the schedule. Both at the GPU's SM clock: as written
    on the H100 (1.98 GHz, the reference), 1.98/1.41 times as long on the A100."""
    assert _ring_base_us("dgx-h100", 2, "Simple") == pytest.approx(8.4 + 3.4)
    assert _ring_base_us("dgx-a100", 8, "Simple") == pytest.approx((8.4 + 3.4) * 1.98 / 1.41)


def test_ll_and_ll128_keep_nccls_step_count() -> None:
    """No extra hop for LL (its measured fixed cost, 5.4 us, where NCCL's model has 6.6)
    nor LL128."""
    assert _ring_base_us("dgx-h100", 2, "LL") == pytest.approx(5.4)
    assert _ring_base_us("dgx-h100", 2, "LL128") == pytest.approx(14.0)


def test_no_extra_hop_across_hosts() -> None:
    assert _ring_base_us("dgx-h100", 16, "Simple", nodes=2) == pytest.approx(8.4)
