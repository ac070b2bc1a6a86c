"""Stage 2 by insertion: list scheduling that fills idle gaps, improved by passes.

The append-only heuristics of :mod:`~ccweave.synth.taccl.ordering` put each send after
the last one on its connection and links, so a link that waits for a late chunk stays
idle even when a send placed after it was ready in time. Here each send is placed at the
earliest time at or after its chunk arrives at which its connection and every link of
its route are idle for as long as it needs them (a connection for the whole send, a link
from the send's latency on, as in the append-only model).

The first pass takes, among the ready sends, the one with the longest way still to go,
ties to the earliest start. The way to go counts a fan-out's serialisation: children that
leave through the same first link stream one after another, so a chunk that a relay
sends on to 15 ranks goes before one it sends on to 8. Then, a few times, the schedule is
justified backwards (each send, latest finish first, placed as late as its chunk's next
hops and the idle gaps of its resources allow, before the makespan) and scheduled forward
again with the backward starts as priorities; the fastest pass is kept. Limits: a greedy
order, no bound on its distance to the best; ``enforce_ordering`` is kept by the forward
passes only (the backward ones set priorities).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ccweave.synth.taccl.logical import LogicalTopology
from ccweave.synth.taccl.ordering import (
    _EPS,
    Heuristic,
    Ordering,
    Send,
    _OwnFirst,
    _sources,
    sends_of,
)
from ccweave.synth.taccl.routing_result import Routing

PASSES = 4
"""Backward-forward passes after the first forward one (each keeps or betters the best)."""


class _Busy:
    """One resource's busy intervals, kept sorted and disjoint."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def fit(self, t: float, length: float) -> float:
        """The earliest time at or after ``t`` from which it is idle for ``length``."""
        k = bisect.bisect_right(self.ends, t + _EPS)
        while k < len(self.starts) and self.starts[k] < t + length - _EPS:
            t = max(t, self.ends[k])
            k += 1
        return t

    def fit_before(self, end: float, length: float) -> float:
        """The latest end at or before ``end`` of an idle span of ``length``."""
        k = bisect.bisect_left(self.starts, end - _EPS) - 1
        while k >= 0 and self.ends[k] > end - length + _EPS:
            end = min(end, self.starts[k])
            k -= 1
        return end

    def take(self, t: float, end: float) -> None:
        k = bisect.bisect_left(self.starts, t)
        self.starts.insert(k, t)
        self.ends.insert(k, end)


@dataclass(frozen=True)
class _Problem:
    """The sends and what scheduling them needs."""

    logical: LogicalTopology
    sends: tuple[Send, ...]
    duration: np.ndarray
    alpha: np.ndarray
    children: tuple[tuple[int, ...], ...]

    def resources(self, i: int) -> list[tuple[tuple[str, int], float, float]]:
        """(resource, offset from the send's start, length) of each resource send ``i``
        holds: its connection, then each link of its route."""
        edge = self.logical.edges[self.sends[i].edge]
        d, a = float(self.duration[i]), float(self.alpha[i])
        return [(("edge", self.sends[i].edge), 0.0, d),
                *((("link", link), a, d - a) for link in edge.route)]


def insertion(logical: LogicalTopology, routing: Routing, chunk_bytes: float) -> Ordering:
    """Stage 2 with gap filling and backward-forward passes; see the module docstring."""
    sends = sends_of(routing)
    edges = logical.edges
    children: list[list[int]] = [[] for _ in sends]
    for i, s in enumerate(sends):
        if s.parent >= 0:
            children[s.parent].append(i)
    problem = _Problem(logical, sends,
                       np.array([edges[s.edge].seconds(chunk_bytes) for s in sends]),
                       np.array([edges[s.edge].alpha for s in sends]),
                       tuple(tuple(c) for c in children))
    best = _forward(problem, -_way_to_go(problem))
    current = best
    for _ in range(PASSES):
        current = _forward(problem, _backward(problem, current))
        if current.makespan_s < best.makespan_s - _EPS:
            best = current
    return best


def _way_to_go(p: _Problem) -> np.ndarray:
    """Each send's longest way still to go, its children that share a first link
    streaming one after another (the longest way first)."""
    remaining = p.duration.copy()
    edges = p.logical.edges
    for i in range(len(p.sends) - 1, -1, -1):  # children come after parents
        by_port: dict[int, list[int]] = {}
        for c in p.children[i]:
            by_port.setdefault(edges[p.sends[c].edge].route[0], []).append(c)
        tail = 0.0
        for group in by_port.values():
            before = 0.0
            for c in sorted(group, key=lambda c: -remaining[c]):
                tail = max(tail, before + remaining[c])
                before += p.duration[c] - p.alpha[c]
        remaining[i] += tail
    return remaining


def _forward(p: _Problem, priority: Sequence[float]) -> Ordering:
    """Ready sends, the least ``priority`` first (ties to the earliest start), each at
    its earliest fit; ``enforce_ordering`` kept."""
    sends = p.sends
    count = len(sends)
    gate = _OwnFirst(p.logical, sends, _sources(sends, p.logical.edges))
    own_end: dict[int, float] = {}  # per gated edge: when its sender's own chunks ended
    ready = np.zeros(count)
    start = np.zeros(count)
    busy: dict[tuple[str, int], _Busy] = {}

    def earliest(i: int) -> float:
        t = ready[i] if gate.own[i] else max(ready[i], own_end.get(sends[i].edge, 0.0))
        held = [(busy[r], offset, length) for r, offset, length in p.resources(i)
                if r in busy]
        while True:
            moved = t
            for b, offset, length in held:
                moved = max(moved, b.fit(moved + offset, length) - offset)
            if moved <= t + _EPS:
                return t
            t = moved

    heap = [(priority[i], 0.0, i) for i, s in enumerate(sends) if s.parent < 0]
    heapq.heapify(heap)
    while heap:
        _, estimate, i = heapq.heappop(heap)
        if not gate.may_go(i):
            continue  # held until its sender's own chunks went; the gate releases it
        t = earliest(i)
        if t > estimate + _EPS:  # a later start may lose a tie it won: ask again
            heapq.heappush(heap, (priority[i], t, i))
            continue
        start[i] = t
        end = t + p.duration[i]
        for r, offset, _ in p.resources(i):
            busy.setdefault(r, _Busy()).take(t + offset, end)
        if gate.own[i]:
            own_end[sends[i].edge] = max(own_end.get(sends[i].edge, 0.0), end)
        for c in p.children[i]:
            ready[c] = end
        for c in [*p.children[i], *gate.went(i)]:
            t = earliest(c)
            heapq.heappush(heap, (priority[c], t, c))
    return _ordering(p, start)


def _backward(p: _Problem, done: Ordering) -> np.ndarray:
    """The starts of ``done`` justified backwards: latest finish first, each send as
    late as its children's starts, the makespan and its resources' gaps allow."""
    start = np.zeros(len(p.sends))
    busy: dict[tuple[str, int], _Busy] = {}
    for i in sorted(range(len(p.sends)), key=lambda k: (-done.finish[k], -k)):
        end = min([done.makespan_s, *(start[c] for c in p.children[i])])
        held = [(busy.setdefault(r, _Busy()), offset, length)
                for r, offset, length in p.resources(i)]
        while True:  # every resource's span ends with the send
            moved = end
            for b, _, length in held:
                moved = min(moved, b.fit_before(moved, length))
            if moved >= end - _EPS:
                break
            end = moved
        start[i] = end - p.duration[i]
        for b, offset, _ in held:
            b.take(start[i] + offset, end)
    return start


def _ordering(p: _Problem, start: np.ndarray) -> Ordering:
    """The orders per connection and per link (by stream start) of a placement."""
    edge_order: dict[int, list[int]] = {}
    link_order: dict[int, list[int]] = {}
    for i in sorted(range(len(p.sends)), key=lambda k: (start[k], k)):
        edge_order.setdefault(p.sends[i].edge, []).append(i)
        for link in p.logical.edges[p.sends[i].edge].route:
            link_order.setdefault(link, []).append(i)
    for sequence in link_order.values():
        sequence.sort(key=lambda k: (start[k] + p.alpha[k], k))
    return Ordering(p.sends, start, start + p.duration,
                    {e: tuple(v) for e, v in edge_order.items()},
                    {lk: tuple(v) for lk, v in link_order.items()}, Heuristic.INSERTION)
