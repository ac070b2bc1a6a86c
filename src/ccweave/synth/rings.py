"""Topology-aware ring search: what NCCL's ``graph/search.cc`` does for rings.

A ring is a directed Hamiltonian cycle over ranks, each hop following the topology's
route between the two ranks. :func:`find_rings` finds rings one after another, each
maximising its bottleneck over the bandwidth the earlier rings left (every link a ring's
routes cross is charged with the ring's share, once per route that crosses it), so later
rings use spare links: the other direction of duplex links, other NVLinks, other NICs.

The search for one ring binary-searches a bandwidth threshold and looks for a Hamiltonian
cycle among the rank pairs whose residual route bandwidth reaches it (depth-first,
Warnsdorff order, a budget of steps; on larger machines also a cycle cover whose cycles
are merged, which finds rings on big meshes, tori and hypercubes). Each earlier ring
reversed is tried first: on duplex links it is as good. On multi-node machines
(``groups["node"]`` with several groups) a ring visits each node's ranks contiguously: a
Hamiltonian path inside every node, joined by one inter-node hop per node, leaving each
node through the rank (and so the NIC) used least so far; this keeps the search small at
1024 ranks and makes every ring cross the network once per node.

The whole greedy sequence runs at a few speeds (:data:`SPEEDS`: caps on a ring's share,
so that more, slower rings can fit where full-speed rings block each other) and, on small
single-node machines, a few tie-break orders (:data:`FLAT_ATTEMPTS`); the set with the
most bandwidth in all wins.

Stopping rule: a ring is kept only while its bandwidth is at least :data:`MIN_SHARE` of
the first ring's (dgx1: after the four NVLink rings, a PCIe ring would get a tenth of
the first); NCCL likewise drops channels much slower than the best. More than
:data:`MAX_RINGS` rings (NCCL's channel limit) are never returned.
"""

from __future__ import annotations

import random
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ccweave.errors import NotApplicableError, TopologyError
from ccweave.topology.model import Topology

MIN_SHARE = 0.25
"""A ring whose bandwidth is below this fraction of the first ring's is not kept."""

MAX_RINGS = 32
"""At most this many rings (NCCL's MAXCHANNELS)."""

SPEEDS = (1.0, 1 / 2, 1 / 3, 1 / 4)
"""Caps on a ring's bandwidth tried, as fractions of the fastest ring's: slower rings can
be more (on 4 fully connected GPUs, six rings at half speed beat two at full speed);
NCCL's search likewise tries decreasing speeds for the most channels x speed."""

SPEED_GAIN = 1.05
"""Slower rings replace faster ones only when they carry this much more in all (more
rings cost more chunks and steps for little)."""

SPEED_SEARCH_RANKS = 256
"""Multi-node machines with more ranks try full speed only (the NICs set it there)."""

FLAT_ATTEMPTS = 8
"""Tie-break orders tried on single-node machines; the ring set with most bandwidth wins."""

FLAT_ATTEMPT_RANKS = 64
"""Larger single-node machines get one attempt."""

SEARCH_BUDGET = 20_000
"""Depth-first steps one Hamiltonian-cycle (or path) search may take before giving up."""


@dataclass(frozen=True)
class Ring:
    """A directed cycle over ranks and the bandwidth it got (its bottleneck share)."""

    order: tuple[int, ...]
    bandwidth: float

    def __len__(self) -> int:
        return len(self.order)

    @property
    def hops(self) -> list[tuple[int, int]]:
        """The directed rank pairs the ring sends over (none for a single rank)."""
        n = len(self.order)
        if n < 2:
            return []
        return [(self.order[i], self.order[(i + 1) % n]) for i in range(n)]

    def successor(self, rank: int) -> int:
        order = self.order
        return order[(order.index(rank) + 1) % len(order)]

    def starting_at(self, rank: int) -> tuple[int, ...]:
        """The order rotated so that it starts at ``rank``."""
        at = self.order.index(rank)
        return self.order[at:] + self.order[:at]

    def ending_at(self, rank: int) -> tuple[int, ...]:
        """The order rotated so that it ends at ``rank``."""
        at = self.order.index(rank) + 1
        return self.order[at:] + self.order[:at]


# ------------------------------------------------------------------ rank graph


class _RankGraph:
    """Routable rank pairs, their routes, and the residual bandwidth of every link."""

    def __init__(self, topology: Topology, pairs: Sequence[tuple[int, int]]) -> None:
        self.topology = topology
        self.routes: dict[tuple[int, int], np.ndarray] = {}
        for pair in pairs:
            try:
                self.routes[pair] = np.asarray(topology.route(*pair), dtype=np.intp)
            except TopologyError:  # only through another rank: not a hop a ring can take
                continue
        self.residual = topology.bandwidths.copy()
        self._pairs = list(self.routes)
        lengths = np.array([len(r) for r in self.routes.values()], dtype=np.intp)
        self._flat = np.concatenate([*self.routes.values(), np.zeros(0, np.intp)])
        self._starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.intp)

    def weight(self, a: int, b: int) -> float:
        """Residual bottleneck bandwidth of the route a -> b (0 if there is none)."""
        route = self.routes.get((a, b))
        if route is None:
            return 0.0
        return float(self.residual[route].min()) if len(route) else np.inf

    def weights(self) -> dict[tuple[int, int], float]:
        """Residual bottleneck bandwidth of every routable pair."""
        if not self._pairs:
            return {}
        mins = np.minimum.reduceat(self.residual[self._flat], self._starts)
        return dict(zip(self._pairs, mins.tolist()))

    def _uses(self, order: Sequence[int]) -> Counter:
        uses: Counter = Counter()
        n = len(order)
        for i in range(n if n > 1 else 0):
            uses.update(self.routes[(order[i], order[(i + 1) % n])].tolist())
        return uses

    def share(self, order: Sequence[int]) -> float:
        """The bandwidth ``order`` would get: min over its links of residual / times used."""
        uses = self._uses(order)
        if not uses:
            return self.topology.local_bandwidth
        return max(0.0, min(self.residual[link] / count for link, count in uses.items()))

    def charge(self, order: Sequence[int], bandwidth: float) -> None:
        for link, count in self._uses(order).items():
            self.residual[link] = max(0.0, self.residual[link] - bandwidth * count)

    def has_ring(self, order: Sequence[int]) -> bool:
        n = len(order)
        return all((order[i], order[(i + 1) % n]) in self.routes for i in range(n)) \
            if n > 1 else True


# ------------------------------------------------------- Hamiltonian search


def hamiltonian_path(vertices: Sequence[int], edges: dict[int, list[int]], *,
                     start: int | None = None, end: int | None = None, cycle: bool = False,
                     budget: int = SEARCH_BUDGET) -> list[int] | None:
    """A Hamiltonian cycle (``cycle``) or ``start``-``end`` path over ``vertices``.

    ``edges[v]`` lists v's out-neighbours, best first. Depth-first with Warnsdorff
    ordering (fewest onward moves first, then the caller's order); gives up after
    ``budget`` steps and returns ``None`` then or when there is none.
    """
    members = set(vertices)
    n = len(members)
    out = {v: [w for w in edges.get(v, ()) if w in members and w != v] for v in members}
    into: dict[int, int] = Counter(w for v in members for w in out[v])
    if n == 1:
        return list(members) if start in (None, *members) else None
    if any(not out[v] for v in members if v != end) or \
            any(not into[v] for v in members if v != start or cycle):
        return None
    if start is None:
        first = {v: i for i, v in enumerate(vertices)}
        start = min(members, key=lambda v: (len(out[v]), first[v]))
    goal = start if cycle else end
    visited = {start}
    path = [start]
    # in-neighbours of the goal still unvisited: when none is left the goal is cut off
    goal_feed = sum(1 for v in members if goal is not None and goal in out[v] and v != start)
    stack = [_moves(start, out, visited, goal, n, path)]
    steps = 0
    while stack:
        steps += 1
        if steps > budget:
            return None
        moves = stack[-1]
        if not moves:
            stack.pop()
            gone = path.pop()
            visited.discard(gone)
            if goal is not None and goal in out[gone] and gone != start:
                goal_feed += 1
            continue
        nxt = moves.pop()
        path.append(nxt)
        visited.add(nxt)
        if goal is not None and goal in out[nxt]:
            goal_feed -= 1
        if len(path) == n:
            if cycle and start in out[nxt]:
                return path
            if not cycle and (end is None or nxt == end):
                return path
        elif goal is None or goal_feed > 0 or (not cycle and goal in out[nxt]):
            stack.append(_moves(nxt, out, visited, goal, n, path))
            continue
        # dead end: undo at once
        path.pop()
        visited.discard(nxt)
        if goal is not None and goal in out[nxt]:
            goal_feed += 1
    return None


def _moves(v: int, out: dict[int, list[int]], visited: set[int], goal: int | None, n: int,
           path: list[int]) -> list[int]:
    """Unvisited successors of ``v``, best last (it is popped first)."""
    last = len(path) + 1 == n
    options = []
    for rank, w in enumerate(out[v]):
        if w in visited or (w == goal and not last and goal != path[0]):
            continue
        onward = sum(1 for x in out[w] if x not in visited)
        options.append((onward, rank, w))
    options.sort(reverse=True)
    return [w for _, _, w in options]


def merged_cycle(vertices: Sequence[int], edges: dict[int, list[int]]) -> list[int] | None:
    """A Hamiltonian cycle made by merging the cycles of a cycle cover, or ``None``.

    A perfect matching of out- to in-ends is a set of disjoint cycles covering every
    vertex; two cycles with hops a->a' and b->b' merge when a->b' and b->a' exist
    (turning one cycle round first if its reverse exists). Scales to thousands of
    vertices on meshes, tori and hypercubes, where depth-first search gets lost.
    """
    import scipy.sparse
    from scipy.sparse.csgraph import maximum_bipartite_matching

    members = list(vertices)
    index = {v: i for i, v in enumerate(members)}
    n = len(members)
    arcs = {(index[a], index[b]) for a in members for b in edges.get(a, ()) if b in index
            and b != a}
    if n < 2 or not arcs:
        return [members[0]] if n == 1 else None
    rows, cols = zip(*sorted(arcs))
    matrix = scipy.sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    succ = maximum_bipartite_matching(matrix, perm_type="column").tolist()
    if min(succ) < 0:
        return None
    cycles = _Cycles(succ, arcs)
    cycles.merge_all()
    if cycles.count != 1:
        return None
    order, v = [], 0
    for _ in range(n):
        order.append(members[v])
        v = cycles.succ[v]
    return order


class _Cycles:
    """Disjoint cycles covering ``0..n-1`` (``succ``), merged two at a time."""

    def __init__(self, succ: list[int], arcs: set[tuple[int, int]]) -> None:
        self.succ = succ
        self.pred = [0] * len(succ)
        for v, w in enumerate(succ):
            self.pred[w] = v
        self.arcs = arcs
        self.out: dict[int, list[int]] = {}
        for a, b in sorted(arcs):
            self.out.setdefault(a, []).append(b)
        self.label = [-1] * len(succ)
        self.count = 0
        for v in range(len(succ)):
            if self.label[v] < 0:
                for w in self.members(v):
                    self.label[w] = self.count
                self.count += 1

    def members(self, v: int) -> list[int]:
        found, w = [v], self.succ[v]
        while w != v:
            found.append(w)
            w = self.succ[w]
        return found

    def merge_all(self) -> None:
        changed = True
        while self.count > 1 and changed:
            changed = False
            for a in range(len(self.succ)):
                for b2 in self.out.get(a, ()):
                    if self.label[b2] != self.label[a] and self._merge(a, b2):
                        changed = True
                        break

    def _merge(self, a: int, b2: int) -> bool:
        """Join a's cycle and b2's through the new hops a->b2 and pred(b2)->succ(a)."""
        a2 = self.succ[a]
        if (self.pred[b2], a2) not in self.arcs and (
                not self._turn(b2) or (self.pred[b2], a2) not in self.arcs):
            return False  # (a turned cycle is as good a cover as before)
        b = self.pred[b2]
        self.succ[a], self.pred[b2] = b2, a
        self.succ[b], self.pred[a2] = a2, b
        keep = self.label[a]
        for w in self.members(b2):
            self.label[w] = keep
        self.count -= 1
        return True

    def _turn(self, v: int) -> bool:
        """Reverse v's cycle if every reversed hop exists; says whether it did."""
        ring = self.members(v)
        if len(ring) < 3 or any((self.succ[w], w) not in self.arcs for w in ring):
            return False
        for w in ring:
            self.succ[w], self.pred[w] = self.pred[w], self.succ[w]
        return True


# ------------------------------------------------------------- one ring


def _thresholds(weights: dict[tuple[int, int], float], above: float) -> list[float]:
    return sorted({w for w in weights.values() if w > above}, reverse=True)


def _adjacency(weights: dict[tuple[int, int], float], threshold: float,
               priority: dict[int, int] | None = None) -> dict[int, list[int]]:
    """Pairs of weight >= threshold as out-lists, fastest first, then by ``priority``."""
    adj: dict[int, list[tuple[float, int, int]]] = {}
    for (a, b), w in weights.items():
        if w >= threshold:
            adj.setdefault(a, []).append((-w, priority[b] if priority else b, b))
    return {a: [b for *_, b in sorted(lst)] for a, lst in adj.items()}


def _best_threshold(thresholds: list[float], feasible) -> tuple[float, object] | None:
    """Binary search for the highest threshold where ``feasible`` returns a result."""
    if not thresholds:
        return None
    found = feasible(thresholds[-1])
    if found is None:
        return None
    best = (thresholds[-1], found)
    low, high = 0, len(thresholds) - 1  # thresholds[high] is feasible
    while low < high:
        mid = (low + high) // 2
        result = feasible(thresholds[mid])
        if result is None:
            low = mid + 1
        else:
            best, high = (thresholds[mid], result), mid
    return best


def _flat_ring(graph: _RankGraph, ranks: Sequence[int], above: float,
               priority: dict[int, int]) -> list[int] | None:
    weights = graph.weights()
    ranks = sorted(ranks, key=priority.__getitem__)

    def feasible(threshold: float):
        adj = _adjacency(weights, threshold, priority)
        found = hamiltonian_path(ranks, adj, cycle=True,
                                 budget=SEARCH_BUDGET if len(ranks) <= 32 else 2_000)
        return found if found is not None else merged_cycle(ranks, adj)

    best = _best_threshold(_thresholds(weights, above), feasible)
    return None if best is None else best[1]  # type: ignore[return-value]


class _NodeSearch:
    """Rings through each node's ranks contiguously, one inter-node hop per node."""

    def __init__(self, graph: _RankGraph, nodes: Sequence[Sequence[int]]) -> None:
        self.graph = graph
        self.nodes = [list(node) for node in nodes]
        self.node_of = {r: i for i, node in enumerate(self.nodes) for r in node}
        self.exits: Counter = Counter()
        self.entries: Counter = Counter()
        self._paths: dict[tuple, list[int] | None] = {}

    @staticmethod
    def pairs(nodes: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
        """Rank pairs a node-contiguous ring (or its reverse) may use: inside a node,
        and between nodes next to each other in node order."""
        pairs = {(a, b) for node in nodes for a in node for b in node if a != b}
        for i, node in enumerate(nodes):
            nxt = nodes[(i + 1) % len(nodes)]
            pairs.update(p for a in node for b in nxt for p in ((a, b), (b, a)))
        return sorted(pairs)

    def ring(self, above: float) -> list[int] | None:
        weights = self.graph.weights()
        best = _best_threshold(_thresholds(weights, above),
                               lambda t: self._feasible(weights, t))
        return None if best is None else best[1]  # type: ignore[return-value]

    def taken(self, order: Sequence[int]) -> None:
        """Count the ranks ``order`` enters and leaves nodes through (to spread NICs)."""
        n = len(order)
        for i in range(n):
            a, b = order[i], order[(i + 1) % n]
            if self.node_of[a] != self.node_of[b]:
                self.exits[a] += 1
                self.entries[b] += 1

    @staticmethod
    def _shape(node: Sequence[int], adj: dict[int, list[int]]) -> tuple:
        """The node's fast-pair graph in local indices, best neighbour first."""
        local = {r: u for u, r in enumerate(node)}
        return tuple(tuple(local[b] for b in adj.get(a, ()) if b in local) for a in node)

    def _feasible(self, weights: dict[tuple[int, int], float], t: float) -> list[int] | None:
        nodes = self.nodes
        adj = _adjacency(weights, t)
        shapes: dict[int, tuple] = {}

        def path(i: int, e: int, x: int) -> list[int] | None:
            node = nodes[i]
            if i not in shapes:
                shapes[i] = self._shape(node, adj)
            local = {r: u for u, r in enumerate(node)}
            key = (shapes[i], local[e], local[x])
            if key not in self._paths:  # nodes alike share one search
                found = hamiltonian_path(range(len(node)), dict(enumerate(shapes[i])),
                                         start=local[e], end=local[x])
                self._paths[key] = found
            found = self._paths[key]
            return None if found is None else [node[u] for u in found]

        def inter(x: int, e: int) -> bool:
            return weights.get((x, e), 0.0) >= t

        def ends(i: int, e: int) -> list[int]:
            return [x for x in nodes[i] if (x != e or len(nodes[i]) == 1)]

        k = len(nodes)
        for e0 in sorted(nodes[0], key=lambda r: (self.entries[r], r)):
            # back[i]: entries of node i from which nodes i.. can be completed back to e0
            back: list[set[int]] = [set() for _ in range(k)]
            targets = {e0}
            for i in range(k - 1, -1, -1):
                exits = {x for x in nodes[i] if any(inter(x, e) for e in targets)}
                back[i] = {e for e in (nodes[i] if i else [e0])
                           if any(x in exits and path(i, e, x) is not None
                                  for x in ends(i, e))}
                targets = back[i]
                if not targets:
                    break
            if e0 not in back[0]:
                continue
            return self._walk(e0, back, path, weights, t)
        return None

    def _walk(self, e0: int, back: list[set[int]], path, weights, t: float) -> list[int]:
        """Choose exits and entries greedily: fast hops first, then ranks used least."""
        nodes, order, entry = self.nodes, [], e0
        for i in range(len(nodes)):
            targets = back[i + 1] if i + 1 < len(nodes) else {e0}
            choices = []
            for x in nodes[i]:
                if (x == entry and len(nodes[i]) > 1) or path(i, entry, x) is None:
                    continue
                for e in targets:
                    w = weights.get((x, e), 0.0)
                    if w >= t:
                        choices.append((-w, self.exits[x] + self.entries[e], x, e))
            _, _, x, nxt = min(choices)
            order += path(i, entry, x)
            entry = nxt
        return order


# ------------------------------------------------------------------ rings


def find_rings(topology: Topology, max_rings: int | None = None, *,
               ranks: Sequence[int] | None = None, min_share: float = MIN_SHARE
               ) -> list[Ring]:
    """Rings over the ranks, fastest first, each on the bandwidth the earlier ones left.

    Parameters
    ----------
    topology: the machine.
    max_rings: at most this many rings (default: as many as the stopping rule keeps,
        at most :data:`MAX_RINGS`).
    ranks: search over these ranks only (e.g. one node's); default all.
    min_share: keep a ring only while its bandwidth is at least this fraction of the
        first ring's.

    Raises ``NotApplicableError`` when the routable rank graph has no Hamiltonian cycle.
    The search is deterministic, so its answer is remembered per topology.
    """
    key = (max_rings, None if ranks is None else tuple(ranks), min_share)
    memo = _FOUND.setdefault(topology, {})
    if key not in memo:
        try:
            memo[key] = _find_rings(topology, max_rings, ranks, min_share)
        except NotApplicableError as error:
            memo[key] = error
    if isinstance(memo[key], NotApplicableError):
        raise memo[key]
    return list(memo[key])


_FOUND: weakref.WeakKeyDictionary[Topology, dict] = weakref.WeakKeyDictionary()


def _find_rings(topology: Topology, max_rings: int | None, ranks: Sequence[int] | None,
                min_share: float) -> list[Ring]:
    members = list(topology.ranks if ranks is None else ranks)
    limit = MAX_RINGS if max_rings is None else max(1, min(max_rings, MAX_RINGS))
    if len(members) == 1:
        return [Ring((members[0],), topology.local_bandwidth)]
    rings: list[Ring] = []
    nodes = _node_groups(topology, members)
    if nodes is not None:
        graph = _RankGraph(topology, _NodeSearch.pairs(nodes))
        speeds = SPEEDS if len(members) <= SPEED_SEARCH_RANKS else SPEEDS[:1]
        rings = _best(graph, lambda: _NodeSearch(graph, nodes), members, limit, min_share,
                      speeds, 1)
    if not rings:  # one node, or no node-contiguous ring: search the whole rank graph
        attempts = FLAT_ATTEMPTS if len(members) <= FLAT_ATTEMPT_RANKS else 1
        rings = _best(_flat_graph(topology, members), lambda: None, members, limit,
                      min_share, SPEEDS, attempts)
    if not rings:
        raise NotApplicableError(_no_cycle_reason(topology, members))
    return rings


def _best(graph: _RankGraph, new_search, members: list[int], limit: int, min_share: float,
          speeds: Sequence[float], attempts: int) -> list[Ring]:
    """Greedy ring sets at a few speeds (caps on a ring's bandwidth, as fractions of the
    fastest ring) and tie-break orders; the set with the most bandwidth in all wins."""
    best: list[Ring] = []
    top = 0.0
    bound = min(graph.topology.out_bandwidth(rank) for rank in members)
    for speed in speeds:
        for attempt in range(attempts):
            graph.residual = graph.topology.bandwidths.copy()
            cap = top * speed if top else np.inf
            rings = _greedy(graph, new_search(), members, limit, min_share,
                            _priority(members, attempt), cap)
            if not rings:
                if not top:
                    return []
                continue
            top = top or rings[0].bandwidth
            gain = 1 + 1e-9 if speed == speeds[0] else SPEED_GAIN
            if _total(rings) > _total(best) * gain:
                best = rings
            if _total(best) >= min(bound, limit * top) * (1 - 1e-9):
                return best
    return best


def _total(rings: list[Ring]) -> float:
    return sum(ring.bandwidth for ring in rings)


def _priority(members: list[int], attempt: int) -> dict[int, int]:
    """Tie-break ranks: in rank order first, then in seeded random orders."""
    order = sorted(members)
    if attempt:
        random.Random(attempt).shuffle(order)
    return {rank: i for i, rank in enumerate(order)}


def _greedy(graph: _RankGraph, search: _NodeSearch | None, members: list[int], limit: int,
            min_share: float, priority: dict[int, int], cap: float) -> list[Ring]:
    """Rings one by one, each the best on what the earlier ones left (a ring takes at
    most ``cap``), until the stopping rule says enough."""
    rings: list[Ring] = []
    while len(rings) < limit:
        order = _next_ring(graph, search, members, rings, priority, cap)
        if order is None:
            break
        share = min(graph.share(order), cap)
        if share <= 0 or (rings and share < min_share * rings[0].bandwidth):
            break
        graph.charge(order, share)
        if search is not None:
            search.taken(order)
        rings.append(Ring(tuple(order), float(share)))
    return rings


def _next_ring(graph: _RankGraph, search: _NodeSearch | None, members: list[int],
               rings: list[Ring], priority: dict[int, int], cap: float) -> list[int] | None:
    """The best next ring: a found one, or an earlier ring reversed if that is as good."""
    reverse, reverse_share = None, 0.0
    for ring in rings:
        candidate = list(reversed(ring.order))
        if not graph.has_ring(candidate) or any(_same_cycle(candidate, r.order)
                                                for r in rings):
            continue
        share = min(graph.share(candidate), cap)
        if share > reverse_share:
            reverse, reverse_share = candidate, share
    if reverse is not None and reverse_share >= cap:
        return reverse  # nothing can beat it
    found = (search.ring(reverse_share) if search
             else _flat_ring(graph, members, reverse_share, priority))
    if found is not None and (reverse is None or min(graph.share(found), cap) > reverse_share):
        return found
    return reverse


def _flat_graph(topology: Topology, members: list[int]) -> _RankGraph:
    return _RankGraph(topology, [(a, b) for a in members for b in members
                                 if a != b and topology.has_route(a, b)])


def _same_cycle(a: Sequence[int], b: Sequence[int]) -> bool:
    if len(a) != len(b) or not a:
        return len(a) == len(b)
    at = list(b).index(a[0]) if a[0] in b else -1
    return at >= 0 and list(b[at:]) + list(b[:at]) == list(a)


def _node_groups(topology: Topology, members: list[int]) -> list[list[int]] | None:
    """The node groups over ``members`` when there are several, else ``None``."""
    parts = topology.groups.get("node", ())
    chosen = set(members)
    nodes = [[r for r in part if r in chosen] for part in parts]
    nodes = [node for node in nodes if node]
    return nodes if len(nodes) > 1 else None


def _no_cycle_reason(topology: Topology, members: list[int]) -> str:
    where = f"topology {topology.name!r}"
    if len(members) < topology.num_ranks:
        where += f", ranks {members}"
    parity = _bipartite_imbalance(topology, members)
    if parity:
        return (f"{where}: the routable rank graph has no Hamiltonian cycle (it is bipartite "
                f"with sides of {parity[0]} and {parity[1]} ranks), so no ring exists; use a "
                "tree or direct strategy")
    return (f"{where}: found no Hamiltonian cycle in the routable rank graph (within the "
            "search budget), so no ring; use a tree or direct strategy")


def _bipartite_imbalance(topology: Topology, members: list[int]) -> tuple[int, int] | None:
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(members)
    graph.add_edges_from((a, b) for a in members for b in members
                         if a < b and topology.has_route(a, b) and topology.has_route(b, a))
    if not nx.is_connected(graph) or not nx.is_bipartite(graph):
        return None
    left, right = nx.bipartite.sets(graph)
    return (len(left), len(right)) if len(left) != len(right) else None
