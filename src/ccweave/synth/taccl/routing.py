"""Stage 1, routing: the front door. The tree selection
(:mod:`~ccweave.synth.taccl.routing_trees`) is the fast option and the warm start of
TACCL's routing MILP (:mod:`~ccweave.synth.taccl.routing_milp`)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import replace

from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.logical import LogicalTopology
from ccweave.synth.taccl.progress import Progress
from ccweave.synth.taccl.routing_milp import route_milp
from ccweave.synth.taccl.routing_result import Routing
from ccweave.synth.taccl.routing_trees import route_trees
from ccweave.synth.taccl.solver import SolverSettings

TREE_SHARE = 0.25
"""Part of the routing time the tree selection may use when it warm-starts the MILP."""
SEARCH_SHARE = 1.0
"""Part of the routing time the route search (:mod:`.routing_search`) may use: a backstop,
as the search stops at a count of sends ordered (``routing_trees.SEARCH_SENDS``)."""


class RoutingMethod(str, enum.Enum):
    """How chunks are routed."""

    MILP = "milp"
    """TACCL's routing MILP (per chunk and edge: sent or not, and when), warm-started by
    the tree selection."""
    TREES = "trees"
    """The tree selection alone: a MILP over a few candidate trees and paths (fast)."""


def route(logical: LogicalTopology, demand: Demand, chunk_bytes: float, *,
          method: RoutingMethod = RoutingMethod.MILP, max_paths: int = 4,
          max_trees: int = 3, relay_hops: int = 1, settings: SolverSettings,
          progress: Callable[[Progress], None] | None = None,
          score: Callable[[tuple], tuple[float, float]] | None = None) -> list[Routing]:
    """The routings to lower: the tree selection's, the route search's when a ``score`` is
    given (hops -> the ordering stage's makespan) and it changed them, then (``milp``) the
    MILP's, warm-started by the last of those."""
    share = settings if method is RoutingMethod.TREES else \
        replace(settings, time_limit_s=settings.time_limit_s * TREE_SHARE)
    found = route_trees(logical, demand, chunk_bytes, max_paths=max_paths,
                        max_trees=max_trees, settings=share, progress=progress, score=score,
                        search_s=settings.time_limit_s * SEARCH_SHARE)
    if method is RoutingMethod.TREES:
        return found
    trees = found[-1]
    rest = replace(settings, time_limit_s=max(settings.time_limit_s - trees.seconds,
                                              settings.time_limit_s * (1 - TREE_SHARE)))
    milp = route_milp(logical, demand, chunk_bytes, trees, relay_hops=relay_hops,
                      settings=rest, progress=progress)
    return [*found, milp]
