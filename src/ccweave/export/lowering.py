"""Pass 1: a Schedule as per-rank instructions (msccl-tools' instruction DAG).

A remote transfer becomes a send on its source rank and a receive (``r``, or ``rrc`` for
a reduction) on its destination; a local one a ``cpy`` or ``re``. An instruction waits
on *anchors*: instructions of its own rank. A dependency on a transfer that touches the
rank anchors on that transfer's instruction there (its receive or local step if it
writes there, its send if it only reads there, which happens when the send runs); a
dependency on a transfer elsewhere is replaced by that transfer's own dependencies, as
MSCCL orders steps only within a gpu.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace

from ccweave.collectives import Buffer
from ccweave.errors import InputError
from ccweave.export import msccl_spec as spec
from ccweave.schedule import Op, Schedule, Transfer

Slot = tuple[Buffer, int]


@dataclass(frozen=True)
class Instr:
    """One step-to-be of one rank.

    ``src``/``dst`` are what the runtime reads (local operand or source) and writes;
    ``recv``/``send``/``local`` are the transfers it carries; ``parts`` keeps the two
    instructions a fused one was made of.
    """

    rank: int
    code: str
    src: Slot
    dst: Slot
    count: int
    channel: int
    recv: int | None = None
    send: int | None = None
    local: int | None = None
    recv_peer: int = -1
    send_peer: int = -1
    parts: tuple[int, int] | None = None


@dataclass
class Program:
    """The instructions and what each waits on (``anchors``: instruction indices of the
    same rank, before fusion). ``alive`` marks instructions in use; ``fused_into`` maps
    the parts of a fused instruction to it."""

    schedule: Schedule
    instrs: list[Instr]
    anchors: list[frozenset[int]]
    send_of: dict[int, int] = field(default_factory=dict)
    recv_of: dict[int, int] = field(default_factory=dict)
    alive: list[bool] = field(default_factory=list)
    fused_into: dict[int, int] = field(default_factory=dict)

    def add(self, instr: Instr, anchors: frozenset[int]) -> int:
        self.instrs.append(instr)
        self.anchors.append(anchors)
        self.alive.append(True)
        return len(self.instrs) - 1

    def live(self) -> list[int]:
        return [i for i, keep in enumerate(self.alive) if keep]

    def fuse(self, fused: Instr, recv: int, send: int) -> int:
        """Replace ``recv`` and ``send`` by ``fused``, which waits on what both did."""
        index = self.add(fused, (self.anchors[recv] | self.anchors[send]) - {recv})
        self.alive[recv] = self.alive[send] = False
        self.fused_into[recv] = self.fused_into[send] = index
        return index

    def unfuse(self, fused: int) -> None:
        """Undo :meth:`fuse`: the parts come back, each waited on as before."""
        parts = self.instrs[fused].parts
        assert parts is not None
        self.alive[fused] = False
        for part in parts:
            self.alive[part] = True
            del self.fused_into[part]

    def waits(self, index: int) -> frozenset[int]:
        """Live instructions ``index`` waits on (anchors seen through fusions)."""
        return frozenset(self.fused_into.get(a, a) for a in self.anchors[index]) - {index}


def split_counts(schedule: Schedule, limit: int = spec.MAX_COUNT - 1) -> Schedule:
    """Cut transfers of more than ``limit`` chunks into pieces (MSCCL needs cnt < 72);
    whoever waited on the transfer waits on all its pieces."""
    if all(t.count <= limit for t in schedule.transfers):
        return schedule
    pieces: list[list[int]] = []
    rows: list[Transfer] = []
    for t in schedule.transfers:
        mine = []
        for start in range(0, t.count, limit):
            mine.append(len(rows))
            rows.append(replace(t, src_index=t.src_index + start, dst_index=t.dst_index + start,
                                count=min(limit, t.count - start)))
        pieces.append(mine)
    rows = [replace(t, deps=tuple(p for d in t.deps for p in pieces[d])) for t in rows]
    return replace(schedule, transfers=tuple(rows))


def transfer_order(transfers: tuple[Transfer, ...]) -> list[int]:
    """A topological order by time step: by the length of the longest dependency chain
    before a transfer (what could run at once comes together), then by index. Messages
    on a connection go in this order."""
    count = len(transfers)
    waiting = [len(set(t.deps)) for t in transfers]
    children: list[list[int]] = [[] for _ in range(count)]
    for index, t in enumerate(transfers):
        for dep in set(t.deps):
            if not 0 <= dep < count:
                raise InputError(f"transfer {index} depends on transfer {dep}, which does "
                                 f"not exist (the schedule has {count})")
            children[dep].append(index)
    level = [0] * count
    ready = [(0, i) for i in range(count) if waiting[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, index = heapq.heappop(ready)
        order.append(index)
        for child in children[index]:
            level[child] = max(level[child], level[index] + 1)
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, (level[child], child))
    if len(order) != count:
        raise InputError("the schedule's dependencies form a cycle; verify it first "
                         "(`ccweave verify`)")
    return order


def channel_of(t: Transfer, num_ranks: int, groups: int) -> int:
    """MSCCL channel of a transfer: its own, spread over ``groups`` channels by peer
    distance so no channel has more than 32 peers a rank sends to (or receives from)."""
    if t.src == t.dst or groups == 1:
        return t.channel * groups
    return t.channel * groups + ((t.dst - t.src) % num_ranks - 1) // spec.MAX_TBS_PER_CHANNEL


def channel_groups(num_ranks: int) -> int:
    return max(1, -(-(num_ranks - 1) // spec.MAX_TBS_PER_CHANNEL))


def lower(schedule: Schedule) -> Program:
    """Per-rank instructions for ``schedule`` (counts must already be below the limit)."""
    transfers = schedule.transfers
    order = transfer_order(transfers)
    groups = channel_groups(schedule.num_ranks)
    program = Program(schedule, [], [])
    at: dict[tuple[int, int], int] = {}  # (transfer, rank) -> instruction there
    memo: dict[tuple[int, int], frozenset[int]] = {}

    def anchors(t: Transfer, rank: int) -> frozenset[int]:
        found: set[int] = set()
        for dep in t.deps:
            found |= _anchor(dep, rank, transfers, at, memo)
        return frozenset(found)

    for index in order:
        t = transfers[index]
        src, dst = (t.src_buffer, t.src_index), (t.dst_buffer, t.dst_index)
        channel = channel_of(t, schedule.num_ranks, groups)
        if t.is_local:
            code = "re" if t.op is Op.REDUCE else "cpy"
            i = program.add(Instr(t.src, code, src, dst, t.count, channel, local=index),
                            anchors(t, t.src))
            at[(index, t.src)] = program.send_of[index] = program.recv_of[index] = i
            continue
        send = program.add(Instr(t.src, "s", src, dst, t.count, channel, send=index,
                                 send_peer=t.dst), anchors(t, t.src))
        code, local = ("rrc", dst) if t.op is Op.REDUCE else ("r", src)
        recv = program.add(Instr(t.dst, code, local, dst, t.count, channel, recv=index,
                                 recv_peer=t.src), anchors(t, t.dst))
        at[(index, t.src)], at[(index, t.dst)] = send, recv
        program.send_of[index], program.recv_of[index] = send, recv
    return program


def _anchor(dep: int, rank: int, transfers: tuple[Transfer, ...],
            at: dict[tuple[int, int], int],
            memo: dict[tuple[int, int], frozenset[int]]) -> frozenset[int]:
    """Instructions on ``rank`` that stand for "transfer ``dep`` is done" (iterative, as
    dependency chains through other ranks can be long)."""
    stack = [(dep, False)]
    while stack:
        d, expanded = stack.pop()
        if (d, rank) in memo:
            continue
        if (d, rank) in at:
            memo[(d, rank)] = frozenset({at[(d, rank)]})
            continue
        deps = transfers[d].deps
        if not expanded:
            stack.append((d, True))
            stack.extend((e, False) for e in deps if (e, rank) not in memo)
            continue
        found: set[int] = set()
        for e in deps:
            found |= memo[(e, rank)]
        memo[(d, rank)] = frozenset(found)
    return memo[(dep, rank)]
