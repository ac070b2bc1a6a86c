"""The joint routing-and-ordering MILP (``ordering=joint``, and ``ordering=best`` on small
sketches): routes whose good order the routing relaxation cannot see."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

import ccweave.synth.taccl  # noqa: F401  (registers the strategy)
from ccweave.collectives import Collective, Kind
from ccweave.errors import InputError
from ccweave.simulate import simulate
from ccweave.synth.taccl import logical, ordering_joint
from ccweave.synth.taccl.build import TacclOptions, synthesize_taccl
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.ordering import Heuristic, order
from ccweave.synth.taccl.routing import RoutingMethod, route
from ccweave.synth.taccl.sketch_defaults import default_sketch
from ccweave.synth.taccl.solver import SolverSettings
from ccweave.topology import zoo
from ccweave.topology.model import Link, Topology
from ccweave.verify import verify
from tests.strategies import topologies

GBPS = 1e9
CHUNK = 2**20
FAST = {"time_limit": 20.0, "routing_time_limit": 2.0, "contiguity_time_limit": 0.5,
        "joint_time_limit": 10.0, "fallback": False}


def six_ranks() -> Topology:
    """Six ranks on eight duplex links of two speeds (0.3 us each): every tree the
    selection offers orders in 105.8 us (1 MB chunks), while routes of a few hops more on
    the fast links order in 84.8 us."""
    pairs = {(0, 5): 50, (1, 2): 50, (1, 3): 25, (1, 4): 50, (0, 1): 25, (2, 3): 50,
             (3, 4): 25, (4, 5): 50}
    links = [Link(a, b, bw * GBPS, 0.3e-6) for (x, y), bw in pairs.items()
             for a, b in ((x, y), (y, x))]
    return Topology("six", 6, tuple(links), {})


def test_best_keeps_the_joint_routes_where_the_heuristics_order_slower():
    topology = six_ranks()
    size = 6 * CHUNK
    best = synthesize_taccl(topology, Kind.ALLGATHER, 1, TacclOptions(size=size, **FAST))
    without = synthesize_taccl(topology, Kind.ALLGATHER, 1, TacclOptions(
        size=size, joint_max_binaries=1, **FAST))
    verify(best, topology)
    report = best.metadata["taccl"]
    assert report["routing"]["kept"] == ordering_joint.METHOD
    assert report["ordering"]["heuristic"] == Heuristic.SOLVER_TIMES.value
    assert all(r["method"] != ordering_joint.METHOD for r in without.metadata["taccl"]["routings"])
    ours = simulate(best, topology, size).time_s
    assert ours < 0.85 * simulate(without, topology, size).time_s
    assert ours <= 85.1e-6


def _ordered(topology: Topology, chunks: int):
    lg = logical.apply(topology, default_sketch(topology))
    demand = Demand(Collective(Kind.ALLGATHER, topology.num_ranks, chunks), lg.symmetry)
    routings = route(lg, demand, CHUNK, method=RoutingMethod.TREES,
                     settings=SolverSettings(time_limit_s=2.0))
    start = min((order(lg, r, CHUNK, h) for r in routings for h in
                 (Heuristic.EARLIEST_START, Heuristic.BACKWARD)), key=lambda o: o.makespan_s)
    return lg, demand, start


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(min_ranks=3, max_ranks=4, switches=False, max_extra_links=3))
def test_joint_routes_reach_everyone_and_their_times_order_them_no_slower(topology):
    """Never slower than the order it starts from; every rank gets every chunk once; and
    its send times, list-scheduled again (solver-times), give its makespan or less."""
    lg, demand, start = _ordered(topology, 1)
    found = ordering_joint.route_and_order(lg, demand, CHUNK, start,
                                           settings=SolverSettings(time_limit_s=2.0))
    assert found.method == ordering_joint.METHOD
    assert found.makespan_s <= start.makespan_s * (1 + 1e-9)
    for chunk, hops in zip(demand.chunks, found.hops):
        reached = [lg.edges[e].dst for e, _ in hops]
        assert sorted(reached) == sorted(chunk.destinations)
        for e, parent in hops:
            came = chunk.source if parent < 0 else lg.edges[hops[parent][0]].dst
            assert lg.edges[e].src == came
    again = order(lg, found, CHUNK, Heuristic.SOLVER_TIMES)
    assert again.makespan_s <= found.makespan_s * (1 + 1e-9) + 1e-12


def test_best_does_not_solve_it_where_the_order_meets_the_lp_bound_or_it_is_too_large():
    ring = zoo.get("ring:4")  # with two chunks a rank the first order meets the LP bound
    schedule = synthesize_taccl(ring, Kind.ALLGATHER, 2, TacclOptions(size=8 * CHUNK, **FAST))
    assert all(r["method"] != ordering_joint.METHOD for r in schedule.metadata["taccl"]["routings"])
    lg, demand, _ = _ordered(six_ranks(), 1)
    assert ordering_joint.joint_binaries(lg, demand) == 240
    assert ordering_joint.joint_binaries(lg, demand, most=239) is None


def test_ordering_joint_over_the_cap_is_one_line_naming_the_option():
    with pytest.raises(InputError, match=r"ordering=joint.*more than 100 binaries "
                                         r"\(joint_max_binaries\); raise joint_max_binaries"):
        synthesize_taccl(six_ranks(), Kind.ALLGATHER, 1, TacclOptions(
            size=6 * CHUNK, ordering="joint", joint_max_binaries=100, **FAST))


@pytest.mark.parametrize(("options", "message"), [
    ({"joint_time_limit": 0}, "joint_time_limit must be a positive number"),
    ({"joint_max_binaries": 2.5}, "joint_max_binaries must be a positive integer"),
    ({"ordering": "jiont"}, "use one of best, joint, earliest-start")])
def test_joint_options_are_checked(options, message):
    with pytest.raises(InputError, match=message):
        TacclOptions.parse(options)
    assert TacclOptions.parse({"ordering": "joint"}).heuristics() is None
