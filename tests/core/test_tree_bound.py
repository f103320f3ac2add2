"""The tree's lower bound (:func:`tpsim.core.comm.algorithms.tree.lower_bound`) lets a
choosing planner skip building trees that cannot win: the bound never exceeds the built
tree's predicted time, and the planner's choice is the one it makes building every
candidate (ranked as NCCL ranks them, :func:`~tpsim.core.comm.schedules.model_time`)."""

from __future__ import annotations

import math

import pytest
from tpsim.calibration import default as default_calibration
from tpsim.core.comm.algorithms import REGISTRY, Context
from tpsim.core.comm.algorithms.tree import lower_bound, tree
from tpsim.core.comm.collectives import _protocols, make_planner
from tpsim.core.comm.group import tp_group
from tpsim.core.comm.schedules import model_time, predict
from tpsim.core.program import CollectiveCall
from tpsim.topologies.io import get_topology

#: (topology, hosts, ranks, GPUs of the group per host)
GROUPS = [("dgx-h100", 1, 8, 0), ("dgx-h100", 1, 4, 0), ("dgx-h100", 2, 16, 0),
          ("dgx-h100", 2, 4, 2), ("dgx-a100", 1, 8, 0)]  # fmt: skip
SIZES = [1, 4096, 65536, 1 << 20, 3 * (1 << 20) + 7, 16 << 20, 128 << 20]


def _fabric(topology: str, hosts: int, ranks: int, per_host: int):  # type: ignore[no-untyped-def]
    group = tp_group(get_topology(topology, hosts), ranks, per_host)
    return group, group.fabric(default_calibration())


@pytest.mark.parametrize("where", GROUPS)
def test_the_bound_is_below_every_tree_built(where: tuple[str, int, int, int]) -> None:
    group, fab = _fabric(*where)
    for proto in _protocols(fab, group.ring):
        for nbytes in SIZES:
            bound = lower_bound(fab, nbytes, proto, group.ring)
            built = predict(fab, tree(fab, nbytes, proto, group.ring))
            assert 0 < bound <= built, (where, proto.name, nbytes)
            # and it is a bound of every piece count, not only of the one the tree chose
            for chunks in (1, 3, 64):
                assert bound <= predict(fab, tree(fab, nbytes, proto, group.ring, chunks))


@pytest.mark.parametrize("where", GROUPS)
@pytest.mark.parametrize("choice", ["auto", "nccl"])
def test_the_planner_chooses_as_if_it_built_every_candidate(
    where: tuple[str, int, int, int], choice: str
) -> None:
    group, fab = _fabric(*where)
    plan = make_planner(fab, group.ring, algo=choice)
    ctx = Context(fab, group.ring, _protocols(fab, group.ring), True)
    pool = [a for a in REGISTRY.values() if (choice == "auto" or a.nccl) and not a.explicit_only]
    for nbytes in SIZES:
        call = CollectiveCall("all_reduce", nbytes)
        every = []
        for entry in pool:
            if "all_reduce" not in entry.ops or entry.why_not(fab, "all_reduce"):
                continue
            hi, lo = entry.auto_max_bytes, entry.auto_min_bytes
            if choice == "auto" and hi is not None and nbytes > hi(fab):
                continue
            if choice == "auto" and lo is not None and nbytes < lo(fab):
                continue
            every.extend(entry.build(ctx, call))
        want = min(every, key=lambda s: model_time(fab, s))  # as NCCL ranks them
        got = plan(call)
        assert (got.algorithm, got.protocol) == (want.algorithm, want.protocol)
        assert got == want and math.isfinite(predict(fab, got))
