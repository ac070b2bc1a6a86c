"""The topology model: validation, parallel links, routes through fabric only."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings

from ccweave.errors import TopologyError
from ccweave.topology.model import Link, NodeKind, Topology
from tests.strategies import topologies


def star(n: int = 3) -> Topology:
    links = []
    for r in range(n):
        links += [Link(r, "sw", 10e9, 1e-6), Link("sw", r, 10e9, 1e-6)]
    return Topology("star", n, tuple(links), {"sw": NodeKind.SWITCH})


def test_route_goes_through_fabric_and_reports_links():
    topo = star()
    route = topo.route(0, 2)
    assert [(topo.links[i].src, topo.links[i].dst) for i in route] == [(0, "sw"), ("sw", 2)]
    assert topo.route_alpha(0, 2) == pytest.approx(2e-6)
    assert topo.route_bandwidth(0, 2) == 10e9


def test_route_never_passes_through_a_third_rank():
    chain = Topology("chain", 3, (Link(0, 1, 1e9), Link(1, 2, 1e9), Link(2, 1, 1e9),
                                  Link(1, 0, 1e9)))
    assert chain.has_route(0, 1)
    assert not chain.has_route(0, 2)
    with pytest.raises(TopologyError, match="relay through ranks"):
        chain.route(0, 2)
    assert chain.neighbors(1) == [0, 2]


def test_cheapest_route_prefers_bandwidth():
    links = (Link(0, 1, 1e9), Link(0, "sw", 100e9), Link("sw", 1, 100e9))
    topo = Topology("two-paths", 2, links, {"sw": "switch"})
    assert [topo.links[i].dst for i in topo.route(0, 1)] == ["sw", 1]


def test_equal_cost_routes_are_all_listed():
    links = []
    for sw in ("a", "b"):
        links += [Link(0, sw, 10e9), Link(sw, 1, 10e9)]
    topo = Topology("ecmp", 2, tuple(links), {"a": "switch", "b": "switch"})
    routes = topo.all_routes(0, 1)
    assert len(routes) == 2
    assert {topo.links[r[0]].dst for r in routes} == {"a", "b"}


def test_parallel_links_merge_with_summed_bandwidth():
    topo = Topology("double", 2, (Link(0, 1, 25e9, 1e-6), Link(0, 1, 25e9, 2e-6),
                                  Link(1, 0, 25e9)))
    assert len(topo.links) == 2
    assert topo.link(0, 1).bandwidth == 50e9
    assert topo.link(0, 1).alpha == 2e-6


@pytest.mark.parametrize(("links", "fabric", "message"), [
    ((Link(0, 5, 1e9),), {}, "unknown node 5"),
    ((Link(0, "x", 1e9),), {}, "unknown node 'x'"),
    ((Link(0, 0, 1e9),), {}, "two different nodes"),
    ((Link(0, 1, -1.0),), {}, "bandwidth must be a positive"),
    ((Link(0, 1, 1e9, -1.0),), {}, "alpha must be"),
    ((Link(0, 1, 1e9),), {"sw": "router"}, "has kind 'router'"),
])
def test_bad_topologies_name_the_problem(links, fabric, message):
    with pytest.raises(TopologyError, match=message):
        Topology("bad", 2, links, fabric)


def test_groups_must_partition_ranks():
    links = (Link(0, 1, 1e9), Link(1, 0, 1e9))
    with pytest.raises(TopologyError, match="in no group"):
        Topology("g", 2, links, groups={"node": ((0,),)})
    with pytest.raises(TopologyError, match="in two groups"):
        Topology("g", 2, links, groups={"node": ((0, 1), (1,))})
    topo = Topology("g", 2, links, groups={"node": ((0,), (1,))})
    assert topo.group_of("node", 1) == (1,)
    with pytest.raises(TopologyError, match="no 'socket' groups"):
        topo.group_of("socket", 0)


def test_disconnected_topology_is_named():
    topo = Topology("split", 4, (Link(0, 1, 1e9), Link(1, 0, 1e9), Link(2, 3, 1e9),
                                 Link(3, 2, 1e9)))
    with pytest.raises(TopologyError, match="disconnected"):
        topo.check_connected()


def test_reversed_turns_every_link():
    topo = Topology("one-way", 2, (Link(0, 1, 5e9, 1e-6), Link(1, 0, 7e9)))
    back = topo.reversed()
    assert back.link(1, 0).bandwidth == 5e9 and back.link(0, 1).bandwidth == 7e9


@settings(max_examples=60, deadline=None)
@given(topologies())
def test_routes_are_contiguous_and_avoid_other_ranks(topo):
    topo.check_connected()
    for src in topo.ranks:
        for dst in topo.ranks:
            if src == dst or not topo.has_route(src, dst):
                continue
            route = [topo.links[i] for i in topo.route(src, dst)]
            assert route[0].src == src and route[-1].dst == dst
            for first, second in itertools.pairwise(route):
                assert first.dst == second.src
                assert not topo.is_rank(first.dst)


def test_dead_end_fabric_does_not_disconnect_ranks():
    links = (Link(0, 1, 1e9), Link(1, 0, 1e9), Link(0, "tap", 1e9))
    Topology("tap", 2, links, {"tap": "nic"}).check_connected()


def test_a_route_through_host_memory_moves_in_two_parts_cut_at_the_first_cpu():
    """The one definition of "staged through host memory" that the simulator, multipath,
    trees and flow share: a pinned route passing a CPU node is copied in, then out."""
    links = []
    for a, b in ((0, "pcie0"), ("pcie0", "cpu0"), ("cpu0", "cpu1"), ("cpu1", "pcie1"),
                 ("pcie1", 1), (0, "sw"), ("sw", 1)):
        links += [Link(a, b, 10e9), Link(b, a, 10e9)]
    topo = Topology("two-sockets", 2, tuple(links),
                    {"pcie0": NodeKind.PCIE, "pcie1": NodeKind.PCIE, "cpu0": NodeKind.CPU,
                     "cpu1": NodeKind.CPU, "sw": NodeKind.SWITCH})
    host = ("pcie0", "cpu0", "cpu1", "pcie1")
    assert topo.has_host and topo.is_host("cpu1") and not topo.is_host("pcie0")
    assert not topo.is_host(0) and not topo.is_host("nowhere")
    assert topo.staged(host) and not topo.staged(("sw",)) and not topo.staged(None)
    ends = [[(topo.links[i].src, topo.links[i].dst) for i in part]
            for part in topo.stages(0, 1, host)]
    assert ends == [[(0, "pcie0"), ("pcie0", "cpu0")],
                    [("cpu0", "cpu1"), ("cpu1", "pcie1"), ("pcie1", 1)]]
    assert topo.stages(0, 1, ("sw",)) == (topo.route_via(0, 1, ("sw",)),)
    assert not star().has_host
