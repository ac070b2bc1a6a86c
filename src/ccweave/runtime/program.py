"""Compile a Schedule into per-rank programs: ordered operations with local dependencies.

A transfer ``src -> dst`` becomes a SEND on ``src`` and a RECV on ``dst``; a local one
(``src == dst``) a LOCAL op. Each rank's ops follow one global topological order of the
schedule (lowest transfer index first), and each op depends on the earlier ops *of its
rank* that touch the same slots (last writer; readers since the last write). Every data
hazard is on some rank's slots, which only that rank's ops touch, so these local deps
are all the ordering correctness needs. An op also waits for its transfer's schedule
deps that this rank takes part in: pure ordering, but the order a strategy chose to
pipeline its chunks (a ring sends chunk k+1 after chunk k); without it a rank posts
every send it can at once, and on a connection, where messages go one after another,
the one the pipeline needs next waits behind them (8 ranks, hierarchical allreduce:
the first inter-node send waited 0.2 s for the intra-node ring's second step). Deps on
transfers elsewhere are enforced by the ranks that take part in them.

No deadlock by construction: ranks issue ops in the restriction of one global order, so
the first unfinished transfer of that order has both ends issued (its earlier ops are
done) and can complete; the executor relies on this when it blocks on its oldest op.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ccweave.collectives import Buffer
from ccweave.errors import InputError
from ccweave.schedule import Op, Schedule, topological_order


class OpKind(str, enum.Enum):
    """What one rank does for one transfer."""

    SEND = "send"
    RECV = "recv"
    LOCAL = "local"


@dataclass(frozen=True, slots=True)
class Slot:
    """``count`` consecutive chunks of one buffer, after in-place aliasing."""

    buffer: Buffer
    index: int
    count: int


@dataclass(frozen=True, slots=True)
class Operation:
    """One step of a rank's program.

    ``transfer`` is the schedule index (and the message tag); ``peer`` the other rank
    (the rank itself for LOCAL); ``src`` is read (SEND, LOCAL), ``dst`` written (RECV,
    LOCAL), and ``reduce`` combines into ``dst`` instead of overwriting it; a reducing
    RECV with a ``src`` writes ``src`` combined with the data received (a fused local
    copy); ``deps`` index earlier ops of the same program.
    """

    kind: OpKind
    transfer: int
    peer: int
    src: Slot | None
    dst: Slot | None
    reduce: bool
    deps: tuple[int, ...]
    channel: int
    via: tuple[str, ...] | None = None
    """The pinned route of the transfer (fabric nodes passed), ``None``: the cheapest."""

    @property
    def is_comm(self) -> bool:
        return self.kind is not OpKind.LOCAL


@dataclass(frozen=True)
class Program:
    """A rank's ordered operations for one schedule (what the executor runs)."""

    rank: int
    schedule: Schedule
    ops: tuple[Operation, ...]

    @property
    def peers(self) -> tuple[int, ...]:
        """Ranks this program exchanges messages with."""
        return tuple(sorted({op.peer for op in self.ops if op.is_comm}))

    def buffer_chunks(self, buffer: Buffer) -> int:
        """Chunks of ``buffer`` this rank's ops touch (0 when none)."""
        end = 0
        for op in self.ops:
            for slot in (op.src, op.dst):
                if slot is not None and slot.buffer is buffer:
                    end = max(end, slot.index + slot.count)
        return end


class _Hazards:
    """Last writer and readers since, per chunk of one rank, to derive local deps."""

    def __init__(self) -> None:
        self.writer: dict[tuple[Buffer, int], int] = {}
        self.readers: dict[tuple[Buffer, int], list[int]] = {}

    def deps(self, reads: Slot | None, writes: Slot | None) -> set[int]:
        """A reduce also reads its dst: the last-writer dep of a write covers that."""
        found: set[int] = set()
        for key in _chunks(reads):
            if key in self.writer:
                found.add(self.writer[key])
        for key in _chunks(writes):
            if key in self.writer:
                found.add(self.writer[key])
            found.update(self.readers.get(key, ()))
        return found

    def record(self, op_index: int, reads: Slot | None, writes: Slot | None) -> None:
        for key in _chunks(reads):
            self.readers.setdefault(key, []).append(op_index)
        for key in _chunks(writes):
            self.writer[key] = op_index
            self.readers[key] = []


def _chunks(slot: Slot | None) -> list[tuple[Buffer, int]]:
    if slot is None:
        return []
    return [(slot.buffer, slot.index + k) for k in range(slot.count)]


def compile_all(schedule: Schedule, fuse: bool = True) -> tuple[Program, ...]:
    """Every rank's program, in one pass over the schedule.

    ``fuse`` folds a local copy ``S -> D`` into the next op touching ``D`` when that op
    receives and reduces into exactly ``D`` (and nothing writes ``S`` in between): the
    received data is combined with ``S`` straight into ``D``, saving one pass over memory
    (the ring's "copy my input, then add my neighbour's").

    Raises ``InputError`` for a transfer naming a rank outside the collective or for a
    dependency cycle (a schedule that passed :func:`ccweave.verify.verify` has neither).
    """
    coll = schedule.collective
    n = coll.num_ranks
    raw: list[list[_Raw]] = [[] for _ in range(n)]

    def slot(rank: int, buffer: Buffer, index: int, count: int) -> Slot:
        if schedule.in_place:
            buffer, index = coll.in_place_alias(rank, buffer, index)
        return Slot(buffer, index, count)

    for index in topological_order(schedule.transfers):
        t = schedule.transfers[index]
        if not (0 <= t.src < n and 0 <= t.dst < n) or t.count < 1:
            raise InputError(f"transfer {index} ({t.src} -> {t.dst}, count {t.count}) names a "
                             f"rank outside 0..{n - 1} or a count below 1; run `ccweave "
                             "verify` on the schedule")
        src = slot(t.src, t.src_buffer, t.src_index, t.count)
        dst = slot(t.dst, t.dst_buffer, t.dst_index, t.count)
        reduce = t.op is Op.REDUCE
        if t.is_local:
            raw[t.src].append(_Raw(OpKind.LOCAL, index, t.src, src, dst, reduce, t.channel))
        else:
            raw[t.src].append(_Raw(OpKind.SEND, index, t.dst, src, None, False, t.channel,
                                   t.via))
            raw[t.dst].append(_Raw(OpKind.RECV, index, t.src, None, dst, reduce, t.channel,
                                   t.via))
    transfers = schedule.transfers
    programs = []
    for rank in range(n):
        entries, absorbed = _fuse(raw[rank]) if fuse else (raw[rank], {})
        hazards = _Hazards()
        ops = []
        where: dict[int, int] = {}  # transfer -> the op of this rank that carries it
        for number, entry in enumerate(entries):
            deps = hazards.deps(entry.src, entry.dst)
            hazards.record(number, entry.src, entry.dst)
            for carried in (entry.transfer, *absorbed.get(entry.transfer, ())):
                deps.update(where[d] for d in transfers[carried].deps if d in where)
                where[carried] = number
            deps.discard(number)
            ops.append(Operation(entry.kind, entry.transfer, entry.peer, entry.src, entry.dst,
                                 entry.reduce, tuple(sorted(deps)), entry.channel,
                                 entry.via))
        programs.append(Program(rank, schedule, tuple(ops)))
    return tuple(programs)


@dataclass(frozen=True, slots=True)
class _Raw:
    kind: OpKind
    transfer: int
    peer: int
    src: Slot | None
    dst: Slot | None
    reduce: bool
    channel: int
    via: tuple[str, ...] | None = None


def _touches(slot: Slot | None, other: Slot) -> bool:
    return (slot is not None and slot.buffer is other.buffer
            and slot.index < other.index + other.count and other.index < slot.index + slot.count)


def _fuse(entries: list[_Raw]) -> tuple[list[_Raw], dict[int, tuple[int, ...]]]:
    """Fold local copies into the receive-and-reduce that next updates their destination.

    Also returns, per receive that absorbed copies, the copies' transfers."""
    out = list(entries)
    dropped: set[int] = set()
    absorbed: dict[int, tuple[int, ...]] = {}
    for i, copy in enumerate(out):
        if copy.kind is not OpKind.LOCAL or copy.reduce:
            continue
        src, dst = copy.src, copy.dst
        assert src is not None and dst is not None
        if src != dst and _touches(src, dst):
            continue
        for j in range(i + 1, len(out)):
            other = out[j]
            if _touches(other.src, dst) or _touches(other.dst, dst):
                if (other.kind is OpKind.RECV and other.reduce and other.src is None
                        and other.dst == dst):
                    out[j] = _Raw(OpKind.RECV, other.transfer, other.peer, src, dst, True,
                                  other.channel, other.via)
                    dropped.add(i)
                    absorbed[other.transfer] = (*absorbed.get(other.transfer, ()),
                                                copy.transfer)
                break
            if _touches(other.dst, src):
                break
    return [entry for number, entry in enumerate(out) if number not in dropped], absorbed


def compile_program(schedule: Schedule, rank: int) -> Program:
    """Rank ``rank``'s program (see :func:`compile_all`)."""
    if not 0 <= rank < schedule.num_ranks:
        raise InputError(f"rank {rank} is not a rank of the schedule "
                         f"(0..{schedule.num_ranks - 1})")
    return compile_all(schedule)[rank]
