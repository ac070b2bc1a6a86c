"""What the taccl strategy loses after routing: the exported MSCCL XML against the model's
own schedule, on TACCL's sketches and on relabelled twins of them (issue 43)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ccweave.synth.taccl  # noqa: F401  (registers the strategy)
from ccweave.collectives import Collective, Kind
from ccweave.export.msccl_xml import from_xml, to_xml
from ccweave.simulate import simulate
from ccweave.synth.taccl import logical, profile, sketch
from ccweave.synth.taccl.build import TacclOptions, synthesize_taccl
from ccweave.synth.taccl.contiguity import singletons
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.lowering import lower
from ccweave.synth.taccl.ordering import Heuristic, order
from ccweave.synth.taccl.ordering_bound import order_bound
from ccweave.synth.taccl.routing import RoutingMethod, route
from ccweave.synth.taccl.sketch_defaults import default_sketch
from ccweave.synth.taccl.solver import SolverSettings
from ccweave.topology import zoo
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.verify import verify
from tests.test_taccl_properties import two_node_machines

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "taccl"
QUICK = {"time_limit": 20.0, "routing_time_limit": 2.0, "contiguity_time_limit": 0.5,
         "fallback": False}


def taccl_case(stem: str, machine: str, **options):
    """TACCL's sketch ``stem`` on ``machine`` with TACCL's 1 MB profile, 1 MB chunks: the
    schedule, the profiled machine and the size."""
    path = FIXTURES / "sketch" / f"{stem}.json"
    family = machine.split(":")[0]
    profile_file = FIXTURES / "topo" / f"topo-{family}-1MB.json"
    base = zoo.get(machine)
    topology = profile.apply(profile.load(profile_file), base)
    chunks = sketch.load(path).input_chunkup
    size = 2**20 * Collective(Kind.ALLGATHER, base.num_ranks, chunks).total_chunks
    schedule = synthesize_taccl(base, Kind.ALLGATHER, None, TacclOptions(
        size=size, sketch=str(path), profile=str(profile_file), **{**QUICK, **options}))
    return schedule, topology, size


def exported_us(schedule, topology, size) -> float:
    return simulate(from_xml(to_xml(schedule)), topology, size).time_s * 1e6


def test_sends_of_several_gpus_through_one_nic_keep_the_models_order():
    """sk2-ndv2-n2: every GPU of a node sends across through the node's one NIC. MSCCL
    cannot make one GPU's send wait for another's, so unpaced the eight chunks crossed at
    once and arrived together (1212.7 us exported against the model's 912.5); paced by
    each GPU's own receives they cross one after another as the model has them."""
    schedule, topology, size = taccl_case("sk2-ndv2-n2", "ndv2:2")
    verify(schedule, topology)
    model_us = schedule.metadata["taccl"]["contiguity"]["makespan_us"]
    assert exported_us(schedule, topology, size) <= 1.05 * model_us


def test_route_search_gives_a_late_chunk_a_shared_fan_out():
    """sk2-dgx2-n2: a GPU pair's two chunks share their NIC, so one lands second and its
    receiver's star fan-out (fifteen switch hops) was the critical path (332.9 us).
    TACCL's relaxation cannot tell a star from a tree that shares the fan-out with a
    helper; the route search, scored by stage 2, can. The export lands within 5% of what
    any order of the kept routes can do (the order bound)."""
    schedule, topology, size = taccl_case("sk2-dgx2-n2", "dgx2:2", time_limit=60.0,
                                          routing_time_limit=30.0)  # the search's time
    verify(schedule, topology)
    routing = schedule.metadata["taccl"]["routing"]
    assert routing["kept"] == "trees+search"
    exported = exported_us(schedule, topology, size)
    assert exported <= 300.0
    assert routing["order_bound_us"] <= exported <= 1.05 * routing["order_bound_us"]


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(machine=two_node_machines(), chunks=st.integers(1, 2),
       size=st.sampled_from([2**16, 2**24]))
def test_no_order_of_the_routes_beats_the_order_bound(machine, chunks, size):
    """The order bound holds for every stage-2 order of the routes and for the lowered
    schedule the simulator times (fair sharing, not TACCL's serial links)."""
    sk = default_sketch(machine)
    lg = logical.apply(machine, sk)
    coll = Collective(Kind.ALLGATHER, machine.num_ranks, chunks)
    demand = Demand(coll, lg.symmetry)
    chunk = coll.chunk_bytes(size)
    for routing in route(lg, demand, chunk, method=RoutingMethod.TREES,
                         settings=SolverSettings(time_limit_s=2.0)):
        bound = order_bound(lg, routing, chunk).seconds
        for heuristic in Heuristic:
            if heuristic is not Heuristic.SOLVER_TIMES:
                assert order(lg, routing, chunk, heuristic).makespan_s >= bound * (1 - 1e-9)
        ordering = order(lg, routing, chunk)
        lowered = lower(demand, lg, ordering, singletons(ordering), "t", {})
        assert simulate(lowered.schedule, machine, size).time_s >= bound * (1 - 1e-9)


def mini_dgx2() -> Topology:
    """Two nodes of four GPUs on an NVSwitch, each GPU pair sharing a PCIe switch and its
    NIC, as DGX-2 does with sixteen."""
    links: list[Link] = []
    fabric = {"net": NodeKind.SWITCH}

    def duplex(a, b, gbps, alpha_us):
        links.extend((Link(a, b, gbps * 1e9, alpha_us * 1e-6),
                      Link(b, a, gbps * 1e9, alpha_us * 1e-6)))

    for node in range(2):
        switch = f"n{node}.nvswitch"
        fabric[switch] = NodeKind.SWITCH
        for pair in range(2):
            pcie, nic = f"n{node}.pcie{pair}", f"n{node}.nic{pair}"
            fabric[pcie], fabric[nic] = NodeKind.PCIE, NodeKind.NIC
            for gpu in (4 * node + 2 * pair, 4 * node + 2 * pair + 1):
                duplex(gpu, switch, 125, 0.35)
                duplex(gpu, pcie, 16, 0.5)
            duplex(pcie, nic, 16, 0.5)
            duplex(nic, "net", 12.5, 0.8)
    return Topology("mini-dgx2:2", 8, tuple(links), fabric, {"node": ((0, 1, 2, 3),
                                                                       (4, 5, 6, 7))})


def pair_relay_sketch(local: tuple[int, ...], chunks: int) -> sketch.Sketch:
    """TACCL's sk1-dgx2-n2 in small, relabelled by ``local`` (the same permutation of
    local ranks in both nodes): one GPU of each pair carries the pair's data across."""
    return sketch.from_dict({
        "intranode": {"strategy": "switch", "hyperedge": "uc-min"},
        "internode": {"connections": {str(local[2 * i + 1]): [local[2 * i]] for i in (0, 1)},
                      "carries": {str(local[2 * i + 1]): [local[2 * i], local[2 * i + 1]]
                                  for i in (0, 1)}},
        "symmetry_offsets": [[4, 8]], "input_chunkup": chunks}, "pairs.json")


PAIR_AUTOMORPHISMS = st.tuples(st.booleans(), st.booleans(), st.booleans()).map(
    lambda flips: tuple((2 * (p ^ flips[0]) + (b ^ flips[1 + (p ^ flips[0])]))
                        for p in (0, 1) for b in (0, 1)))
"""Permutations of a node's local ranks that keep GPU pairs together: the machine's
automorphisms (applied in both nodes), which commute with the sketch's node rotation."""


@settings(max_examples=3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(local=PAIR_AUTOMORPHISMS, chunks=st.integers(1, 2),
       size=st.sampled_from([2**23, 2**26]))  # 1 and 8 MB chunks, as TACCL's profiles
@example(local=(0, 1, 3, 2), chunks=1, size=2**26)  # 1551.4 vs 1485.0 us before the fix
def test_a_relabelled_twin_exports_within_half_a_percent(local, chunks, size):
    """Renumbering GPUs by an automorphism of the machine changes no figure: the sketch
    and its twin export within 0.5% (the route search once found a better routing for one
    numbering only: its split trees were picked by rank number). The routes are the tree
    selection's (solved to optimality) and the route search stops at its count, not its
    time: the routing MILP's answer at a time limit depends on the load, not on labels."""
    machine = mini_dgx2()
    options = TacclOptions(size=size, fallback=False, time_limit=600.0, routing="trees",
                           routing_time_limit=120.0, contiguity_time_limit=0.5)
    times = []
    for numbering in ((0, 1, 2, 3), local):
        schedule = synthesize_taccl(machine, Kind.ALLGATHER, None, replace(
            options, sketch=pair_relay_sketch(numbering, chunks)))
        verify(schedule, machine)
        times.append(exported_us(schedule, machine, size))
    assert times[1] == pytest.approx(times[0], rel=5e-3)


def test_the_order_bound_of_searched_routes_is_below_their_orders():
    """sk1-ndv2-n1's searched routes order in 92.6 us; dealing an upstream link's turns
    while keeping each send's own path once claimed 92.9 (a dealing that favours sends
    with long paths is not the least bound): the bound now holds for every dealing."""
    lg = logical.apply(zoo.get("ndv2"), sketch.load(FIXTURES / "sketch" / "sk1-ndv2-n1.json"))
    coll = Collective(Kind.ALLGATHER, 8, 1)
    demand = Demand(coll, lg.symmetry)
    from ccweave.synth.taccl.build import _ordering_score

    for routing in route(lg, demand, 2**20, method=RoutingMethod.TREES,
                         settings=SolverSettings(time_limit_s=5.0),
                         score=_ordering_score(lg, 2**20)):
        bound = order_bound(lg, routing, 2**20).seconds
        for heuristic in Heuristic:
            if heuristic is not Heuristic.SOLVER_TIMES:
                assert order(lg, routing, 2**20, heuristic).makespan_s >= bound * (1 - 1e-9)
