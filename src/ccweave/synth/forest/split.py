"""Switch removal by edge splitting (ForestColl, after Bang-Jensen, Frank and Jackson).

A fabric vertex ``w`` forwards but holds no data, so trees cannot branch there. Splitting
off a pair of arcs ``(u, w), (w, t)`` by ``g`` units moves ``g`` units onto one arc
``u -> t`` that passes ``w``; at a vertex whose in- and out-capacity are equal, all of
its capacity can be split off without lowering any rank's connectivity from the roots,
so the trees packed afterwards over ranks only are as fast as the bound allows.

Each vertex is first split in bulk, proportionally (every neighbour to every other, as
the fabric spreads traffic: stars, shallow trees), and the result checked with max-flows;
where that loses rate, pair by pair with the largest amount that keeps the condition,
computed exactly with max-flows as the paper does.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from ccweave.synth.forest.network import BIG, Arc, FlowGraph, Network, split_off
from ccweave.synth.forest.rate import feasible


def split_fabric(net: Network, demand: np.ndarray) -> None:
    """Split off every fabric vertex of ``net`` (in place), keeping ``feasible``.

    Vertices next to the most ranks go first, so the pairs split at later ones join
    ranks rather than fabric. Capacity that cannot be split (a vertex whose in- and
    out-capacity differ) is dropped.
    """
    remaining = [v for v in net.fabric() if any(v in (a[0], a[1]) for a in net.capacity)]
    while remaining:
        remaining.sort(key=lambda v: -_rank_neighbours(net, v))
        vertex = remaining.pop(0)
        _balance(net, vertex, demand)
        trial = net.copy()
        _split_proportionally(trial, vertex)
        _drop(trial, vertex)
        if feasible(trial, demand):
            net.capacity = trial.capacity
        else:
            _split_greedily(net, vertex, demand)
            _drop(net, vertex)


def _balance(net: Network, vertex: int, demand: np.ndarray) -> None:
    """Trim the larger side of ``vertex`` (in- or out-capacity) towards the smaller, arc by
    arc, each by the most that keeps feasibility: what a vertex that only forwards cannot
    pass on is of no use, and once in equals out the splitting theorem applies."""
    into, out = net.arcs_at(vertex)
    excess = sum(c for _, c in into) - sum(c for _, c in out)
    side = into if excess > 0 else out
    excess = abs(excess)
    for arc, _ in sorted(side, key=lambda item: -item[1]):
        if excess == 0:
            break
        low, high = 0, min(excess, net.capacity[arc])
        while low < high:  # the most units this arc can give up
            middle = (low + high + 1) // 2
            net.take(arc, middle)
            ok = feasible(net, demand)
            net.add(arc, middle)
            if ok:
                low = middle
            else:
                high = middle - 1
        if low:
            net.take(arc, low)
            excess -= low


def _drop(net: Network, vertex: int) -> None:
    """Remove what is left at ``vertex`` (capacity no pair could take)."""
    for arc in [a for a in net.capacity if vertex in (a[0], a[1])]:
        del net.capacity[arc]


def _rank_neighbours(net: Network, vertex: int) -> int:
    return len({a[0] for a in net.capacity if a[1] == vertex and a[0] < net.num_ranks}
               | {a[1] for a in net.capacity if a[0] == vertex and a[1] < net.num_ranks})


def _split_proportionally(net: Network, vertex: int) -> None:
    """Pair every arc into ``vertex`` with every arc out of it (other ends differing) in
    proportion to their capacities (iterative proportional fitting, then rounded down and
    topped up greedily)."""
    into, out = net.arcs_at(vertex)
    if not into or not out:
        return
    rows = np.array([c for _, c in into], dtype=float)
    cols = np.array([c for _, c in out], dtype=float)
    total = min(rows.sum(), cols.sum())
    rows *= total / rows.sum()
    cols *= total / cols.sum()
    allowed = np.array([[a[0] != b[1] for b, _ in out] for a, _ in into], dtype=float)
    plan = allowed * np.outer(rows, cols)
    for _ in range(200):
        plan *= (rows / np.maximum(plan.sum(axis=1), 1e-300))[:, None]
        plan *= (cols / np.maximum(plan.sum(axis=0), 1e-300))[None, :]
        if np.allclose(plan.sum(axis=1), rows, rtol=1e-9, atol=1e-6):
            break
    amounts = _rounded(plan, allowed, np.array([c for _, c in into]),
                       np.array([c for _, c in out]))
    for r, (first, _) in enumerate(into):
        for c, (second, _) in enumerate(out):
            split_off(net, first, second, int(amounts[r, c]))


def _rounded(plan: np.ndarray, allowed: np.ndarray, rows: np.ndarray,
             cols: np.ndarray) -> np.ndarray:
    """An integer plan within one unit of ``plan`` per pair, filling rows and columns as
    far as they can be (a max-flow over the pairs, each capped at ``ceil(plan)``)."""
    r_count, c_count = plan.shape
    source, sink = r_count + c_count, r_count + c_count + 1
    pairs = np.argwhere(allowed > 0)
    tails = np.concatenate([np.full(r_count, source), pairs[:, 0],
                            r_count + np.arange(c_count)])
    heads = np.concatenate([np.arange(r_count), r_count + pairs[:, 1],
                            np.full(c_count, sink)])
    caps = np.concatenate([rows, np.ceil(plan[pairs[:, 0], pairs[:, 1]] - 1e-9),
                           cols]).astype(np.int64)
    size = r_count + c_count + 2
    matrix = scipy.sparse.csr_array((caps.astype(np.int32), (tails, heads)),
                                    shape=(size, size))
    flow = scipy.sparse.csgraph.maximum_flow(matrix, source, sink).flow.toarray()
    amounts = np.zeros(plan.shape, dtype=np.int64)
    amounts[pairs[:, 0], pairs[:, 1]] = flow[pairs[:, 0], r_count + pairs[:, 1]]
    return np.maximum(amounts, 0)


def _split_greedily(net: Network, vertex: int, demand: np.ndarray) -> None:
    """Each pair in turn by the most it can take without breaking feasibility."""
    into, out = net.arcs_at(vertex)
    for first, _ in into:
        for second, _ in out:
            if first[0] == second[1]:
                continue
            have = min(net.capacity.get(first, 0), net.capacity.get(second, 0))
            if have <= 0:
                continue
            amount = min(have, splittable(net, first[0], vertex, second[1], demand, have))
            split_off(net, first, second, amount)


def splittable(net: Network, u: int, w: int, t: int, demand: np.ndarray, limit: int) -> int:
    """Most units (at most ``limit``) splittable off ``(u, w), (w, t)`` keeping feasibility.

    Splitting lowers the in-capacity of a set X by the amount exactly when X holds ``u``
    and ``t`` but not ``w``, or ``w`` but neither ``u`` nor ``t``. With ``S0`` feeding the
    roots, the slack of such sets that hold a rank is a max-flow each: from ``{S0, w}`` to
    ``{u, t}``, and from ``{S0, u, t}`` to ``{w, v}`` for each rank ``v``.
    """
    graph = FlowGraph(net.merged(), net.num_vertices)
    source, sink = net.num_vertices, net.num_vertices + 1
    roots = np.flatnonzero(demand)
    total = int(demand.sum())
    feed = [(np.full(len(roots), source), roots, demand[roots].astype(np.int64))]
    best = limit

    def flow(arcs: list[tuple[int, int]]) -> int:
        extra = [*feed, (np.array([a for a, _ in arcs]), np.array([b for _, b in arcs]),
                         np.full(len(arcs), BIG, dtype=np.int64))]
        return graph.max_flow(source, sink, 2, extra) - total

    # sets holding u and t, not w (and a rank: u or t, else one of each class)
    holdings = [()] if min(u, t) < net.num_ranks else \
        [(v,) for v in _representatives(net, exclude=set())]
    for holding in holdings:
        best = min(best, flow([(source, w), (u, sink), (t, sink),
                               *((v, sink) for v in holding)]))
        if best <= 0:
            return 0
    # sets holding w and a rank v, not u or t
    for v in _representatives(net, exclude={u, t}):
        best = min(best, flow([(source, u), (source, t), (w, sink), (v, sink)]))
        if best <= 0:
            return 0
    return best


def _representatives(net: Network, exclude: set[int]) -> list[int]:
    """One rank per class of ranks with identical arcs (swapping two of them maps the
    network to itself, so their flows are equal), the others excluded."""
    out: dict[int, list[tuple[int, int]]] = {}
    into: dict[int, list[tuple[int, int]]] = {}
    for (a, b), units in net.merged().items():
        out.setdefault(a, []).append((b, units))
        into.setdefault(b, []).append((a, units))
    seen: dict[tuple, int] = {}
    for v in range(net.num_ranks):
        if v in exclude:
            continue
        key = (tuple(sorted(out.get(v, []))), tuple(sorted(into.get(v, []))))
        seen.setdefault(key, v)
    return list(seen.values())


__all__ = ["Arc", "split_fabric", "splittable"]
