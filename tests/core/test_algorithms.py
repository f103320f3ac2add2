"""The collective algorithm registry: one entry per algorithm, everything derived from it,
and no silent fall-through for a name or a latency that is not there."""

from __future__ import annotations

import pytest
from tpsim.calibration import Protocol, profile
from tpsim.calibration import default as default_calibration
from tpsim.cli import _parser
from tpsim.core.comm import algorithms
from tpsim.core.comm.algorithms import REGISTRY, Algorithm
from tpsim.core.comm.collectives import ALGORITHMS, NCCL_ALGORITHMS, make_planner, why_not
from tpsim.core.comm.group import tp_group
from tpsim.core.comm.schedules import predict
from tpsim.core.config import ALLREDUCE_ALGOS, Options
from tpsim.core.errors import ConfigError
from tpsim.core.program import CollectiveCall
from tpsim.topologies.io import get_topology

MiB = 1024**2
#: A group each algorithm can run on (an 8x H100 node, or two of them across the network).
WHERE = {"hierarchical": ("dgx-h100", 2, 16), "nvlstree": ("dgx-h100", 2, 16)}


def test_the_registry_lists_every_algorithm_once_in_order() -> None:
    names = list(REGISTRY)
    assert names == [
        "ring",
        "multiring",
        "tree",
        "oneshot",
        "twoshot",
        "multimem",
        "nvls",
        "nvlstree",
        "hierarchical",
        "pairwise",
        "deepep_ll",
        "deepep_normal",
    ]
    assert all(isinstance(a, Algorithm) and a.name == n for n, a in REGISTRY.items())
    assert NCCL_ALGORITHMS == ("ring", "multiring", "tree", "nvls", "nvlstree", "pairwise")


def test_choices_everywhere_come_from_the_registry() -> None:
    """``collective --algo`` takes every algorithm; ``--allreduce-algo`` those that run an
    all-reduce (the all-to-all kernels are ``--moe-a2a``'s)."""
    assert ("auto", "nccl", *REGISTRY) == ALGORITHMS
    reduces = tuple(n for n, a in REGISTRY.items() if "all_reduce" in a.ops)
    assert ("auto", "nccl", *reduces) == ALLREDUCE_ALGOS
    assert "pairwise" not in ALLREDUCE_ALGOS and "deepep_ll" not in ALLREDUCE_ALGOS
    parser = _parser()
    run = parser._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    coll = parser._subparsers._group_actions[0].choices["collective"]  # type: ignore[union-attr]
    for sub, flag, choices in ((run, "--allreduce-algo", ALLREDUCE_ALGOS),
                               (coll, "--algo", ALGORITHMS)):  # fmt: skip
        action = next(a for a in sub._actions if flag in a.option_strings)
        assert tuple(action.choices) == choices


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_entry_builds_within_its_step_bound(name: str) -> None:
    topo, nodes, ranks = WHERE.get(name, ("dgx-h100", 1, 8))
    group = tp_group(get_topology(topo, nodes), ranks)
    # multimem is an engine's kernel: vLLM's profile has it
    fab = group.fabric(profile("vllm") if name == "multimem" else default_calibration())
    op = REGISTRY[name].ops[0]  # all_reduce, or the all-to-all's own
    assert why_not(fab, name, op) is None
    plan = make_planner(fab, group.ring, algo=name)
    for n in (8 * 1024, 64 * MiB):
        sched = plan(CollectiveCall(op, n))
        assert name == sched.algorithm or sched.algorithm.startswith(name.removeprefix("multi")), (
            sched.algorithm
        )
        steps = max(len(s) for s in sched.steps)
        assert 1 <= steps <= REGISTRY[name].max_steps(ranks)
        assert steps <= algorithms.max_steps(name, ranks)
        assert predict(fab, sched) > 0


def test_auto_and_nccl_choose_only_among_their_candidates() -> None:
    group = tp_group(get_topology("dgx-h100"), 8)
    fab = group.fabric(default_calibration())
    for choice, allowed in (("auto", set(REGISTRY)), ("nccl", set(NCCL_ALGORITHMS))):
        plan = make_planner(fab, group.ring, algo=choice)
        for n in (8 * 1024, 1 * MiB, 256 * MiB):
            algo = plan(CollectiveCall("all_reduce", n)).algorithm.split(" ")[0]
            assert algo in allowed | {"ring"}, (choice, n, algo)
    # a serving engine's peer-memory all-reduce only below its buffer size (8 MiB)
    plan = make_planner(fab, group.ring, algo="auto")
    big = plan(CollectiveCall("all_reduce", 64 * MiB)).algorithm
    assert big not in ("oneshot", "twoshot")


def test_unknown_names_are_errors_never_a_fall_through() -> None:
    group = tp_group(get_topology("dgx-h100"), 8)
    fab = group.fabric(default_calibration())
    with pytest.raises(ConfigError, match="algo='nvlz'"):
        make_planner(fab, group.ring, algo="nvlz")
    with pytest.raises(ConfigError, match="algo='nvlz'"):
        why_not(fab, "nvlz", "all_reduce")
    with pytest.raises(ConfigError, match="allreduce_algo='nvlz'"):
        Options(allreduce_algo="nvlz")


def test_a_collective_an_algorithm_does_not_run_goes_to_the_ring_and_says_so() -> None:
    group = tp_group(get_topology("dgx-h100"), 8)
    fab = group.fabric(default_calibration())
    assert why_not(fab, "tree", "all_gather") == "tree runs only all_reduce; all_gather uses ring"
    plan = make_planner(fab, group.ring, algo="tree")
    assert plan(CollectiveCall("all_gather", MiB)).algorithm == "ring"


def test_all_to_all_runs_pairwise_under_any_choice_and_nccls_p2p_protocol() -> None:
    # NCCL_P2P_LL_THRESHOLD: LL up to 16 KiB to each peer, Simple above; never LL128
    group = tp_group(get_topology("dgx-h100"), 8)
    fab = group.fabric(default_calibration())
    for choice in ("auto", "nccl", "ring", "tree", "pairwise"):
        plan = make_planner(fab, group.ring, algo=choice)
        small = plan(CollectiveCall("all_to_all", 8 * 16 * 1024))
        large = plan(CollectiveCall("all_to_all", 8 * 16 * 1024 + 8))
        assert (small.algorithm, small.protocol) == ("pairwise", "LL"), choice
        assert (large.algorithm, large.protocol) == ("pairwise", "Simple"), choice
    assert small.base_s == default_calibration().collectives.protocols["LL"].base("p2p")
    # a named algorithm's other collectives still go to the ring
    plan = make_planner(fab, group.ring, algo="pairwise")
    assert plan(CollectiveCall("all_reduce", MiB)).algorithm == "ring"


def test_a_missing_base_latency_is_an_error_not_zero() -> None:
    proto = Protocol("LL", {"ring": 6.6e-6}, {"nvlink": 0.6e-6}, 2.0, {})
    assert proto.base("ring") == 6.6e-6
    with pytest.raises(KeyError, match="protocol LL has no base latency for 'tree'"):
        proto.base("tree")


def test_the_record_bound_is_the_largest_step_count_of_the_candidates() -> None:
    # the tree pipelines in up to 64 pieces: 2 (depth + pieces - 1) steps, depth < p
    assert algorithms.max_steps("auto", 8) == 2 * (7 + 63)
    assert algorithms.max_steps("ring", 8) == 2 * 7
    assert algorithms.max_steps("oneshot", 8) == 2 * 7  # other ops run as a ring
    assert algorithms.max_steps("auto", 1) == 0
