"""The capacity network trees are packed in: ranks and fabric, integer arc capacities in
*units* (one unit is a fixed share of a root's data), arcs that remember the fabric they
pass.

Vertex ``v < num_ranks`` is rank ``v``; the others are fabric nodes, named in ``nodes``.
An arc ``(u, v, via)`` runs from ``u`` to ``v`` through the fabric vertices ``via``: a
physical link has ``via == ()``; splitting a fabric vertex off joins two arcs into one
that passes it. Max-flows run on scipy's ``maximum_flow`` over the arcs merged per
``(u, v)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from ccweave.topology.model import Node, Topology

Arc = tuple[int, int, tuple[int, ...]]
"""(tail, head, fabric vertices passed in order)."""

BIG = 2**30
"""An uncut capacity in a max-flow (scipy counts in int32)."""


@dataclass
class Network:
    """A mutable integer-capacity multigraph over the topology's ranks and fabric."""

    num_ranks: int
    nodes: tuple[Node, ...]
    capacity: dict[Arc, int] = field(default_factory=dict)

    @property
    def num_vertices(self) -> int:
        return len(self.nodes)

    def copy(self) -> Network:
        return Network(self.num_ranks, self.nodes, dict(self.capacity))

    def add(self, arc: Arc, units: int) -> None:
        if units > 0 and arc[0] != arc[1]:
            self.capacity[arc] = self.capacity.get(arc, 0) + units

    def take(self, arc: Arc, units: int) -> None:
        left = self.capacity[arc] - units
        if left < 0:
            raise AssertionError(f"arc {arc} over-used by {-left} units")
        if left:
            self.capacity[arc] = left
        else:
            del self.capacity[arc]

    def fabric(self) -> range:
        return range(self.num_ranks, self.num_vertices)

    def arcs_at(self, vertex: int) -> tuple[list[tuple[Arc, int]], list[tuple[Arc, int]]]:
        """(arcs into ``vertex``, arcs out of it), each with its capacity."""
        into = [(a, c) for a, c in self.capacity.items() if a[1] == vertex]
        out = [(a, c) for a, c in self.capacity.items() if a[0] == vertex]
        return into, out

    def merged(self) -> dict[tuple[int, int], int]:
        """Capacity per (tail, head), parallel arcs summed."""
        total: dict[tuple[int, int], int] = {}
        for (u, v, _), units in self.capacity.items():
            total[u, v] = total.get((u, v), 0) + units
        return total

    def via_names(self, arc: Arc) -> tuple[str, ...]:
        return tuple(str(self.nodes[f]) for f in arc[2])


def from_topology(topology: Topology, units_per_byte_per_s: float) -> Network:
    """Every link as an arc of ``floor(bandwidth * units_per_byte_per_s)`` units, at most
    :data:`BIG`: more than all the units there are is uncut either way, and links a
    trillion times faster than the slowest (whose rate sets the time) would overflow the
    flows' integers."""
    index = topology.node_index
    net = Network(topology.num_ranks, topology.nodes)
    for link in topology.links:
        units = min(link.bandwidth * units_per_byte_per_s * (1 + 1e-12), BIG)
        net.add((index[link.src], index[link.dst], ()), int(units))
    return net


def join(first: Arc, second: Arc, middle: int) -> Arc:
    """The arc ``first`` then ``second`` through fabric vertex ``middle``, loops cut out
    (a route that comes back to a vertex can skip the detour: it only frees links)."""
    path: list[int] = []
    for vertex in (*first[2], middle, *second[2]):
        if vertex in path:
            del path[path.index(vertex) + 1:]
        else:
            path.append(vertex)
    return first[0], second[1], tuple(path)


def split_off(net: Network, first: Arc, second: Arc, units: int) -> None:
    """Move ``units`` from ``first`` (into a fabric vertex) and ``second`` (out of it)
    onto one arc that passes the vertex (edge splitting)."""
    if units <= 0:
        return
    net.take(first, units)
    net.take(second, units)
    net.add(join(first, second, first[1]), units)


def fold_chains(net: Network) -> None:
    """Split off every fabric vertex with at most two neighbours completely (exact: such a
    vertex only forwards between them), and drop dead ends; repeat until none is left."""
    changed = True
    while changed:
        changed = False
        for vertex in net.fabric():
            into, out = net.arcs_at(vertex)
            near = {a[0] for a, _ in into} | {a[1] for a, _ in out}
            if not near or len(near) > 2:
                continue
            for a, _units in into:
                for b, _ in out:
                    if a[0] != b[1] and a in net.capacity and b in net.capacity:
                        split_off(net, a, b, min(net.capacity[a], net.capacity[b]))
            for arc, _ in [*into, *out]:
                net.capacity.pop(arc, None)
            changed = True


# --------------------------------------------------------------------------- flows


class FlowGraph:
    """Merged arcs of a network as arrays, plus extra vertices and arcs per max-flow."""

    def __init__(self, merged: Mapping[tuple[int, int], int], num_vertices: int) -> None:
        pairs = list(merged)
        self.size = num_vertices
        self.src = np.array([p[0] for p in pairs], dtype=np.int64)
        self.dst = np.array([p[1] for p in pairs], dtype=np.int64)
        self.cap = np.array([merged[p] for p in pairs], dtype=np.int64)

    def max_flow(self, source: int, sink: int, extra_vertices: int = 0,
                 extra: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]] = ()) -> int:
        """Max-flow value from ``source`` to ``sink`` with ``extra`` arcs (arrays of
        tails, heads, capacities) over ``extra_vertices`` more vertices."""
        srcs, dsts, caps = [self.src], [self.dst], [self.cap]
        for s, d, c in extra:
            srcs.append(s)
            dsts.append(d)
            caps.append(c)
        size = self.size + extra_vertices
        return max_flow(size, np.concatenate(srcs), np.concatenate(dsts),
                        np.concatenate(caps), source, sink)


def max_flow(size: int, src: np.ndarray, dst: np.ndarray, cap: np.ndarray, source: int,
             sink: int) -> int:
    """The max-flow value on arcs given as arrays (parallel arcs summed, capacities
    clipped at :data:`BIG`)."""
    keep = (src != dst) & (cap > 0)
    matrix = scipy.sparse.csr_array((cap[keep].astype(np.int64), (src[keep], dst[keep])),
                                    shape=(size, size))
    matrix.sum_duplicates()
    matrix.data = np.minimum(matrix.data, BIG).astype(np.int32)
    return int(scipy.sparse.csgraph.maximum_flow(matrix, source, sink).flow_value)


def arrays(pairs: Iterable[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tails, heads, capacities) arrays from triples."""
    rows = list(pairs)
    if not rows:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    s, d, c = zip(*rows)
    return (np.array(s, dtype=np.int64), np.array(d, dtype=np.int64),
            np.array(c, dtype=np.int64))
