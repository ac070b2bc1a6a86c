"""Out-trees from every root, packed in the split network (Edmonds' branching theorem made
constructive as in Lovász's proof; multiplicities as in ForestColl).

Each root starts with one tree holding all its units. A tree grows by an arc ``(x, y)``
from a rank it holds to one it lacks, carrying as many of its units as the arc can take
without leaving the other trees short: the most ``g`` such that every set ``X`` with
``y`` in it and ``x`` outside still has in-capacity for every tree that has no rank in
``X`` yet. That ``g`` is one max-flow from ``x`` to ``y`` in the residual network with an
extra vertex per other tree (fed from ``x`` with the tree's units, feeding its ranks).
When fewer than all of a tree's units fit, the tree splits: the rest carry on as a new
tree from the same point. Edmonds' theorem guarantees every tree completes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ccweave.errors import CCWeaveError
from ccweave.synth.forest.network import BIG, Arc, FlowGraph, Network


@dataclass
class Tree:
    """An out-tree over all ranks carrying ``units`` of ``root``'s data; ``arcs`` run from
    parents to children, parents first."""

    root: int
    units: int
    arcs: list[Arc] = field(default_factory=list)

    def ranks(self) -> set[int]:
        return {self.root, *(arc[1] for arc in self.arcs)}

    def depth(self) -> int:
        level = {self.root: 0}
        for tail, head, _ in self.arcs:
            level[head] = level[tail] + 1
        return max(level.values())


def pack(net: Network, demand: np.ndarray) -> list[Tree]:
    """Trees from every root ``r`` carrying ``demand[r]`` units in all, in ``net``'s arcs
    between ranks (fabric split off already); consumes ``net``'s capacity.

    Trees grow in turns, one arc each per turn, each from its shallowest rank that has a
    feasible arc: the capacity near every root is shared out evenly, so trees stay
    shallow (the pipeline fills and drains in fewer steps) rather than the first trees
    taking the short arcs and the last winding around the machine.
    """
    n = net.num_ranks
    growing = [_Growing(Tree(int(r), int(demand[r])), {int(r): 0})
               for r in np.flatnonzero(demand)]
    done: list[Tree] = []
    while growing:
        for tree in list(growing):
            if len(tree.level) == n:
                continue
            spawned = _extend(net, tree, [o for o in growing if o is not tree])
            growing.extend(spawned)
        done += [t.tree for t in growing if len(t.level) == n]
        growing = [t for t in growing if len(t.level) < n]
    return done


@dataclass
class _Growing:
    tree: Tree
    level: dict[int, int]
    """Depth of each rank the tree holds."""


def _extend(net: Network, growing: _Growing, others: list[_Growing]) -> list[_Growing]:
    """Add one arc to ``growing``, from its shallowest rank that can take one; returns the
    tree split off it if only some of its units fit."""
    for x in sorted(growing.level, key=lambda r: (growing.level[r], r)):
        for y, arcs in _out_arcs(net, x, growing.level):
            units = _fits(net, growing, others, x, y, arcs)
            if units <= 0:
                continue
            arc = max(arcs, key=lambda a: (net.capacity[a], -len(a[2])))
            units = min(units, net.capacity[arc])
            tree = growing.tree
            spawned = []
            if units < tree.units:
                spawned.append(_Growing(Tree(tree.root, tree.units - units, list(tree.arcs)),
                                        dict(growing.level)))
                tree.units = units
            tree.arcs.append(arc)
            growing.level[y] = growing.level[x] + 1
            net.take(arc, units)
            return spawned
    missing = sorted(set(range(net.num_ranks)) - set(growing.level))
    raise CCWeaveError(f"trees: the tree from rank {growing.tree.root} cannot reach ranks "
                       f"{missing[:8]}; the capacities do not satisfy the packing condition "
                       "(a bug)")


def _out_arcs(net: Network, x: int, members) -> list[tuple[int, list[Arc]]]:
    """Arcs from ``x`` to ranks outside ``members``, grouped by head, widest first."""
    heads: dict[int, list[Arc]] = {}
    for arc in net.capacity:
        if arc[0] == x and arc[1] not in members:
            heads.setdefault(arc[1], []).append(arc)
    return sorted(heads.items(), key=lambda item: -sum(net.capacity[a] for a in item[1]))


def _fits(net: Network, growing: _Growing, others: list[_Growing], x: int, y: int,
          arcs: list[Arc]) -> int:
    """Units of ``growing`` the arc ``x -> y`` can carry (see the module docstring)."""
    capacity = sum(net.capacity[a] for a in arcs)
    limit = min(growing.tree.units, capacity)
    active = [o for o in others if len(o.level) < net.num_ranks]
    if not active:
        return limit
    graph = FlowGraph(net.merged(), net.num_ranks)
    base = net.num_ranks
    feeds = np.array([o.tree.units for o in active], dtype=np.int64)
    heads = np.concatenate([np.fromiter(o.level, dtype=np.int64, count=len(o.level))
                            for o in active])
    tails = np.repeat(base + np.arange(len(active)), [len(o.level) for o in active])
    extra = [(np.full(len(active), x), base + np.arange(len(active)), feeds),
             (tails, heads, np.full(len(heads), BIG, dtype=np.int64))]
    value = graph.max_flow(x, y, len(active), extra) - int(feeds.sum())
    return max(0, min(limit, value))


__all__ = ["Tree", "pack"]
