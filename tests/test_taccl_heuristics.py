"""TACCL's ordering heuristics as named options: 5 (backward from the last send), 10, 11,
13, 14, 15, and its reverse heuristics 12 and 18 for reduce-scatter; every one in
ordering=best (reduce_order=best)."""

from __future__ import annotations

import itertools

import pytest

import ccweave.synth.taccl  # noqa: F401  (registers the strategy)
from ccweave.collectives import Collective, Kind
from ccweave.synth.taccl import logical
from ccweave.synth.taccl.build import ReduceOrder, TacclOptions, synthesize_taccl
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.ordering import Heuristic, order
from ccweave.synth.taccl.routing import RoutingMethod, route
from ccweave.synth.taccl.sketch_defaults import default_sketch
from ccweave.synth.taccl.solver import SolverSettings
from ccweave.topology import zoo
from ccweave.verify import verify
from tests.test_taccl_after_routing import QUICK


def mesh_ordered(heuristic: Heuristic):
    """A 2x3 mesh's default sketch, one chunk per rank, routed by the tree selection and
    ordered by ``heuristic``."""
    topology = zoo.get("mesh:2x3")
    lg = logical.apply(topology, default_sketch(topology))
    demand = Demand(Collective(Kind.ALLGATHER, 6, 1), lg.symmetry)
    routing = route(lg, demand, 2**20, method=RoutingMethod.TREES,
                    settings=SolverSettings(time_limit_s=5.0))[0]
    return lg, order(lg, routing, 2**20, heuristic)


def test_backward_ends_every_send_as_late_as_it_may():
    """Heuristic 5 schedules from the last send back: each send ends when the first of what
    follows it starts (its chunk's next hops, the next send on its connection, the next
    stream on any of its links) or at the makespan; a forward list schedule does not."""
    for heuristic, alap in ((Heuristic.BACKWARD, True), (Heuristic.EARLIEST_START, False)):
        lg, o = mesh_ordered(heuristic)
        later: dict[int, list[float]] = {i: [o.makespan_s] for i in range(len(o.sends))}
        for i, s in enumerate(o.sends):
            if s.parent >= 0:
                later[s.parent].append(o.start[i])
        for sequence in o.edge_order.values():
            for a, b in itertools.pairwise(sequence):
                later[a].append(o.start[b])
        for sequence in o.link_order.values():
            for a, b in itertools.pairwise(sequence):
                later[a].append(o.start[b] + lg.edges[o.sends[b].edge].alpha)
        slack = [min(later[i]) - o.finish[i] for i in range(len(o.sends))]
        assert min(slack) >= -1e-12
        assert bool(max(slack) <= 1e-12) == alap


def test_every_heuristic_has_its_taccl_number_and_is_an_option():
    numbers = {h.value: h.taccl_number for h in Heuristic}
    assert numbers == {"earliest-start": 15, "longest-remaining": 10, "own-node-first": 14,
                       "longest-remaining-sources-first": 11,
                       "longest-remaining-own-node": 13, "backward": 5,
                       "longest-remaining-insertion": None, "solver-times": None}
    for h in Heuristic:
        assert TacclOptions.parse({"ordering": h.value}).heuristics() == (h,)
    assert TacclOptions.parse({"ordering": "best"}).heuristics() is None


@pytest.mark.parametrize("heuristic", [Heuristic.BACKWARD, Heuristic.LONGEST_SOURCES_FIRST,
                                       Heuristic.LONGEST_OWN_NODE])
def test_a_named_heuristic_alone_gives_a_proven_schedule(heuristic):
    topology = zoo.get("ndv2:2")
    schedule = synthesize_taccl(topology, Kind.ALLGATHER, 1, TacclOptions(
        size=2**24, ordering=heuristic.value, **QUICK))
    verify(schedule, topology)
    assert schedule.metadata["taccl"]["ordering"]["heuristic"] == heuristic.value


def test_best_tries_every_heuristic_and_every_reverse_order():
    topology = zoo.get("ndv2:2")
    allreduce = synthesize_taccl(topology, Kind.ALLREDUCE, 1,
                                 TacclOptions(size=2**24, **QUICK))
    verify(allreduce, topology)
    tried = allreduce.metadata["taccl"]["ordering"]["tried_us"]
    assert set(tried) >= {h.value for h in Heuristic if h is not Heuristic.SOLVER_TIMES}
    orders = allreduce.metadata["reduce_order"]["tried_us"]
    assert {label.split(",")[0] for label in orders} == {r.value for r in ReduceOrder}
    branch = synthesize_taccl(topology, Kind.REDUCESCATTER, 1, TacclOptions(
        size=2**24, reduce_order="reverse-branch", **QUICK))
    verify(branch, topology)
    assert branch.metadata["reduce_order"]["kept"].startswith("reverse-branch")
