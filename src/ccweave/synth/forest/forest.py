"""The optimal forest of a topology: rate, switch removal, tree packing (ForestColl).

:func:`allgather_forest` packs out-trees from every rank at the allgather bound's rate;
:func:`broadcast_forest` from one root at the broadcast bound's. Both are cached per
topology, so schedules for many sizes share one synthesis.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccweave.bounds import allgather_cut, broadcast_flow
from ccweave.errors import CCWeaveError
from ccweave.synth.forest.boxes import Boxes, LiftedTrees, detect, fitting_time, residual_box
from ccweave.synth.forest.lower import Edge
from ccweave.synth.forest.network import Network
from ccweave.synth.forest.pack import Tree, pack
from ccweave.synth.forest.rate import Rate, feasible, search
from ccweave.synth.forest.split import split_fabric
from ccweave.topology.model import Topology

EASING = (1.01, 1.01, 1.02, 1.05, 1.1, 1.25, 1.5, 2.0, 2.0, 2.0, 2.0, 4.0, 4.0, 16.0)
"""Factors the time is eased by, in turn, while a split leaves the network short: a fabric
vertex whose in- and out-capacity differ may not split off completely, and then the
max-flow bound (each rank alone) is more than trees through it can reach (a switch that
takes in less than it must hand out cannot copy)."""
BISECTIONS = 6
"""Steps that narrow a large easing down (geometric bisection)."""


@dataclass(frozen=True)
class Forest:
    """Trees with their units: ``trees[i] = (root, units, edges parents first)``;
    ``units[r]`` units leave root ``r`` in all; the trees reach ``seconds_per_byte`` times
    the size (the bound's ``optimal_seconds_per_byte``, up to integer capacities).
    ``serial`` leading edges of every tree are its root's sends on one port, to be sent
    one after another (the rails of a multi-box forest)."""

    trees: Sequence[tuple[int, int, tuple[Edge, ...]]]
    units: tuple[int, ...]
    seconds_per_byte: float
    optimal_seconds_per_byte: float
    method: str
    depth: int = 0
    serial: int = 0
    by_root: Mapping[int, Sequence[int]] = field(default_factory=dict)

    def of_root(self, root: int) -> list[tuple[int, tuple[Edge, ...]]]:
        return [self.trees[i][1:] for i in self.by_root.get(root, ())]


def _index(trees: Sequence[tuple[int, int, tuple[Edge, ...]]]) -> dict[int, list[int]]:
    by_root: dict[int, list[int]] = {}
    for position, tree in enumerate(trees):
        by_root.setdefault(tree[0], []).append(position)
    return by_root


_CACHE: weakref.WeakKeyDictionary[Topology, dict[Any, Forest]] = weakref.WeakKeyDictionary()


def cached(topology: Topology, key: Any, make) -> Forest:
    memo = _CACHE.setdefault(topology, {})
    if key not in memo:
        memo[key] = make()
    return memo[key]


_REVERSED: weakref.WeakKeyDictionary[Topology, Topology] = weakref.WeakKeyDictionary()


def reversed_topology(topology: Topology) -> Topology:
    """``topology.reversed()``, one object per topology, so its forests are cached too."""
    if topology not in _REVERSED:
        _REVERSED[topology] = topology.reversed()
    return _REVERSED[topology]


def allgather_forest(topology: Topology) -> Forest:
    """Out-trees from every rank reaching the allgather cut bound (see the module doc):
    by symmetry from one box's forest where the topology is identical boxes on a switch
    (:mod:`.boxes`), else packed in the whole topology."""
    def make() -> Forest:
        boxes = detect(topology)
        if boxes is not None:
            return _lifted(topology, boxes)
        optimal, _ = allgather_cut(topology)
        n = topology.num_ranks
        return _packed(topology, optimal, lambda k: np.full(n, k, dtype=np.int64))
    return cached(topology, "allgather", make)


def _lifted(topology: Topology, boxes: Boxes) -> Forest:
    """The multi-box forest: rails plus one box's forest on what the rails leave."""
    optimal, _ = allgather_cut(topology)
    fit = fitting_time(topology, boxes)
    box = residual_box(topology, boxes, fit)
    if box is None:
        raise CCWeaveError(f"trees: the rails of {topology.name!r} do not fit (a bug)")
    inner = allgather_forest(box)
    trees = LiftedTrees(boxes, inner.trees, topology.num_ranks)
    units = [0] * topology.num_ranks
    for b in range(boxes.count):
        for i, rank in enumerate(trees.rank_of[b]):
            units[rank] = inner.units[i]
    by_root: dict[int, list[int]] = {}
    for position, (b, i, _) in enumerate(trees.index):
        by_root.setdefault(trees.rank_of[b][i], []).append(position)
    return Forest(trees, tuple(units), max(fit, inner.seconds_per_byte), optimal,
                  f"{boxes.count} boxes on {boxes.shared}", inner.depth + 1,
                  trees.rails(), by_root)


def broadcast_forest(topology: Topology, root: int) -> Forest:
    """Out-trees from ``root`` reaching the broadcast max-flow bound."""
    def make() -> Forest:
        optimal, _ = broadcast_flow(topology, root)

        def demand(k: int) -> np.ndarray:
            units = np.zeros(topology.num_ranks, dtype=np.int64)
            units[root] = k
            return units
        return _packed(topology, optimal, demand, min_units=topology.num_ranks - 1)
    return cached(topology, ("broadcast", root), make)


def _packed(topology: Topology, optimal: float, demand_of, min_units: int = 1) -> Forest:
    rate = search(topology, optimal, demand_of, min_units)
    failed = None
    for factor in (*EASING, None):
        net = _split(rate)
        if net is not None:
            break
        if factor is None:
            raise CCWeaveError(f"trees: could not split the fabric of {topology.name!r} off "
                               "without losing the packing condition (a bug)")
        failed, rate = rate, _eased(topology, rate, factor)
    if failed is not None and rate.seconds_per_byte > failed.seconds_per_byte * 1.05:
        for _ in range(BISECTIONS):  # eased a lot: find the time between more closely
            middle = _eased(topology, failed,
                            (rate.seconds_per_byte / failed.seconds_per_byte) ** 0.5)
            found = _split(middle)
            if found is None:
                failed = middle
            else:
                rate, net = middle, found
    packed = pack(net, rate.demand)
    trees = tuple((t.root, t.units, _named(rate.network, t)) for t in packed)
    return Forest(trees, tuple(int(u) for u in rate.demand), rate.seconds_per_byte, optimal,
                  "packed", max((t.depth() for t in packed), default=0), 0, _index(trees))


def _split(rate: Rate) -> Network | None:
    """The rate's network with its fabric split off, or ``None`` if that leaves it short."""
    net = rate.network.copy()
    split_fabric(net, rate.demand)
    return net if feasible(net, rate.demand) else None


def _eased(topology: Topology, rate: Rate, factor: float) -> Rate:
    from ccweave.synth.forest.network import fold_chains, from_topology

    seconds = rate.seconds_per_byte * factor
    net = from_topology(topology, seconds * rate.units)
    fold_chains(net)
    return Rate(net, rate.demand, seconds, rate.optimal_seconds_per_byte)


def _named(net: Network, tree: Tree) -> tuple[Edge, ...]:
    return tuple((tail, head, net.via_names((tail, head, via))) for tail, head, via in tree.arcs)


__all__ = ["Forest", "allgather_forest", "broadcast_forest", "reversed_topology"]
