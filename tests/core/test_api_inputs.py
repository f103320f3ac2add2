"""The API's arguments: a value of the wrong type, or a hand-built graph, fails as bad input
(one line naming the argument), not as an AttributeError deep inside; every bad-input error
is a tpsim.InputError."""

from __future__ import annotations

import networkx as nx
import pytest
import tpsim
from tpsim import ConfigError, InputError, Workload, simulate


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("llama-3.1-8b", "dgx-h100", "4", Workload()), "layout='4'"),
        (("llama-3.1-8b", "dgx-h100", 4.0, Workload()), "layout=4.0"),
        (("llama-3.1-8b", "dgx-h100", True, Workload()), "layout=True"),
        ((5, "dgx-h100", 1, Workload()), "model=5"),
        (("llama-3.1-8b", "dgx-h100", 1, {"batch": 1}), "workload="),
        (("llama-3.1-8b", 7, 1, Workload()), "topology=7"),
    ],
)
def test_a_wrong_type_names_its_argument(args: tuple[object, ...], needle: str) -> None:
    with pytest.raises(ConfigError, match=f"^{needle}") as e:
        simulate(*args)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


def test_every_bad_input_is_an_input_error() -> None:
    for call in (
        lambda: simulate("no-such-model", "dgx-h100", 1),
        lambda: simulate("llama-3.1-8b", "no-such-topology", 1),
        lambda: simulate("llama-3.1-8b", "dgx-h100", 1, options=tpsim.Options(engine="nope")),
        lambda: simulate("llama-3.1-8b", nx.DiGraph(), 1),
        lambda: tpsim.collective_sweep("dgx-h100", 8, ["1M"]),  # type: ignore[list-item]
    ):
        with pytest.raises(InputError):
            call()
