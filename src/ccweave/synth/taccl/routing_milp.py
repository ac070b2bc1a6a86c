"""Stage 1, routing: TACCL's path encoding as a MILP on HiGHS.

Per chunk and allowed logical edge a binary ``x`` (the chunk crosses the edge) and a
continuous send time ``s``; per chunk and rank its arrival ``a`` (TACCL's ``start``); the
makespan ``T``. One representative chunk per symmetry orbit carries variables, its
images use the images of its edges at the same times (TACCL states the symmetry as
equalities; substituting them leaves a model the size of one orbit representative).

- Delivery: every destination receives the chunk over exactly one edge; a relay that is
  not a destination (alltoall) forwards what it received; a chunk leaves a rank only
  after it arrived (``s >= a(src)``) and arrives an edge's ``alpha + beta`` later
  (``a(dst) >= s + cost`` when sent, big-M otherwise); destinations arrive by ``T``.
- Relay relaxation (TACCL's internode sketch): a chunk crosses nodes only over the
  sketch's connections, leaving its home node from a sender that carries it; every other
  node is entered at least once (allgather: twice when a NIC has time to spare and a
  switch port has none). With ``relay_hops`` above 1, chunks may cross
  further nodes through relays in nodes they already reached (multi-hop relays).
- Link rows: every physical link's load (the bytes of every chunk whose route crosses
  it, over the orbit) fits in ``T``; switch ports and shared NICs are physical links, so
  these are TACCL's switch in/out rows. Every logical edge carries its chunks one after
  another, each paying ``alpha + beta``. Per chunk and rank, the sends through one shared
  port go one after another after the chunk arrived (TACCL's per-chunk switch row).
- ``enforce_ordering``: on a sender's internode connections, its own chunks go first.
- Objective: ``T``, then the mean arrival time (small weight), and the sketch's
  hyperedge policy (TACCL's ``mu`` per distinct switch connection: ``uc-min`` pays for
  each, ``uc-max`` is paid for each), or its link-load objective (TACCL's ``minmax``:
  ``mu`` times the most loaded link's load; ``maxmin``: minus ``mu`` times the least).

The tree selection (:mod:`ccweave.synth.taccl.routing_trees`) is the warm start, so a
solve stopped at its time limit is never worse than it by this objective.
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
from ccweave.synth.taccl.progress import Progress
from ccweave.synth.taccl.routing_result import Routing, tree_hops
from ccweave.synth.taccl.sketch_model import Balance, Hyperedge
from ccweave.synth.taccl.solver import DEFAULT_SETTINGS, Model, SolverSettings

US_PER_S = 1e6
ARRIVAL_WEIGHT = 0.01
"""Weight of the mean arrival time of chunks at their destinations beside ``T``."""
BALANCE_WEIGHT = 0.01
"""TACCL's ``mu`` on its ``minmax``/``maxmin`` link-load term: both are times, as ``T``."""
HYPEREDGE_WEIGHT = 1 / 800
"""Objective per distinct switch connection of a node, as a fraction of one chunk's time
over a switch edge: TACCL's ``mu = 0.01`` against its DGX-2 profile's 8 us per chunk."""
MIN_SOLVE_S = 0.5
"""No MILP solve gets less time than this."""
MIN_COST_US = 1e-6
"""Least cost of one hop, so that arrival times order every route (no zero-time cycles)."""
HORIZON_SLACK = 1e-6
"""Relative room above the warm start's makespan in the time variables' bounds."""
AT_BOUND = 1e-6
"""A warm start whose makespan is within this (relative) of the LP bound meets it."""
LP_SHARE = 0.2
"""At most this part of the routing time goes to the LP bound on the makespan."""
TIE_BREAK_SHARE = 0.1
"""Part of the routing time the MILP gets when the warm start's makespan already meets
the LP bound: only the tie-breaks (arrivals, hyperedge policy) can still improve."""
TIE_BREAK_GAP = 1e-6
"""Relative MIP gap of that solve: the tie-breaks are a small part of the objective, so
the usual tolerance would stop at the warm start."""


@dataclass(frozen=True)
class _Rep:
    """One orbit representative: its chunk, source, destinations and allowed edges."""

    chunk: int
    source: int
    destinations: frozenset[int]
    edges: tuple[int, ...]


def route_milp(logical: LogicalTopology, demand: Demand, chunk_bytes: float, warm: Routing,
               *, relay_hops: int = 1, settings: SolverSettings = DEFAULT_SETTINGS,
               progress: Callable[[Progress], None] | None = None) -> Routing:
    """TACCL's routing MILP warm-started from ``warm``; see the module docstring."""
    started = time.perf_counter()
    encoding = _Encoding(logical, demand, chunk_bytes, relay_hops)
    model, start = encoding.build(warm)
    binding = encoding.label(encoding.binding_row)
    bound = _makespan_bound(model, encoding.time, replace(
        settings, time_limit_s=settings.time_limit_s * LP_SHARE))
    at_bound = bound is not None and encoding.warm_time <= bound * (1 + AT_BOUND) + 1e-9
    left = settings.time_limit_s - (time.perf_counter() - started)
    limit = max(left, MIN_SOLVE_S)
    gap = settings.mip_gap
    if at_bound:
        limit = max(min(limit, settings.time_limit_s * TIE_BREAK_SHARE), MIN_SOLVE_S)
        gap = min(gap, TIE_BREAK_GAP)
    if progress:
        progress(Progress("routing", f"TACCL MILP with {model.num_vars} variables "
                                     f"({model.num_integers} binary), {model.num_rows} rows, "
                                     f"{len(encoding.reps)} chunk orbits; warm start "
                                     f"{encoding.warm_time:.4g} us ({binding}), LP bound "
                                     f"{'unknown' if bound is None else f'{bound:.4g} us'}"))
    try:
        result = model.solve(replace(settings, time_limit_s=limit, mip_gap=gap), start,
                             progress, "routing")
    except SolverError as error:
        raise SolverError(f"taccl routing with sketch {logical.sketch.source}: {error}") \
            from None
    hops, times = encoding.expand(result.values)
    warm_objective = model.cost_of(start)
    note = result.describe()
    if at_bound:
        note = (f"the warm start's makespan {encoding.warm_time:.4g} us is the LP bound (set "
                f"by {binding}): no routing in the sketch is faster in TACCL's model; the "
                f"MILP worked on the tie-breaks: {note}")
    if hops is None:  # cannot happen with positive hop costs; keep the warm start
        hops, times = warm.hops, None
        note += "; its answer left a destination unreached, the warm start is kept"
    makespan = float(result.values[encoding.time]) / US_PER_S
    return Routing(hops, makespan, result.status, result.gap, result.seconds, model.num_vars,
                   note, "milp", times, result.objective, warm_objective,
                   encoding.warm_time / US_PER_S,
                   None if bound is None else bound / US_PER_S, binding)


def allowed_edges(logical: LogicalTopology, demand: Demand, chunk: int,
                  relay_hops: int = 1) -> tuple[int, ...]:
    """The logical edges ``chunk`` may cross: none into its source (nor, for a unicast
    chunk, out of its destination); between nodes only the sketch's connections, leaving
    its home node from a sender that carries it, into nodes it must reach (or, with
    ``relay_hops`` above 1, into any node and on from nodes it reached)."""
    node_of = logical.node_of
    ch = demand.chunks[chunk]
    source, home = ch.source, node_of[ch.source]
    targets = {node_of[d] for d in ch.destinations}
    unicast = not demand.multicast
    # nodes a unicast chunk may pass: its own and its destination's, or any with relays
    passable = set(range(len(logical.nodes))) if (not unicast or relay_hops > 1) \
        else {home, *targets}
    allowed = []
    for i, e in enumerate(logical.edges):
        if e.dst == source or (unicast and e.src in ch.destinations):
            continue
        a, b = node_of[e.src], node_of[e.dst]
        if not e.internode:
            if a in passable:
                allowed.append(i)
            continue
        if b == home or b not in passable:
            continue
        if a == home:
            if logical.may_carry(e.src, source) and (relay_hops > 1 or b in targets
                                                     or not unicast):
                allowed.append(i)
        elif relay_hops > 1:
            allowed.append(i)
    return tuple(allowed)


def _makespan_bound(model: Model, column: int, settings: SolverSettings) -> float | None:
    """The LP bound on the makespan (``None`` if the LP does not finish in time)."""
    try:
        result = model.relaxation(column).solve(settings)
    except SolverError:
        return None
    return float(result.values[column]) if result.solved else None


class _Encoding:
    """The MILP of one logical topology and demand."""

    def __init__(self, logical: LogicalTopology, demand: Demand, chunk_bytes: float,
                 relay_hops: int) -> None:
        self.logical = logical
        self.demand = demand
        self.relay_hops = relay_hops
        topo = logical.topology
        self.cost = [max(MIN_COST_US, e.seconds(chunk_bytes) * US_PER_S)
                     for e in logical.edges]
        self.stream = [chunk_bytes / lk.bandwidth * US_PER_S for lk in topo.links]
        self.inverse = [_inverse(g) for g in logical.symmetry]
        self.reps = [self._rep(chunk) for chunk, _ in demand.orbits]
        self.model = Model("taccl routing (TACCL MILP)")
        self.time = self.model.add_vars(1, cost=1.0)[0]
        self.x: dict[tuple[int, int], int] = {}
        self.s: dict[tuple[int, int], int] = {}
        self.a: dict[tuple[int, int], int] = {}
        self.uc: list[tuple[int, list[int]]] = []
        self.link_rows: dict[int, dict[int, float]] = {}
        self.balance: tuple[int, bool] | None = None
        """(column, minmax?) of the link-load objective"""
        self.warm_time = 0.0
        self.binding_row: int | None = None
        self.labels: dict[int, str] = {}
        self.ordering_pairs: list[tuple[tuple[int, int], tuple[int, int], float]] = []
        """(first, second, cost): ``second``'s send waits ``cost`` after ``first``'s."""

    def label(self, row: int | None) -> str:
        """What a row that bounds ``T`` stands for, in words."""
        if row is None:
            return "no row"
        return self.labels.get(row, "a chunk's path or a port's sends")

    # ------------------------------------------------------------------ edges

    def _rep(self, chunk: int) -> _Rep:
        ch = self.demand.chunks[chunk]
        return _Rep(chunk, ch.source, frozenset(ch.destinations),
                    allowed_edges(self.logical, self.demand, chunk, self.relay_hops))

    # ------------------------------------------------------------------ build

    def build(self, warm: Routing) -> tuple[Model, np.ndarray]:
        model = self.model
        for r, rep in enumerate(self.reps):
            for e in rep.edges:
                self.x[r, e] = model.add_vars(1, binary=True)[0]
                self.s[r, e] = model.add_vars(1)[0]
                for v in (self.logical.edges[e].src, self.logical.edges[e].dst):
                    if v != rep.source and (r, v) not in self.a:
                        self.a[r, v] = model.add_vars(1)[0]
            self._delivery(r, rep)
            self._fan_out(r, rep)
        self._loads()
        self._balance()
        self._enforce_ordering()
        self._hyperedge()
        self._arrival_cost()
        values = self._warm_values(warm)
        warm_time, self.binding_row = model.least_feasible(values, self.time)
        self.warm_time = float(warm_time)
        values[self.time] = self.warm_time
        horizon = self.warm_time * (1 + HORIZON_SLACK) + HORIZON_SLACK
        self._timing(horizon)
        for column in (self.time, *self.s.values(), *self.a.values()):
            model.set_upper(column, horizon)
        return model, values

    def _delivery(self, r: int, rep: _Rep) -> None:
        """In-degrees, forwarding, and node entries (relay relaxation)."""
        model, logical = self.model, self.logical
        into: dict[int, list[int]] = defaultdict(list)
        out: dict[int, list[int]] = defaultdict(list)
        for e in rep.edges:
            into[logical.edges[e].dst].append(self.x[r, e])
            out[logical.edges[e].src].append(self.x[r, e])
        for v, cols in into.items():
            if v in rep.destinations:
                model.add_row(cols, [1.0] * len(cols), 1.0, 1.0)
            else:
                model.add_row(cols, [1.0] * len(cols), upper=1.0)
        missing = rep.destinations - set(into)
        if missing:
            raise SolverError(f"taccl routing: the sketch {logical.sketch.source} leaves no "
                              f"way to rank {min(missing)} for a chunk of rank {rep.source}")
        if self.demand.multicast:
            model.add_row(out[rep.source], [1.0] * len(out[rep.source]), lower=1.0)
        else:
            model.add_row(out[rep.source], [1.0] * len(out[rep.source]), 1.0, 1.0)
            for v, cols in out.items():  # a relay forwards what it received, once
                if v != rep.source:
                    model.add_row(cols + into[v], [1.0] * len(cols) + [-1.0] * len(into[v]),
                                  0.0, 0.0)
        entries: dict[int, list[int]] = defaultdict(list)
        for e in rep.edges:
            if logical.edges[e].internode:
                entries[logical.node_of[logical.edges[e].dst]].append(self.x[r, e])
        targets = {logical.node_of[d] for d in rep.destinations}
        for node, cols in entries.items():
            if not self.demand.multicast:  # a path enters a node at most once
                model.add_row(cols, [1.0] * len(cols), float(node in targets), 1.0)
            elif node in targets:  # TACCL's relay relaxation: at least once
                model.add_row(cols, [1.0] * len(cols), lower=1.0)

    def _fan_out(self, r: int, rep: _Rep) -> None:
        """Per rank, the chunk's sends through one shared port go one after another after
        it arrived: ``a(u) + beta * sends <= T``."""
        logical = self.logical
        through: dict[tuple[int, int], list[int]] = defaultdict(list)
        for e in rep.edges:
            edge = logical.edges[e]
            for link in edge.route:
                through[edge.src, link].append(e)
        for (u, link), edges in through.items():
            if len(edges) < 2:
                continue
            cols = [self.x[r, e] for e in edges] + [self.time]
            coefs = [self.stream[link]] * len(edges) + [-1.0]
            if u != rep.source:
                cols.append(self.a[r, u])
                coefs.append(1.0)
            self.model.add_row(cols, coefs, upper=0.0)

    def _loads(self) -> None:
        """Physical link loads and logical edge loads over every orbit, within ``T``."""
        logical = self.logical
        link_rows: dict[int, dict[int, float]] = defaultdict(dict)
        edge_rows: dict[int, dict[int, float]] = defaultdict(dict)
        terms: dict[int, tuple[dict[int, float], dict[int, float]]] = {}
        for e in {e for _, e in self.x}:  # what one chunk on ``e`` adds, over its orbit
            per_edge: dict[int, float] = defaultdict(float)
            per_link: dict[int, float] = defaultdict(float)
            for g in logical.symmetry:
                image = logical.edge_image(g, e)
                per_edge[image] += self.cost[image]
                for link in logical.edges[image].route:
                    per_link[link] += self.stream[link]
            terms[e] = (per_edge, per_link)
        for (_, e), col in self.x.items():
            per_edge, per_link = terms[e]
            for image, coef in per_edge.items():
                edge_rows[image][col] = edge_rows[image].get(col, 0.0) + coef
            for link, coef in per_link.items():
                link_rows[link][col] = link_rows[link].get(col, 0.0) + coef
        topo = logical.topology
        self.link_rows = link_rows
        for link, row in link_rows.items():
            lk = topo.links[link]
            self.labels[self.model.num_rows] = f"the load of link {lk.src}->{lk.dst}"
            self.model.add_row([*row, self.time], [*row.values(), -1.0], upper=0.0)
        for edge, row in edge_rows.items():
            e = logical.edges[edge]
            self.labels[self.model.num_rows] = f"the sends on connection {e.src}->{e.dst}"
            self.model.add_row([*row, self.time], [*row.values(), -1.0], upper=0.0)
        for r, rep in enumerate(self.reps):
            for v in rep.destinations:
                if (r, v) in self.a:
                    self.model.add_row([self.a[r, v], self.time], [1.0, -1.0], upper=0.0)

    def _balance(self) -> None:
        """TACCL's ``minmax`` (a column at least every link's load, ``+mu`` of it in the
        objective) or ``maxmin`` (at most every link's load, ``-mu``): over the links the
        sketch's sends may cross."""
        policy = self.logical.sketch.intranode.balance
        self.balance = None
        if policy is None or not self.link_rows:
            return
        minmax = policy is Balance.MINMAX
        column = self.model.add_vars(1, cost=BALANCE_WEIGHT if minmax else -BALANCE_WEIGHT)[0]
        self.balance = (column, minmax)
        for row in self.link_rows.values():
            self.model.add_row([*row, column], [*row.values(), -1.0],
                               **({"upper": 0.0} if minmax else {"lower": 0.0}))

    def _orbit_place(self) -> dict[int, tuple[int, int]]:
        """Actual chunk -> (representative index, symmetry index)."""
        place = {}
        for r, (_, images) in enumerate(self.demand.orbits):
            for k, chunk in enumerate(images):
                place.setdefault(chunk, (r, k))
        return place

    def _enforce_ordering(self) -> None:
        """TACCL's ``enforce_ordering``: on a sender's internode edges its own chunks are
        sent (and take their ``alpha + beta``) before the chunks it carries for others."""
        logical, demand = self.logical, self.demand
        if not logical.sketch.internode.enforce_ordering:
            return
        place = self._orbit_place()
        by_source: dict[int, list[int]] = defaultdict(list)
        for chunk, ch in enumerate(demand.chunks):
            by_source[ch.source].append(chunk)
        seen = set()
        for f, edge in enumerate(logical.edges):
            if not edge.internode:
                continue
            u = edge.src
            own = by_source[u]
            carried = [c for v in logical.nodes[logical.node_of[u]] if v != u
                       and logical.carriers is not None and (u, v) in logical.carriers
                       for c in by_source[v]]
            for c1 in carried:
                for c2 in own:
                    first, second = self._variable(place, c2, f), self._variable(place, c1, f)
                    if first is None or second is None or (first, second) in seen:
                        continue
                    seen.add((first, second))
                    self.ordering_pairs.append((first, second, self.cost[f]))

    def _variable(self, place: dict[int, tuple[int, int]], chunk: int, edge: int
                  ) -> tuple[int, int] | None:
        """(representative, edge) whose variables stand for ``chunk`` on ``edge``."""
        r, k = place[chunk]
        pre = self.logical.edge_id.get(tuple(self.inverse[k][end] for end in (
            self.logical.edges[edge].src, self.logical.edges[edge].dst)))  # type: ignore
        return (r, pre) if pre is not None and (r, pre) in self.x else None

    def _hyperedge(self) -> None:
        """``uc-min``/``uc-max``: a binary per orbit of switch connections, used or not."""
        logical = self.logical
        policy = logical.sketch.intranode.hyperedge
        switch_edges = [i for i, e in enumerate(logical.edges) if e.switch is not None]
        if policy is None or not switch_edges:
            return
        orbit_of: dict[int, int] = {}
        size: dict[int, int] = defaultdict(int)
        for i in switch_edges:
            if i not in orbit_of:
                for g in logical.symmetry:
                    image = logical.edge_image(g, i)
                    if image not in orbit_of:
                        orbit_of[image] = i
                        size[i] += 1
        members: dict[int, list[int]] = defaultdict(list)
        for (_, e), col in self.x.items():
            if e in orbit_of:
                members[orbit_of[e]].append(col)
        hop = min(self.cost[i] for i in switch_edges)
        nodes = len(logical.nodes)
        sign = 1.0 if policy is Hyperedge.UC_MIN else -1.0
        for orbit, cols in members.items():
            weight = HYPEREDGE_WEIGHT * hop * size[orbit] / nodes
            y = self.model.add_vars(1, binary=True, cost=sign * weight)[0]
            self.uc.append((y, cols))
            if policy is Hyperedge.UC_MIN:
                for col in cols:
                    self.model.add_row([y, col], [1.0, -1.0], lower=0.0)
            else:
                self.model.add_row([y, *cols], [1.0] + [-1.0] * len(cols), upper=0.0)

    def _arrival_cost(self) -> None:
        count = sum(len(rep.destinations) for rep in self.reps)
        for r, rep in enumerate(self.reps):
            for v in rep.destinations:
                if (r, v) in self.a:
                    self.model.add_cost(self.a[r, v], ARRIVAL_WEIGHT / count)

    def _timing(self, horizon: float) -> None:
        """``s >= a(src)``; ``a(dst) >= s + cost`` when sent (big-M ``horizon + cost``);
        the enforce-ordering pairs."""
        model, logical = self.model, self.logical
        for (r, e), x in self.x.items():
            edge = logical.edges[e]
            s = self.s[r, e]
            if edge.src != self.reps[r].source:
                model.add_row([s, self.a[r, edge.src]], [1.0, -1.0], lower=0.0)
            big = horizon + self.cost[e]
            model.add_row([self.a[r, edge.dst], s, x], [1.0, -1.0, -big],
                          lower=self.cost[e] - big)
        for (r1, e1), (r2, e2), cost in self.ordering_pairs:
            big = 2 * horizon + cost  # both sent: s2 >= s1 + cost
            model.add_row([self.s[r2, e2], self.s[r1, e1], self.x[r1, e1], self.x[r2, e2]],
                          [1.0, -1.0, -big, -big], lower=cost - 2 * big)

    def _warm_values(self, warm: Routing) -> np.ndarray:
        values = np.zeros(self.model.num_vars)
        logical = self.logical
        for r, rep in enumerate(self.reps):
            arrival = {rep.source: 0.0}
            for e, _ in warm.hops[rep.chunk]:
                edge = logical.edges[e]
                if (r, e) not in self.x:
                    raise AssertionError("taccl: the warm start uses an edge the MILP "
                                         "does not allow")  # a bug, not input
                values[self.x[r, e]] = 1.0
                values[self.s[r, e]] = arrival[edge.src]
                arrival[edge.dst] = arrival[edge.src] + self.cost[e]
            for (rr, v), col in self.a.items():
                if rr == r:
                    values[col] = arrival.get(v, 0.0)
            for e in rep.edges:
                if values[self.x[r, e]] < 0.5:
                    values[self.s[r, e]] = arrival.get(logical.edges[e].src, 0.0)
        for y, cols in self.uc:
            values[y] = float(any(values[c] > 0.5 for c in cols))
        if self.balance is not None:
            column, minmax = self.balance
            loads = [sum(coef * values[c] for c, coef in row.items())
                     for row in self.link_rows.values()]
            values[column] = max(loads) if minmax else min(loads)
        for (r1, e1), (r2, e2), cost in self.ordering_pairs:
            if values[self.x[r1, e1]] > 0.5 and values[self.x[r2, e2]] > 0.5:
                values[self.s[r2, e2]] = max(values[self.s[r2, e2]],
                                             values[self.s[r1, e1]] + cost)
        self._push_arrivals(values)
        return values

    def _push_arrivals(self, values: np.ndarray) -> None:
        """Arrivals after sends delayed by the ordering pairs, along every warm route."""
        logical = self.logical
        for _ in range(len(logical.nodes) * 2 + 2):
            changed = False
            for (r, e), x in self.x.items():
                if values[x] < 0.5:
                    continue
                edge = logical.edges[e]
                if edge.src != self.reps[r].source:
                    need = values[self.a[r, edge.src]]
                    if values[self.s[r, e]] < need:
                        values[self.s[r, e]] = need
                        changed = True
                need = values[self.s[r, e]] + self.cost[e]
                if values[self.a[r, edge.dst]] < need - 1e-12:
                    values[self.a[r, edge.dst]] = need
                    changed = True
            if not changed:
                return

    # --------------------------------------------------------------- solution

    def expand(self, values: np.ndarray
               ) -> tuple[tuple | None, tuple[tuple[float, ...], ...] | None]:
        """Every chunk's hops and send times (seconds), each representative's mapped by
        its symmetries; ``(None, None)`` if a destination is left unreached."""
        logical, demand = self.logical, self.demand
        hops: list[tuple] = [()] * len(demand.chunks)
        times: list[tuple[float, ...]] = [()] * len(demand.chunks)
        for r, (rep, (_, images)) in enumerate(zip(self.reps, demand.orbits)):
            used = sorted((e for e in rep.edges if values[self.x[r, e]] > 0.5),
                          key=lambda e: values[self.s[r, e]])
            tree = tree_hops(logical, rep.source, used)
            if not rep.destinations <= {logical.edges[e].dst for e, _ in tree}:
                return None, None
            sent = tuple(float(values[self.s[r, e]]) / US_PER_S for e, _ in tree)
            for g, chunk in zip(logical.symmetry, images):
                hops[chunk] = tuple((logical.edge_image(g, e), parent) for e, parent in tree)
                times[chunk] = sent
        return tuple(hops), tuple(times)


def _inverse(permutation: tuple[int, ...]) -> tuple[int, ...]:
    inverse = [0] * len(permutation)
    for i, image in enumerate(permutation):
        inverse[image] = i
    return tuple(inverse)

