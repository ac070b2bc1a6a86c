"""The MSCCL XML export passes in order, with lanes that fit MSCCL's limits.

Counts are split (:func:`.lowering.split_counts`), transfers dealt into lanes
(:mod:`.lanes`), lowered to instructions (:mod:`.lowering`), fused (:mod:`.fusion`),
laid out on threadblocks (:mod:`.threadblocks`) and given their waits
(:mod:`.dependencies`). Lanes cost channels and threadblocks: where a schedule keeps
more transfers of one connection in flight than MSCCL's channels (32), threadblocks (216
per GPU, 128 that can be waited on) or steps (256 per threadblock) allow, the lanes of a
connection are capped, the most that fit (:attr:`Lowered.capped`), and the transfers past
the cap wait on each other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ccweave.export import msccl_spec as spec
from ccweave.export.dependencies import Step, infer
from ccweave.export.fusion import forwards, fuse
from ccweave.export.lanes import Reach, deal, timings
from ccweave.export.lowering import (
    Program,
    channel_groups,
    lower,
    split_counts,
    transfer_order,
)
from ccweave.export.threadblocks import Layout, assign
from ccweave.schedule import Schedule
from ccweave.topology.model import Topology

Steps = tuple[tuple[tuple[Step, ...], ...], ...]


@dataclass(frozen=True)
class Lowered:
    """What the passes made: the schedule as dealt (counts split, transfers on their
    MSCCL channels), its instructions, threadblocks and steps; ``capped``: the lanes a
    connection was held to (at most one a channel MSCCL has; ``None``: no cap) and
    ``longest`` the transfers a lane was held to; ``overflow``: the limit the result still
    breaks ('' if none); ``held_by``: the limit the wider lanes tried before broke, for
    which they were held to ``capped`` ('' if none was)."""

    schedule: Schedule
    program: Program
    layout: Layout
    steps: Steps
    capped: int | None
    longest: int | None
    overflow: str
    held_by: str = ""


def run(schedule: Schedule, topology: Topology | None = None,
        sizes: tuple[float, ...] = ()) -> Lowered:
    """Lower ``schedule``: with a lane for every transfer it runs at once where MSCCL's
    limits allow, else with the most lanes per connection that fit (and lanes short
    enough for a threadblock's steps); past :data:`TRIES` attempts, or at once where no
    lanes can fit (:func:`fewest_elements`), with one lane per connection (the schedule's
    own channels), whatever limit that breaks. A connection never gets more lanes than
    MSCCL has channels, so each attempt's work grows with the transfers, not their
    square. ``topology`` and ``sizes``: the machine, and the sizes at which which
    transfers run at once is judged by simulating the schedule there (:class:`.Reach`);
    without them, by an estimate that knows no topology."""
    sched = split_counts(schedule)
    order = transfer_order(sched.transfers)
    fwd = forwards(sched, order)
    if fewest_elements(sched) > spec.MAX_NODES:  # no lanes can fit: refuse at once
        return _attempt(sched, order, Reach(sched.transfers, order), fwd, 1, None)
    timed = timings(sched, topology, sizes) if topology is not None else ()
    reach = Reach(sched.transfers, order, timed)
    most: int | None = spec.MAX_CHANNELS // channel_groups(sched.num_ranks)
    longest: int | None = None
    broke = ""
    wider: int | None = None  # the narrowest cap that broke a limit other than steps
    for _ in range(TRIES):
        most = _fitting(sched, order, reach, fwd, most, longest)
        result = _attempt(sched, order, reach, fwd, most, longest)
        if not result.overflow:
            if wider is not None and most is not None:
                result = _widest_fitting(sched, order, reach, fwd, result, wider, longest)
            return replace(result, held_by=broke)
        broke = result.overflow
        if result.overflow.endswith(STEPS):
            longest = _shorter(result, longest)
        elif most == 1:
            break
        else:
            wider = most
            most = max(1, min(most or spec.MAX_CHANNELS, _widest(result.schedule)) // 2)
    if (result.capped, result.longest) == (1, None):
        return result  # the last attempt was the fallback itself
    return replace(_attempt(sched, order, reach, fwd, 1, None), held_by=broke)


TRIES = 6
"""Attempts at fitting lanes within MSCCL's limits before one lane per connection."""


def _widest_fitting(sched: Schedule, order: list[int], reach: Reach, fwd: dict[int, int],
                    fitting: Lowered, wider: int, longest: int | None) -> Lowered:
    """Between ``fitting``'s cap and ``wider`` (a cap that broke a limit), the lowering
    with the most lanes that fits, by bisection: halving the cap skips the caps between
    (dgx-a100:2's trees allreduce broke MSCCL's limits at 6 lanes, fitted at 3 and 4)."""
    low, high = fitting.capped or 1, wider - 1
    best = fitting
    while low < high:
        middle = (low + high + 1) // 2
        result = _attempt(sched, order, reach, fwd, middle, longest)
        if result.overflow:
            high = middle - 1
        else:
            low, best = middle, result
    return best


def fewest_elements(sched: Schedule) -> int:
    """The fewest XML elements any lowering of ``sched`` gives one GPU: the header, the
    gpus, a threadblock, and a step per local transfer plus one per received or sent one,
    whichever are more (a fused step carries one of each). Past MSCCL's parser limit, no
    choice of lanes can fit, and trying them costs an attempt each."""
    local = [0] * sched.num_ranks
    sent = [0] * sched.num_ranks
    received = [0] * sched.num_ranks
    for t in sched.transfers:
        if t.is_local:
            local[t.src] += 1
        else:
            sent[t.src] += 1
            received[t.dst] += 1
    steps = max((local[r] + max(sent[r], received[r]) for r in range(sched.num_ranks)),
                default=0)
    return 2 + sched.num_ranks + steps


def _fitting(sched: Schedule, order: list[int], reach: Reach, fwd: dict[int, int],
             most: int | None, longest: int | None) -> int | None:
    """The largest cap on a connection's lanes, at most ``most``, whose channels fit
    MSCCL's (``most`` itself when they do; 1 when none does)."""
    def fits(cap: int | None) -> bool:
        dealt = deal(sched, order, reach, fwd, cap, longest)
        return _channels(dealt.schedule) <= spec.MAX_CHANNELS

    if fits(most):
        return most
    low, high = 1, (most or deal(sched, order, reach, fwd, None, longest).widest) - 1
    while low < high:  # the largest cap that fits lies in [low, high]
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _attempt(sched: Schedule, order: list[int], reach: Reach, fwd: dict[int, int],
             most: int | None, longest: int | None) -> Lowered:
    dealt = deal(sched, order, reach, fwd, most, longest)
    program = fuse(lower(dealt.schedule))
    layout = assign(program, reach)
    steps = infer(program, layout)
    overflow = _overflow(dealt.schedule, layout, steps)
    return Lowered(dealt.schedule, program, layout, steps, most, longest, overflow)


def _channels(dealt: Schedule) -> int:
    return (1 + max((t.channel for t in dealt.transfers), default=0)) * \
        channel_groups(dealt.num_ranks)


def _widest(dealt: Schedule) -> int:
    """The most channels one connection's transfers took."""
    seen: dict[tuple[int, int], set[int]] = {}
    for t in dealt.transfers:
        if not t.is_local:
            seen.setdefault((t.src, t.dst), set()).add(t.channel)
    return max((len(c) for c in seen.values()), default=1)


def _shorter(lowered: Lowered, longest: int | None) -> int:
    """A cap on a lane's transfers that brings the longest threadblock within MSCCL's
    steps in proportion (nops included), and at most 3/4 of the cap before."""
    most = max(len(tb) for rank in lowered.steps for tb in rank)
    held = max((len(tb.instrs) for rank in lowered.layout.tbs for tb in rank), default=1)
    cap = max(1, held * spec.MAX_STEPS // most - 1)
    return cap if longest is None else max(1, min(cap, longest * 3 // 4))


def _overflow(dealt: Schedule, layout: Layout, steps: Steps) -> str:
    """The first of MSCCL's limits the lowered schedule breaks ('' if none): those that
    more lanes break (channels, threadblocks, the parser's elements, waits, peers on a
    channel) before a threadblock's steps."""
    channels = _channels(dealt)
    if channels > spec.MAX_CHANNELS:
        return f"{channels} channels"
    for rank, blocks in enumerate(layout.tbs):
        if len(blocks) > spec.MAX_THREADBLOCKS:
            return f"gpu {rank}: {len(blocks)} threadblocks"
        elements = 1 + len(layout.tbs) + len(blocks) + sum(map(len, steps[rank]))
        if elements > spec.MAX_NODES:
            return f"gpu {rank}: {elements} elements in the XML"
        if any(st.depid > spec.MAX_DEPID for tb_steps in steps[rank] for st in tb_steps):
            return f"gpu {rank}: a wait on threadblock {spec.MAX_DEPID + 1} or later"
        for role in ("send", "recv"):
            per_channel: dict[int, int] = {}
            for tb in blocks:
                if getattr(tb, role) >= 0:
                    per_channel[tb.chan] = per_channel.get(tb.chan, 0) + 1
            if max(per_channel.values(), default=0) > spec.MAX_TBS_PER_CHANNEL:
                return f"gpu {rank}: over {spec.MAX_TBS_PER_CHANNEL} {role} peers on a channel"
    for rank, blocks in enumerate(steps):
        longest = max((len(tb_steps) for tb_steps in blocks), default=0)
        if longest > spec.MAX_STEPS:
            return f"gpu {rank}: a threadblock of {longest} {STEPS}"
    return ""


STEPS = "steps"
"""The word :func:`_overflow` ends a threadblock's step overflow with."""
