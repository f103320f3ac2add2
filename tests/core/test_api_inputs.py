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
    with pytest.raises(ConfigError, match=r"^nodes=3: .*\(2 hosts\)"):
        simulate("llama-3.1-8b", get_topology("dgx-h100", 2), 16, nodes=3)
    two = get_topology("dgx-h100", 2)
    assert simulate("llama-3.1-8b", two, 16, nodes=2).latency_s > 0  # as the CLI passes it


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("bandwidth", r"bandwidth_Bps=5e-324.*must be from"),
        ("huge", r"bandwidth_Bps=1e\+20.*must be from"),
        ("flops", r"bf16_tflops=0.*must be a finite number > 0"),
        ("hbm", r"hbm_TBps=nan.*must be a finite number"),
        ("efficiency", r"matmul_efficiency=5.*<= 1"),
        ("control", r"node id=.*control characters"),
    ],
)
def test_a_graph_built_in_code_is_held_to_a_file_s_bounds(change: str, says: str) -> None:
    """A link of 5e-324 B/s divided by zero, one of 1e-310 made an infinite latency, and a
    GPUSpec with no FLOPs or a NaN bandwidth ran: a file with those values is refused."""
    import dataclasses
    import math

    from tpsim.topologies import TopologyError, get_topology

    g = get_topology("dgx-h100").copy()
    a, b = next(iter(g.edges))
    gpu = next(n for n, d in g.nodes(data=True) if d["kind"] == "gpu")
    spec = g.nodes[gpu]["gpu"]
    if change == "bandwidth":
        g.edges[a, b]["bandwidth_Bps"] = 5e-324
    elif change == "huge":
        g.edges[a, b]["bandwidth_Bps"] = 1e20
    elif change == "control":
        g = nx.relabel_nodes(g, {gpu: "gpu\x07"})
    else:
        field, value = {"flops": ("bf16_flops", 0.0), "hbm": ("hbm_Bps", math.nan),
                        "efficiency": ("matmul_efficiency", 5.0)}[change]  # fmt: skip
        for _, d in g.nodes(data=True):
            if d["kind"] == "gpu":
                d["gpu"] = dataclasses.replace(spec, **{field: value})
    with pytest.raises(TopologyError, match=says):
        simulate("llama-3.1-8b", g, 8)
