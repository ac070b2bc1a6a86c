"""Stage 2, ordering: a greedy order of the chunks on every link and switch port.

Every hop of every routed chunk is a *send*. Sends are list-scheduled on a model where
each physical link (an NVLink, a switch port, a NIC) streams one send at a time, and
a send holds every link of its route while it streams (cut-through): among the sends
that can start, the one that can start earliest goes first, and among those the one
with the most work still downstream of it (TACCL's heuristic: chunks with longer
remaining routes first). The result is an order per logical edge and per physical
link, with estimated times that the contiguity stage refines.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ccweave.synth.taccl.logical import LogicalTopology
from ccweave.synth.taccl.routing import Routing

_EPS = 1e-15


@dataclass(frozen=True, slots=True)
class Send:
    """Chunk ``chunk`` crosses logical ``edge``; ``parent`` is the send that brought it
    to the edge's source (-1: it starts there)."""

    chunk: int
    edge: int
    parent: int


@dataclass(frozen=True)
class Ordering:
    """Stage 2's answer: every send, its estimated start and finish (seconds), and the
    order of sends on each logical edge and each physical link."""

    sends: tuple[Send, ...]
    start: np.ndarray
    finish: np.ndarray
    edge_order: dict[int, tuple[int, ...]]
    link_order: dict[int, tuple[int, ...]]

    @property
    def makespan_s(self) -> float:
        return float(self.finish.max()) if len(self.finish) else 0.0


def sends_of(routing: Routing) -> tuple[Send, ...]:
    """Every hop of every chunk as a send, parents before children."""
    sends: list[Send] = []
    for chunk, hops in enumerate(routing.hops):
        base = len(sends)
        for edge, parent in hops:
            sends.append(Send(chunk, edge, -1 if parent < 0 else base + parent))
    return tuple(sends)


def order(logical: LogicalTopology, routing: Routing, chunk_bytes: float) -> Ordering:
    """List-schedule every send greedily; see the module docstring."""
    sends = sends_of(routing)
    count = len(sends)
    edges = logical.edges
    duration = np.array([edges[s.edge].seconds(chunk_bytes) for s in sends])
    alpha = np.array([edges[s.edge].alpha for s in sends])
    children: list[list[int]] = [[] for _ in range(count)]
    for i, s in enumerate(sends):
        if s.parent >= 0:
            children[s.parent].append(i)
    remaining = duration.copy()
    for i in range(count - 1, -1, -1):  # children come after parents
        if children[i]:
            remaining[i] += max(remaining[c] for c in children[i])
    ready = np.zeros(count)
    start = np.zeros(count)
    finish = np.zeros(count)
    edge_free: dict[int, float] = {}
    link_free: dict[int, float] = {}

    def earliest(i: int) -> float:
        s = sends[i]
        t = max(ready[i], edge_free.get(s.edge, 0.0))
        for link in edges[s.edge].route:
            t = max(t, link_free.get(link, 0.0) - alpha[i])
        return t

    heap = [(0.0, -remaining[i], i) for i, s in enumerate(sends) if s.parent < 0]
    heapq.heapify(heap)
    edge_order: dict[int, list[int]] = {}
    link_order: dict[int, list[int]] = {}
    while heap:
        key, priority, i = heapq.heappop(heap)
        t = earliest(i)
        if t > key + _EPS:
            heapq.heappush(heap, (t, priority, i))
            continue
        s = sends[i]
        start[i], finish[i] = t, t + duration[i]
        edge_free[s.edge] = finish[i]
        edge_order.setdefault(s.edge, []).append(i)
        for link in edges[s.edge].route:
            link_free[link] = finish[i]
            link_order.setdefault(link, []).append(i)
        for c in children[i]:
            ready[c] = finish[i]
            heapq.heappush(heap, (earliest(c), -remaining[c], c))
    return Ordering(sends, start, finish, {e: tuple(v) for e, v in edge_order.items()},
                    {lk: tuple(v) for lk, v in link_order.items()})
