"""Pass 1: channels on which a threadblock's order is one the schedule already has.

MSCCL runs a threadblock's steps one after another, and a connection (sender, receiver,
channel) has one threadblock at each end: two transfers of one connection that the
schedule lets run at once would wait on each other there. This pass deals each
connection's transfers into *lanes*, in which every transfer comes after the one before
(it depends on it through some path, or by an estimate of when each runs it starts once
the other ends), and gives each lane a channel of its own. A transfer that forwards what
another brought takes that one's lane where it can, so the two can become one fused step
(:mod:`.fusion`), as msccl-tools lays out a ring.

When the machine is known, when each transfer may start and ends comes from simulating
the schedule on it at both ends of the sizes the XML serves (a slow link's latency, a
shared link's bandwidth). Without it, the estimate knows no topology: a transfer takes
its count in time, latency and shared bandwidth aside, local ones none; where a schedule
overlaps the latency of transfers the estimate puts one after another (a ring's two
phases over the slow link between two nodes), they share a lane, and
benchmarks/gpu_stacks.py (section mscclpp) prints what that costs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from ccweave.schedule import Schedule, Transfer
from ccweave.topology.model import Topology


class Reach:
    """Whether one transfer depends on another through any path of dependencies, and
    when each starts and ends by the estimate (``start``, ``finish``: in chunks).

    A search back from the later transfer through transfers of a higher dependency level
    than the earlier one (nothing at or below its level depends on it); answers are kept.
    ``timed``: when the machine is known, the schedule simulated on it at some sizes
    (:func:`timings`): then whether one transfer starts once another ends is judged by
    those times at every size, instead of by the estimate.
    """

    def __init__(self, transfers: tuple[Transfer, ...], order: list[int],
                 timed: tuple[Timing, ...] = ()) -> None:
        self.timed = timed
        self.deps = [tuple(set(t.deps)) for t in transfers]
        self.level = [0] * len(transfers)
        self.start: list[float] = [0] * len(transfers)
        self.finish: list[float] = [0] * len(transfers)
        for index in order:
            self.level[index] = max((self.level[d] + 1 for d in self.deps[index]), default=0)
            self.start[index] = max((self.finish[d] for d in self.deps[index]), default=0)
            self.finish[index] = self.start[index] + (0 if transfers[index].is_local
                                                      else transfers[index].count)
        self._known: dict[tuple[int, int], bool] = {}

    def after(self, before: int, after: int) -> bool:
        """``after`` can run once ``before`` is done at no cost: it depends on it, or by
        every one of :meth:`estimates` it may start no earlier than ``before`` ends."""
        return all(finish[before] <= start[after] * SLACK
                   for start, finish in self.estimates()) or self.precedes(before, after)

    def estimates(self) -> tuple[Timing, ...]:
        """When each transfer may start and when it ends: by each simulation if the
        machine is known, else by the estimate."""
        return self.timed or ((self.start, self.finish),)

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


Timing = tuple[list[float], list[float]]
"""When each transfer may start (its dependencies done) and when it ends, in seconds."""
SLACK = 1 + 1e-9
"""Simulated times that agree but for rounding count as one after the other."""


def timings(schedule: Schedule, topology: Topology, sizes: tuple[float, ...]
            ) -> tuple[Timing, ...]:
    """``schedule`` simulated on ``topology`` at each of ``sizes``: when each transfer
    may start and when it ends (what :class:`Reach` judges lanes by)."""
    from ccweave.simulate import simulate

    found = []
    for size in sizes:
        result = simulate(schedule, topology, size)
        found.append((result.ready.tolist(), result.finish.tolist()))
    return tuple(found)


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
    lane whose last transfer is earliest in dependency order, of those the one holding
    fewest transfers (transfers free at once are dealt round the lanes, not piled on the
    first), and waits on it there.
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
                       key=lambda k: (reach.level[ends[k][-1]], len(ends[k]), k))
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
