"""Pass 3 of the MSCCL++ export: operations into threadblocks, and the syncs they need.

A threadblock runs its operations one after another, so an operation best joins a
threadblock whose last operation it depends on already: that order is one the schedule
has, and costs nothing at any size (a *chain*). Vector clocks (per threadblock, the last
position known done) say which tails an operation depends on, through any path; each
dependency the clock does not already cover becomes a sync: a ``signal``/``wait`` from
another rank, a ``sem_release``/``sem_acquire`` from another threadblock of the rank,
or nothing where the operation reads the other's packets (their flags order it).

The executor spins in every threadblock, so all must be resident at once: past
``limit`` threadblocks on a rank, an operation joins the threadblock that frees up
latest before it starts in the schedule's simulated timeline (no wait at that size), or
else the one that frees up first (a wait the export adds; the benchmark prints it).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ccweave.export.mscclpp_actions import Action


@dataclass(frozen=True)
class Sync:
    """Action ``before`` must be done before action ``after`` starts."""

    before: int
    after: int


class Layout:
    """Threadblocks of actions (global ids; ``tb_rank`` says whose), each action's
    ``place`` (threadblock, position), and the syncs the order leaves to add."""

    def __init__(self, acts: list[Action], order: list[int], cap: int, limit: int | None,
                 times: tuple[list[float], list[float]] | None = None) -> None:
        self.acts, self.cap, self.limit, self.times = acts, cap, limit, times
        self.tbs: list[list[int]] = []
        self.tb_rank: list[int] = []
        self.place: list[tuple[int, int]] = [(-1, -1)] * len(acts)
        self.syncs: list[Sync] = []
        self._build(order)

    def count(self, rank: int) -> int:
        return sum(r == rank for r in self.tb_rank)

    def _build(self, order: list[int]) -> None:
        acts = self.acts
        width = 64
        clocks: dict[int, np.ndarray] = {}  # actions some later action depends on
        tails: list[np.ndarray] = []  # per threadblock, the clock after its last action
        waiting = [0] * len(acts)
        for a in acts:
            for d in set(a.deps):
                waiting[d] += 1
        depth = [0] * len(acts)
        by_rank: dict[int, list[int]] = defaultdict(list)
        for index in order:
            a = acts[index]
            depth[index] = 1 + max((depth[d] for d in a.deps), default=0)
            if len(self.tbs) >= width:
                width *= 2
                clocks = {k: _grow(v, width) for k, v in clocks.items()}
                tails = [_grow(v, width) for v in tails]
            known = np.full(width, -1, np.int64)
            for d in a.deps:
                np.maximum(known, clocks[d], out=known)
            tb = self._choose(index, by_rank[a.rank], known, depth)
            if tb is None:
                tb = len(self.tbs)
                self.tbs.append([])
                self.tb_rank.append(a.rank)
                by_rank[a.rank].append(tb)
                tails.append(np.full(width, -1, np.int64))
            start = tails[tb].copy()
            for d in sorted(set(a.deps), key=lambda d: -int(clocks[d].sum())):
                dtb, dpos = self.place[d]
                if start[dtb] >= dpos:
                    continue
                if d not in a.implicit:
                    self.syncs.append(Sync(d, index))
                np.maximum(start, clocks[d], out=start)
            pos = len(self.tbs[tb])
            start[tb] = pos
            self.tbs[tb].append(index)
            self.place[index] = (tb, pos)
            tails[tb] = start
            if waiting[index]:
                clocks[index] = start
            for d in set(a.deps):
                waiting[d] -= 1
                if waiting[d] == 0:
                    del clocks[d]

    def _choose(self, index: int, candidates: list[int], known: np.ndarray,
                depth: list[int]) -> int | None:
        """A threadblock whose tail this action depends on (the deepest); past the limit,
        the one free latest before it starts, else the one free first; ``None``: a new
        threadblock."""
        open_ = [tb for tb in candidates if len(self.tbs[tb]) < self.cap]
        chained = [tb for tb in open_ if known[tb] >= len(self.tbs[tb]) - 1]
        if chained:
            return max(chained, key=lambda tb: depth[self.tbs[tb][-1]])
        if self.limit is None or len(candidates) < self.limit or self.times is None:
            return None
        start, finish = self.times
        if not open_:
            return None  # every threadblock is full: the limit is exceeded, said later
        free = [tb for tb in open_ if finish[self.tbs[tb][-1]] <= start[index]]
        if free:
            return max(free, key=lambda tb: finish[self.tbs[tb][-1]])
        return min(open_, key=lambda tb: finish[self.tbs[tb][-1]])


def _grow(clock: np.ndarray, width: int) -> np.ndarray:
    return np.concatenate([clock, np.full(width - clock.size, -1, np.int64)])
