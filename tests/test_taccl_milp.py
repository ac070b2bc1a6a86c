"""TACCL's routing MILP: a decision the tree selection cannot make (a node entered twice
when a switch port is short and the NIC is not), multi-hop relays across nodes, never
worse than its warm start, send times that respect the routes, gaps reported as HiGHS
gives them."""

from __future__ import annotations

import pytest

from ccweave.collectives import Collective, Kind
from ccweave.synth.taccl import logical, sketch
from ccweave.synth.taccl.build import TacclOptions, synthesize_taccl
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.routing import RoutingMethod, route
from ccweave.synth.taccl.solver import Model, SolverSettings
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.verify import verify
from tests.test_taccl_stages import toy_sketch, two_node_toy

GB = 1e9
US = 1e-6


def duplex(links, a, b, gbps, alpha_us=0.5):
    links.append(Link(a, b, gbps * GB, alpha_us * US))
    links.append(Link(b, a, gbps * GB, alpha_us * US))


def slow_switch_fast_nics() -> Topology:
    """Two nodes of two ranks on a slow switch each; every rank has a NIC of its own, with
    time to spare when the switch port is the bottleneck."""
    links: list[Link] = []
    fabric = {"net": NodeKind.SWITCH}
    for node in range(2):
        fabric[f"sw{node}"] = NodeKind.SWITCH
        for rank in (2 * node, 2 * node + 1):
            fabric[f"nic{rank}"] = NodeKind.NIC
            duplex(links, rank, f"sw{node}", 10)
            duplex(links, rank, f"nic{rank}", 15)
            duplex(links, f"nic{rank}", "net", 15)
    return Topology("slow-switch", 4, tuple(links), fabric, {"node": ((0, 1), (2, 3))})


def line_of_nodes() -> Topology:
    """Three one-rank nodes: 0 and 1, 1 and 2 joined by fast links, 0 and 2 by a slow one;
    rank 1's two NICs reach each other only through rank 1 (a relay, not a route)."""
    links: list[Link] = []
    fabric = {name: NodeKind.NIC for name in ("nic0", "nic1a", "nic1b", "nic2")}
    duplex(links, 0, "nic0", 50)
    duplex(links, 1, "nic1a", 50)
    duplex(links, 1, "nic1b", 50)
    duplex(links, 2, "nic2", 50)
    duplex(links, "nic0", "nic1a", 25)
    duplex(links, "nic1b", "nic2", 25)
    duplex(links, "nic0", "nic2", 1)
    return Topology("line", 3, tuple(links), fabric, {"node": ((0,), (1,), (2,))})


def routings(topology, data, kind=Kind.ALLGATHER, chunks=1, size=2**24, **options):
    lg = logical.apply(topology, sketch.from_dict(data, "t.json"))
    demand = Demand(Collective(kind, topology.num_ranks, chunks), lg.symmetry)
    chunk = demand.collective.chunk_bytes(size)
    trees, milp = route(lg, demand, chunk, method=RoutingMethod.MILP,
                        settings=SolverSettings(time_limit_s=20, mip_gap=1e-6), **options)
    return lg, demand, trees, milp


def test_the_milp_enters_a_node_twice_when_the_switch_port_is_short():
    topology = slow_switch_fast_nics()
    lg, _, trees, milp = routings(topology, {"intranode": {"strategy": "switch"},
                                             "internode": {"connections": "direct-map"}})
    assert milp.makespan_s < trees.makespan_s * 0.9  # the trees enter each node once
    assert milp.objective < milp.warm_objective
    entries = [sum(lg.edges[e].internode for e, _ in hops) for hops in milp.hops]
    assert max(entries) == 2
    assert milp.bound_s <= milp.makespan_s * (1 + 1e-9)


def test_multi_hop_relays_go_around_a_slow_direct_link():
    topology = line_of_nodes()
    data = {"internode": {"connections": "direct-map"}}
    lg, _, _, one_hop = routings(topology, data)
    *_, two_hops = routings(topology, data, relay_hops=2)
    assert two_hops.makespan_s < one_hop.makespan_s * 0.5
    assert any(sum(lg.edges[e].internode for e, _ in hops) == 2 for hops in two_hops.hops)
    assert all(sum(lg.edges[e].internode for e, _ in hops) == 2 for hops in one_hop.hops)
    schedule = synthesize_taccl(topology, Kind.ALLGATHER, 1, TacclOptions(
        size=2**24, sketch=sketch.from_dict(data, "t.json"), relay_hops=2, fallback=False,
        time_limit=20))
    verify(schedule, topology)


@pytest.mark.parametrize(("kind", "data"), [
    (Kind.ALLGATHER, {}), (Kind.ALLGATHER, {"senders": [0]}),
    (Kind.ALLTOALL, {"connections": "fully-connected"})])
def test_never_worse_than_its_warm_start_and_send_times_follow_the_routes(kind, data):
    toy = two_node_toy()
    lg, demand, trees, milp = routings(toy, {**toy_sketch(**data).to_dict()}, kind,
                                       chunks=2, size=2**16)
    assert milp.objective <= milp.warm_objective * (1 + 1e-9)
    assert milp.makespan_s <= milp.warm_makespan_s * (1 + 1e-9)
    assert milp.warm_makespan_s == pytest.approx(trees.makespan_s, rel=1e-6)
    chunk = demand.collective.chunk_bytes(2**16)
    for hops, times in zip(milp.hops, milp.send_times, strict=True):
        for (_, parent), sent in zip(hops, times, strict=True):
            if parent >= 0:
                before = lg.edges[hops[parent][0]].seconds(chunk)
                assert sent >= times[parent] + before - 1e-9


def test_a_warm_start_at_the_lp_bound_is_said_to_be_so():
    toy = two_node_toy()
    *_, milp = routings(toy, toy_sketch().to_dict(), size=2**28)
    assert milp.warm_makespan_s == pytest.approx(milp.bound_s, rel=1e-6)
    assert "LP bound" in milp.note and "n0.nic->net" in milp.note


def test_a_gap_within_the_tolerance_is_not_called_optimal():
    model = Model("knapsack")
    weights = [31, 29, 23, 19, 17, 13, 11, 7, 5, 3]
    x = model.add_vars(len(weights), binary=True)
    for column, w in zip(x, weights):
        model.set_cost(column, -w)
    model.add_row(list(x), weights, upper=60.5)
    loose = model.solve(SolverSettings(time_limit_s=10, mip_gap=0.5))
    assert loose.status in ("optimal", "within gap")
    if loose.status == "within gap":
        assert loose.gap > 0 and "not proven optimal" in loose.describe()
        assert "tolerance" in loose.describe()
    exact = model.solve(SolverSettings(time_limit_s=10, mip_gap=0.0))
    assert exact.optimal and exact.gap == 0 and "MIP gap 0" in exact.describe()
