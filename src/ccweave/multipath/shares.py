"""How much of a message each path carries, and in how many pipeline pieces.

Each path ``i`` costs ``T_i = D_i + x_i * n * W_i`` for its share ``x_i`` of ``n`` bytes
(:func:`path_cost`). Where paths share no link, the shares that make every ``T_i`` equal
have a closed form (ExaMPI'25, :func:`closed_form`); where they share links, an LP
minimises the finish time under each shared link's capacity as well (:func:`lp`).
A relay path, and a host path staged in host memory, pipelines in ``k`` pieces
(:func:`pieces`, the ExaMPI rule ``k ~ sqrt(x n / (a b'))`` generalised to any number of
store-and-forward stages).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ccweave.errors import SolverError
from ccweave.multipath.paths import Path
from ccweave.topology.model import Topology

MAX_PIECES = 8
"""Pipeline pieces per relay or staged path at most (the multipath paper pipelines the
host path in 1-8)."""

FLOOR = 1e-3
"""A link's capacity counts as at least this fraction of its bandwidth (keeps the LP
well scaled when other traffic takes all of it)."""


@dataclass(frozen=True)
class PathCost:
    """``T(x) = latency + x * n * per_byte``: a path's time for share ``x`` of ``n`` bytes."""

    latency: float
    per_byte: float

    def time(self, share: float, size_bytes: float) -> float:
        return self.latency + share * size_bytes * self.per_byte


Capacity = Sequence[float] | np.ndarray
"""Bandwidth per link index (bytes/second): the topology's, or what other traffic leaves."""


def _hops(path: Path, capacity: Capacity | None) -> list[tuple[float, float]]:
    """(alpha, bandwidth) per store-and-forward stage (a hop, or each stage of a hop
    staged in host memory), bandwidth under ``capacity`` when given."""
    stages = [stage for hop in path.hops
              for stage in (hop.stages or ((hop.links, hop.alpha, hop.bandwidth),))]
    if capacity is None:
        return [(alpha, bandwidth) for _, alpha, bandwidth in stages]
    return [(alpha, max(min(capacity[i] for i in links), bandwidth * FLOOR))
            for links, alpha, bandwidth in stages]


def path_cost(path: Path, pieces: int = 1, capacity: Capacity | None = None) -> PathCost:
    """The pipelined store-and-forward cost of ``path`` in ``pieces`` equal pieces.

    With hop latencies ``a_h``, bandwidths ``b_h`` and slowest hop ``*``:
    ``D = sum a_h + (k-1) a_*`` and ``W = (sum 1/b_h + (k-1)/b_*) / k``; for one piece on
    two hops this is ExaMPI's ``D = a + a'``, ``W = 1/b + 1/b'``.
    """
    k = max(1, int(pieces))
    hops = _hops(path, capacity)
    slow_alpha, slow_bw = max(hops, key=lambda h: (1 / h[1], h[0]))
    latency = sum(a for a, _ in hops) + (k - 1) * slow_alpha
    per_byte = (sum(1 / b for _, b in hops) + (k - 1) / slow_bw) / k
    return PathCost(latency, per_byte)


def pieces(path: Path, share: float, size_bytes: float, max_pieces: int = MAX_PIECES,
           capacity: Capacity | None = None) -> int:
    """Pipeline pieces that minimise :func:`path_cost`'s time: ``sqrt(x n R / a_*)`` with
    ``R`` the per-byte time of every hop but the slowest (one piece for one hop)."""
    hops = _hops(path, capacity)
    if len(hops) == 1 or share <= 0:
        return 1
    slow_alpha, slow_bw = max(hops, key=lambda h: (1 / h[1], h[0]))
    rest = sum(1 / b for _, b in hops) - 1 / slow_bw
    if slow_alpha <= 0:
        return max_pieces
    best = math.sqrt(share * size_bytes * rest / slow_alpha)
    return int(min(max_pieces, max(1, round(best))))


def closed_form(costs: Sequence[PathCost], size_bytes: float) -> np.ndarray:
    """Shares that make every path finish together (ExaMPI'25), for disjoint paths.

    ``x_i = (1/W_i)/S * (1 - D_i S/n + (1/n) sum_j D_j/W_j)`` with ``S = sum 1/W_j``; a
    path whose share comes out negative (its latency alone outlasts the rest) is dropped
    and the others solved again.
    """
    n = float(size_bytes)
    active = list(range(len(costs)))
    while active:
        inv = np.array([1 / costs[i].per_byte for i in active])
        lat = np.array([costs[i].latency for i in active])
        total = inv.sum()
        if n <= 0:
            share = inv / total
        else:
            share = inv / total * (1 - lat * total / n + (lat * inv).sum() / n)
        if (share >= 0).all():
            out = np.zeros(len(costs))
            out[active] = share
            return out
        active = [i for i, x in zip(active, share) if x > 0] or [active[int(np.argmin(lat))]]
    return np.zeros(len(costs))


def disjoint(paths: Sequence[Path]) -> bool:
    """Whether no link is crossed twice, by two paths or by two hops of one path."""
    uses: Counter = Counter()
    for path in paths:
        uses.update(path.link_uses)
    return all(count == 1 for count in uses.values())


def lp(paths: Sequence[Path], costs: Sequence[PathCost], size_bytes: float,
       topology: Topology, capacity: Capacity | None = None) -> np.ndarray:
    """Shares minimising the finish time ``T`` when paths share links.

    ``T >= D_i + x_i n W_i`` for every path, ``T >= d_l + n sum_i u_il x_i / b_l`` for
    every link crossed ``u_il`` times by path ``i`` (``d_l``: the least latency of a path
    on it), ``sum x = 1``; a tiny cost per byte-time breaks ties towards cheaper paths.
    """
    capacity = topology.bandwidths if capacity is None else capacity
    n = max(float(size_bytes), 1.0)
    count = len(paths)
    scale = n * min(c.per_byte for c in costs)  # times in units of the fastest path's
    rows, rhs = [], []
    for i, cost in enumerate(costs):
        row = np.zeros(count + 1)
        row[i], row[-1] = n * cost.per_byte / scale, -1.0
        rows.append(row)
        rhs.append(-cost.latency / scale)
    uses: dict[int, dict[int, int]] = {}
    for i, path in enumerate(paths):
        for link, times in path.link_uses.items():
            uses.setdefault(link, {})[i] = times
    for link, users in uses.items():
        if len(users) == 1 and next(iter(users.values())) == 1:
            continue  # one path, once: its own constraint covers it
        row = np.zeros(count + 1)
        for i, times in users.items():
            floor = topology.links[link].bandwidth * FLOOR
            row[i] = times * n / max(capacity[link], floor) / scale
        row[-1] = -1.0
        rows.append(row)
        rhs.append(-min(costs[i].latency for i in users) / scale)
    objective = np.zeros(count + 1)
    objective[-1] = 1.0
    objective[:-1] = 1e-6 * np.array([c.per_byte * n / scale for c in costs])
    equality = np.zeros(count + 1)
    equality[:-1] = 1.0
    x = _highs(objective, np.vstack([*rows, equality]), np.array([*rhs, 1.0]), len(rows),
               topology)
    shares = np.clip(x[:-1], 0.0, None)
    return shares / shares.sum()


def _highs(cost: np.ndarray, matrix: np.ndarray, upper: np.ndarray, inequalities: int,
           topology: Topology) -> np.ndarray:
    """Minimise ``cost @ x`` over ``x >= 0`` with rows ``< inequalities`` at most ``upper``
    and the rest equal to it (HiGHS, straight through highspy: a share LP is tiny and
    solved many times, so scipy's checks would cost more than the solve)."""
    import highspy
    import scipy.sparse

    from ccweave.solvers import quiet_highs

    csc = scipy.sparse.csc_array(matrix)
    lower = upper.copy()
    lower[:inequalities] = -highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_row_, lp.num_col_ = csc.shape
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(csc.shape[1])
    lp.col_upper_ = np.full(csc.shape[1], highspy.kHighsInf)
    lp.row_lower_, lp.row_upper_ = lower, upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_row_, lp.a_matrix_.num_col_ = csc.shape
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = \
        csc.indptr, csc.indices, csc.data
    highs = quiet_highs()
    highs.passModel(lp)
    highs.run()
    if highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        status = highs.modelStatusToString(highs.getModelStatus())
        raise SolverError(f"multipath share LP on {topology.name!r}: HiGHS says {status}")
    return np.asarray(highs.getSolution().col_value, dtype=float)


def solve(paths: Sequence[Path], size_bytes: float, topology: Topology,
          max_pieces: int = MAX_PIECES, rounds: int = 3,
          capacity: Capacity | None = None) -> tuple[np.ndarray, list[int]]:
    """Shares and pipeline pieces for ``paths``: closed form where they are disjoint, the
    LP where they share links, alternating with :func:`pieces` for ``rounds`` rounds.
    ``capacity`` replaces the links' bandwidths (what other traffic leaves of them)."""
    ks = [1] * len(paths)
    shared = not disjoint(paths)
    shares = np.zeros(len(paths))
    for _ in range(rounds):
        costs = [path_cost(p, k, capacity) for p, k in zip(paths, ks)]
        shares = lp(paths, costs, size_bytes, topology, capacity) if shared \
            else closed_form(costs, size_bytes)
        new = [pieces(p, x, size_bytes, max_pieces, capacity) for p, x in zip(paths, shares)]
        if new == ks:
            break
        ks = new
    return shares, ks
