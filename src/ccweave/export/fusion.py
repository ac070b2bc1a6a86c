"""Pass 2: fuse a receive with the send that forwards what it received.

``r`` + ``s`` of the same slot becomes ``rcs``; ``rrc`` + ``s`` becomes ``rrcs``, or
``rrs`` when nothing else reads the reduced value and a copy overwrites it next (so it
need not be stored: msccl-tools' rule). Legal when the send reads exactly what the receive
wrote and both use one channel; the fused step waits on what either part waited on, and
the threadblock pass splits it again if it cannot be placed without a deadlock.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ccweave.collectives import Buffer
from ccweave.export.lowering import Instr, Program, transfer_order
from ccweave.schedule import Op, Schedule, Transfer

Key = tuple[int, Buffer, int]


@dataclass(frozen=True)
class SlotHistory:
    """Who wrote what each transfer reads, who reads each written value, and what
    overwrites it next (for a race-free schedule, in any dependency order)."""

    read_from: dict[tuple[int, int], int | None]
    readers: dict[tuple[int, Key], list[int]]
    next_write: dict[tuple[int, Key], tuple[int, Op]]


def slot_history(schedule: Schedule, order: list[int]) -> SlotHistory:
    coll = schedule.collective

    def key(rank: int, buffer: Buffer, index: int) -> Key:
        if schedule.in_place:
            buffer, index = coll.in_place_alias(rank, buffer, index)
        return rank, buffer, index

    last: dict[Key, int] = {}
    read_from: dict[tuple[int, int], int | None] = {}
    readers: dict[tuple[int, Key], list[int]] = defaultdict(list)
    next_write: dict[tuple[int, Key], tuple[int, Op]] = {}
    for index in order:
        t = schedule.transfers[index]
        for k in range(t.count):
            slot = key(t.src, t.src_buffer, t.src_index + k)
            read_from[(index, k)] = last.get(slot)
            if slot in last:
                readers[(last[slot], slot)].append(index)
        for k in range(t.count):
            slot = key(t.dst, t.dst_buffer, t.dst_index + k)
            if slot in last:
                if t.op is Op.REDUCE:
                    readers[(last[slot], slot)].append(index)
                next_write.setdefault((last[slot], slot), (index, t.op))
            last[slot] = index
    return SlotHistory(read_from, dict(readers), next_write)


def fuse(program: Program) -> Program:
    """Fuse receive/send pairs; their parts retire (:meth:`Program.fuse`)."""
    schedule = program.schedule
    transfers = schedule.transfers
    order = transfer_order(transfers)
    history = slot_history(schedule, order)
    claimed: set[int] = set()
    for out in order:
        t_out = transfers[out]
        if t_out.is_local:
            continue
        t_in = _forwarded(history, transfers, out)
        if t_in is None:
            continue
        recv, send = program.recv_of[t_in], program.send_of[out]
        if recv in claimed or not _legal(program, recv, send):
            continue
        code = _fused_code(history, transfers, t_in, out, schedule)
        r, s = program.instrs[recv], program.instrs[send]
        local = r.dst
        fused = Instr(r.rank, code, r.src if code == "rcs" else local, local, r.count,
                      r.channel, recv=t_in, send=out, recv_peer=r.recv_peer,
                      send_peer=s.send_peer, parts=(recv, send))
        program.fuse(fused, recv, send)
        claimed.add(recv)
    return program


def forwards(schedule: Schedule, order: list[int]) -> dict[int, int]:
    """Remote transfer -> the remote transfer whose whole written range it sends on (the
    pairs :func:`fuse` may make one step)."""
    history = slot_history(schedule, order)
    found = {}
    for out in order:
        if not schedule.transfers[out].is_local:
            t_in = _forwarded(history, schedule.transfers, out)
            if t_in is not None:
                found[out] = t_in
    return found


def _forwarded(history: SlotHistory, transfers: tuple[Transfer, ...], out: int) -> int | None:
    """The remote transfer whose whole written range ``out`` sends on, if one is."""
    t_out = transfers[out]
    writers = {history.read_from[(out, k)] for k in range(t_out.count)}
    if len(writers) != 1:
        return None
    t_in = writers.pop()
    if t_in is None:
        return None
    w = transfers[t_in]
    if w.is_local or w.dst != t_out.src or w.count != t_out.count:
        return None
    return t_in  # every chunk read was written by t_in, and the sizes agree


def _legal(program: Program, recv: int, send: int) -> bool:
    """Both parts unfused and on one channel (a threadblock has one); whether the fused
    step can be placed is the scheduler's call (:mod:`.threadblocks`)."""
    r, s = program.instrs[recv], program.instrs[send]
    return program.alive[recv] and program.alive[send] and r.channel == s.channel


def _fused_code(history: SlotHistory, transfers: tuple[Transfer, ...], t_in: int, out: int,
                schedule: Schedule) -> str:
    w = transfers[t_in]
    if w.op is Op.COPY:
        return "rcs"
    coll = schedule.collective
    for k in range(w.count):
        buffer, index = w.dst_buffer, w.dst_index + k
        if schedule.in_place:
            buffer, index = coll.in_place_alias(w.dst, buffer, index)
        slot = (w.dst, buffer, index)
        after = history.next_write.get((t_in, slot))
        if history.readers.get((t_in, slot)) != [out] or after is None or after[1] is Op.REDUCE:
            return "rrcs"
    return "rrs"
