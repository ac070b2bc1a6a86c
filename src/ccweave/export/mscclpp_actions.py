"""Pass 2 of the MSCCL++ export: each transfer as the operations the executor runs.

Simple: a copy to a peer is a ``put`` by the sender (memory channel) or a ``pwsf`` (port
channel: put, signal, flush); a reduction from a peer is a ``rre`` by the receiver (it
reads the peer's memory), or across a port channel a ``pwsf`` into the receiver's scratch
and a local ``re``. LL: every remote transfer goes as packets into the receiver's scratch
(``ppkt``; across a port channel ``cpkt`` then ``rppkt``, whose proxy put carries the
flags), where the receiver unpacks (``upkt``) or reduces (``repkt``) it: a packet read
waits for its flag, so no signal orders it. Local transfers are ``copy`` and ``re``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccweave.collectives import Buffer
from ccweave.export import mscclpp_spec as spec
from ccweave.export.mscclpp_spec import Channel, OpName
from ccweave.schedule import Op as TransferOp
from ccweave.schedule import Schedule, Transfer, topological_order
from ccweave.topology.model import NodeKind, Topology


@dataclass(frozen=True)
class Ref:
    """``count`` chunks from ``index`` of a rank's buffer; ``packets``: LL packet form."""

    rank: int
    buffer: Buffer
    index: int
    count: int
    packets: bool = False


@dataclass
class Action:
    """One data operation: run by ``rank``; ``deps``: actions that must be done first;
    ``implicit``: those of them whose packets it reads (their flags order it)."""

    rank: int
    name: OpName
    src: tuple[Ref, ...]
    dst: tuple[Ref, ...]
    channel: Channel | None
    transfer: int
    deps: list[int] = field(default_factory=list)
    implicit: set[int] = field(default_factory=set)

    @property
    def peer(self) -> int | None:
        """The rank a port operation sends to."""
        if self.channel is not Channel.PORT:
            return None
        return next(r.rank for r in self.dst if r.rank != self.rank)


def channel_kinds(topology: Topology) -> dict[tuple[int, int], Channel]:
    """Memory channels between GPUs that load and store each other's memory (a route
    through NVLink, NVSwitch or a PCIe switch, inside one ``node`` group); port channels
    where the route passes a CPU or a NIC (host-staged or another node)."""
    nodes = topology.groups.get("node")
    node_of = {r: k for k, part in enumerate(nodes) for r in part} if nodes else {}
    kinds: dict[tuple[int, int], Channel] = {}
    for a in topology.ranks:
        for b in topology.ranks:
            if a == b:
                continue
            memory = node_of.get(a) == node_of.get(b) and topology.has_route(a, b)
            if memory:
                for link in topology.route(a, b):
                    end = topology.links[link].dst
                    if isinstance(end, str) and topology.fabric[end] in (NodeKind.CPU,
                                                                          NodeKind.NIC):
                        memory = False
                        break
            kinds[(a, b)] = Channel.MEMORY if memory else Channel.PORT
    return kinds


class Scratch:
    """Landing slots appended to each rank's scratch: plain ones after the schedule's
    own, packets from where their doubled bytes clear the plain ones."""

    def __init__(self, schedule: Schedule, packets: bool) -> None:
        self.plain = schedule.scratch_chunks
        self.next = dict.fromkeys(range(schedule.num_ranks),
                                  -(-self.plain // 2) if packets else self.plain)

    def take(self, rank: int, count: int) -> int:
        start = self.next[rank]
        self.next[rank] = start + count
        return start

    def chunks(self, rank: int, packets: bool) -> int:
        """``scratch_chunks`` for ``rank``: LL scratch holds twice its chunks' bytes."""
        if packets:
            return max(-(-self.plain // 2), self.next[rank])
        return max(self.plain, self.next[rank])


def actions(schedule: Schedule, kinds: dict[tuple[int, int], Channel],
            protocol: str) -> tuple[list[Action], Scratch]:
    """The data operations of every transfer, with their dependencies."""
    packets = protocol == spec.LL
    scratch = Scratch(schedule, packets)
    transfers = schedule.transfers
    coll = schedule.collective
    out: list[Action] = []
    last: dict[int, int] = {}  # transfer -> its last action
    move: dict[int, int] = {}  # transfer -> the action that crosses ranks (or its only one)
    for index in topological_order(transfers):
        t = transfers[index]
        src = Ref(t.src, t.src_buffer, t.src_index, t.count)
        dst = Ref(t.dst, t.dst_buffer, t.dst_index, t.count)
        feeds, orders, touches = _split(schedule, t, coll)
        first_deps = [last[d] for d in feeds] + [move[d] for d in orders]
        last_deps = [last[d] for d in touches]
        steps = _steps(t, src, dst, kinds, packets, scratch)
        for k, (rank, name, srcs, dsts, channel, flags) in enumerate(steps):
            action = Action(rank, name, srcs, dsts, channel, index)
            if k == 0:
                action.deps = first_deps if len(steps) > 1 else first_deps + last_deps
            else:
                action.deps = [len(out) - 1] + (last_deps if k == len(steps) - 1 else [])
                if flags:
                    action.implicit.add(len(out) - 1)
            if any(r.rank != rank for r in (*srcs, *dsts)) or len(steps) == 1:
                move[index] = len(out)
            out.append(action)
        last[index] = len(out) - 1
    return out, scratch


def _split(schedule: Schedule, t: Transfer, coll) -> tuple[list[int], list[int], list[int]]:
    """``t``'s deps: those that write what it reads and those that read or write its
    destination (its data needs them done), and the rest, orderings the schedule adds
    beside its data (a link's order): those need only the other's crossing done, not its
    unpacking at the far end."""
    feeds, orders, touches = [], [], []
    for d in t.deps:
        dep = schedule.transfers[d]
        if _overlap(schedule, coll, (dep.dst, dep.dst_buffer, dep.dst_index, dep.count),
                    (t.src, t.src_buffer, t.src_index, t.count)):
            feeds.append(d)
        elif _touches(schedule, coll, dep, t):
            touches.append(d)
        else:
            orders.append(d)
    return feeds, orders, touches


def _touches(schedule: Schedule, coll, dep: Transfer, t: Transfer) -> bool:
    """Whether ``dep`` reads or writes ``t``'s destination slots."""
    target = (t.dst, t.dst_buffer, t.dst_index, t.count)
    return _overlap(schedule, coll, (dep.dst, dep.dst_buffer, dep.dst_index, dep.count),
                    target) or _overlap(schedule, coll,
                                        (dep.src, dep.src_buffer, dep.src_index, dep.count),
                                        target)


def _overlap(schedule: Schedule, coll, a, b) -> bool:
    (ra, ba, ia, ca), (rb, bb, ib, cb) = a, b
    if ra != rb:
        return False
    if schedule.in_place:
        ba, ia = coll.in_place_alias(ra, ba, ia)
        bb, ib = coll.in_place_alias(rb, bb, ib)
    return ba == bb and ia < ib + cb and ib < ia + ca


def _steps(t: Transfer, src: Ref, dst: Ref, kinds, packets: bool, scratch: Scratch):
    """(rank, operation, sources, destinations, channel, reads the previous step's
    packets) per step of one transfer."""
    reduce = t.op is TransferOp.REDUCE
    if t.is_local:
        if reduce:
            return [(t.src, OpName.REDUCE, (dst, src), (dst,), None, False)]
        return [(t.src, OpName.COPY, (src,), (dst,), None, False)]
    kind = kinds[(t.src, t.dst)]
    if packets:
        land = Ref(t.dst, Buffer.SCRATCH, scratch.take(t.dst, t.count), t.count, True)
        steps = []
        if kind is Channel.MEMORY:
            steps.append((t.src, OpName.PUT_PACKETS, (src,), (land,), Channel.MEMORY, False))
        else:
            staged = Ref(t.src, Buffer.SCRATCH, scratch.take(t.src, t.count), t.count, True)
            steps.append((t.src, OpName.COPY_PACKETS, (src,), (staged,), None, False))
            steps.append((t.src, OpName.READ_PUT_PACKETS, (staged,), (land,), Channel.PORT,
                          True))
        if reduce:
            steps.append((t.dst, OpName.REDUCE_PACKETS, (dst, land), (dst,), None, True))
        else:
            steps.append((t.dst, OpName.UNPACK_PACKETS, (land,), (dst,), None, True))
        return steps
    if kind is Channel.MEMORY:
        if reduce:
            return [(t.dst, OpName.READ_REDUCE, (dst, src), (dst,), Channel.MEMORY, False)]
        return [(t.src, OpName.PUT, (src,), (dst,), Channel.MEMORY, False)]
    if not reduce:
        return [(t.src, OpName.PUT_WITH_SIGNAL_AND_FLUSH, (src,), (dst,), Channel.PORT, False)]
    land = Ref(t.dst, Buffer.SCRATCH, scratch.take(t.dst, t.count), t.count)
    return [(t.src, OpName.PUT_WITH_SIGNAL_AND_FLUSH, (src,), (land,), Channel.PORT, False),
            (t.dst, OpName.REDUCE, (dst, land), (dst,), None, False)]
