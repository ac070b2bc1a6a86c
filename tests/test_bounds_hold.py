"""No schedule of any registered strategy is ever faster than its bound: every fast
strategy, every collective, on random topologies (switches with slow ports, one-way links,
relays through ranks), simulated at small and large sizes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccweave.bounds import lower_bound
from ccweave.collectives import Kind
from ccweave.errors import NotApplicableError
from ccweave.simulate import simulate
from ccweave.synth.registry import get_strategy, strategies_for, synthesize
from ccweave.verify import verify
from tests.strategies import slow_port_switches, topologies

SIZES = (4096, 2**20, 2**30)
KINDS = (*Kind.collectives(), Kind.SENDRECV)
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check_every_strategy(topology, kind: Kind, root: int) -> int:
    """Simulate every fast strategy's schedule; none may beat the bound. Returns how many
    schedules were checked."""
    checked = 0
    bounds = {size: lower_bound(topology, kind, size, root=root) for size in SIZES}
    for name in strategies_for(kind):
        if get_strategy(name).slow:
            continue
        try:
            schedule = synthesize(topology, kind, name, root=root)
        except NotApplicableError:
            continue
        verify(schedule, topology)
        for size, bound in bounds.items():
            time_s = simulate(schedule, topology, size).time_s
            assert time_s >= bound.time_s * (1 - 1e-9), (
                f"{schedule.name} {kind.value} at {size} B on {topology.name}: "
                f"{time_s:.6g} s beats the bound {bound.time_s:.6g} s ({bound.method})")
        checked += 1
    return checked


@SETTINGS
@given(topology=slow_port_switches(), kind=st.sampled_from(KINDS), data=st.data())
def test_no_schedule_beats_its_bound_on_slow_port_switches(topology, kind, data):
    root = data.draw(st.integers(0, topology.num_ranks - 1))
    if kind is Kind.SENDRECV and topology.num_ranks < 2:
        return
    check_every_strategy(topology, kind, root)


@SETTINGS
@given(topology=topologies(max_ranks=6, max_extra_links=6), kind=st.sampled_from(KINDS),
       data=st.data())
def test_no_schedule_beats_its_bound_on_random_topologies(topology, kind, data):
    root = data.draw(st.integers(0, topology.num_ranks - 1))
    check_every_strategy(topology, kind, root)


@pytest.mark.parametrize("kind", [Kind.ALLREDUCE, Kind.ALLGATHER, Kind.BROADCAST])
def test_the_issue_example_allreduce_is_not_beaten(kind):
    from ccweave.topology.model import NodeKind, Topology
    from tests.test_bounds import duplex

    links = [lk for r, gbps in enumerate([10, 25, 25, 25]) for lk in duplex(r, "sw", gbps, 1e-6)]
    topology = Topology("slowport", 4, tuple(links), {"sw": NodeKind.SWITCH})
    assert check_every_strategy(topology, kind, 0) >= 2


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(topology=slow_port_switches(max_ranks=4),
       kind=st.sampled_from(sorted(get_strategy("taccl").collectives, key=str)))
def test_taccl_schedules_never_beat_the_bound_on_tiny_machines(topology, kind):
    schedule = synthesize(topology, kind, "taccl", size=2**20, time_limit=5.0,
                          fallback=False)
    verify(schedule, topology)
    for size in SIZES:
        bound = lower_bound(topology, kind, size)
        assert simulate(schedule, topology, size).time_s >= bound.time_s * (1 - 1e-9)


@st.composite
def sockets(draw) -> object:
    """Ranks on a switch with host paths through one socket's memory links, the memory
    often slower than the PCIe links together (the delivery bound binds there)."""
    from tests.test_bounds import socket

    ports = draw(st.lists(st.sampled_from([25.0, 50.0, 100.0]), min_size=2, max_size=5))
    return socket(ports, pcie=draw(st.sampled_from([16.0, 32.0, 64.0])),
                  memory=draw(st.sampled_from([8.0, 20.0, 50.0, 200.0])))


@SETTINGS
@given(topology=sockets(), kind=st.sampled_from((Kind.ALLGATHER, Kind.REDUCESCATTER,
                                                 Kind.ALLREDUCE)))
def test_no_schedule_beats_the_delivery_bound_through_a_socket(topology, kind):
    assert check_every_strategy(topology, kind, 0) >= 2
