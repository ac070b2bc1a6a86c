"""How fast any schedule of given routes can be: a lower bound on the makespan once the
routing stage has chosen every chunk's hops.

The routing stage's makespan bounds each link's load and each chunk's path on an idle
machine, one at a time (TACCL's relaxation). A schedule must also fill and drain: what
crosses a shared link late still has its way to go, and what a link carries second
cannot leave before the first. Per physical link this is Jackson's one-machine bound
(the earliest release among some of its sends, their streaming one after another, and
the least way still to go after them); a send's release is its path from its chunk's
source on an idle machine, and, where its chunk crossed a busier link before (a NIC a
GPU pair shares), the time that link can have handed it over: of ``m`` chunks crossing
a link, the ``j``-th to get across does so no sooner than the ``j``-th in the best
order. Chunks are whole, as the MSCCL XML sends them; links may be shared fairly or
serially, the bound holds for both (the simulator's and TACCL's models).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ccweave.synth.taccl.logical import LogicalTopology
from ccweave.synth.taccl.ordering import sends_of
from ccweave.synth.taccl.routing_result import Routing


@dataclass(frozen=True)
class OrderBound:
    """No schedule of the routes finishes before ``seconds``; ``link`` sets it
    (``src->dst``), or ``path`` when a chunk's way on an idle machine does."""

    seconds: float
    link: str


def order_bound(logical: LogicalTopology, routing: Routing, chunk_bytes: float) -> OrderBound:
    """The bound of the module docstring for ``routing``'s hops."""
    sends = sends_of(routing)
    edges, topology = logical.edges, logical.topology
    cost = [edges[s.edge].seconds(chunk_bytes) for s in sends]
    alpha = [edges[s.edge].alpha for s in sends]
    head = [0.0] * len(sends)
    parent_of = [s.parent for s in sends]
    for i, p in enumerate(parent_of):  # parents come first
        head[i] = 0.0 if p < 0 else head[p] + cost[p]
    tail = [0.0] * len(sends)
    for i in range(len(sends) - 1, -1, -1):
        p = parent_of[i]
        if p >= 0:
            tail[p] = max(tail[p], cost[i] + tail[i])
    best = OrderBound(max((head[i] + cost[i] + tail[i] for i in range(len(sends))),
                          default=0.0), "path")
    users: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(sends):
        for link in edges[s.edge].route:
            users[link].append(i)
    stream = {link: chunk_bytes / topology.links[link].bandwidth for link in users}
    handed = {link: _turns(sorted(head[i] + alpha[i] for i in members), stream[link])
              for link, members in users.items()}  # the j-th send across, at the earliest
    for link, members in users.items():
        least_tail = min(tail[i] + cost[i] - alpha[i] - stream[link] for i in members)
        plain = {i: head[i] + alpha[i] for i in members}
        dealt = sorted(_upstream(link, members, sends, edges, handed, head, cost, alpha,
                                 parent_of), key=lambda d: -max(d.values()))
        combined = dict(plain)
        taken: set[int] = set()
        for releases in dealt:  # turns on different links are dealt independently
            if taken.isdisjoint(releases):
                taken.update(releases)
                combined.update(releases)
        for releases in (plain, combined):
            value = _jackson(list(releases.values()), stream[link], least_tail)
            if value > best.seconds:
                lk = topology.links[link]
                best = OrderBound(value, f"{lk.src}->{lk.dst}")
    return best


def _turns(releases: list[float], stream: float) -> list[float]:
    """When the ``j``-th send can be across a link at the earliest: in release order, one
    after another (sorted ``releases``; every send streams for ``stream``)."""
    done, times = 0.0, []
    for release in releases:
        done = max(done, release) + stream
        times.append(done)
    return times


def _jackson(releases: list[float], stream: float, least_tail: float) -> float:
    """Jackson's one-machine bound: over every release ``r``, ``r`` plus the streaming of
    the sends released at ``r`` or later, plus the least tail."""
    best, work = 0.0, 0.0
    for r in sorted(releases, reverse=True):
        work += stream
        best = max(best, r + work + least_tail)
    return best


def _upstream(link, members, sends, edges, handed, head, cost, alpha, parent_of):
    """For each link ``up`` the chunks of ``link``'s sends crossed before (by the send
    ``a`` that crossed it), the releases of those of ``link``'s sends with ``up``'s turns
    dealt to the crossings: distinct sends on ``up`` get distinct turns, so the ``j``-th
    of them gets across no sooner than ``handed[up][j]``; the crossings with the most
    sends below them on ``link`` take the first turns, which is the least bound of every
    dealing (the sends below one crossing share its release, so the dealing that gives the
    most of them the earliest turns lowers every term of Jackson's bound at once). Yields
    ``{send: release}``."""
    crossing: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i in members:
        a = parent_of[i]
        while a >= 0:
            for up in edges[sends[a].edge].route:
                if up != link:
                    crossing[up][a].append(i)
            a = parent_of[a]
    for up, below in crossing.items():
        if len(below) < 2:
            continue
        chosen = set()
        for i_list in below.values():
            chosen.update(i_list)
        if len(chosen) != sum(len(v) for v in below.values()):
            continue  # a chunk crossed ``up`` twice on its way here: no dealing
        lag = min(head[i] - (head[a] + cost[a]) for a, i_list in below.items()
                  for i in i_list)
        turns = handed[up]
        least_alpha = min(alpha[i] for i in chosen)
        releases = {}
        dealt = sorted(below.items(), key=lambda item: -len(item[1]))
        for turn, (_, i_list) in enumerate(dealt):
            for i in i_list:  # not max'ed with the send's own path: then no dealing is
                releases[i] = turns[turn] + lag + least_alpha  # surely the least bound
        yield releases
