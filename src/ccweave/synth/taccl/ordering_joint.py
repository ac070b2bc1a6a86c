"""Routes and order at once: a MILP that picks every chunk's hops and the order of the
sends on every link together, for small sketches.

The routing stage bounds each link's load and each chunk's path on an idle machine, one
at a time, and the ordering stage then orders the routes it was handed: where the
routing makespan is reachable only by routes whose order the relaxation cannot see (one
NDv2, ``sk1-ndv2-n1``: trees of depth three, each hop on a double NVLink where it can),
neither stage finds them. This model is stage 2's list-scheduling model solved exactly
over every route the sketch allows:

- per chunk and allowed edge a binary ``x`` (sent) and a start ``s``; per chunk and rank
  an arrival ``a``; the makespan ``T``;
- every destination receives each chunk over exactly one edge (a relay that is not a
  destination forwards what it received); a send starts after its chunk arrived at its
  source and arrives ``alpha + beta`` later;
- two sends on one logical edge go one after another (the second starts when the first
  ends), and two sends through one physical link stream one after another (the second's
  bytes start when the first's end: ``s2 + alpha2 >= s1 + alpha1 + beta1``): a binary per
  pair of sends that may share one, as stage 2 (:mod:`.ordering`) serves them;
- ``enforce_ordering``: on a sender's internode edges its own chunks go first;
- objective: ``T``, then (weight 0.01) the mean arrival.

Every chunk has variables (no symmetry reduction: the order of images is not an image of
one order), so the model grows with the pairs of sends that share a link; the build
offers it only below a size (:data:`MAX_BINARIES`). It is warm-started from the best
order stage 2 found, so a solve stopped at its time limit is never worse than that
order, and its send times order the routes again exactly (heuristic ``solver-times``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ccweave.errors import SolverError
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.logical import LogicalTopology
from ccweave.synth.taccl.ordering import Ordering
from ccweave.synth.taccl.progress import Progress
from ccweave.synth.taccl.routing_milp import allowed_edges
from ccweave.synth.taccl.routing_result import Routing, tree_hops
from ccweave.synth.taccl.solver import DEFAULT_SETTINGS, Model, SolverSettings

US_PER_S = 1e6
METHOD = "joint"
"""The :attr:`Routing.method` of the joint model's answer."""
MAX_BINARIES = 1000
"""Largest joint model ``ordering=best`` solves (binaries: sends and pairs of sends that
may share a link). ``benchmarks/taccl.py --joint``: ``sk1-ndv2-n1`` (896) reaches its
routing makespan in 4.5-10 s on the shared 2-core host; no model of 1,260 to 11,840
binaries improved its start in 30 s."""
TIME_LIMIT_S = 20.0
"""Default solver seconds of one joint solve: twice the longest ``sk1-ndv2-n1`` took."""
ARRIVAL_WEIGHT = 0.01
"""Weight of the mean arrival time of chunks at their destinations beside ``T``."""
HORIZON_SLACK = 1e-6
"""Relative room above the warm start's makespan in the time variables' bounds."""


@dataclass(frozen=True)
class _Send:
    """A send the model may make: chunk ``chunk`` over logical edge ``edge``."""

    chunk: int
    edge: int


@dataclass(frozen=True)
class _Pair:
    """Sends ``first`` and ``second`` share an edge or a link: one streams after the
    other, ``gap`` microseconds from one's start to the other's (``first`` before:
    ``gap_after_first``; else ``gap_after_second``)."""

    first: int
    second: int
    gap_after_first: float
    gap_after_second: float


class _Sends:
    """The sends of one demand on one logical topology, and the pairs that may queue."""

    def __init__(self, logical: LogicalTopology, demand: Demand, chunk_bytes: float,
                 max_binaries: int | None = None, relay_hops: int = 1) -> None:
        self.logical = logical
        self.demand = demand
        edges = logical.edges
        self.sends = [_Send(c, e) for c in range(len(demand.chunks))
                      for e in allowed_edges(logical, demand, c, relay_hops)]
        self.index = {(s.chunk, s.edge): i for i, s in enumerate(self.sends)}
        self.cost = [edges[s.edge].seconds(chunk_bytes) * US_PER_S for s in self.sends]
        self.alpha = [edges[s.edge].alpha * US_PER_S for s in self.sends]
        self.pairs = self._pairs(None if max_binaries is None
                                 else max_binaries - len(self.sends))
        self.ordered = self._own_first()

    def _pairs(self, most: int | None) -> list[_Pair]:
        """The pairs of sends that may queue on an edge or a link; more than ``most``
        raise :class:`_TooLarge` (counting them all takes long on large sketches)."""
        edges = self.logical.edges
        by_resource: dict[tuple[str, int], list[int]] = defaultdict(list)
        for i, s in enumerate(self.sends):
            by_resource["edge", s.edge].append(i)
            for link in edges[s.edge].route:
                by_resource["link", link].append(i)
        gaps: dict[tuple[int, int], tuple[float, float]] = {}
        for (kind, _), members in by_resource.items():
            for k, p in enumerate(members):
                for q in members[k + 1:]:
                    sp, sq = self.sends[p], self.sends[q]
                    if sp.chunk == sq.chunk and edges[sp.edge].dst == edges[sq.edge].dst:
                        continue  # a chunk enters a rank once: never both
                    if kind == "edge":  # a connection: the next starts when one ends
                        gap = (self.cost[p], self.cost[q])
                    else:  # a link: the next one's bytes start when one's end
                        gap = (self.cost[p] - self.alpha[q], self.cost[q] - self.alpha[p])
                    old = gaps.get((p, q), gap)
                    gaps[p, q] = (max(old[0], gap[0]), max(old[1], gap[1]))
                    if most is not None and len(gaps) > most:
                        raise _TooLarge
        return [_Pair(p, q, *gap) for (p, q), gap in sorted(gaps.items())]

    def _own_first(self) -> list[tuple[int, int]]:
        """``enforce_ordering``: (own send, carried send) pairs on a sender's internode
        edges, the own one first."""
        logical, chunks = self.logical, self.demand.chunks
        if not logical.sketch.internode.enforce_ordering:
            return []
        on_edge: dict[int, list[int]] = defaultdict(list)
        for i, s in enumerate(self.sends):
            if logical.edges[s.edge].internode:
                on_edge[s.edge].append(i)
        found = []
        for e, members in on_edge.items():
            sender = logical.edges[e].src
            own = [i for i in members if chunks[self.sends[i].chunk].source == sender]
            carried = [i for i in members if chunks[self.sends[i].chunk].source != sender]
            found += [(o, c) for o in own for c in carried]
        return found

    @property
    def binaries(self) -> int:
        return len(self.sends) + len(self.pairs)


class _TooLarge(Exception):
    """The joint model would have more binaries than asked."""


def joint_binaries(logical: LogicalTopology, demand: Demand,
                   most: int = MAX_BINARIES, relay_hops: int = 1) -> int | None:
    """How many binaries the joint model of ``demand`` on ``logical`` has (the size that
    decides whether it is solved), or ``None`` when over ``most`` (not counted further)."""
    try:
        return _Sends(logical, demand, 1.0, most, relay_hops).binaries
    except _TooLarge:
        return None


def route_and_order(logical: LogicalTopology, demand: Demand, chunk_bytes: float,
                    incumbent: Ordering, *, floor_s: float = 0.0, relay_hops: int = 1,
                    settings: SolverSettings = DEFAULT_SETTINGS,
                    progress: Callable[[Progress], None] | None = None) -> Routing:
    """The joint model of the module docstring, warm-started from ``incumbent`` (stage 2's
    best order of some routing of the same demand); its hops and send times.

    ``floor_s`` is a known lower bound on the makespan (the routing MILP's LP bound: the
    routing model relaxes this one), which lets the solver stop once it is met;
    ``relay_hops`` the routing stage's (the routes a chunk may take, and the incumbent's)."""
    started = time.perf_counter()
    sends = _Sends(logical, demand, chunk_bytes, relay_hops=relay_hops)
    model, columns = _build(sends, incumbent, floor_s * US_PER_S)
    warm = _warm_values(sends, columns, incumbent, model.num_vars)
    if progress:
        progress(Progress("routing", f"joint routing and ordering: {model.num_vars} variables "
                                     f"({model.num_integers} binary), {model.num_rows} rows; "
                                     f"warm start {incumbent.makespan_s * US_PER_S:.4g} us "
                                     f"({incumbent.heuristic.value})"))
    try:
        result = model.solve(replace(settings, time_limit_s=max(
            settings.time_limit_s - (time.perf_counter() - started), 0.1)), warm, progress,
            "routing")
    except SolverError as error:
        raise SolverError(f"taccl joint routing and ordering with sketch "
                          f"{logical.sketch.source}: {error}") from None
    values = result.values
    if result.objective > model.cost_of(warm) * (1 + 1e-9):
        values = warm  # HiGHS ended on something worse than the order it was handed
    hops, times = _expand(sends, columns, values)
    makespan = float(values[columns.time]) / US_PER_S
    note = (f"{result.describe()}; {makespan * US_PER_S:.4g} us against the warm start's "
            f"{incumbent.makespan_s * US_PER_S:.4g} us")
    return Routing(hops, makespan, result.status, result.gap,
                   time.perf_counter() - started, model.num_vars, note, METHOD, times,
                   result.objective, model.cost_of(warm), incumbent.makespan_s)


@dataclass
class _Columns:
    time: int
    x: list[int]
    s: list[int]
    a: dict[tuple[int, int], int]
    y: list[int]
    big: float


def _build(sends: _Sends, incumbent: Ordering, floor: float) -> tuple[Model, _Columns]:
    logical, demand = sends.logical, sends.demand
    edges = logical.edges
    horizon = incumbent.makespan_s * US_PER_S * (1 + HORIZON_SLACK) + HORIZON_SLACK
    model = Model("taccl joint routing and ordering")
    count = len(sends.sends)
    time_col = model.add_vars(1, lower=min(floor, horizon), upper=horizon, cost=1.0)[0]
    x = list(model.add_vars(count, binary=True))
    s = list(model.add_vars(count, upper=horizon))
    arrivals = sum(len(ch.destinations) for ch in demand.chunks)
    a: dict[tuple[int, int], int] = {}
    for c, ch in enumerate(demand.chunks):
        for v in range(logical.num_ranks):
            if v != ch.source:
                weight = ARRIVAL_WEIGHT / arrivals if v in ch.destinations else 0.0
                a[c, v] = model.add_vars(1, upper=horizon, cost=weight)[0]
    big = horizon + max(sends.cost, default=0.0)
    columns = _Columns(time_col, x, s, a, [], big)
    into: dict[tuple[int, int], list[int]] = defaultdict(list)
    out: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, send in enumerate(sends.sends):
        edge = edges[send.edge]
        into[send.chunk, edge.dst].append(x[i])
        out[send.chunk, edge.src].append(x[i])
        source = demand.chunks[send.chunk].source
        if edge.src != source:  # leaves after it arrived
            model.add_row([s[i], a[send.chunk, edge.src]], [1.0, -1.0], lower=0.0)
        cost = sends.cost[i]  # arrives alpha + beta after it left, when sent
        model.add_row([a[send.chunk, edge.dst], s[i], x[i]], [1.0, -1.0, -(horizon + cost)],
                      lower=-horizon)
    for c, ch in enumerate(demand.chunks):
        for v in range(logical.num_ranks):
            if v == ch.source:
                continue
            cols = into[c, v]
            if v in ch.destinations:
                if not cols:
                    raise SolverError(f"taccl joint routing: the sketch "
                                      f"{logical.sketch.source} leaves no way to rank {v} "
                                      f"for a chunk of rank {ch.source}")
                model.add_row(cols, [1.0] * len(cols), 1.0, 1.0)
                model.add_row([a[c, v], time_col], [1.0, -1.0], upper=0.0)
            else:  # a relay forwards what it received, at most once
                model.add_row(cols, [1.0] * len(cols), upper=1.0)
                for col in out[c, v]:
                    model.add_row([col, *cols], [1.0] + [-1.0] * len(cols), upper=0.0)
    for pair in sends.pairs:  # y = 1: first before second
        p, q = pair.first, pair.second
        y = model.add_vars(1, binary=True)[0]
        columns.y.append(y)
        model.add_row([s[q], s[p], y, x[p], x[q]], [1.0, -1.0, -big, -big, -big],
                      lower=pair.gap_after_first - 3 * big)
        model.add_row([s[p], s[q], y, x[p], x[q]], [1.0, -1.0, big, -big, -big],
                      lower=pair.gap_after_second - 2 * big)
    for own, carried in sends.ordered:
        model.add_row([s[carried], s[own], x[own], x[carried]], [1.0, -1.0, -big, -big],
                      lower=sends.cost[own] - 2 * big)
    return model, columns


def _warm_values(sends: _Sends, columns: _Columns, incumbent: Ordering,
                 num_vars: int) -> np.ndarray:
    """``incumbent``'s hops, times and per-link order as values of the model."""
    values = np.zeros(num_vars)
    edges = sends.logical.edges
    start = np.zeros(len(sends.sends))
    used = np.zeros(len(sends.sends), dtype=bool)
    arrival: dict[tuple[int, int], float] = {}
    for k, send in enumerate(incumbent.sends):
        i = sends.index.get((send.chunk, send.edge))
        if i is None:
            raise AssertionError("taccl: the incumbent uses an edge the joint model "
                                 "does not allow")  # a bug, not input
        used[i] = True
        start[i] = incumbent.start[k] * US_PER_S
        arrival[send.chunk, edges[send.edge].dst] = incumbent.finish[k] * US_PER_S
    for (c, v), col in columns.a.items():
        values[col] = arrival.get((c, v), 0.0)
    for i, send in enumerate(sends.sends):
        values[columns.x[i]] = float(used[i])
        if not used[i]:  # any time after its chunk reached the edge's source
            source = sends.demand.chunks[send.chunk].source
            src = edges[send.edge].src
            start[i] = 0.0 if src == source else arrival.get((send.chunk, src), 0.0)
        values[columns.s[i]] = start[i]
    for pair, y in zip(sends.pairs, columns.y):
        values[y] = float(start[pair.first] <= start[pair.second])
    values[columns.time] = max(arrival.values(), default=0.0)
    return values


def _expand(sends: _Sends, columns: _Columns, values: np.ndarray
            ) -> tuple[tuple, tuple[tuple[float, ...], ...]]:
    """Every chunk's hops (parents first) and their start times (seconds)."""
    logical, demand = sends.logical, sends.demand
    by_chunk: dict[int, list[int]] = defaultdict(list)
    for i, send in enumerate(sends.sends):
        if values[columns.x[i]] > 0.5:
            by_chunk[send.chunk].append(i)
    hops: list[tuple] = []
    times: list[tuple[float, ...]] = []
    for c, ch in enumerate(demand.chunks):
        chosen = sorted(by_chunk[c], key=lambda i: values[columns.s[i]])
        start = {sends.sends[i].edge: float(values[columns.s[i]]) / US_PER_S for i in chosen}
        tree = tree_hops(logical, ch.source, [sends.sends[i].edge for i in chosen])
        if not set(ch.destinations) <= {logical.edges[e].dst for e, _ in tree}:
            raise AssertionError("taccl: the joint model left a destination unreached")
        hops.append(tree)
        times.append(tuple(start[e] for e, _ in tree))
    return tuple(hops), tuple(times)
