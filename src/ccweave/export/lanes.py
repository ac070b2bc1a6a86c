"""Pass 1: channels on which a threadblock's order is one the schedule already has.

MSCCL runs a threadblock's steps one after another, and a connection (sender, receiver,
channel) has one threadblock at each end: two transfers of one connection that the
schedule lets run at once would wait on each other there. This pass deals each
connection's transfers into *lanes*, in which every transfer comes after the one before
(it depends on it through some path, or by an estimate of when each runs it starts once
the other ends), and gives each lane a channel of its own. A transfer that forwards what
another brought takes that one's lane where it can, so the two can become one fused step
(:mod:`.fusion`), as msccl-tools lays out a ring.

The estimate knows no topology: a transfer takes its count in time, latency and shared
bandwidth aside, local ones none. Where a schedule overlaps the latency of transfers the
estimate puts one after another (a ring's first two steps over a slow link), they share a
lane: benchmarks/gpu_stacks.py (section mscclpp) prints what that costs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from ccweave.schedule import Schedule, Transfer


class Reach:
    """Whether one transfer depends on another through any path of dependencies, and
    when each starts and ends by the estimate (``start``, ``finish``: in chunks).

    A search back from the later transfer through transfers of a higher dependency level
    than the earlier one (nothing at or below its level depends on it); answers are kept.
    """

    def __init__(self, transfers: tuple[Transfer, ...], order: list[int]) -> None:
        self.deps = [tuple(set(t.deps)) for t in transfers]
        self.level = [0] * len(transfers)
        self.start = [0] * len(transfers)
        self.finish = [0] * len(transfers)
        for index in order:
            self.level[index] = max((self.level[d] + 1 for d in self.deps[index]), default=0)
            self.start[index] = max((self.finish[d] for d in self.deps[index]), default=0)
            self.finish[index] = self.start[index] + (0 if transfers[index].is_local
                                                      else transfers[index].count)
        self._known: dict[tuple[int, int], bool] = {}

    def after(self, before: int, after: int) -> bool:
        """``after`` can run once ``before`` is done at no cost: it depends on it, or it
        starts no earlier than ``before`` ends when every transfer starts as soon as its
        dependencies are done and takes its count in time (no bandwidth shared)."""
        return self.finish[before] <= self.start[after] or self.precedes(before, after)

    def precedes(self, before: int, after: int) -> bool:
        """``after`` depends on ``before`` (directly or through others)."""
        if self.level[before] >= self.level[after]:
            return False
        found = self._known.get((before, after))
        if found is None:
            found = self._known[(before, after)] = self._search(before, after)
        return found

    def _search(self, before: int, after: int) -> bool:
        floor = self.level[before]
        deps, level = self.deps, self.level
        stack, seen = [after], {after}
        while stack:
            for dep in deps[stack.pop()]:
                if dep == before:
                    return True
                if dep not in seen and level[dep] > floor:
                    seen.add(dep)
                    stack.append(dep)
        return False


@dataclass(frozen=True)
class Dealt:
    """The schedule with its transfers on their lanes' channels, and the most lanes one
    connection took."""

    schedule: Schedule
    widest: int


def deal(schedule: Schedule, order: list[int], reach: Reach, forwards: dict[int, int],
         most: int | None = None, longest: int | None = None) -> Dealt:
    """``schedule`` with each remote transfer on the channel of its lane.

    ``order``: the transfers in dependency order; ``forwards``: transfer -> the remote
    transfer whose data it sends on (a fusion candidate). ``most`` caps the lanes of a
    connection (MSCCL's channels and threadblocks are few): past it a transfer joins the
    lane whose last transfer is earliest in dependency order, and waits on it there.
    ``longest`` caps the transfers of a lane (MSCCL's steps per threadblock): a full lane
    is continued on another. Lanes of one schedule channel become consecutive channels;
    local transfers keep theirs (they need no connection).
    """
    transfers = schedule.transfers
    lanes: dict[tuple[int, int, int], dict[int, list[int]]] = defaultdict(dict)
    lane_of: dict[int, int] = {}
    for index in order:
        t = transfers[index]
        if t.is_local:
            continue
        ends = lanes[(t.src, t.dst, t.channel)]  # lane -> its transfers
        full = {k for k, held in ends.items() if longest is not None and len(held) >= longest}
        fitting = [k for k, held in ends.items()
                   if k not in full and reach.after(held[-1], index)]
        wanted = lane_of.get(forwards.get(index, -1))
        if wanted is not None and (wanted in fitting or wanted not in ends):
            lane = wanted
        elif fitting:
            lane = max(fitting, key=lambda k: reach.level[ends[k][-1]])
        elif most is not None and len(ends) - len(full) >= most:
            lane = min((k for k in ends if k not in full),
                       key=lambda k: (reach.level[ends[k][-1]], k))
        else:
            lane = next(k for k in range(len(ends) + 1) if k not in ends)
        ends.setdefault(lane, []).append(index)
        lane_of[index] = lane
    widest = max((len(ends) for ends in lanes.values()), default=1)
    if all(lane == 0 for lane in lane_of.values()):
        return Dealt(schedule, widest)
    width = 1 + max(lane_of.values())
    rows = tuple(replace(t, channel=t.channel * width + lane_of.get(i, 0))
                 for i, t in enumerate(transfers))
    used = sorted({t.channel for t in rows})
    compact = {channel: k for k, channel in enumerate(used)}
    return Dealt(replace(schedule, transfers=tuple(replace(t, channel=compact[t.channel])
                                                   for t in rows)), widest)
