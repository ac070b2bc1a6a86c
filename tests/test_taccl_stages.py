"""The taccl stages one at a time, on tiny machines: routing (the tree selection and
TACCL's MILP), ordering (greedy heuristics), contiguity (MILP), lowering (a verified
Schedule)."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from ccweave.collectives import Collective, Kind
from ccweave.simulate import simulate
from ccweave.synth.taccl import logical, sketch
from ccweave.synth.taccl.contiguity import (
    Contiguity,
    batches,
    contiguity,
    high_alpha_edges,
    singletons,
)
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.lowering import (
    RELAY_CHANNELS,
    lower,
    relays_share_ports,
    shared_ports,
)
from ccweave.synth.taccl.ordering import Heuristic, order, sends_of
from ccweave.synth.taccl.routing import RoutingMethod, route
from ccweave.synth.taccl.routing_paths import PathFinder
from ccweave.synth.taccl.solver import Model, SolverSettings
from ccweave.topology import zoo
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.verify import verify

GB = 1e9
US = 1e-6


def two_node_toy(ranks_per_node: int = 4, nvlink_gbps: float = 50.0,
                 nic_gbps: float = 12.5) -> Topology:
    """Two nodes; inside each, every pair of ranks on a direct link; all ranks of a node
    reach its one NIC through a PCIe switch; the NICs meet at a network switch."""
    links: list[Link] = []
    fabric: dict[str, NodeKind] = {"net": NodeKind.SWITCH}

    def duplex(a, b, gbps, alpha_us):
        links.append(Link(a, b, gbps * GB, alpha_us * US))
        links.append(Link(b, a, gbps * GB, alpha_us * US))

    nodes = []
    for node in range(2):
        members = tuple(range(node * ranks_per_node, (node + 1) * ranks_per_node))
        nodes.append(members)
        pcie, nic = f"n{node}.pcie", f"n{node}.nic"
        fabric[pcie], fabric[nic] = NodeKind.PCIE, NodeKind.NIC
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                duplex(a, b, nvlink_gbps, 0.7)
            duplex(a, pcie, 16.0, 0.5)
        duplex(pcie, nic, 16.0, 0.5)
        duplex(nic, "net", nic_gbps, 0.8)
    return Topology("toy:2x4", 2 * ranks_per_node, tuple(links), fabric,
                    {"node": tuple(nodes)})


def toy_sketch(**internode) -> sketch.Sketch:
    return sketch.from_dict({"intranode": {"strategy": "links"},
                             "internode": {"strategy": "relay", **internode},
                             "symmetry_offsets": [[4, 8]], "input_chunkup": 1}, "toy.json")


def routed(lg, demand, chunk, method=RoutingMethod.MILP, time_limit=20.0, **options):
    """The last routing of ``method`` (the MILP's, or the tree selection's)."""
    return route(lg, demand, chunk, method=method,
                 settings=SolverSettings(time_limit_s=time_limit), **options)[-1]


def stages(topology, data_sketch, kind, size, chunks=1, method=RoutingMethod.MILP,
           heuristic=Heuristic.EARLIEST_START, **contig):
    lg = logical.apply(topology, data_sketch)
    coll = Collective(kind, topology.num_ranks, chunks)
    demand = Demand(coll, lg.symmetry)
    chunk = coll.chunk_bytes(size)
    routing = routed(lg, demand, chunk, method)
    ordering = order(lg, routing, chunk, heuristic)
    groups = contiguity(lg, ordering, chunk, settings=SolverSettings(time_limit_s=5), **contig)
    return lg, demand, routing, ordering, groups


# ---------------------------------------------------------------------- routing


@pytest.mark.parametrize("method", list(RoutingMethod))
def test_allgather_routes_are_trees_reaching_everyone(method):
    toy = two_node_toy()
    lg, demand, routing, _, _ = stages(toy, toy_sketch(), Kind.ALLGATHER, 2**24,
                                       method=method)
    assert routing.method == method.value
    for chunk, hops in zip(demand.chunks, routing.hops):
        reached = {chunk.source}
        for edge, parent in hops:
            e = lg.edges[edge]
            assert e.src in reached and e.dst not in reached  # a tree, parents first
            assert parent < 0 or lg.edges[hops[parent][0]].dst == e.src
            reached.add(e.dst)
        assert reached == set(range(8))
        assert sum(lg.edges[e].internode for e, _ in hops) == 1  # each node entered once


@pytest.mark.parametrize("method", list(RoutingMethod))
def test_routing_balances_the_nic_and_meets_the_relaxation(method):
    toy = two_node_toy()
    size = 2**26
    lg, _demand, routing, _, _ = stages(toy, toy_sketch(), Kind.ALLGATHER, size,
                                        method=method)
    chunk = size / 8
    nic_out = next(i for i, lk in enumerate(toy.links) if (lk.src, lk.dst) == ("n0.nic", "net"))
    load = sum(chunk for hops in routing.hops for e, _ in hops if nic_out in lg.edges[e].route)
    assert load == pytest.approx(4 * chunk)  # node 0's four chunks cross once each
    assert routing.makespan_s == pytest.approx(4 * chunk / (12.5 * GB), rel=1e-6)


@pytest.mark.parametrize("method", list(RoutingMethod))
def test_symmetric_images_are_routed_alike(method):
    toy = two_node_toy()
    lg, demand, routing, _, _ = stages(toy, toy_sketch(), Kind.ALLGATHER, 2**24,
                                       method=method)
    swap = lg.symmetry[1]
    for chunk in range(4):
        image = demand.image(swap, chunk)
        assert [lg.edge_image(swap, e) for e, _ in routing.hops[chunk]] == \
            [e for e, _ in routing.hops[image]]


@pytest.mark.parametrize("method", list(RoutingMethod))
def test_alltoall_routes_are_paths(method):
    toy = two_node_toy()
    s = toy_sketch(connections="fully-connected")
    lg, demand, routing, _, _ = stages(toy, s, Kind.ALLTOALL, 2**24, method=method)
    for chunk, hops in zip(demand.chunks, routing.hops):
        assert lg.edges[hops[0][0]].src == chunk.source
        assert lg.edges[hops[-1][0]].dst == chunk.destinations[0]
        assert [p for _, p in hops] == list(range(-1, len(hops) - 1))


def test_candidate_trees_span_the_node_and_start_with_the_shortest():
    toy = two_node_toy()
    lg = logical.apply(toy, toy_sketch())
    finder = PathFinder(lg, 2**20, max_trees=3)
    trees = finder.node_trees(0)
    # at most 3 grown trees, and in a node of four every split tree: 3 helpers x 2 shares
    assert 1 + 6 <= len(trees) <= 3 + 6
    for tree in trees:
        assert sorted(lg.edges[e].dst for e in tree.edges) == [1, 2, 3]
    assert trees[0].height <= min(t.height for t in trees) + 1e-12


def test_uc_policies_change_the_connections_used():
    used = {}
    for policy in ("uc-min", "uc-max"):
        s = sketch.from_dict({"intranode": {"strategy": "switch", "hyperedge": policy},
                              "input_chunkup": 2}, "sw.json")
        topology = zoo.get("switch:4")
        lg = logical.apply(topology, s)
        demand = Demand(Collective(Kind.ALLGATHER, 4, 2), lg.symmetry)
        routing = routed(lg, demand, 2**18, RoutingMethod.TREES)
        used[policy] = len({e for hops in routing.hops for e, _ in hops})
    assert used["uc-min"] <= used["uc-max"]


# --------------------------------------------------------------------- ordering


@pytest.mark.parametrize("heuristic", list(Heuristic))
def test_ordering_respects_parents_and_fifo_edges(heuristic):
    toy = two_node_toy()
    lg, _, routing, ordering, _ = stages(toy, toy_sketch(), Kind.ALLGATHER, 2**24, chunks=2,
                                         heuristic=heuristic)
    assert ordering.heuristic is heuristic
    sends = ordering.sends
    assert len(sends) == sum(len(h) for h in routing.hops) == len(sends_of(routing))
    for i, s in enumerate(sends):
        if s.parent >= 0:
            assert ordering.start[i] >= ordering.finish[s.parent] - 1e-15
        chunk = 2**24 / 16
        assert ordering.finish[i] - ordering.start[i] == pytest.approx(
            lg.edges[s.edge].seconds(chunk))
    for sequence in ordering.edge_order.values():
        for a, b in itertools.pairwise(sequence):
            assert ordering.start[b] >= ordering.finish[a] - 1e-15
    for _link, sequence in ordering.link_order.items():  # one stream per link at a time
        for a, b in itertools.pairwise(sequence):
            assert ordering.finish[b] - lg.edges[sends[b].edge].seconds(2**24 / 16) \
                + lg.edges[sends[b].edge].alpha >= ordering.finish[a] - 1e-12


@pytest.mark.parametrize("enforce", [True, False])
def test_enforce_ordering_sends_a_senders_own_chunks_first(enforce):
    """Solver times that put carried chunks first on the NIC are overruled by TACCL's
    enforce_ordering (local rank 0 carries its node's data)."""
    from dataclasses import replace

    toy = two_node_toy()
    s = sketch.from_dict({"intranode": {"strategy": "links"},
                          "internode": {"connections": {"0": [0]},
                                        "carries": {"0": [0, 1, 2, 3]},
                                        "enforce_ordering": enforce},
                          "symmetry_offsets": [[4, 8]]}, "e.json")
    lg = logical.apply(toy, s)
    demand = Demand(Collective(Kind.ALLGATHER, 8, 1), lg.symmetry)
    trees = routed(lg, demand, 2**20, RoutingMethod.TREES)
    early_for_carried = tuple(tuple(0.0 if demand.chunks[c].source % 4 else 1.0
                                    for _ in hops) for c, hops in enumerate(trees.hops))
    ordering = order(lg, replace(trees, send_times=early_for_carried), 2**20,
                     Heuristic.SOLVER_TIMES)
    nic = lg.edge_id[(0, 4)]
    own = [ordering.sends[i].chunk == 0 for i in ordering.edge_order[nic]]
    assert own[0] is enforce  # with enforce_ordering the own chunk leads, else it trails
    assert sum(own) == 1


# ------------------------------------------------------------------- contiguity


def test_large_chunks_merge_nothing():
    toy = two_node_toy()
    *_, _ordering, groups = stages(toy, toy_sketch(senders=[0]), Kind.ALLGATHER, 2**30)
    assert groups.merges == 0 and groups.status == "skipped"
    assert all(len(g) == 1 for g in groups.groups)


def test_small_chunks_merge_on_the_nic_and_gain():
    toy = two_node_toy()
    lg, _, _, ordering, groups = stages(toy, toy_sketch(senders=[0]), Kind.ALLGATHER, 2**14)
    assert groups.merges > 0
    assert groups.makespan_s < ordering.makespan_s
    high = high_alpha_edges(lg, 2**14 / 8)
    for group in groups.groups:
        edges = {ordering.sends[i].edge for i in group}
        assert len(edges) == 1
        if len(group) > 1:
            assert edges <= high and all(lg.edges[e].internode for e in edges)


def test_contiguity_time_limit_returns_the_best_with_its_gap():
    ndv2 = zoo.get("ndv2:2")
    s = sketch.from_dict({"internode": {"senders": [0]}, "symmetry_offsets": [[8, 16]]},
                         "x.json")
    *_, ordering, groups = stages(ndv2, s, Kind.ALLGATHER, 2**20, chunks=2,
                                  max_merges=200)
    assert groups.status in ("time limit", "optimal", "within gap")
    if groups.status == "time limit":
        assert groups.gap > 0 and "MIP gap" in groups.note
    assert groups.makespan_s <= ordering.makespan_s * (1 + 1e-6)


def test_batching_joins_ready_chunks_only():
    toy = two_node_toy()
    lg, _, _, ordering, _ = stages(toy, toy_sketch(senders=[0]), Kind.ALLGATHER, 2**14)
    nic_edges = {i for i, e in enumerate(lg.edges) if e.internode}
    joined = batches(ordering, nic_edges)
    for i in joined:
        assert ordering.sends[i].edge in nic_edges


def test_model_fixed_keeps_the_original():
    model = Model("m")
    x = model.add_vars(2, binary=True, cost=-1.0)
    model.add_row(list(x), [1.0, 1.0], upper=1.0)
    fixed = model.fixed({x[0]: 0.0})
    assert model._upper[x[0]] == 1.0 and fixed._upper[x[0]] == 0.0
    result = fixed.solve(SolverSettings(time_limit_s=5))
    assert result.optimal and result.values[x[1]] == pytest.approx(1.0)


# ------------------------------------------------------------------------ lower


@pytest.mark.parametrize("kind", [Kind.ALLGATHER, Kind.ALLTOALL])
@pytest.mark.parametrize("size", [2**14, 2**28])
def test_lowered_schedules_verify(kind, size):
    toy = two_node_toy()
    s = toy_sketch(senders=[0, 1]) if kind is Kind.ALLGATHER else \
        toy_sketch(connections="fully-connected")
    lg, demand, _, ordering, groups = stages(toy, s, kind, size, chunks=2)
    lowered = lower(demand, lg, ordering, groups, "t", {})
    verify(lowered.schedule, toy)
    assert len(lowered.carrier) == len(groups.groups)
    assert simulate(lowered.schedule, toy, size).time_s > 0


def test_lowering_packs_and_unpacks_merged_relays():
    toy = two_node_toy()
    s = toy_sketch(connections="fully-connected", senders=[0], receivers=[0])
    lg, demand, _, ordering, _ = stages(toy, s, Kind.ALLTOALL, 2**12)
    merged = Contiguity(*_all_on_edges_merged(ordering))
    schedule = lower(demand, lg, ordering, merged, "t", {}).schedule
    verify(schedule, toy)
    assert any(t.count > 1 and not t.is_local for t in schedule.transfers)
    assert schedule.scratch_chunks > 0


def _all_on_edges_merged(ordering):
    """Each internode edge's sends as one group (a legal grouping when sends come in
    readiness order), the rest alone."""
    groups, start = [], []
    for _, sequence in sorted(ordering.edge_order.items()):
        groups.append(tuple(sequence))
        start.append(float(max(ordering.start[i] for i in sequence)))
    order = np.argsort(start, kind="stable")
    return (tuple(groups[i] for i in order), tuple(start[i] for i in order),
            ordering.makespan_s, "test", 0.0, 0.0, sum(len(g) - 1 for g in groups), "")


def test_shared_ports_are_a_ranks_way_to_its_nic():
    toy = two_node_toy()
    lg = logical.apply(toy, toy_sketch(connections="fully-connected"))
    ports = shared_ports(lg, "internode")
    for e, links in ports.items():
        assert lg.edges[e].internode
        assert links and links[0] == lg.edges[e].route[0]
    assert shared_ports(lg, "none") == {}
    counts = Counter(len(v) for v in shared_ports(lg, "all").values())
    assert counts


def test_relay_first_puts_a_relays_copy_ahead_of_the_copies_kept():
    s = sketch.from_dict({"intranode": {"strategy": "switch", "hyperedge": "uc-min"},
                          "input_chunkup": 2}, "sw.json")
    topology = zoo.get("switch:4")
    lg = logical.apply(topology, s)
    demand = Demand(Collective(Kind.ALLGATHER, 4, 2), lg.symmetry)
    star = routed(lg, demand, 2**18, RoutingMethod.TREES)
    assert not relays_share_ports(lg, order(lg, star, 2**18))  # no relay: nothing to do
    source = demand.chunks[0].source
    a, b, c = (r for r in range(4) if r != source)
    edge = {(e.src, e.dst): k for k, e in enumerate(lg.edges)}
    relayed = ((edge[(source, a)], -1), (edge[(source, b)], -1), (edge[(a, c)], 0))
    routing = replace(star, hops=(relayed, *star.hops[1:]))  # chunk 0 reaches c through a
    ordering = order(lg, routing, 2**18)
    groups = singletons(ordering)
    assert relays_share_ports(lg, ordering)
    plain = lower(demand, lg, ordering, groups, "t", {})
    first = lower(demand, lg, ordering, groups, "t", {}, relay_first=True)
    verify(first.schedule, topology)
    assert all(t.channel < RELAY_CHANNELS for t in plain.schedule.transfers)
    forwarded = {send.parent for send in ordering.sends if send.parent >= 0}
    copies: dict[tuple, tuple[list[int], list[int]]] = {}
    for number, group in enumerate(groups.groups):
        (i,) = group
        edge = lg.edges[ordering.sends[i].edge]
        index = first.carrier[number]
        assert (first.schedule.transfers[index].channel >= RELAY_CHANNELS) == (i in forwarded)
        key = (edge.src, edge.route[0], ordering.sends[i].chunk)
        copies.setdefault(key, ([], []))[0 if i in forwarded else 1].append(index)
    waits = [(leaf, relay) for relays, leaves in copies.values() for leaf in leaves
             for relay in relays]
    assert waits
    assert all(relay in first.schedule.transfers[leaf].deps for leaf, relay in waits)


def test_singletons_keep_stage_two():
    toy = two_node_toy()
    *_, ordering, _ = stages(toy, toy_sketch(), Kind.ALLGATHER, 2**20)
    alone = singletons(ordering)
    assert alone.merges == 0 and len(alone.groups) == len(ordering.sends)


def test_routing_out_of_time_keeps_a_schedule_and_says_so():
    ndv2 = zoo.get("ndv2:4")
    s = sketch.from_dict({"symmetry_offsets": [[8, 32]]}, "x.json")
    lg = logical.apply(ndv2, s)
    demand = Demand(Collective(Kind.ALLGATHER, 32, 4), lg.symmetry)
    routing = routed(lg, demand, 2**13, RoutingMethod.TREES, time_limit=0.01)
    assert routing.status in ("time limit", "optimal", "within gap")
    if routing.status == "time limit":
        assert "not proven optimal" in routing.note and "MIP gap" in routing.note
    assert all(len(hops) == 31 for hops in routing.hops)  # still a tree to everyone


def test_a_measured_per_message_latency_is_taccls_alpha_and_merges_the_relay():
    """A calibrated machine's per-message latency (``cost_model``) is part of each send's
    alpha, as the simulator charges it: a relay over a NIC whose links state no alpha then
    merges its chunks into fewer messages, and simulates faster for it."""
    from pathlib import Path

    from ccweave.synth.taccl.build import TacclOptions, synthesize_taccl
    from ccweave.synth.taccl.sketch_defaults import default_sketch
    from ccweave.topology import io
    from ccweave.topology.cost import CostModel

    folder = Path(__file__).resolve().parent.parent / "examples" / "topologies"
    plain = io.load(str(folder / "shared-nic-2x4.json"))
    measured = plain.with_cost(CostModel(message_latency=800 * US, connection_fifo=True))
    lg = logical.apply(measured, default_sketch(measured, Kind.ALLTOALL))
    assert all(e.alpha == pytest.approx(800 * US) for e in lg.edges)
    size = 2**16
    options = TacclOptions(size=size, sketch="relay-per-nic", fallback=False, time_limit=20.0,
                           routing_time_limit=2.0, contiguity_time_limit=1.0)
    built = {name: synthesize_taccl(machine, Kind.ALLTOALL, 1, options)
             for name, machine in (("plain", plain), ("measured", measured))}
    for schedule in built.values():
        verify(schedule, measured)

    def crossing(schedule):
        return [t.count for t in schedule.transfers
                if plain.group_of("node", t.src) != plain.group_of("node", t.dst)]

    assert max(crossing(built["plain"])) == 1  # 16 messages a way, one chunk each
    assert len(crossing(built["measured"])) < len(crossing(built["plain"]))
    times = {name: simulate(s, measured, size).time_s for name, s in built.items()}
    assert times["measured"] < 0.8 * times["plain"]
