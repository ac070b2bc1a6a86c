"""``auto``: the fastest verified schedule per size, never slower than any single strategy
at the sizes it was built for; plans made per size for strategies tuned per size."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccweave.collectives import Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.plan import Plan
from ccweave.select import auto_strategies, best_plan, strategy_plan
from ccweave.simulate import simulate
from ccweave.synth import get_strategy, synthesize
from ccweave.topology import zoo
from ccweave.verify import verify
from tests.strategies import topologies

KB, MB, GB = 2**10, 2**20, 2**30


def _single_times(topology, kind, name, sizes):
    """Each strategy on its own, as a user would build it (sized ones at each size)."""
    times = {}
    try:
        fixed = None if get_strategy(name).sized else synthesize(topology, kind, name)
        for size in sizes:
            schedule = fixed or synthesize(topology, kind, name, size=size)
            times[size] = simulate(schedule, topology, size).time_s
    except NotApplicableError:
        return {}
    return times


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(max_ranks=5), st.sampled_from([Kind.ALLREDUCE, Kind.ALLTOALL,
                                                 Kind.ALLGATHER, Kind.BROADCAST]))
def test_auto_is_never_slower_than_any_single_strategy(topology, kind):
    sizes = [KB, 64 * KB, 4 * MB, GB]
    plan = best_plan(topology, kind, sizes)
    for entry in plan.entries:
        verify(entry.schedule, topology)
    for name in auto_strategies(kind):
        for size, single in _single_times(topology, kind, name, sizes).items():
            mine = simulate(plan.schedule_for(size), topology, size).time_s
            assert mine <= single * (1 + 1e-9), (name, size)


def test_auto_tries_flow_and_not_taccl():
    assert "flow" in auto_strategies("alltoall")
    assert "taccl" not in auto_strategies("alltoall")
    assert "multipath" in auto_strategies("sendrecv")
    assert {"hierarchical-pipelined", "flat-pipelined"} <= set(auto_strategies("allreduce"))


def test_auto_on_dgx1_alltoall_relays_where_the_classics_cannot():
    topo = zoo.get("dgx1")
    plan = best_plan(topo, Kind.ALLTOALL, [MB, GB])
    assert plan.schedule_for(GB).name.startswith("flow(")
    ring = synthesize(topo, "alltoall", "ring")
    assert simulate(plan.schedule_for(GB), topo, GB).time_s < \
        0.6 * simulate(ring, topo, GB).time_s


def test_plan_ranges_meet_at_geometric_midpoints_and_merge_equal_schedules():
    topo = zoo.get("switch:4")
    a = synthesize(topo, "allgather", "direct")
    a_again = synthesize(topo, "allgather", "direct")  # same transfers, another object
    b = synthesize(topo, "allgather", "ring")
    plan = Plan.from_sizes({KB: a, 4 * KB: a_again, 16 * KB: b, 64 * KB: b})
    assert [(e.min_bytes, e.max_bytes) for e in plan.entries] == [(0, 8 * KB), (8 * KB, None)]
    assert plan.schedule_for(8 * KB - 1) is a and plan.schedule_for(8 * KB) is b
    with pytest.raises(InputError):
        Plan.from_sizes({})


def test_a_sized_strategy_becomes_a_plan_tuned_per_size():
    topo = zoo.get("mist")
    plan = strategy_plan(topo, Kind.SENDRECV, "multipath", [8 * KB, GB])
    small, large = plan.schedule_for(8 * KB), plan.schedule_for(GB)
    assert len(small.metadata["paths"]) == 1 < len(large.metadata["paths"])
    pinned = strategy_plan(topo, Kind.SENDRECV, "multipath", [8 * KB, GB], size=GB)
    assert len(pinned.entries) == 1
    ring = strategy_plan(topo, Kind.ALLREDUCE, "ring", [8 * KB, GB])
    assert len(ring.entries) == 1
    with pytest.raises(InputError, match="takes no options"):
        strategy_plan(topo, Kind.ALLREDUCE, "auto", [KB], depth=2)
