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


def test_paths_name_models_and_topologies_as_strings_do(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A pathlib.Path to a config.json or a topology file works as its str does (it was
    refused: 'must be a catalog name, a config.json path or a ModelSpec')."""
    from pathlib import Path

    from tpsim import simulate
    from tpsim.models.catalog import CONFIGS
    from tpsim.topologies import get_topology, save_topology

    config = Path(CONFIGS) / "qwen3-32b.json"
    topo = tmp_path / "t.yaml"
    save_topology(get_topology("dgx-h100"), topo)
    by_path = simulate(config, topo, 2)
    assert by_path.latency_s == simulate(str(config), str(topo), 2).latency_s


def test_nodes_with_a_graph_is_refused_not_ignored() -> None:
    """nodes= joins copies of a named topology; a graph is used as it is, and nodes=2 with
    one ran on its one host while the error of a too-large TP pointed at nodes=."""
    from tpsim import ConfigError, simulate
    from tpsim.topologies import get_topology

    with pytest.raises(ConfigError, match=r"^nodes=2: a graph passed as the topology"):
        simulate("llama-3.1-8b", get_topology("dgx-h100"), 8, nodes=2)
    assert simulate("llama-3.1-8b", get_topology("dgx-h100", 2), 16).latency_s > 0
