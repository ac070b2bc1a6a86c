"""What the routing stage hands on: every chunk's hops, and how they were found."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from ccweave.synth.taccl.logical import LogicalTopology

Hop = tuple[int, int]
"""``(edge, parent hop)``: a chunk crosses ``edge``; ``parent`` indexes the hop that
brought it to the edge's source (-1: the chunk starts there)."""


@dataclass(frozen=True)
class Routing:
    """Stage 1's answer: the hops of every chunk, parents first, and how it was found.

    ``makespan_s`` is the model's makespan (loads and idle-machine times), a lower
    estimate of the schedule's time; ``status``, ``gap`` and ``seconds`` come from the
    solver, ``note`` says them in words. ``method`` names the routing (``trees`` or
    ``milp``); ``send_times`` (seconds, per chunk and hop) are the MILP's send times when
    it gave them. ``objective`` and ``warm_objective`` are the solver's objective at its
    answer and at its warm start, ``warm_makespan_s`` the warm start's makespan (the
    MILP's worth, measured), ``bound_s`` the LP bound on the makespan and ``binding`` the
    row (a link, a connection) that sets the warm start's makespan.
    """

    hops: tuple[tuple[Hop, ...], ...]
    makespan_s: float
    status: str
    gap: float
    seconds: float
    variables: int
    note: str
    method: str = "trees"
    send_times: tuple[tuple[float, ...], ...] | None = None
    objective: float | None = None
    warm_objective: float | None = None
    warm_makespan_s: float | None = None
    bound_s: float | None = None
    binding: str | None = None

    def report(self) -> dict[str, object]:
        """Facts for a schedule's metadata."""
        facts: dict[str, object] = {
            "method": self.method, "status": self.status, "gap": self.gap,
            "seconds": round(self.seconds, 3), "makespan_us": self.makespan_s * 1e6,
            "variables": self.variables, "note": self.note}
        if self.warm_makespan_s is not None:
            facts["warm_makespan_us"] = self.warm_makespan_s * 1e6
        if self.objective is not None:
            facts["objective"] = self.objective
        if self.warm_objective is not None:
            facts["warm_objective"] = self.warm_objective
        if self.bound_s is not None:
            facts["makespan_bound_us"] = self.bound_s * 1e6
        if self.binding is not None:
            facts["binding"] = self.binding
        return facts


def tree_hops(logical: LogicalTopology, source: int, edges: Sequence[int]) -> tuple[Hop, ...]:
    """``edges`` reachable from ``source`` as hops in breadth-first order, one way into
    each rank (the first listed)."""
    into: dict[int, int] = {}
    for e in edges:
        into.setdefault(logical.edges[e].dst, e)
    children: dict[int, list[int]] = {}
    for e in into.values():
        children.setdefault(logical.edges[e].src, []).append(e)
    hops: list[Hop] = []
    queue = deque([(source, -1)])
    seen = {source}
    while queue:
        u, parent = queue.popleft()
        for e in sorted(children.get(u, ())):
            v = logical.edges[e].dst
            if v in seen:
                continue
            seen.add(v)
            hops.append((e, parent))
            queue.append((v, len(hops) - 1))
    return tuple(hops)
