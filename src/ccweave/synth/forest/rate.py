"""The rate trees are packed at: integer capacities for a time within a hair of the bound.

A root's data is cut into *units*; ``demand[r]`` units leave root ``r`` (allgather: ``k``
per rank; broadcast: ``k`` at the root), ``D`` in all, so one unit is ``M / D`` bytes and
a link of bandwidth ``B`` carries ``floor(B * T * D / M)`` units in time ``T``. Trees
exist exactly when every set ``X`` holding a rank has in-capacity at least the units of
the roots outside it (Edmonds' branching theorem, with switches split off first):
``maxflow(S0 -> v) >= D`` for every rank ``v``, ``S0`` feeding each root its units.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ccweave.synth.forest.network import BIG, FlowGraph, Network, arrays, fold_chains, from_topology
from ccweave.topology.model import Topology

TOLERANCE = 0.003
"""Integer capacities may cost at most this share of the optimal rate (else more units)."""
MAX_UNITS = 48
"""Units per root tried: ``min_units .. MAX_UNITS``; the fewest within :data:`TOLERANCE`
win (fewer units, fewer trees), else the closest to the bound."""
LARGE_UNITS = (64, 96, 128, 192, 256, 384, 512)
"""Then these, for bandwidths so uneven that few units round the slow links away."""
SEARCH_STEPS = 14
"""Bisection steps between the bound and the tolerance."""


@dataclass(frozen=True)
class Rate:
    """Integer capacities (fabric chains folded) for ``seconds_per_byte``: the collective
    of ``M`` bytes takes ``seconds_per_byte * M`` at that rate."""

    network: Network
    demand: np.ndarray
    seconds_per_byte: float
    optimal_seconds_per_byte: float

    @property
    def units(self) -> int:
        return int(self.demand.sum())


def feasible(net: Network, demand: np.ndarray) -> bool:
    """Whether every rank can receive every unit: ``maxflow(S0 -> v) >= D`` for all ranks."""
    graph = FlowGraph(net.merged(), net.num_vertices)
    source = net.num_vertices
    roots = np.flatnonzero(demand)
    feed = (np.full(len(roots), source), roots, demand[roots].astype(np.int64))
    total = int(demand.sum())
    for sink in sink_order(net, demand):
        if graph.max_flow(source, int(sink), 1, [feed]) < total:
            return False
    return True


def sink_order(net: Network, demand: np.ndarray) -> list[int]:
    """Ranks to check, the least connected first (they fail first)."""
    into = np.zeros(net.num_ranks)
    for (_, head, _), units in net.capacity.items():
        if head < net.num_ranks:
            into[head] += units
    into = into + demand * BIG  # a root with all the demand needs no check
    return [int(v) for v in np.argsort(into, kind="stable") if demand[v] < demand.sum()]


def search(topology: Topology, optimal: float, demand_of: Callable[[int], np.ndarray],
           min_units: int = 1, tolerance: float = TOLERANCE) -> Rate:
    """The fewest units per root (from ``min_units``) whose integer capacities reach
    ``optimal`` (seconds per byte) within ``tolerance``, at the smallest such time; if no
    unit count does, the one closest to the bound."""
    def network(seconds: float, demand: np.ndarray) -> Network:
        net = from_topology(topology, seconds * int(demand.sum()))
        fold_chains(net)
        return net

    def smallest(demand: np.ndarray, low: float, high: float) -> float:
        if feasible(network(low, demand), demand):
            return low
        for _ in range(SEARCH_STEPS):
            middle = (low + high) / 2
            if feasible(network(middle, demand), demand):
                high = middle
            else:
                low = middle
        return high

    candidates = [*range(min_units, max(MAX_UNITS, 2 * min_units) + 1),
                  *(k for k in LARGE_UNITS if k > max(MAX_UNITS, 2 * min_units))]
    for slack in (tolerance, 4 * tolerance, 16 * tolerance, 64 * tolerance):
        high = optimal * (1 + slack)
        for k in candidates:
            demand = demand_of(k)
            if feasible(network(high, demand), demand):
                seconds = smallest(demand, optimal, high)
                return Rate(network(seconds, demand), demand, seconds, optimal)
    k, slack = min_units, 128 * tolerance
    demand = demand_of(k)
    while not feasible(network(optimal * (1 + slack), demand), demand):
        slack *= 2
    seconds = optimal * (1 + slack)
    return Rate(network(seconds, demand), demand, seconds, optimal)


__all__ = ["Rate", "arrays", "feasible", "search"]
