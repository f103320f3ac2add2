"""The vllm-v0 host entry: each row of Vidur's CPU overheads is the profile's pieces, priced
with the profile's own formulas; the fitted rows land close, the held-out ones are shown."""

from __future__ import annotations

import pytest
from tpsim.calibration.profiles import profile
from tpsim.experiments.validation import host_overheads as ho
from tpsim.experiments.validation.registry import BY_NAME


def test_the_collections_and_their_rows() -> None:
    january, may = ho.cases("2024-01-11"), ho.cases("2024-05-09")
    assert (len(january), len(may)) == (56, 78)
    assert sum(c.fitted for c in january) == 36 and not any(c.fitted for c in may)


def test_a_row_is_its_pieces_and_the_price_the_profiles_formulas() -> None:
    # Llama-2-7B, TP 2, batch 8: schedule 0.1785, prepare 0.381 + 0.3413 (the model call's
    # host side), sample 1.156, outputs 0.6791, Ray 3.0626 ms
    (row,) = [c for c in ho.cases() if c.model.endswith("Llama-2-7b-hf") and c.tp == 2
              and c.batch == 8]  # fmt: skip
    pieces = dict(row.pieces)
    assert pieces["prepare_inputs"] == pytest.approx((0.381 + 0.3413) / 1e3)
    assert pieces["tp_coordination"] == pytest.approx(3.0626e-3)
    assert row.measured_s == pytest.approx((0.1785 + 0.7223 + 1.156 + 0.6791 + 3.0626) / 1e3)
    engine = profile("vllm-v0").engine
    want = sum(c.seconds(8) for c in engine.step_host.values())
    assert ho.price(row) == pytest.approx(want + engine.tp_coordination.seconds(2, 8))


def test_one_gpu_has_no_hand_off() -> None:
    for c in ho.cases():
        assert ("tp_coordination" in dict(c.pieces)) == (c.tp > 1)


def test_the_fitted_rows_are_close_and_the_entry_passes() -> None:
    fitted = tuple(c for c in ho.cases() if c.fitted)
    assert ho.geomean_error(fitted) < 0.08
    entry = BY_NAME["vllm-v0-host"]
    assert entry.status(entry.runner().error) == "pass"
    may = BY_NAME["vllm-v0-host-2024-05"]
    assert may.status(may.runner().error) == "expected-miss"
