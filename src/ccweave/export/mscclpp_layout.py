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
from ccweave.export.mscclpp_spec import Channel


@dataclass(frozen=True)
class Sync:
    """Action ``before`` must be done before action ``after`` starts."""

    before: int
    after: int


class Layout:
    """Threadblocks of actions (global ids; ``tb_rank`` says whose), each action's
    ``place`` (threadblock, position), and the syncs the order leaves to add.

    ``budget``: operations a threadblock may hold (its actions, a nop before each, and an
    estimate of the waits and signals around them); an action joins a threadblock only
    while it has room for :data:`ROOM` more.
    """

    def __init__(self, acts: list[Action], order: list[int], budget: int, limit: int | None,
                 times: tuple[list[float], list[float]] | None = None,
                 kinds: dict[tuple[int, int], Channel] | None = None) -> None:
        self.acts, self.budget, self.limit, self.times = acts, budget, limit, times
        self.kinds = kinds or {}
        self.tbs: list[list[int]] = []
        self.tb_rank: list[int] = []
        self.place: list[tuple[int, int]] = [(-1, -1)] * len(acts)
        self.syncs: list[Sync] = []
        self._build(order)

    def count(self, rank: int) -> int:
        return sum(r == rank for r in self.tb_rank)

    def _build(self, order: list[int]) -> None:
        acts = self.acts
        width = 256
        clocks: dict[int, np.ndarray] = {}  # actions some later action depends on
        tails: list[np.ndarray] = []  # per threadblock, the clock after its last action
        self.ops = np.zeros(width, np.int64)  # per threadblock, operations so far
        self.tail_pos = np.full(width, -1, np.int64)
        self.tail_depth = np.zeros(width, np.int64)
        self.by_rank: dict[int, list[int]] = defaultdict(list)
        posts: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])  # memory, port, semaphore
        waiting = [0] * len(acts)
        for a in acts:
            for d in set(a.deps):
                waiting[d] += 1
        depth = [0] * len(acts)
        for index in order:
            a = acts[index]
            depth[index] = 1 + max((depth[d] for d in a.deps), default=0)
            if len(self.tbs) >= width:
                width *= 2
                clocks = {k: _grow(v, width) for k, v in clocks.items()}
                tails = [_grow(v, width) for v in tails]
                self.ops = _grow(self.ops, width, 0)
                self.tail_pos = _grow(self.tail_pos, width)
                self.tail_depth = _grow(self.tail_depth, width, 0)
            known = np.full(width, -1, np.int64)
            for d in a.deps:
                np.maximum(known, clocks[d], out=known)
            tb = self._choose(index, a.rank, known)
            if tb is None:
                tb = len(self.tbs)
                self.tbs.append([])
                self.tb_rank.append(a.rank)
                self.by_rank[a.rank].append(tb)
                tails.append(np.full(width, -1, np.int64))
                self.ops[tb] = 2  # the barriers that open and close it
            start = tails[tb].copy()
            pre = [0, 0, 0]  # waits on memory and port channels, acquires
            for d in sorted(set(a.deps), key=lambda d: -int(clocks[d].sum())):
                dtb, dpos = self.place[d]
                if start[dtb] >= dpos:
                    continue
                if d not in a.implicit:
                    self.syncs.append(Sync(d, index))
                    kind = self._kind(acts[d].rank, a.rank)
                    pre[kind] += 1
                    before = _post_ops(posts[d])
                    posts[d][kind] += 1
                    self.ops[dtb] += _post_ops(posts[d]) - before
                np.maximum(start, clocks[d], out=start)
            self.ops[tb] += 2 + _groups(pre[0], 8) + _groups(pre[1], 8) + _groups(pre[2], 16)
            pos = len(self.tbs[tb])
            start[tb] = pos
            self.tbs[tb].append(index)
            self.place[index] = (tb, pos)
            self.tail_pos[tb], self.tail_depth[tb] = pos, depth[index]
            tails[tb] = start
            if waiting[index]:
                clocks[index] = start
            for d in set(a.deps):
                waiting[d] -= 1
                if waiting[d] == 0:
                    del clocks[d]

    def _kind(self, a: int, b: int) -> int:
        """0: a memory channel, 1: a port channel, 2: a semaphore (one rank)."""
        if a == b:
            return 2
        return 1 if self.kinds.get((a, b)) is Channel.PORT else 0

    def _choose(self, index: int, rank: int, known: np.ndarray) -> int | None:
        """A threadblock whose tail this action depends on (the deepest); past the limit,
        the one free latest before it starts, else the one free first; ``None``: a new
        threadblock."""
        ids = np.asarray(self.by_rank[rank], dtype=np.int64)
        if not ids.size:
            return None
        room = self.ops[ids] + ROOM <= self.budget
        chained = room & (known[ids] >= self.tail_pos[ids])
        if chained.any():
            pick = ids[chained]
            return int(pick[np.argmax(self.tail_depth[pick])])
        if self.limit is None or ids.size < self.limit or self.times is None:
            return None
        if not room.any():
            return None  # every threadblock is full: the limit is exceeded, said later
        start, finish = self.times
        open_ = ids[room]
        free_at = np.array([finish[self.tbs[tb][-1]] for tb in open_])
        free = free_at <= start[index]
        if free.any():  # prefer where its deps run (no sync), then the one freed last
            holds = {self.place[d][0] for d in self.acts[index].deps}
            score = [(tb in holds, at) for tb, at in zip(open_[free], free_at[free])]
            return int(open_[free][max(range(len(score)), key=score.__getitem__)])
        return int(open_[np.argmin(free_at)])


ROOM = 8
"""Operations an action may add to its threadblock: the nop and the operation, and room
for the waits and semaphores before it."""


def _groups(count: int, per: int) -> int:
    return -(-count // per)


def _post_ops(post: list[int]) -> int:
    """Operations after an action for its signals and releases: a nop, then the signals
    8 per operation and channel type, the releases 16."""
    memory, port, releases = post
    if not any(post):
        return 0
    return 1 + _groups(memory, 8) + _groups(port, 8) + _groups(releases, 16)


def _grow(values: np.ndarray, width: int, fill: int = -1) -> np.ndarray:
    return np.concatenate([values, np.full(width - values.size, fill, np.int64)])
