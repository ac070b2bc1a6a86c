"""TACCL's minmax and maxmin intranode strategies: the machine's links (as ``none``) and a
link-load term beside the makespan in the routing MILP (TACCL's ``mu`` = 0.01)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from ccweave.collectives import Collective, Kind
from ccweave.synth.taccl import logical, sketch
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.routing import RoutingMethod, route
from ccweave.synth.taccl.sketch import Balance, Intranode
from ccweave.synth.taccl.solver import SolverSettings
from ccweave.topology import zoo


def taccl_sketch(strategy: str) -> sketch.Sketch:
    return sketch.from_dict({"nnodes": 1, "intranode_sketch": {"strategy": strategy},
                             "hyperparameters": {"input_chunkup": 1}}, f"sk-{strategy}.json")


def link_loads(strategy: str) -> tuple[float, float, float]:
    """The MILP routing's makespan, its most and its least loaded link (seconds of
    streaming) on one NDv2, over every link the sketch's sends may cross."""
    topology = zoo.get("ndv2")
    lg = logical.apply(topology, taccl_sketch(strategy))
    demand = Demand(Collective(Kind.ALLGATHER, 8, 1), lg.symmetry)
    routing = route(lg, demand, 2**20, method=RoutingMethod.MILP,
                    settings=SolverSettings(time_limit_s=10.0))[-1]
    load: dict[int, float] = defaultdict(float)
    for hops in routing.hops:
        for edge, _ in hops:
            for link in lg.edges[edge].route:
                load[link] += 2**20 / topology.links[link].bandwidth
    usable = {link for e in lg.edges for link in e.route}
    return routing.makespan_s, max(load.values()), min(load.get(lk, 0.0) for lk in usable)


@pytest.mark.parametrize("strategy, balance", [("minmax", Balance.MINMAX),
                                               ("maxmin", Balance.MAXMIN)])
def test_taccls_balance_strategies_read_as_its_links_and_an_objective(strategy, balance):
    s = taccl_sketch(strategy)
    assert s.intranode.strategy is Intranode.NONE and s.intranode.balance is balance
    assert sketch.from_dict(s.to_dict(), "again.json").intranode.balance is balance
    applied = logical.apply(zoo.get("ndv2"), s)
    assert applied.sketch.intranode.strategy is Intranode.LINKS


def test_minmax_and_maxmin_balance_link_loads_at_the_same_makespan():
    """On one NDv2 the plain MILP leaves some NVLink idle; maxmin brings every link into
    use and minmax keeps the busiest no busier, at the same makespan."""
    plain, minmax, maxmin = (link_loads(s) for s in ("none", "minmax", "maxmin"))
    assert minmax[0] == pytest.approx(plain[0]) and maxmin[0] == pytest.approx(plain[0])
    assert maxmin[2] > 0.0 and maxmin[2] >= plain[2]
    assert minmax[1] <= plain[1] * (1 + 1e-9)
