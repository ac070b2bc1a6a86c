"""Pass 4 of the MSCCL++ export: a layout as the plan's records.

Per threadblock, for each action: the ``wait``s and ``sem_acquire``s its syncs need, a
``nop`` (``__syncthreads``: the few threads that waited, and the action before, are
done), the operation, then a ``nop`` and the ``signal``s and ``sem_release``s later
actions wait for. A wait that needs the k-th signal on its channel waits as often as it
takes to get there (the executor counts per channel). A ``pwsf`` signals on its own
channel: it serves one sync to its peer, and where none needs it, the peer's control
threadblock waits for it at the end (every signal is waited for, so the next call starts
with none pending).

A Simple plan has a control threadblock (id 0; more where one would hold more than 16
channels of a type) per GPU: it tells its peers (the ranks
whose memory it reads or writes, or that reach its memory) that it has entered the call
and waits until they have, then a ``barrier`` releases the others; at the end, after a
``barrier``, it says it is done and waits until they are. So no rank touches a peer's
buffers before the peer entered the call, nor returns while a peer still does: repeated
calls never overlap. LL plans need neither (packets carry their call's flag, and each call
uses the other half of a doubled scratch).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ccweave.collectives import Buffer
from ccweave.export import mscclpp_spec as spec
from ccweave.export.mscclpp_actions import Action, Ref, Scratch
from ccweave.export.mscclpp_layout import Layout, Sync
from ccweave.export.mscclpp_model import (
    BufferRef,
    Gpu,
    GpuChannel,
    Op,
    PlanDoc,
    RemoteBuffer,
    TbChannel,
    Threadblock,
)
from ccweave.export.mscclpp_spec import Channel, OpName
from ccweave.schedule import Schedule

_Key = tuple[int, int]
"""(rank, local threadblock id)."""


@dataclass
class _Tb:
    """A threadblock being written: its operations, channels and remote buffers."""

    rank: int
    local: int
    ops: list[Op] = field(default_factory=list)
    channels: dict[Channel, list[int]] = field(default_factory=lambda: defaultdict(list))
    remote: dict[Channel, list[int]] = field(default_factory=lambda: defaultdict(list))

    def channel(self, kind: Channel, gpu_channel: int) -> int:
        table = self.channels[kind]
        if gpu_channel not in table:
            table.append(gpu_channel)
        return table.index(gpu_channel)

    def buffer(self, kind: Channel, gpu_buffer: int) -> int:
        table = self.remote[kind]
        if gpu_buffer not in table:
            table.append(gpu_buffer)
        return table.index(gpu_buffer)


@dataclass(frozen=True)
class Header:
    """The plan's own fields."""

    name: str
    collective: str
    protocol: str
    min_message_size: int
    max_message_size: int
    threads_per_block: int


class Emitter:
    """Writes one plan for a layout."""

    def __init__(self, schedule: Schedule, acts: list[Action], layout: Layout,
                 kinds: dict[tuple[int, int], Channel], scratch: Scratch,
                 header: Header) -> None:
        self.schedule, self.acts, self.layout = schedule, acts, layout
        self.kinds, self.scratch, self.header = kinds, scratch, header
        self.n = schedule.num_ranks
        self.control = header.protocol != spec.LL
        self.peer_channels = {r: {Channel.MEMORY: [], Channel.PORT: []} for r in range(self.n)}
        self.channel_of: dict[tuple[int, int, int, int], tuple[Channel, int]] = {}
        self.remote: dict[int, list[tuple[int, Buffer, Channel]]] = defaultdict(list)
        self.semaphores: dict[int, list[int]] = defaultdict(list)
        self._index()

    # ------------------------------------------------------------ indexes

    def _index(self) -> None:
        layout, acts = self.layout, self.acts
        self.incoming: dict[int, list[Sync]] = defaultdict(list)
        self.outgoing: dict[int, list[Sync]] = defaultdict(list)
        befores: dict[tuple[int, int], set[int]] = defaultdict(set)
        for sync in layout.syncs:
            self.incoming[sync.after].append(sync)
            self.outgoing[sync.before].append(sync)
            befores[(layout.place[sync.before][0], layout.place[sync.after][0])].add(
                sync.before)
        self.number: dict[tuple[int, int], dict[int, int]] = {
            pair: {a: k + 1 for k, a in enumerate(sorted(found, key=lambda a:
                                                               layout.place[a][1]))}
            for pair, found in befores.items()}
        """(threadblock before, threadblock after) -> action -> which signal (or release)
        on their channel (semaphore), counting from 1, comes after it."""
        self.reader: dict[int, int] = {d: k for k, a in enumerate(acts) for d in a.implicit}
        self.rides: dict[int, Sync] = {}  # pwsf action -> the sync its own signal serves
        self.drains: dict[int, list[int]] = defaultdict(list)  # rank -> pwsf with no sync
        for index, a in enumerate(acts):
            if a.name is not OpName.PUT_WITH_SIGNAL_AND_FLUSH:
                continue
            served = [s for s in self.outgoing.get(index, []) if acts[s.after].rank == a.peer]
            if served:
                self.rides[index] = min(served, key=lambda s: layout.place[s.after])
            else:
                self.drains[a.peer].append(index)  # type: ignore[index]
        self.peers = {(min(a.rank, r.rank), max(a.rank, r.rank)) for a in acts
                      for r in (*a.src, *a.dst) if r.rank != a.rank}
        self._controls()
        self.local: dict[int, int] = {}
        self.tbs_of: dict[int, list[int]] = defaultdict(list)
        for tb, rank in enumerate(layout.tb_rank):
            self.local[tb] = self.controls[rank] + len(self.tbs_of[rank])
            self.tbs_of[rank].append(tb)

    def _controls(self) -> None:
        """How many control threadblocks each rank needs, and which holds each peer's
        handshake and each drained pwsf's channel: at most 16 channels of a type each."""
        self.controls: dict[int, int] = defaultdict(int)
        self.ctrl_of: dict[tuple[int, tuple], int] = {}
        if not self.control:
            return
        per = spec.LIMITS.channels_per_threadblock
        for rank in range(self.n):
            items: list[tuple] = [("peer", p) for p in sorted(
                {b if a == rank else a for a, b in self.peers if rank in (a, b)})]
            items += sorted({("drain", self.acts[i].rank, self.layout.place[i][0])
                             for i in self.drains.get(rank, [])})
            used: list[dict[Channel, int]] = []
            for item in items:
                kind = self.kinds[(rank, item[1])]
                k = next((k for k, u in enumerate(used) if u[kind] < per), len(used))
                if k == len(used):
                    used.append({Channel.MEMORY: 0, Channel.PORT: 0})
                used[k][kind] += 1
                self.ctrl_of[(rank, item)] = k
            self.controls[rank] = max(1, len(used))

    def _drain_key(self, index: int) -> _Key:
        """The control threadblock that waits for pwsf ``index``'s unserved signal."""
        a = self.acts[index]
        return a.peer, self.ctrl_of[(a.peer, ("drain", a.rank,  # type: ignore[index]
                                              self.layout.place[index][0]))]

    def _key(self, action: int) -> _Key:
        return self.acts[action].rank, self.local[self.layout.place[action][0]]

    # ------------------------------------------------------------ tables

    def _pair(self, a: _Key, b: _Key) -> None:
        """A channel between threadblocks of two ranks: an entry on each side, appended
        in the same order on both, so the executor pairs them."""
        if (*a, *b) in self.channel_of:
            return
        kind = self.kinds[(a[0], b[0])]
        for (rank, tb), (peer, peer_tb) in ((a, b), (b, a)):
            table = self.peer_channels[rank][kind]
            table.append(peer)
            self.channel_of[(rank, tb, peer, peer_tb)] = (kind, len(table) - 1)

    def _chan(self, t: _Tb, peer: _Key) -> tuple[Channel, int]:
        kind, gpu_channel = self.channel_of[(t.rank, t.local, *peer)]
        return kind, t.channel(kind, gpu_channel)

    def _tables(self) -> None:
        layout, acts = self.layout, self.acts
        for sync in layout.syncs:
            if acts[sync.before].rank != acts[sync.after].rank:
                self._pair(self._key(sync.before), self._key(sync.after))
        for index, a in enumerate(acts):
            if a.name is OpName.PUT_WITH_SIGNAL_AND_FLUSH and index not in self.rides:
                self._pair(self._key(index), self._drain_key(index))
            elif a.name is OpName.READ_PUT_PACKETS:
                self._pair(self._key(index), self._key(self.reader[index]))
        if self.control:
            for ra, rb in sorted(self.peers):
                self._pair((ra, self.ctrl_of[(ra, ("peer", rb))]),
                           (rb, self.ctrl_of[(rb, ("peer", ra))]))
        self.semaphore: dict[tuple[int, int], int] = {}
        for sync in layout.syncs:
            rank = acts[sync.before].rank
            if rank == acts[sync.after].rank:
                key = (layout.place[sync.before][0], layout.place[sync.after][0])
                if key not in self.semaphore:
                    self.semaphore[key] = len(self.semaphores[rank])
                    self.semaphores[rank].append(0)

    # ------------------------------------------------------------ the plan

    def emit(self) -> PlanDoc:
        self._tables()
        h, sched = self.header, self.schedule
        gpus = tuple(self._gpu(rank) for rank in range(self.n))
        return PlanDoc(name=h.name, collective=h.collective, protocol=h.protocol,
                       inplace=sched.in_place, gpus=gpus, reuse_resources=False,
                       use_double_scratch_buffer=h.protocol == spec.LL,
                       buffer_alignment=spec.DEFAULT_ALIGNMENT,
                       min_message_size=h.min_message_size,
                       max_message_size=h.max_message_size,
                       num_threads_per_block=h.threads_per_block)

    def _gpu(self, rank: int) -> Gpu:
        coll = self.schedule.collective
        tbs = self.tbs_of[rank]
        count = len(tbs) + self.controls[rank]
        blocks = [self._control(rank, k, count) for k in range(self.controls[rank])]
        blocks += [self._data(tb, count) for tb in tbs]
        channels = tuple(GpuChannel(kind, tuple(self.peer_channels[rank][kind]))
                         for kind in (Channel.MEMORY, Channel.PORT)
                         if self.peer_channels[rank][kind])
        remote = tuple(RemoteBuffer(owner, buffer, (kind,))
                       for owner, buffer, kind in self.remote[rank])
        threadblocks = tuple(
            Threadblock(k, tuple(t.ops),
                        tuple(TbChannel(kind, tuple(ids)) for kind, ids in t.channels.items()
                              if ids),
                        tuple((kind, tuple(ids)) for kind, ids in t.remote.items() if ids))
            for k, t in enumerate(blocks))
        return Gpu(rank, coll.input_chunks, coll.output_chunks,
                   self.scratch.chunks(rank, self.header.protocol == spec.LL), threadblocks,
                   channels, remote, tuple(self.semaphores[rank]))

    def _control(self, rank: int, k: int, count: int) -> _Tb:
        t = _Tb(rank, k)
        mine = [item for (r, item), c in self.ctrl_of.items() if r == rank and c == k]
        handshake = [self._chan(t, (p, self.ctrl_of[(p, ("peer", rank))]))
                     for kind, p, *_ in mine if kind == "peer"]
        self._grouped(t, OpName.RELAXED_SIGNAL, handshake)
        self._grouped(t, OpName.RELAXED_WAIT, handshake)
        t.ops.append(Op(OpName.BARRIER, barrier_id=0, num_threadblocks=count))
        t.ops.append(Op(OpName.BARRIER, barrier_id=0, num_threadblocks=count))
        self._grouped(t, OpName.WAIT, [self._chan(t, self._key(i))
                                       for i in self.drains.get(rank, [])
                                       if self._drain_key(i) == (rank, k)])
        self._grouped(t, OpName.SIGNAL, handshake)
        self._grouped(t, OpName.WAIT, handshake)
        return t

    def _grouped(self, t: _Tb, name: OpName, channels: list[tuple[Channel, int]]) -> None:
        per = spec.LIMITS.channels_per_operation
        for kind in (Channel.MEMORY, Channel.PORT):
            ids = [i for k, i in channels if k is kind]
            for start in range(0, len(ids), per):
                t.ops.append(Op(name, kind, tuple(ids[start:start + per])))

    def _semaphores(self, t: _Tb, name: OpName, ids: list[int]) -> None:
        per = spec.LIMITS.semaphores_per_operation
        for start in range(0, len(ids), per):
            t.ops.append(Op(name, semaphore_ids=tuple(ids[start:start + per])))

    def _data(self, tb: int, count: int) -> _Tb:
        layout, acts = self.layout, self.acts
        rank = layout.tb_rank[tb]
        t = _Tb(rank, self.local[tb])
        if self.control:
            t.ops.append(Op(OpName.BARRIER, barrier_id=0, num_threadblocks=count))
        signalled: dict[tuple[Channel, int], int] = defaultdict(int)
        acquired: dict[int, int] = defaultdict(int)
        for pos, index in enumerate(layout.tbs[tb]):
            waits, acquires = [], []
            for sync in self.incoming.get(index, []):
                before_tb = layout.place[sync.before][0]
                need = self.number[(before_tb, tb)][sync.before]
                if acts[sync.before].rank == rank:
                    sem = self.semaphore[(before_tb, tb)]
                    acquires += [sem] * max(0, need - acquired[sem])
                    acquired[sem] = max(acquired[sem], need)
                else:
                    channel = self._chan(t, self._key(sync.before))
                    waits += [channel] * max(0, need - signalled[channel])
                    signalled[channel] = max(signalled[channel], need)
            self._grouped(t, OpName.WAIT, waits)
            self._semaphores(t, OpName.SEM_ACQUIRE, acquires)
            if pos > 0 or waits or acquires:
                t.ops.append(Op(OpName.NOP))
            t.ops.append(self._operation(t, index))
            signals, releases = [], []
            ride = self.rides.get(index)
            for sync in self.outgoing.get(index, []):
                after_tb = layout.place[sync.after][0]
                if acts[sync.after].rank == rank:
                    releases.append(self.semaphore[(tb, after_tb)])
                elif sync is not ride:
                    signals.append(self._chan(t, self._key(sync.after)))
            if signals or releases:
                t.ops.append(Op(OpName.NOP))
                self._grouped(t, OpName.SIGNAL, signals)
                self._semaphores(t, OpName.SEM_RELEASE, releases)
        if self.control:
            t.ops.append(Op(OpName.BARRIER, barrier_id=0, num_threadblocks=count))
        return t

    def _operation(self, t: _Tb, index: int) -> Op:
        a = self.acts[index]
        channel_ids: tuple[int, ...] = ()
        if a.name is OpName.PUT_WITH_SIGNAL_AND_FLUSH:
            ride = self.rides.get(index)
            peer = self._key(ride.after) if ride is not None else self._drain_key(index)
            channel_ids = (self._chan(t, peer)[1],)  # type: ignore[arg-type]
        elif a.name is OpName.READ_PUT_PACKETS:
            channel_ids = (self._chan(t, self._key(self.reader[index]))[1],)
        return Op(a.name, a.channel, channel_ids, tuple(self._ref(t, a, r) for r in a.src),
                  tuple(self._ref(t, a, r) for r in a.dst))

    def _ref(self, t: _Tb, a: Action, ref: Ref) -> BufferRef:
        if ref.rank == a.rank:
            return BufferRef(ref.index, ref.count, type=ref.buffer)
        kind = a.channel
        assert kind in (Channel.MEMORY, Channel.PORT)
        key = (ref.rank, ref.buffer, kind)
        table = self.remote[a.rank]
        if key not in table:
            table.append(key)
        return BufferRef(ref.index, ref.count, buffer_id=t.buffer(kind, table.index(key)))
