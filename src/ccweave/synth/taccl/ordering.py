"""Stage 2, ordering: a greedy order of the chunks on every link and switch port.

Every hop of every routed chunk is a *send*. Sends are list-scheduled on a model where
each physical link (an NVLink, a switch port, a NIC) streams one send at a time, and
a send holds every link of its route while it streams (cut-through). Which send goes
next is TACCL's choice among several heuristics (:class:`Heuristic`, named here instead
of TACCL's numbers); the build tries them and keeps the one whose schedule is fastest.
With the sketch's ``enforce_ordering``, a sender's own chunks go first on its internode
connections. The result is an order per logical edge and per physical link, with
estimated times that the contiguity stage refines.
"""

from __future__ import annotations

import enum
import heapq
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ccweave.synth.taccl.logical import LogicalTopology
from ccweave.synth.taccl.routing_result import Routing

_EPS = 1e-15


class Heuristic(str, enum.Enum):
    """Which ready send goes next (TACCL's heuristics, ``heuristic_ordering.py``)."""

    EARLIEST_START = "earliest-start"
    """The send that can start earliest; ties to the chunk with the longest way still
    to go (TACCL's heuristic 15)."""
    LONGEST_REMAINING = "longest-remaining"
    """The chunk with the longest way still to go, at the earliest time it can start
    (TACCL's heuristic 10, its choice for switched nodes)."""
    OWN_NODE_FIRST = "own-node-first"
    """The earliest start; ties to chunks still in their home node, then to the longest
    way to go (TACCL's heuristic 14, its choice for multi-node NVLink machines)."""
    LONGEST_SOURCES_FIRST = "longest-remaining-sources-first"
    """The longest way still to go; ties to the earliest start, then to sends leaving the
    rank the chunk started at (TACCL's heuristic 11)."""
    LONGEST_OWN_NODE = "longest-remaining-own-node"
    """The longest way still to go; ties to the earliest start, then to chunks still in
    their home node (TACCL's heuristic 13)."""
    BACKWARD = "backward"
    """Scheduled backwards from the last send: each link takes, latest first, the send
    that can end latest, the last hops of the paths before the hops that feed them, ties
    to the chunk with the least way to go and the longest way travelled (TACCL's
    heuristic 5, its choice for one-node NVLink sketches)."""
    INSERTION = "longest-remaining-insertion"
    """The longest way still to go (a relay's fan-out through one port counted one send
    after another), ties to the earliest start, each send placed in the earliest idle gap
    of its connection and links that fits it after its chunk arrived, then improved by
    backward-forward passes (:mod:`~ccweave.synth.taccl.ordering_insertion`; not one of
    TACCL's: its heuristics append to a link and never fill an idle gap)."""
    SOLVER_TIMES = "solver-times"
    """The routing MILP's send times, ties to the longest way to go (the order TACCL's
    routing stage hands on); only after the MILP routing."""

    @property
    def time_driven(self) -> bool:
        """Whether the send that can start earliest is taken (else: the highest priority,
        whenever it can start)."""
        return self in (Heuristic.EARLIEST_START, Heuristic.OWN_NODE_FIRST)

    @property
    def taccl_number(self) -> int | None:
        """The heuristic's number in TACCL's ``heuristic_ordering.py`` (``None``: the
        routing MILP's own times, which TACCL's numbered heuristics sort by first, or
        insertion, which is not TACCL's)."""
        return _TACCL_NUMBERS.get(self)


_TACCL_NUMBERS = {Heuristic.EARLIEST_START: 15, Heuristic.LONGEST_REMAINING: 10,
                  Heuristic.OWN_NODE_FIRST: 14, Heuristic.LONGEST_SOURCES_FIRST: 11,
                  Heuristic.LONGEST_OWN_NODE: 13, Heuristic.BACKWARD: 5}


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
    heuristic: Heuristic = Heuristic.EARLIEST_START

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


def heuristics_for(routing: Routing) -> tuple[Heuristic, ...]:
    """The heuristics that apply to ``routing`` (solver times only when it has them)."""
    return tuple(h for h in Heuristic
                 if h is not Heuristic.SOLVER_TIMES or routing.send_times is not None)


def order(logical: LogicalTopology, routing: Routing, chunk_bytes: float,
          heuristic: Heuristic = Heuristic.EARLIEST_START) -> Ordering:
    """List-schedule every send by ``heuristic``; see the module docstring."""
    if heuristic is Heuristic.SOLVER_TIMES and routing.send_times is None:
        raise ValueError("the solver-times ordering needs the MILP routing's send times")
    if heuristic is Heuristic.BACKWARD:
        return _backward(logical, routing, chunk_bytes)
    if heuristic is Heuristic.INSERTION:
        from ccweave.synth.taccl.ordering_insertion import insertion  # it imports this

        return insertion(logical, routing, chunk_bytes)
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
    source = _sources(sends, edges)
    own_node = np.array([0 if not edges[s.edge].internode
                         and logical.node_of[source[i]] == logical.node_of[edges[s.edge].src]
                         else 1 for i, s in enumerate(sends)])
    solver = np.zeros(count)
    if heuristic is Heuristic.SOLVER_TIMES:
        solver = np.array([t for times in routing.send_times or () for t in times])

    def key(i: int, t: float) -> tuple:
        if heuristic is Heuristic.EARLIEST_START:
            return (t, -remaining[i], i)
        if heuristic is Heuristic.OWN_NODE_FIRST:
            return (t, own_node[i], -remaining[i], i)
        if heuristic is Heuristic.LONGEST_REMAINING:
            return (-remaining[i], t, i)
        if heuristic is Heuristic.LONGEST_SOURCES_FIRST:
            return (-remaining[i], t, sends[i].parent >= 0, i)
        if heuristic is Heuristic.LONGEST_OWN_NODE:
            return (-remaining[i], t, own_node[i], i)
        return (solver[i], -remaining[i], t, i)

    gate = _OwnFirst(logical, sends, source)
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

    heap = [(key(i, 0.0), 0.0, i) for i, s in enumerate(sends) if s.parent < 0]
    heapq.heapify(heap)
    edge_order: dict[int, list[int]] = {}
    link_order: dict[int, list[int]] = {}
    while heap:
        _, estimate, i = heapq.heappop(heap)
        if not gate.may_go(i):
            continue  # held until its sender's own chunks went; the gate releases it
        t = earliest(i)
        if heuristic.time_driven and t > estimate + _EPS:
            heapq.heappush(heap, (key(i, t), t, i))
            continue
        s = sends[i]
        start[i], finish[i] = t, t + duration[i]
        edge_free[s.edge] = finish[i]
        edge_order.setdefault(s.edge, []).append(i)
        for link in edges[s.edge].route:
            link_free[link] = finish[i]
            link_order.setdefault(link, []).append(i)
        released = [*children[i], *gate.went(i)]
        for c in children[i]:
            ready[c] = finish[i]
        for c in released:
            t = earliest(c)
            heapq.heappush(heap, (key(c, t), t, c))
    assert all(len(order) for order in edge_order.values())
    return Ordering(sends, start, finish, {e: tuple(v) for e, v in edge_order.items()},
                    {lk: tuple(v) for lk, v in link_order.items()}, heuristic)


def _backward(logical: LogicalTopology, routing: Routing, chunk_bytes: float) -> Ordering:
    """TACCL's heuristic 5: list scheduling in reverse time. A send may be placed once
    every send its chunk makes from where it lands is placed; it ends no later than those
    start, and streams on each link of its route (and uses its connection) before
    whatever was placed there already. Among the sends that may be placed, the one that
    can end latest goes; ties to the fewest hops left below it, the least way to go and
    the longest way travelled. Times are then shifted to start at zero."""
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
    hops_below = np.zeros(count, dtype=int)
    for i in range(count - 1, -1, -1):
        if children[i]:
            remaining[i] += max(remaining[c] for c in children[i])
            hops_below[i] = 1 + max(hops_below[c] for c in children[i])
    travelled = np.zeros(count)
    for i, s in enumerate(sends):
        if s.parent >= 0:
            travelled[i] = travelled[s.parent] + duration[s.parent]
    latest = np.zeros(count)  # the latest end each send may have, from its children
    edge_first: dict[int, float] = {}  # earliest start placed on each connection
    link_first: dict[int, float] = {}  # earliest stream start placed on each link

    def latest_end(i: int) -> float:
        s = sends[i]
        t = min(latest[i], edge_first.get(s.edge, 0.0))
        for link in edges[s.edge].route:
            t = min(t, link_first.get(link, 0.0))
        return t

    def key(i: int, t: float) -> tuple:
        return (-t, hops_below[i], remaining[i], -travelled[i], i)

    waiting = [len(c) for c in children]
    carried = _carried_last(logical, sends)  # enforce_ordering, turned around
    for i, held_by in carried.items():
        waiting[i] += held_by
    heap = [(key(i, 0.0), 0.0, i) for i in range(count) if not waiting[i]]
    heapq.heapify(heap)
    start = np.zeros(count)
    finish = np.zeros(count)
    placed: list[int] = []
    own_waiting: dict[int, list[int]] = {}
    for i in carried:
        own_waiting.setdefault(sends[i].edge, []).append(i)
    carried_left = {e: sum(1 for k, s in enumerate(sends) if s.edge == e and k not in carried)
                    for e in own_waiting}
    while heap:
        _, estimate, i = heapq.heappop(heap)
        t = latest_end(i)
        if t < estimate - _EPS:
            heapq.heappush(heap, (key(i, t), t, i))
            continue
        s = sends[i]
        finish[i], start[i] = t, t - duration[i]
        placed.append(i)
        if s.edge in carried_left and i not in carried:
            carried_left[s.edge] -= 1
            if not carried_left[s.edge]:
                for own in own_waiting[s.edge]:
                    waiting[own] -= 1
                    if not waiting[own]:
                        t = latest_end(own)
                        heapq.heappush(heap, (key(own, t), t, own))
        edge_first[s.edge] = start[i]
        for link in edges[s.edge].route:
            link_first[link] = start[i] + alpha[i]
        if s.parent >= 0:
            p = s.parent
            latest[p] = min(latest[p], start[i]) if waiting[p] < len(children[p]) \
                else start[i]
            waiting[p] -= 1
            if not waiting[p]:
                t = latest_end(p)
                heapq.heappush(heap, (key(p, t), t, p))
    shift = -float(start.min()) if count else 0.0
    start += shift
    finish += shift
    edge_order: dict[int, list[int]] = {}
    link_order: dict[int, list[int]] = {}
    for i in reversed(placed):
        edge_order.setdefault(sends[i].edge, []).append(i)
        for link in edges[sends[i].edge].route:
            link_order.setdefault(link, []).append(i)
    return Ordering(sends, start, finish, {e: tuple(v) for e, v in edge_order.items()},
                    {lk: tuple(v) for lk, v in link_order.items()}, Heuristic.BACKWARD)


def _carried_last(logical: LogicalTopology, sends: tuple[Send, ...]) -> dict[int, int]:
    """``enforce_ordering`` for scheduling in reverse: each own send on a sender's
    internode edge that also carries others' chunks, and 1 (it waits for them to be
    placed, since they go after it)."""
    if not logical.sketch.internode.enforce_ordering:
        return {}
    source = _sources(sends, logical.edges)
    own: dict[int, list[int]] = {}
    carried: set[int] = set()
    for i, s in enumerate(sends):
        edge = logical.edges[s.edge]
        if edge.internode:
            if source[i] == edge.src:
                own.setdefault(s.edge, []).append(i)
            else:
                carried.add(s.edge)
    return {i: 1 for e, members in own.items() if e in carried for i in members}


def _sources(sends: tuple[Send, ...], edges) -> list[int]:
    """The rank each send's chunk started at."""
    source = [0] * len(sends)
    for i, s in enumerate(sends):
        source[i] = edges[s.edge].src if s.parent < 0 else source[s.parent]
    return source


class _OwnFirst:
    """``enforce_ordering``: on an internode edge of a sender, the chunks that started at
    the sender go before the ones it carries for others."""

    def __init__(self, logical: LogicalTopology, sends: tuple[Send, ...],
                 source: list[int]) -> None:
        self.pending: dict[int, int] = defaultdict(int)
        self.held: dict[int, list[int]] = defaultdict(list)
        self.own = [False] * len(sends)
        self.sends = sends
        if not logical.sketch.internode.enforce_ordering:
            self.active = False
            return
        self.active = True
        for i, s in enumerate(sends):
            edge = logical.edges[s.edge]
            if edge.internode and source[i] == edge.src:
                self.own[i] = True
                self.pending[s.edge] += 1

    def may_go(self, i: int) -> bool:
        if not self.active or self.own[i] or not self.pending.get(self.sends[i].edge):
            return True
        self.held[self.sends[i].edge].append(i)
        return False

    def went(self, i: int) -> list[int]:
        """Sends released because ``i`` went."""
        if not self.active or not self.own[i]:
            return []
        edge = self.sends[i].edge
        self.pending[edge] -= 1
        return self.held.pop(edge, []) if self.pending[edge] == 0 else []
