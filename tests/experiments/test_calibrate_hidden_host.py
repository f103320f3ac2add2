"""``--hidden-host most``: a host time hidden under the GPU's is taken at the most the points
allow, found by bisection on the simulator's predictions (here a stand-in whose one point is
max(GPU, host), the shape of a weight-bound step with the host launching ahead)."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from tpsim.experiments.calibrate.hidden_host import AT_MOST_MOVE, most, take_at_most
from tpsim.experiments.calibrate.knobs import KNOBS

LAYER = next(i for i, k in enumerate(KNOBS) if k.name == "layer_host_us")
STEP = next(i for i, k in enumerate(KNOBS) if k.name == "step_host_scale")
LOWER = np.zeros(len(KNOBS))
UPPER = np.array([2000.0 if k.unit == "us" else 50.0 for k in KNOBS])
SHIFT = np.array([k.shift for k in KNOBS])


class _Hidden:
    """One point: a 10 ms GPU step, the host (48 layers of ``layer_host_us``) hidden under it
    until it is longer (no host at all when not ``hidden``)."""

    def __init__(self, hidden: bool = True) -> None:
        self.hidden = hidden

    def predict(self, values: Any) -> np.ndarray:
        host = 48 * values[LAYER] * 1e-3 if self.hidden else 0.0
        return np.array([max(10.0, host)])


def _values() -> list[float]:
    v = [1.0] * len(KNOBS)
    v[LAYER] = 50.0
    return v


def test_the_most_is_where_a_point_first_moves_by_more_than_the_allowance() -> None:
    sim = cast(Any, _Hidden())
    x = most(sim, _values(), LAYER, (LOWER, UPPER), SHIFT)
    edge = 10.0 / 48 * 1e3 * (1 + AT_MOST_MOVE)  # 210.4 us: the step 1% past the GPU's
    assert x is not None and edge * 0.99 < x <= edge
    assert x == round(x, 2)  # rounded down to 0.01 us


def test_a_host_time_no_point_depends_on_is_not_bounded() -> None:
    sim = cast(Any, _Hidden(hidden=False))
    assert most(sim, _values(), LAYER, (LOWER, UPPER), SHIFT) is None
    values = _values()
    taken = take_at_most(sim, values, {"layer_host_us": "no point"}, (LOWER, UPPER), SHIFT)
    assert taken == {} and values == _values()  # kept at the base


def test_only_the_host_times_the_fit_kept_are_taken() -> None:
    sim = cast(Any, _Hidden())
    values = _values()
    assert take_at_most(sim, values, {}, (LOWER, UPPER), SHIFT) == {}  # both fitted
    taken = take_at_most(sim, values, {"layer_host_us": "kept"}, (LOWER, UPPER), SHIFT)
    assert list(taken) == ["layer_host_us"] and values[LAYER] == taken["layer_host_us"][0]
    assert "upper bounds" in taken["layer_host_us"][1]
    assert values[STEP] == 1.0
