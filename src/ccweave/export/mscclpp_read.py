"""An MSCCL++ execution plan as a Schedule: every data movement a transfer, every ordering
the executor guarantees a dependency, and nothing else.

What an operation moves is what ``execution_kernel.hpp`` does with the offsets the loader
computes; what orders two operations:

* inside a threadblock, a ``nop`` (``__syncthreads``) or a ``barrier``: operations between
  two of them run in the same threads at once and are not ordered (a ``wait`` or
  ``sem_acquire`` is done by a few threads only: what follows it is ordered only after
  the next ``nop``);
* a ``barrier`` across the threadblocks that take part (its ``num_threadblocks``);
* ``sem_release``/``sem_acquire`` of one semaphore (counting, from its ``init_value``);
* ``signal``/``wait`` (and their relaxed forms) on a paired channel: the k-th wait on a
  channel returns after the k-th signal on its peer; channels pair per peer and type in
  the order they are listed (``executor.cc``, ``setupConnections``' per-peer tags);
* a put through a port channel lands before a later signal or flush on that channel
  (the proxy's FIFO); ``pwsf`` returns only when it has landed;
* an LL packet is read only once it is written (its flag): a packet read waits for the
  packet write of those slots.

A plan whose order depends on more than these (two threadblocks waiting on one channel,
a packet slot written twice, signals that do not balance their waits) is refused with
the reason. A ``pipeline`` is unrolled for :data:`PIPELINE_ITERATIONS` iterations and a
threadblock group (``tbg_info``) split into its parts, so one plan chunk becomes
:attr:`Imported.unit` schedule chunks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError
from ccweave.export import mscclpp_spec as spec
from ccweave.export.mscclpp_model import BufferRef, Gpu, Op, PlanDoc
from ccweave.export.mscclpp_spec import Channel, OpName
from ccweave.schedule import Op as TransferOp
from ccweave.schedule import Schedule, Transfer

PIPELINE_ITERATIONS = 2
"""A pipeline runs size / unit_size iterations; the proof unrolls two, so what one
iteration leaves for the next is checked."""
MAX_DEP_ENTRIES = 50_000_000
"""Dependency entries an import may hold (a plan of many barriers over many transfers)."""

_KINDS = {name: kind for kind, name in spec.COLLECTIVES.items()}


@dataclass(frozen=True)
class Imported:
    """The schedule, and per transfer the operation it comes from (for messages)."""

    schedule: Schedule
    origins: tuple[str, ...]
    unit: int
    """Schedule chunks per plan chunk (threadblock groups and pipelines split chunks)."""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Range:
    """Slots of one rank's buffer; ``packets``: in LL packet form (flag per word)."""

    rank: int
    buffer: Buffer
    start: int
    count: int
    packets: bool = False


@dataclass
class _Row:
    src: _Range
    dst: _Range
    op: TransferOp
    origin: str
    waits_flags: bool = False
    """It reads packets and spins on their flags until they are written."""
    rank: int = -1
    """The rank whose threadblock runs it."""


@dataclass
class _Graph:
    """Nodes: transfers (``row`` >= 0) and points in time (``row`` = -1); edges: before."""

    rows: list[int] = field(default_factory=list)
    preds: list[list[int]] = field(default_factory=list)

    def node(self, row: int = -1) -> int:
        self.rows.append(row)
        self.preds.append([])
        return len(self.rows) - 1

    def edge(self, before: int, after: int) -> None:
        self.preds[after].append(before)


def to_schedule(doc: PlanDoc, source: str = "plan",
                iterations: int = PIPELINE_ITERATIONS) -> Imported:
    """The Schedule that ``doc`` runs; ``InputError`` with the reason where the executor's
    behaviour is not one schedule (or not what the loader can run)."""
    return _Importer(doc, source, iterations).run()


class _Importer:
    def __init__(self, doc: PlanDoc, source: str, iterations: int) -> None:
        self.doc, self.source, self.iterations = doc, source, iterations
        self.n = len(doc.gpus)
        self.graph = _Graph()
        self.rows: list[_Row] = []
        self.row_node: list[int] = []
        self.notes: list[str] = []
        self.signals: dict[tuple[int, Channel, int], list[tuple[int, int]]] = defaultdict(list)
        self.waits: dict[tuple[int, Channel, int], list[tuple[int, int]]] = defaultdict(list)
        self.releases: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        self.acquires: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        self.barriers: dict[tuple[int, int], dict[int, list[tuple[int, int, int]]]] = \
            defaultdict(lambda: defaultdict(list))
        self.ends: dict[int, list[int]] = defaultdict(list)
        """Per rank, the last point of each threadblock: its call returns after them."""
        self.open_puts: dict[tuple[int, int, int], list[int]] = defaultdict(list)
        """(rank, tb, port channel) -> transfer nodes of puts not yet followed by a
        signal or flush on that channel."""

    def fail(self, where: str, message: str) -> InputError:
        return InputError(f"{self.source}: {where}: {message}")

    # ------------------------------------------------------------ the whole plan

    def run(self) -> Imported:
        doc = self.doc
        kind = _KINDS.get(doc.collective)
        if kind is None:
            raise self.fail("collective", f"{doc.collective!r}: ccweave proves "
                            f"{', '.join(_KINDS)} plans (MSCCL++'s DSL collectives; a "
                            "rooted one has no root in the plan)")
        self.kind = kind
        self._chunks()
        self._channels()
        self.unit = self._unit()
        self.collective = self._collective()
        for gpu in doc.gpus:
            for tb in gpu.threadblocks:
                self._threadblock(gpu, tb.id)
        self._match_signals()
        self._match_semaphores()
        self._match_barriers()
        self._match_packets()
        self._unflushed()
        self._completed()
        return self._build()

    def _chunks(self) -> None:
        """Every gpu declares the same input and output chunks (the loader computes a
        peer's offsets with its own counts); the shape fits the collective."""
        first = self.doc.gpus[0]
        for gpu in self.doc.gpus[1:]:
            if (gpu.input_chunks, gpu.output_chunks) != (first.input_chunks,
                                                         first.output_chunks):
                raise self.fail(f"gpus[{gpu.id}]", f"declares {gpu.input_chunks} input and "
                                f"{gpu.output_chunks} output chunks, gpu 0 {first.input_chunks} "
                                f"and {first.output_chunks}; each rank computes a peer's offsets "
                                "with its own counts, so they must agree")
        i, o, n = first.input_chunks, first.output_chunks, self.n
        inplace = self.doc.inplace
        if i == 0 and o == 0:
            raise self.fail("gpus[0]", "input_chunks and output_chunks are both 0; the loader "
                                       "needs one to size a chunk")
        if self.kind in (Kind.ALLREDUCE, Kind.ALLTOALL):
            if (i and o and i != o) or (not (i and o) and not inplace):
                raise self.fail("gpus[0]", f"{i} input and {o} output chunks: an out-of-place "
                                f"{self.kind.value} has as many of each")
            total = i or o
            if self.kind is Kind.ALLTOALL and total % n:
                raise self.fail("gpus[0]", f"{total} chunks do not split into {n} ranks' blocks")
            self.in_chunks = self.out_chunks = total
        elif self.kind is Kind.ALLGATHER:
            self.in_chunks, self.out_chunks = (i or o // n), (o or i * n)
        else:
            self.in_chunks, self.out_chunks = (i or o * n), (o or i // n)
        if (self.kind is Kind.ALLGATHER and self.out_chunks != n * self.in_chunks) or \
                (self.kind is Kind.REDUCESCATTER and self.in_chunks != n * self.out_chunks):
            raise self.fail("gpus[0]", f"{i} input and {o} output chunks do not fit a "
                            f"{self.kind.value} on {n} ranks (one side is {n} x the other)")

    def _unit(self) -> int:
        """Schedule chunks per plan chunk: every threadblock group's parts, pipeline
        pieces, and (allreduce, reducescatter) a multiple that splits into the ranks."""
        unit = 1
        for gpu in self.doc.gpus:
            for tb in gpu.threadblocks:
                for op in tb.ops:
                    for o in (op, *op.ops):
                        if o.tbg is not None:
                            unit = math.lcm(unit, o.tbg[1])
                    if op.name is OpName.PIPELINE:
                        unit = math.lcm(unit, self.iterations)
        full = self.in_chunks if self.kind is not Kind.ALLGATHER else 0
        if full:
            unit *= self.n // math.gcd(full * unit, self.n)
        return unit

    def _collective(self) -> Collective:
        n, unit = self.n, self.unit
        per_rank = (self.in_chunks * unit if self.kind is Kind.ALLGATHER
                    else self.in_chunks * unit // n)
        return Collective(self.kind, n, per_rank)

    def _channels(self) -> None:
        """Per rank: the peer of each memory and port channel (flattened in order), the
        switch channels (one per rank group), and who each channel pairs with."""
        self.peers: dict[tuple[int, Channel], list[int]] = {}
        self.switch: dict[int, list[tuple[tuple[int, ...], Buffer]]] = {}
        for gpu in self.doc.gpus:
            for kind in (Channel.MEMORY, Channel.PORT):
                self.peers[(gpu.id, kind)] = [p for c in gpu.channels if c.channel_type is kind
                                              for p in c.connected_to]
            self.switch[gpu.id] = [(ranks, c.buffer_type) for c in gpu.channels
                                   if c.channel_type is Channel.SWITCH
                                   for _, ranks in c.rank_groups]  # type: ignore[misc]
            for k, b in enumerate(gpu.remote_buffers):
                if not 0 <= b.rank < self.n or b.rank == gpu.id:
                    raise self.fail(f"gpus[{gpu.id}].remote_buffers[{k}].rank",
                                    f"{b.rank} is not another rank (0..{self.n - 1})")
            for k, c in enumerate(gpu.channels):
                for peer in c.connected_to:
                    if not 0 <= peer < self.n or peer == gpu.id:
                        raise self.fail(f"gpus[{gpu.id}].channels[{k}].connected_to",
                                        f"{peer} is not another rank (0..{self.n - 1})")
                for _, ranks in c.rank_groups:
                    if any(not 0 <= r < self.n for r in ranks) or gpu.id not in ranks:
                        raise self.fail(f"gpus[{gpu.id}].channels[{k}].rank_groups",
                                        f"{list(ranks)} must be ranks including {gpu.id}")
        self.pair: dict[tuple[int, Channel, int], tuple[int, int] | None] = {}
        for (rank, kind), peers in self.peers.items():
            seen: dict[int, int] = defaultdict(int)
            for index, peer in enumerate(peers):
                nth = seen[peer]
                seen[peer] += 1
                theirs = [k for k, p in enumerate(self.peers[(peer, kind)]) if p == rank]
                self.pair[(rank, kind, index)] = (peer, theirs[nth]) if nth < len(theirs) \
                    else None

    # ------------------------------------------------------------ one threadblock

    def _threadblock(self, gpu: Gpu, tb_id: int) -> None:
        tb = gpu.threadblocks[tb_id]
        where = f"gpus[{gpu.id}].threadblocks[{tb_id}]"
        local: dict[Channel, list[int]] = defaultdict(list)
        for c in tb.channels:
            local[c.channel_type].extend(c.channel_ids)
        for kind, ids in local.items():
            count = (len(self.switch[gpu.id]) if kind is Channel.SWITCH
                     else len(self.peers.get((gpu.id, kind), [])))
            bad = [i for i in ids if i >= count]
            if kind is Channel.NONE or bad:
                raise self.fail(f"{where}.channels", f"{kind.value} channel {bad[:1] or ids[:1]} "
                                f"does not exist (gpu {gpu.id} has {count})")
        remote: dict[Channel, list[int]] = defaultdict(list)
        for kind, ids in tb.remote_buffer_refs:
            for i in ids:
                if i >= len(gpu.remote_buffers):
                    raise self.fail(f"{where}.remote_buffer_refs", f"remote buffer {i} does not "
                                    f"exist (gpu {gpu.id} has {len(gpu.remote_buffers)})")
                if kind not in gpu.remote_buffers[i].access_channel_types:
                    raise self.fail(f"{where}.remote_buffer_refs", f"remote buffer {i} is not "
                                    f"reachable through {kind.value} channels (its "
                                    "access_channel_types), so the loader maps it to another "
                                    "buffer")
            if kind in (Channel.MEMORY, Channel.PORT):
                remote[kind].extend(ids)
        self.tb = _Tb(gpu, tb_id, where, local, remote)
        count = sum(op.flat_count() for op in tb.ops)
        if count > spec.LIMITS.operations_per_threadblock:
            raise self.fail(where, f"has {count} operations; the executor refuses more than "
                            f"{spec.LIMITS.operations_per_threadblock} (MAX_OPERATION)")
        boundary: int | None = None
        members: list[int] = []
        for k, op in enumerate(tb.ops):
            for iteration, inner, path in self._unroll(op, f"{where}.ops[{k}]"):
                if inner.name in (OpName.NOP, OpName.BARRIER):
                    arrive = self.graph.node()
                    for m in members + ([boundary] if boundary is not None else []):
                        self.graph.edge(m, arrive)
                    leave = arrive
                    if inner.name is OpName.BARRIER:
                        leave = self.graph.node()
                        self._barrier(inner, path, arrive, leave)
                    boundary, members = leave, []
                    continue
                entry, exit_ = self.graph.node(), self.graph.node()
                if boundary is not None:
                    self.graph.edge(boundary, entry)
                self._operation(inner, iteration, path, entry, exit_)
                members.append(exit_)
        end = self.graph.node()
        for m in members + ([boundary] if boundary is not None else []):
            self.graph.edge(m, end)
        self.ends[gpu.id].append(end)

    def _unroll(self, op: Op, path: str):
        """(iteration or None, operation, path): a pipeline's body once per iteration."""
        if op.name is not OpName.PIPELINE:
            yield None, op, path
            return
        if op.iter_context is None:
            raise self.fail(path, "a pipeline without iter_context")
        for inner in op.ops:
            if inner.name is OpName.PIPELINE:
                raise self.fail(path, "a pipeline inside a pipeline (the loader flattens one "
                                      "level)")
            if inner.name in spec.PACKET_OPS:
                raise self.fail(path, f"{inner.name.value} in a pipeline: the executor runs "
                                      "packet operations on their whole range every iteration")
            if inner.tbg is not None:
                raise self.fail(path, "a threadblock group inside a pipeline: the loop runs "
                                      "num_chunks chunks past each part's slice")
        for iteration in range(self.iterations):
            for k, inner in enumerate(op.ops):
                yield (iteration, op.iter_context[1]), inner, f"{path}.ops[{k}]"

    # ------------------------------------------------------------ synchronization

    def _barrier(self, op: Op, path: str, arrive: int, leave: int) -> None:
        if op.barrier_id is None or op.num_threadblocks is None:
            raise self.fail(path, "a barrier needs barrier_id and num_threadblocks")
        if op.barrier_id >= spec.LIMITS.barriers:
            raise self.fail(path, f"barrier_id {op.barrier_id}: the executor has "
                                  f"{spec.LIMITS.barriers} (MAX_DEVICE_SYNCERS)")
        self.barriers[(self.tb.gpu.id, op.barrier_id)][self.tb.id].append(
            (arrive, leave, op.num_threadblocks))

    def _match_barriers(self) -> None:
        for (rank, bid), by_tb in self.barriers.items():
            rounds = {len(calls) for calls in by_tb.values()}
            counts = {n for calls in by_tb.values() for _, _, n in calls}
            where = f"gpus[{rank}] barrier {bid}"
            if len(counts) != 1 or len(rounds) != 1 or counts != {len(by_tb)}:
                raise self.fail(where, f"threadblocks {sorted(by_tb)} take part "
                                f"{sorted(rounds)} time(s) with num_threadblocks "
                                f"{sorted(counts)}: every participant must call it as often, "
                                "and num_threadblocks must count them, or it never completes")
            for k in range(rounds.pop()):
                meet = self.graph.node()
                for calls in by_tb.values():
                    self.graph.edge(calls[k][0], meet)
                    self.graph.edge(meet, calls[k][1])

    def _sync(self, op: Op, path: str, entry: int, exit_: int) -> None:
        rank, tb = self.tb.gpu.id, self.tb.id
        if op.name in (OpName.SEM_ACQUIRE, OpName.SEM_RELEASE):
            table = self.acquires if op.name is OpName.SEM_ACQUIRE else self.releases
            for sem in op.semaphore_ids:
                if sem >= len(self.tb.gpu.semaphores):
                    raise self.fail(path, f"semaphore {sem} does not exist (gpu {rank} has "
                                          f"{len(self.tb.gpu.semaphores)})")
                node = self.graph.node()
                self.graph.edge(entry, node)
                self.graph.edge(node, exit_)
                table[(rank, sem)].append((tb, node))
            return
        kind = op.channel_type
        if kind not in (Channel.MEMORY, Channel.PORT):
            raise self.fail(path, f"{op.name.value} needs channel_type memory or port")
        channels = [self.tb.channel(kind, i, path, self) for i in op.channel_ids]
        if op.name is OpName.FLUSH:
            if kind is not Channel.PORT:
                raise self.fail(path, "flush is for port channels")
            for channel in channels[:len(op.dst)]:  # handleFlush flushes nOutputs channels
                self._close_puts(channel, exit_)
            if len(op.dst) < len(channels):
                self.notes.append(f"{path}: flush flushes as many channels as it has dst_buff "
                                  f"entries ({len(op.dst)}), not its {len(channels)} channel_ids "
                                  "(handleFlush reads nOutputs)")
            self.graph.edge(entry, exit_)
            return
        self.graph.edge(entry, exit_)
        for channel in channels:
            node = self.graph.node()
            self.graph.edge(entry, node)
            if op.name in spec.SIGNALS:  # the threadblock goes on once it has sent it
                if kind is Channel.PORT:
                    self._close_puts(channel, node)
                self.signals[(rank, kind, channel)].append((tb, node))
            else:
                self.graph.edge(node, exit_)
                self.waits[(rank, kind, channel)].append((tb, node))

    def _close_puts(self, channel: int, before: int) -> None:
        """Port puts issued on ``channel`` earlier in this threadblock land before
        ``before`` (a later signal there, or the end of a flush)."""
        for node in self.open_puts.pop((self.tb.gpu.id, self.tb.id, channel), []):
            self.graph.edge(node, before)

    def _match_signals(self) -> None:
        for key in set(self.signals) | set(self.waits):
            rank, kind, channel = key
            for table, what in ((self.signals, "signal"), (self.waits, "wait")):
                tbs = {tb for tb, _ in table.get(key, [])}
                if len(tbs) > 1:
                    raise self.fail(f"gpus[{rank}]", f"threadblocks {sorted(tbs)} all {what} on "
                                    f"{kind.value} channel {channel}; the executor keeps one "
                                    "count per channel, so which of them a signal serves is "
                                    "a race")
        for key, waits in self.waits.items():
            rank, kind, channel = key
            peer = self.pair[key]
            where = f"gpus[{rank}] {kind.value} channel {channel}"
            if peer is None:
                raise self.fail(where, f"waits, but rank {self.peers[(rank, kind)][channel]} has "
                                "no channel paired with it (fewer channels back), so nothing "
                                "ever signals it")
            signals = self.signals.get((peer[0], kind, peer[1]), [])
            if len(signals) < len(waits):
                raise self.fail(where, f"waits {len(waits)} time(s) per call but rank {peer[0]} "
                                f"signals it {len(signals)} time(s): the call never finishes")
            for (_, signal), (_, wait) in zip(signals, waits):
                self.graph.edge(signal, wait)
        for key, signals in self.signals.items():
            rank, kind, channel = key
            peer = self.pair[key]
            waits = [] if peer is None else self.waits.get((peer[0], kind, peer[1]), [])
            if len(signals) > len(waits):
                raise self.fail(f"gpus[{rank}] {kind.value} channel {channel}",
                                f"signals {len(signals)} time(s) per call but its peer waits "
                                f"{len(waits)} time(s): the next call starts with "
                                f"{len(signals) - len(waits)} stale signal(s), and its waits "
                                "return early")

    def _match_semaphores(self) -> None:
        for key in set(self.releases) | set(self.acquires):
            rank, sem = key
            where = f"gpus[{rank}] semaphore {sem}"
            releases, acquires = self.releases.get(key, []), self.acquires.get(key, [])
            for calls, what in ((releases, "release"), (acquires, "acquire")):
                if len({tb for tb, _ in calls}) > 1:
                    raise self.fail(where, f"threadblocks {sorted({tb for tb, _ in calls})} "
                                    f"all {what} it: which release an acquire takes is a race")
            init = self.doc.gpus[rank].semaphores[sem]
            if len(acquires) > len(releases) + init:
                raise self.fail(where, f"acquired {len(acquires)} time(s) per call, released "
                                f"{len(releases)} time(s) from {init}: the call never finishes")
            if len(acquires) != len(releases):
                raise self.fail(where, f"acquired {len(acquires)} and released {len(releases)} "
                                "time(s) per call: the next call starts at another value")
            for k, (_, node) in enumerate(acquires):
                if k >= init:
                    self.graph.edge(releases[k - init][1], node)

    def _match_packets(self) -> None:
        writers: dict[tuple[int, Buffer, int], int] = {}
        plain: dict[tuple[int, Buffer, int], int] = {}
        packed: dict[tuple[int, Buffer, int], int] = {}
        for index, row in enumerate(self.rows):
            for r in (row.src, row.dst):
                for k in range(r.start, r.start + r.count):
                    (packed if r.packets else plain).setdefault((r.rank, r.buffer, k), index)
            if row.dst.packets:
                for k in range(row.dst.count):
                    slot = (row.dst.rank, row.dst.buffer, row.dst.start + k)
                    if slot in writers:
                        raise self.fail(row.origin, f"writes packets into {_where(slot, True)}, "
                                        f"which {self.rows[writers[slot]].origin} also writes in "
                                        "the same call: a reader takes whichever comes first")
                    writers[slot] = index
        for (rank, buffer, k), index in packed.items():
            for j in (2 * k, 2 * k + 1):  # a packet slot holds two slots' bytes
                if (rank, buffer, j) in plain:
                    raise self.fail(self.rows[plain[(rank, buffer, j)]].origin,
                                    f"uses rank {rank}'s {buffer.value} slot {j} as plain data, "
                                    f"whose bytes {self.rows[index].origin} uses as packets "
                                    f"(packet slot {k}: packets take twice the bytes)")
        for index, row in enumerate(self.rows):
            if not row.waits_flags:
                continue
            for k in range(row.src.count):
                slot = (row.src.rank, row.src.buffer, row.src.start + k)
                if slot not in writers:
                    raise self.fail(row.origin, f"waits for packets in {_where(slot, True)}, which "
                                    "nothing writes in the call: it spins forever")
                self.graph.edge(self.row_node[writers[slot]], self.row_node[index])

    def _unflushed(self) -> None:
        for (_, _, channel), nodes in self.open_puts.items():
            if nodes:
                row = self.rows[self.graph.rows[nodes[0]]]
                raise self.fail(row.origin, f"puts through port channel {channel} and nothing "
                                "after it signals or flushes that channel: the proxy may land "
                                "it after the call returns")

    def room(self, rank: int, buffer: Buffer) -> int:
        """Bytes of a buffer, in schedule chunks: an LL plan's scratch holds twice its
        chunks (packets carry a flag beside their data)."""
        if buffer is Buffer.SCRATCH:
            return self.doc.gpus[rank].scratch_chunks * self.unit * \
                (2 if self.doc.uses_packets else 1)
        return (self.in_chunks if buffer is Buffer.INPUT else self.out_chunks) * self.unit

    def _completed(self) -> None:
        """What a peer reads or writes in a rank's memory is done before that rank's call
        returns (else its caller reuses a buffer a peer still reads, or reads an output
        a peer still writes)."""
        succ: list[list[int]] = [[] for _ in self.graph.rows]
        for node, preds in enumerate(self.graph.preds):
            for p in preds:
                succ[p].append(node)
        touched: dict[int, list[int]] = defaultdict(list)
        for index, row in enumerate(self.rows):
            for rank in {row.src.rank, row.dst.rank} - {row.rank}:
                touched[rank].append(index)
        for rank, rows in touched.items():
            before = set(self.ends[rank])
            stack = list(before)
            while stack:
                for p in self.graph.preds[stack.pop()]:
                    if p not in before:
                        before.add(p)
                        stack.append(p)
            for index in rows:
                if self.row_node[index] not in before:
                    row = self.rows[index]
                    verb = "writes" if row.dst.rank == rank else "reads"
                    slot = row.dst if row.dst.rank == rank else row.src
                    raise self.fail(row.origin, f"{verb} rank {rank}'s {slot.buffer.value} "
                                    f"buffer, and nothing orders that before rank {rank}'s call "
                                    "returns (no signal, wait or packet after it reaches rank "
                                    f"{rank}): rank {rank} may return while it is in flight")

    # ------------------------------------------------------------ operations

    def _operation(self, op: Op, iteration, path: str, entry: int, exit_: int) -> None:
        if op.name in spec.SYNC_OPS:
            if op.name is OpName.PIPELINE:
                raise self.fail(path, "a pipeline inside a pipeline")
            self._sync(op, path, entry, exit_)
            return
        if op.tbg is not None and not op.tbg[0] < op.tbg[1]:
            raise self.fail(f"{path}.tbg_info", f"tb_id {op.tbg[0]} of a group of {op.tbg[1]}")
        origin = f"gpu {self.tb.gpu.id} threadblock {self.tb.id} {path.rsplit('.', 1)[-1]} " \
                 f"{op.name.value}"
        if op.tbg is not None:
            origin += f" (group part {op.tbg[0] + 1} of {op.tbg[1]})"
        if iteration is not None:
            origin += f" (iteration {iteration[0] + 1} of {self.iterations})"
        semantics = _Semantics(self, op, path, iteration)
        stages = semantics.stages()
        previous = [entry]
        asynchronous = op.channel_type is Channel.PORT and op.name in (
            OpName.PUT, OpName.PUT_WITH_SIGNAL, OpName.READ_PUT_PACKETS)
        for stage in stages:
            nodes = []
            for src, dst, kind, waits in stage:
                row = _Row(src, dst, kind, origin, waits, self.tb.gpu.id)
                node = self.graph.node(len(self.rows))
                self.rows.append(row)
                self.row_node.append(node)
                for p in previous:
                    self.graph.edge(p, node)
                nodes.append(node)
            previous = nodes or previous
        if asynchronous:  # the threadblock goes on once the proxy has the request
            self.graph.edge(entry, exit_)
        else:
            for node in previous:
                self.graph.edge(node, exit_)
        if op.channel_type is not Channel.PORT or op.name not in spec.PUTS:
            return  # (a port rppkt lands when its reader sees the flags)
        rank, tb = self.tb.gpu.id, self.tb.id
        for k, node in enumerate(previous):
            channel = self.tb.channel(Channel.PORT, op.channel_ids[k], path, self)
            if op.name is OpName.PUT:  # lands before the next signal or flush there
                self.open_puts[(rank, tb, channel)].append(node)
                continue
            signal = self.graph.node()  # pws/pwsf signal once the put has landed
            self.graph.edge(node, signal)
            self._close_puts(channel, signal)  # the proxy's FIFO: earlier puts landed too
            self.signals[(rank, Channel.PORT, channel)].append((tb, signal))

    # ------------------------------------------------------------ the schedule

    def _build(self) -> Imported:
        graph = self.graph
        order = _topological(graph, self.source)
        frontier: list[frozenset[int] | None] = [None] * len(graph.rows)
        deps_of: dict[int, tuple[int, ...]] = {}
        total = 0
        for node in order:
            found: set[int] = set()
            for p in graph.preds[node]:
                if graph.rows[p] >= 0:
                    found.add(graph.rows[p])
                else:
                    found |= frontier[p]  # type: ignore[operator]
            row = graph.rows[node]
            if row >= 0:
                deps_of[row] = tuple(sorted(found))
                total += len(found)
                if total > MAX_DEP_ENTRIES:
                    raise InputError(f"{self.source}: the plan's ordering needs over "
                                     f"{MAX_DEP_ENTRIES:,} dependency entries to express")
                frontier[node] = frozenset((row,))
            else:
                frontier[node] = frozenset(found)
        rank_of = {graph.rows[node]: k for k, node in enumerate(order) if graph.rows[node] >= 0}
        rows_in_order = sorted(rank_of, key=rank_of.__getitem__)
        new_index = {row: k for k, row in enumerate(rows_in_order)}
        base = max(self.room(g.id, Buffer.SCRATCH) for g in self.doc.gpus)

        def at(r: _Range) -> int:  # packet slots after every plain one: their bytes differ
            return base + r.start if r.packets else r.start

        transfers = []
        for row_index in rows_in_order:
            row = self.rows[row_index]
            transfers.append(Transfer(row.src.rank, row.dst.rank, row.src.buffer, at(row.src),
                                      row.dst.buffer, at(row.dst), row.src.count, row.op,
                                      tuple(sorted(new_index[d] for d in deps_of[row_index]))))
        scratch = max((at(r) + r.count for row in self.rows for r in (row.src, row.dst)
                       if r.buffer is Buffer.SCRATCH), default=0)
        declared = max(g.scratch_chunks for g in self.doc.gpus) * self.unit
        metadata = {"source": self.source, "format": "mscclpp", "protocol": self.doc.protocol,
                    "plan_name": self.doc.name, "unit": self.unit, "packet_base": base,
                    "min_message_size": self.doc.min_message_size,
                    "max_message_size": self.doc.max_message_size,
                    "transfer_origins": [self.rows[r].origin for r in rows_in_order]}
        if self.notes:
            metadata["notes"] = list(self.notes)
        schedule = Schedule(self.collective, tuple(transfers), max(scratch, declared),
                            self.doc.inplace, self.doc.name, metadata)
        return Imported(schedule, tuple(self.rows[r].origin for r in rows_in_order), self.unit,
                        tuple(self.notes))


@dataclass
class _Tb:
    """The threadblock being read: its channel and remote-buffer tables."""

    gpu: Gpu
    id: int
    where: str
    channels: dict[Channel, list[int]]
    remote: dict[Channel, list[int]]

    def channel(self, kind: Channel, index: int, path: str, reader: _Importer) -> int:
        table = self.channels.get(kind, [])
        if index >= len(table):
            raise reader.fail(path, f"{kind.value} channel {index}: threadblock {self.id} lists "
                              f"{len(table)} {kind.value} channel(s)")
        return table[index]

    def remote_buffer(self, kind: Channel | None, index: int, path: str,
                      reader: _Importer) -> tuple[int, Buffer]:
        if kind not in (Channel.MEMORY, Channel.PORT):
            raise reader.fail(path, "a remote buffer (buffer_id) needs the operation's "
                                    "channel_type memory or port")
        table = self.remote.get(kind, [])
        if index >= len(table):
            raise reader.fail(path, f"buffer_id {index}: threadblock {self.id} refers to "
                                    f"{len(table)} remote buffer(s) through {kind.value} channels")
        buffer = self.gpu.remote_buffers[table[index]]
        return buffer.rank, buffer.type


_Transfer = tuple[_Range, _Range, TransferOp, bool]


class _Semantics:
    """What one operation instance moves, as stages of transfers (each stage after the
    one before; a stage's transfers run at once)."""

    def __init__(self, reader: _Importer, op: Op, path: str, iteration) -> None:
        self.r, self.op, self.path, self.iteration = reader, op, path, iteration
        self.rank = reader.tb.gpu.id
        self.unit = reader.unit

    def fail(self, message: str) -> InputError:
        return self.r.fail(self.path, message)

    # --------------------------------------------------------- buffer refs

    def _range(self, ref: BufferRef, role: str, packets: bool = False,
               local: bool | None = None, buffer: Buffer | None = None) -> _Range:
        """The slots ``ref`` names (after the group part and the pipeline piece).
        ``local``: True must be local, False must be remote; ``buffer``: the buffer the
        kernel uses whatever the ref says (packets come from scratch)."""
        op = self.op
        if ref.switch_channel_id is not None:
            raise self.fail(f"{role} names a switch channel; {op.name.value} does not use one")
        if ref.buffer_id is not None:
            if local:
                raise self.fail(f"{role} names a remote buffer; the executor reads it as a "
                                "local one")
            rank, kind = self.r.tb.remote_buffer(op.channel_type, ref.buffer_id, self.path,
                                                 self.r)
        else:
            if local is False:
                raise self.fail(f"{role} has no buffer_id; the executor sends it to a peer")
            if ref.type is None:
                raise self.fail(f"{role} has neither type nor buffer_id")
            rank, kind = self.rank, ref.type
        if buffer is not None and kind is not buffer:
            raise self.fail(f"{role} says {kind.value}, but the executor reads or writes "
                            f"{buffer.value} here")
        return self._slice(rank, kind, ref, role, packets)

    def _slice(self, rank: int, buffer: Buffer, ref: BufferRef, role: str,
               packets: bool) -> _Range:
        unit = self.unit
        start, count = ref.index * unit, ref.size * unit
        if count == 0:
            raise self.fail(f"{role} has size 0")
        if self.op.tbg is not None:
            part, parts = self.op.tbg
            count //= parts
            start += part * count
        if self.iteration is not None:
            k, num_chunks = self.iteration
            piece = num_chunks * unit // self.r.iterations
            if count < piece * self.r.iterations:
                raise self.fail(f"{role} covers {ref.size} chunk(s), fewer than the pipeline's "
                                f"num_chunks ({num_chunks}): its later iterations run past it "
                                "(the executor's unsigned size - offset wraps)")
            start += k * piece
            count = piece
        limit = self.r.room(rank, buffer)
        if packets and buffer is not Buffer.SCRATCH:
            raise self.fail(f"{role}: packets in the {buffer.value} buffer; ccweave models "
                            "packets in scratch only (they take twice their data's bytes)")
        end = 2 * (start + count) if packets else start + count
        if end > limit:
            form = "packets" if packets else "chunks"
            raise self.fail(f"{role} reaches {form} {start // unit}..{(start + count - 1) // unit} "
                            f"of rank {rank}'s {buffer.value} buffer, past its "
                            f"{limit // unit} chunk(s) of bytes")
        return _Range(rank, buffer, start, count, packets)

    def _same(self, a: _Range, b: _Range) -> bool:
        coll, inplace = self.r.collective, self.r.doc.inplace
        if a.rank != b.rank or a.count != b.count or a.packets != b.packets:
            return False
        if inplace:
            return coll.in_place_alias(a.rank, a.buffer, a.start) == \
                coll.in_place_alias(b.rank, b.buffer, b.start)
        return (a.buffer, a.start) == (b.buffer, b.start)

    def _need(self, refs: tuple[BufferRef, ...], role: str, low: int,
              high: int | None = None) -> None:
        if len(refs) < low or (high is not None and len(refs) > high):
            want = f"{low}" if high == low else f"{low} or more" if high is None \
                else f"{low} to {high}"
            raise self.fail(f"{self.op.name.value} needs {want} {role} entries, has {len(refs)}")
        if len(refs) > spec.LIMITS.buffers_per_operation:
            raise self.fail(f"{len(refs)} {role} entries; the executor holds "
                            f"{spec.LIMITS.buffers_per_operation} per operation")

    def _sizes(self, a: _Range, b: _Range, what: str) -> None:
        if a.count != b.count:
            raise self.fail(f"{what}: {a.count // self.unit} chunk(s) against "
                            f"{b.count // self.unit}; the executor moves one size for both")

    # --------------------------------------------------------- operations

    def stages(self) -> list[list[_Transfer]]:
        name = self.op.name
        if name in (OpName.MULTI_LOAD_REDUCE_STORE, OpName.MULTI_STORE,
                    OpName.MULTI_STORE_PKT):
            return self._switch()
        table = {
            OpName.COPY: self._copy, OpName.GET: self._get,
            OpName.REDUCE: self._reduce, OpName.REDUCE_SEND: self._reduce,
            OpName.READ_REDUCE: self._reduce, OpName.READ_REDUCE_SEND: self._reduce,
            OpName.PUT: self._put, OpName.PUT_WITH_SIGNAL: self._put,
            OpName.PUT_WITH_SIGNAL_AND_FLUSH: self._put,
            OpName.PUT_PACKETS: self._put_packets, OpName.READ_PUT_PACKETS: self._read_put,
            OpName.REDUCE_SEND_PACKETS: self._reduce_packets,
            OpName.REDUCE_PACKETS: self._reduce_packets,
            OpName.REDUCE_COPY_SEND_PACKETS: self._reduce_packets,
            OpName.REDUCE_COPY_PACKETS: self._reduce_packets,
            OpName.UNPACK_PACKETS: self._unpack, OpName.COPY_PACKETS: self._copy_packets}
        return table[name]()

    def _copy(self) -> list[list[_Transfer]]:
        op = self.op
        self._need(op.src, "src_buff", 1, 1)
        self._need(op.dst, "dst_buff", 1, 1)
        src, dst = self._range(op.src[0], "src_buff[0]", local=True), \
            self._range(op.dst[0], "dst_buff[0]", local=True)
        self._sizes(src, dst, "copy")
        return [[(src, dst, TransferOp.COPY, False)]]

    def _get(self) -> list[list[_Transfer]]:
        op = self.op
        if op.channel_type is not Channel.MEMORY:
            raise self.fail("get reads through memory channels only")
        self._need(op.src, "src_buff", 1)
        self._need(op.dst, "dst_buff", len(op.src), len(op.src))
        stage = []
        for k, (s, d) in enumerate(zip(op.src, op.dst)):
            if (s.index, s.size) != (d.index, d.size):
                raise self.fail(f"get src_buff[{k}] (chunk {s.index}) and dst_buff[{k}] (chunk "
                                f"{d.index}) differ: the executor's handleGet writes locally at "
                                "the source's offset and reads remotely at the destination's")
            src = self._range(s, f"src_buff[{k}]", local=False)
            dst = self._range(d, f"dst_buff[{k}]", local=True)
            stage.append((src, dst, TransferOp.COPY, False))
        return [stage]

    def _put(self) -> list[list[_Transfer]]:
        op = self.op
        if op.channel_type not in (Channel.MEMORY, Channel.PORT):
            raise self.fail(f"{op.name.value} needs channel_type memory or port")
        self._need(op.dst, "dst_buff", 1)
        self._need(op.src, "src_buff", len(op.dst), len(op.dst))
        if op.channel_type is Channel.PORT:
            if len(op.channel_ids) < len(op.dst):
                raise self.fail(f"{len(op.dst)} port puts need as many channel_ids, has "
                                f"{len(op.channel_ids)}")
        elif any(s.type != op.src[0].type for s in op.src):
            raise self.fail("src_buff entries of different buffers: a memory-channel put "
                            "reads every source from src_buff[0]'s buffer")
        stage = []
        for k, (s, d) in enumerate(zip(op.src, op.dst)):
            src = self._range(s, f"src_buff[{k}]", local=True)
            dst = self._range(d, f"dst_buff[{k}]", local=False)
            self._sizes(src, dst, f"put {k}")
            stage.append((src, dst, TransferOp.COPY, False))
        return [stage]

    def _reduce(self) -> list[list[_Transfer]]:
        """re/res: local sources; rre/rres: remote sources (src_buff[0] is the local
        operand); res/rres also write the result to remote dst_buff[1:]."""
        op, name = self.op, self.op.name
        reads_remote = name in (OpName.READ_REDUCE, OpName.READ_REDUCE_SEND)
        sends = name in (OpName.REDUCE_SEND, OpName.READ_REDUCE_SEND)
        self._need(op.src, "src_buff", 2)
        self._need(op.dst, "dst_buff", 2 if sends else 1, None if sends else 1)
        if (reads_remote or sends) and op.channel_type is not Channel.MEMORY:
            raise self.fail(f"{name.value} reaches peers through memory channels only")
        first = self._range(op.src[0], "src_buff[0]", local=True)
        target = self._range(op.dst[0], "dst_buff[0]", local=True)
        self._sizes(first, target, "src_buff[0] and dst_buff[0]")
        stages: list[list[_Transfer]] = []
        if not self._same(first, target):
            stages.append([(first, target, TransferOp.COPY, False)])
        for k, ref in enumerate(op.src[1:], 1):
            source = self._range(ref, f"src_buff[{k}]", local=not reads_remote)
            self._sizes(source, target, f"src_buff[{k}]")
            stages.append([(source, target, TransferOp.REDUCE, False)])
        if sends:
            sent = []
            for k, ref in enumerate(op.dst[1:], 1):
                out = self._range(ref, f"dst_buff[{k}]", local=False)
                self._sizes(target, out, f"dst_buff[{k}]")
                sent.append((target, out, TransferOp.COPY, False))
            stages.append(sent)
        return stages

    def _put_packets(self) -> list[list[_Transfer]]:
        op = self.op
        self._need(op.dst, "dst_buff", 1)
        self._need(op.src, "src_buff", len(op.dst), len(op.dst))
        stage = []
        port = op.channel_type is Channel.PORT
        if op.channel_type not in (Channel.MEMORY, Channel.PORT):
            raise self.fail("ppkt needs channel_type memory or port")
        if port:
            raise self.fail("ppkt through a port channel sends packets it does not wait for "
                            "(the proxy copies them as they are); ccweave does not model that")
        for k, (s, d) in enumerate(zip(op.src, op.dst)):
            # every source is read from src_buff[0]'s buffer (handlePutPackets)
            src = self._range(BufferRef(s.index, s.size, op.src[0].type, s.buffer_id,
                                        s.switch_channel_id), f"src_buff[{k}]", local=True)
            dst = self._range(d, f"dst_buff[{k}]", packets=True, local=False)
            self._sizes(src, dst, f"ppkt {k}")
            stage.append((src, dst, TransferOp.COPY, False))
        return [stage]

    def _read_put(self) -> list[list[_Transfer]]:
        """rppkt: once the local packets' flags are set, copy them to each peer (memory:
        by the threadblock; port: a proxy put per destination, channel by channel)."""
        op = self.op
        self._need(op.src, "src_buff", 1, 1)
        self._need(op.dst, "dst_buff", 1)
        if op.channel_type not in (Channel.MEMORY, Channel.PORT):
            raise self.fail("rppkt needs channel_type memory or port")
        if op.channel_type is Channel.PORT and len(op.channel_ids) < len(op.dst):
            raise self.fail(f"{len(op.dst)} port puts need as many channel_ids, has "
                            f"{len(op.channel_ids)}")
        src = self._range(op.src[0], "src_buff[0]", packets=True, local=True,
                          buffer=Buffer.SCRATCH)
        stage = []
        for k, d in enumerate(op.dst):
            dst = self._range(d, f"dst_buff[{k}]", packets=True, local=False)
            self._sizes(src, dst, f"dst_buff[{k}]")
            stage.append((src, dst, TransferOp.COPY, True))
        return [stage]

    def _reduce_packets(self) -> list[list[_Transfer]]:
        """respkt/repkt/recspkt/recpkt: src_buff[0] plain local, src_buff[1:] packets in
        the local scratch; dst_buff[0] plain local; recspkt/recpkt also dst_buff[1] as
        local packets; respkt/recspkt send the rest as packets to peers."""
        op, name = self.op, self.op.name
        keeps_packets = name in (OpName.REDUCE_COPY_SEND_PACKETS, OpName.REDUCE_COPY_PACKETS)
        sends = name in (OpName.REDUCE_SEND_PACKETS, OpName.REDUCE_COPY_SEND_PACKETS)
        self._need(op.src, "src_buff", 2)
        local_outs = 2 if keeps_packets else 1
        self._need(op.dst, "dst_buff", local_outs, None if sends else local_outs)
        if sends and len(op.dst) > local_outs and op.channel_type is not Channel.MEMORY:
            raise self.fail(f"{name.value} sends packets through memory channels only")
        first = self._range(op.src[0], "src_buff[0]", local=True)
        target = self._range(op.dst[0], "dst_buff[0]", local=True)
        self._sizes(first, target, "src_buff[0] and dst_buff[0]")
        stages: list[list[_Transfer]] = []
        if not self._same(first, target):
            stages.append([(first, target, TransferOp.COPY, False)])
        for k, ref in enumerate(op.src[1:], 1):
            source = self._range(ref, f"src_buff[{k}]", packets=True, local=True,
                                 buffer=Buffer.SCRATCH)
            self._sizes(source, target, f"src_buff[{k}]")
            stages.append([(source, target, TransferOp.REDUCE, True)])
        out = []
        if keeps_packets:
            kept = self._range(op.dst[1], "dst_buff[1]", packets=True, local=True)
            self._sizes(target, kept, "dst_buff[1]")
            out.append((target, kept, TransferOp.COPY, False))
        for k, ref in enumerate(op.dst[local_outs:], local_outs):
            remote = self._range(ref, f"dst_buff[{k}]", packets=True, local=False)
            self._sizes(target, remote, f"dst_buff[{k}]")
            out.append((target, remote, TransferOp.COPY, False))
        if out:
            stages.append(out)
        return stages

    def _unpack(self) -> list[list[_Transfer]]:
        op = self.op
        self._need(op.src, "src_buff", 1, 1)
        self._need(op.dst, "dst_buff", 1, 1)
        src = self._range(op.src[0], "src_buff[0]", packets=True, local=True,
                          buffer=Buffer.SCRATCH)
        dst = self._range(op.dst[0], "dst_buff[0]", local=True)
        self._sizes(src, dst, "upkt")
        return [[(src, dst, TransferOp.COPY, True)]]

    def _copy_packets(self) -> list[list[_Transfer]]:
        op = self.op
        self._need(op.src, "src_buff", 1, 1)
        self._need(op.dst, "dst_buff", 1, 1)
        src = self._range(op.src[0], "src_buff[0]", local=True)
        dst = self._range(op.dst[0], "dst_buff[0]", packets=True, local=True)
        self._sizes(src, dst, "cpkt")
        return [[(src, dst, TransferOp.COPY, False)]]

    def _switch(self) -> list[list[_Transfer]]:
        """glres: every group rank's src summed, stored to every group rank's dst (here:
        the sum gathered into this rank's dst, then copied to the others'); gstore: a
        local buffer stored to every group rank's dst; gstorepkt: local packets stored as
        packets."""
        op, name = self.op, self.op.name
        self._need(op.src, "src_buff", 1, 1)
        self._need(op.dst, "dst_buff", 1, 1)
        packets = name is OpName.MULTI_STORE_PKT
        out_ranks, out_buffer = self._group(op.dst[0], "dst_buff[0]")
        outs = [self._slice(q, out_buffer, op.dst[0], "dst_buff[0]", packets)
                for q in out_ranks]
        mine = next(o for o in outs if o.rank == self.rank)
        if name is not OpName.MULTI_LOAD_REDUCE_STORE:
            src = self._range(op.src[0], "src_buff[0]", packets=packets, local=True)
            self._sizes(src, mine, "src_buff[0] and dst_buff[0]")
            return [[(src, o, TransferOp.COPY, packets) for o in outs]]
        in_ranks, in_buffer = self._group(op.src[0], "src_buff[0]")
        if set(in_ranks) != set(out_ranks):
            raise self.fail("src and dst switch channels span different ranks")
        ins = {q: self._slice(q, in_buffer, op.src[0], "src_buff[0]", False) for q in in_ranks}
        self._sizes(ins[self.rank], mine, "src_buff[0] and dst_buff[0]")
        stages: list[list[_Transfer]] = []
        if not self._same(ins[self.rank], mine):
            stages.append([(ins[self.rank], mine, TransferOp.COPY, False)])
        for q in in_ranks:
            if q != self.rank:
                stages.append([(ins[q], mine, TransferOp.REDUCE, False)])
        stages.append([(mine, o, TransferOp.COPY, False) for o in outs if o.rank != self.rank])
        return stages

    def _group(self, ref: BufferRef, role: str) -> tuple[tuple[int, ...], Buffer]:
        if ref.switch_channel_id is None:
            raise self.fail(f"{role} names no switch_channel_id")
        if self.op.channel_type is not Channel.SWITCH:
            raise self.fail(f"{self.op.name.value} needs channel_type switch")
        index = self.r.tb.channel(Channel.SWITCH, ref.switch_channel_id, self.path, self.r)
        return self.r.switch[self.rank][index]


def _where(slot: tuple[int, Buffer, int], packets: bool = False) -> str:
    rank, buffer, index = slot
    return f"rank {rank}'s {buffer.value} {'packet ' if packets else ''}slot {index}"


def _topological(graph: _Graph, source: str) -> list[int]:
    """Kahn's order; a cycle means a threadblock waits on something that waits on it."""
    count = len(graph.rows)
    succ: list[list[int]] = [[] for _ in range(count)]
    waiting = [len(p) for p in graph.preds]
    for node, preds in enumerate(graph.preds):
        for p in preds:
            succ[p].append(node)
    ready = [node for node in range(count) if waiting[node] == 0]
    order = []
    while ready:
        node = ready.pop()
        order.append(node)
        for s in succ[node]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.append(s)
    if len(order) != count:
        raise InputError(f"{source}: its waits form a cycle (a threadblock waits for a signal, "
                         "release or packet that comes only after it): the call deadlocks")
    return sorted(order, key=_position(graph, order))


def _position(graph: _Graph, order: list[int]):
    """Sort key keeping a topological order but putting transfers in creation order where
    it can (deps then point backwards, as builders make them): level, then node id."""
    level = [0] * len(graph.rows)
    for node in order:
        level[node] = max((level[p] + 1 for p in graph.preds[node]), default=0)
    return lambda node: (level[node], node)
