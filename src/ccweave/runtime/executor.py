"""Run one rank's compiled program over a transport: an event loop that starts every op
whose local deps are done, reduces received data with torch, and gives up with a
:class:`RuntimeFault` naming the peers when nothing finishes for ``timeout`` seconds."""

from __future__ import annotations

import collections
import contextlib
import heapq
import time
from collections.abc import Callable, Iterator

import torch

from ccweave.collectives import Buffer
from ccweave.errors import InputError, RuntimeFault
from ccweave.runtime import progress
from ccweave.runtime import uneven as unequal_chunks
from ccweave.runtime.program import Operation, OpKind, Program, Slot, compile_program
from ccweave.runtime.reduce_ops import RedOp
from ccweave.runtime.transport.base import PeerFailure, Transport
from ccweave.schedule import Schedule

SEGMENT_BYTES: int | None = None
"""Default piece size for host-driven transports (None: whole messages). Pieces let a
reduction overlap the next piece's transfer, but each costs a message; on loopback whole
messages were as fast or faster (benchmarks/executor.py)."""
Combine = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]
_Views = list[tuple[torch.Tensor | None, torch.Tensor | None]]
BINDINGS = 4
"""Buffers an executor keeps bound at once (the most recently run): DDP's gradient buckets
take turns on one schedule's executor, and rebinding walks every op of the program. The
bound views hold their tensors, so this many buffers stay alive until :meth:`release`."""


class Executor:
    """Runs ``schedule`` as rank ``transport.rank``; reusable across calls and sizes.

    Parameters
    ----------
    schedule: a verified schedule (in place when ``schedule.in_place``).
    transport: how bytes move; its world size must equal the schedule's ranks.
    timeout: seconds without any finished transfer before raising ``RuntimeFault``.
    tag_base: added to every transfer index to form message tags.
    segment_bytes: host-driven transports send larger messages as pieces of this size
        and reduce each piece as it lands (``None``: whole messages).
    threads: torch intra-op threads while a run reduces and copies (``None``: leave
        torch's setting). One by default: the work is memory-bound, and ranks sharing
        cores with OpenMP pools of their own starve the network (8 ranks on 2 cores ran
        a schedule 2.8-3.4x slower with torch's default of one thread per core).
    uneven: run buffers whose elements do not split into the chunks as they are, with
        chunks one element apart in size (:mod:`ccweave.runtime.uneven`), where the
        schedule allows it (:meth:`runs_uneven`); every rank must say the same. Off: such
        a buffer is refused, as nccl-tests rounds its count.
    """

    def __init__(self, schedule: Schedule, transport: Transport, *, timeout: float = 60.0,
                 tag_base: int = 0, segment_bytes: int | None = SEGMENT_BYTES,
                 threads: int | None = 1, uneven: bool = False) -> None:
        if transport.world_size != schedule.num_ranks:
            raise RuntimeFault(
                f"world size {transport.world_size} != the schedule's {schedule.num_ranks} "
                f"ranks ({schedule.name or 'schedule'}); start {schedule.num_ranks} "
                "processes or synthesize for this world size")
        self.schedule = schedule
        self.transport = transport
        self.timeout = timeout
        self.tag_base = tag_base
        self.segment_bytes = segment_bytes
        self.threads = threads
        self.trace: list[tuple[float, float]] | None = None
        """After a run with tracing on (:meth:`record`): per op of the program,
        ``(started, finished)`` in ``time.perf_counter`` seconds."""
        self._tracing = False
        self.program: Program = compile_program(schedule, transport.rank)
        ops = self.program.ops
        # every rank opens the same channels: the schedule's, not this rank's program's
        transport.open_channels(1 + max((t.channel for t in schedule.transfers), default=0))
        self._children: list[list[int]] = [[] for _ in ops]
        for index, op in enumerate(ops):
            for dep in op.deps:
                self._children[dep].append(index)
        self._ndeps = [len(op.deps) for op in ops]
        self._roots = [index for index, op in enumerate(ops) if not op.deps]
        self._uses = {buffer: self.program.buffer_chunks(buffer) for buffer in Buffer}
        # an out-of-place schedule that sums into its input (a reduce-scatter made by
        # reversing an allgather) runs on a private copy: the caller's input is kept
        rank = transport.rank
        self._writes_input = not schedule.in_place and any(
            t.dst == rank and t.dst_buffer == Buffer.INPUT for t in schedule.transfers)
        self._pool: dict[tuple, list[torch.Tensor]] = {}
        self._own: dict[tuple, torch.Tensor] = {}
        self._bindings: collections.OrderedDict[tuple, tuple[_Views, int, int]] = \
            collections.OrderedDict()
        """(input, output) -> (views, bytes this rank sends, size in bytes), newest last."""
        self._send_bytes = 0
        self._size_bytes = 0
        self._calls = 0
        self._kind = progress.kind_code(schedule.collective.kind)
        self._classes = unequal_chunks.classes(schedule) if uneven else None
        self._uneven: dict[int, unequal_chunks.Bounds | None] = {}

    def runs_uneven(self, elements: int) -> bool:
        """Whether a buffer of ``elements`` that does not split into the chunks runs as
        it is (chunks one element apart), without a padded copy."""
        return self._bounds(elements) is not None

    def _bounds(self, elements: int) -> unequal_chunks.Bounds | None:
        if self._classes is None or elements % self.schedule.collective.total_chunks == 0:
            return None
        if elements not in self._uneven:
            self._uneven[elements] = unequal_chunks.bounds(self._classes, self.transport.rank,
                                                   elements)
        return self._uneven[elements]

    def _uneven_bounds(self, input: torch.Tensor | None,
                       output: torch.Tensor | None) -> unequal_chunks.Bounds | None:
        """Unequal chunk bounds for these tensors, where they need and allow them."""
        given = [t.numel() for t in (input, output) if t is not None]
        if not given or len(set(given)) > 1:
            return None
        return self._bounds(given[0])

    # ------------------------------------------------------------ binding

    def chunk_elements(self, input: torch.Tensor | None, output: torch.Tensor | None) -> int:
        """Elements per chunk implied by the tensors given (checked against each other)."""
        coll = self.schedule.collective
        if self.schedule.in_place:
            buffer = output if output is not None else input
            if buffer is None:
                raise InputError("an in-place run needs the buffer tensor")
            return _split(buffer, coll.total_chunks, "in-place buffer")
        chunk = None
        for tensor, chunks, name in ((input, coll.input_chunks, "input"),
                                     (output, coll.output_chunks, "output")):
            if tensor is not None:
                this = _split(tensor, chunks, name)
                if chunk is not None and this != chunk:
                    raise InputError(f"output has {output.numel()} elements but input has "
                                     f"{input.numel()}; {coll.describe()} needs output = "
                                     f"{coll.output_chunks}/{coll.input_chunks} x input")
                chunk = this
        if chunk is None:
            raise InputError("give an input or an output tensor")
        return chunk

    def _own_buffer(self, buffer: Buffer, numel: int, like: torch.Tensor) -> torch.Tensor:
        key = (buffer, numel, like.dtype, like.device)
        if key not in self._own:
            self._own[key] = torch.empty(numel, dtype=like.dtype, device=like.device)
        return self._own[key]

    def _bind(self, input: torch.Tensor | None, output: torch.Tensor | None) -> _Views:
        key = tuple((t.data_ptr(), t.numel(), t.dtype, t.device) if t is not None else None
                    for t in (input, output))
        bound = self._bindings.get(key)
        if bound is not None:
            self._bindings.move_to_end(key)
            views, self._send_bytes, self._size_bytes = bound
            return views
        coll = self.schedule.collective
        unequal = self._uneven_bounds(input, output)
        chunk = self.chunk_elements(input, output) if unequal is None else 0
        like = output if output is not None else input
        assert like is not None
        self._size_bytes = like.element_size() * (
            like.numel() if unequal is not None
            else chunk * max(coll.input_chunks, coll.output_chunks))
        if self.schedule.in_place:
            input = output = like
        flats: dict[Buffer, torch.Tensor] = {}
        sizes = {Buffer.INPUT: coll.input_chunks, Buffer.OUTPUT: coll.output_chunks,
                 Buffer.SCRATCH: self.schedule.scratch_chunks}
        given = {Buffer.INPUT: input, Buffer.OUTPUT: output, Buffer.SCRATCH: None}
        for buffer in Buffer:
            if not self._uses[buffer]:
                continue
            tensor = given[buffer]
            if tensor is None:
                numel = (sizes[buffer] * chunk if unequal is None
                         else unequal.elements(buffer))
                tensor = self._own_buffer(buffer, numel, like)
            elif not tensor.is_contiguous():
                raise InputError(f"the {buffer.value} tensor must be contiguous")
            flats[buffer] = tensor.view(-1)

        def view(slot: Slot | None) -> torch.Tensor | None:
            if slot is None:
                return None
            if unequal is not None:
                return flats[slot.buffer][unequal.start(slot.buffer, slot.index):
                                          unequal.start(slot.buffer, slot.index + slot.count)]
            start = slot.index * chunk
            return flats[slot.buffer][start:start + slot.count * chunk]

        views: _Views = [(view(op.src), view(op.dst)) for op in self.program.ops]
        self._send_bytes = sum(src.numel() * src.element_size()
                               for op, (src, _) in zip(self.program.ops, views)
                               if op.kind is OpKind.SEND and src is not None)
        # the transport's cap on what a peer may make it allocate (a message kept aside)
        self.transport.expect_messages(max(
            (dst.numel() * dst.element_size() for op, (_, dst) in zip(self.program.ops, views)
             if op.kind is OpKind.RECV and dst is not None), default=0))
        self._bindings[key] = (views, self._send_bytes, self._size_bytes)
        if len(self._bindings) > BINDINGS:
            self._bindings.popitem(last=False)
        return views

    def record(self, on: bool = True) -> None:
        """Note when each op starts and finishes in the following runs (:attr:`trace`)."""
        self._tracing = on

    def release(self) -> None:
        """Drop cached views, temporaries and scratch (they are rebuilt on the next run)."""
        self._bindings.clear()
        self._pool.clear()
        self._own.clear()

    # ------------------------------------------------------------ running

    def run(self, input: torch.Tensor | None, output: torch.Tensor | None = None,
            op: RedOp | str = RedOp.SUM) -> None:
        """Run the schedule once: ``input`` -> ``output`` (in place: pass one buffer).

        Reductions use ``op``; collectives that move data ignore it. Raises
        ``RuntimeFault`` when a peer fails or nothing finishes for ``timeout`` seconds.
        """
        with intra_op_threads(self.threads):
            if self._writes_input and input is not None:
                private = self._own_buffer(Buffer.INPUT, input.numel(), input)
                private.copy_(input.reshape(-1))
                input = private
            views = self._bind(input, output)
            combine = RedOp.parse(op).combiner()
            if self.transport.stream_ordered:
                self._run_ordered(views, combine)
            else:
                self._run_host(views, combine)

    def _temp(self, like: torch.Tensor) -> torch.Tensor:
        free = self._pool.get((like.numel(), like.dtype, like.device))
        if free:
            return free.pop()
        return torch.empty(like.numel(), dtype=like.dtype, device=like.device)

    def _give_back(self, temp: torch.Tensor) -> None:
        self._pool.setdefault((temp.numel(), temp.dtype, temp.device), []).append(temp)

    def _local(self, op: Operation, src: torch.Tensor, dst: torch.Tensor,
               combine: Combine) -> None:
        if op.reduce:
            combine(dst, dst, src if not _overlap(src, dst) else src.clone())
        elif src.data_ptr() != dst.data_ptr():
            dst.copy_(src if not _overlap(src, dst) else src.clone())

    def _run_host(self, views: _Views, combine: Combine) -> None:
        """Host-driven transports. A message larger than ``segment_bytes`` travels as
        pieces (same tag: both backends match in order), each received piece reduced as
        it lands. Transports that can hand over received data in place (shared memory)
        are reduced from directly, without a temporary."""
        ops, children, transport = self.program.ops, self._children, self.transport
        waiting = list(self._ndeps)
        ready = list(self._roots)
        pending: dict[tuple[int, int], object] = {}
        staged: dict[tuple[int, int], torch.Tensor | None] = {}  # temp, or None: zero copy
        left: dict[int, int] = {}
        temps: dict[int, torch.Tensor] = {}
        finished = 0
        total = len(ops)
        clock = time.perf_counter if self._tracing else None
        started_at = [0.0] * total if clock else None
        finished_at = [0.0] * total if clock else None
        tag = self.tag_base
        segment = self.segment_bytes
        receive_data = getattr(transport, "irecv_data", None)
        begin = getattr(transport, "begin", None)
        if begin is not None:
            try:
                begin(self._send_bytes, self.timeout)
            except PeerFailure as failure:
                peer = failure.peer
                if peer is not None:
                    transport.report_loss(peer)
                why = transport.explain_loss(peer) if peer is not None else "a peer failed"
                raise RuntimeFault(f"rank {transport.rank}: {why}; the last run's messages "
                                   f"to it were not all read ({failure.detail})") from None
        recorder: progress.Recorder | None = progress.of(transport)
        if not recorder.active:
            recorder = None
        self._calls += 1
        if recorder is not None:
            recorder.run(self._kind, self._size_bytes, self._calls, total)
        while finished < total:
            while ready:
                index = heapq.heappop(ready)
                op = ops[index]
                src, dst = views[index]
                if clock:
                    started_at[index] = clock()
                if op.kind is OpKind.LOCAL:
                    self._local(op, src, dst, combine)
                    if clock:
                        finished_at[index] = clock()
                    finished += 1
                    for child in children[index]:
                        waiting[child] -= 1
                        if not waiting[child]:
                            heapq.heappush(ready, child)
                    continue
                buffer = src if op.kind is OpKind.SEND else dst
                pieces = _pieces(buffer, segment)
                left[index] = len(pieces)
                for number, (lo, hi) in enumerate(pieces):
                    key, peer, label = (index, number), op.peer, tag + op.transfer
                    if op.kind is OpKind.SEND:
                        pending[key] = transport.isend(buffer[lo:hi], peer, label, op.channel,
                                                       op.via)
                        continue
                    if not op.reduce:
                        pending[key] = transport.irecv(buffer[lo:hi], peer, label, op.channel,
                                                       op.via)
                        continue
                    handle = receive_data(buffer[lo:hi], peer, label) if receive_data else None
                    if handle is not None:
                        pending[key], staged[key] = handle, None
                        continue
                    if index not in temps:
                        temps[index] = self._temp(dst)
                    staged[key] = temps[index][lo:hi]
                    pending[key] = transport.irecv(staged[key], peer, label, op.channel,
                                                   op.via)
            if finished == total:
                break
            order = sorted(pending)
            if recorder is not None:  # progress so far, and the oldest transfer waited on
                oldest = ops[order[0][0]]
                recorder.step(finished, oldest.peer, oldest.kind is OpKind.SEND,
                              oldest.transfer, len(order))
            try:
                done = transport.wait_some([pending[key] for key in order], self.timeout)
            except PeerFailure as failure:
                raise self._peer_fault(ops[order[failure.position][0]],
                                       failure.detail) from None
            if not done:
                raise self._stall(sorted({index for index, _ in order}))
            for position in done:
                key = order[position]
                handle = pending.pop(key)
                index = key[0]
                if key in staged:
                    data = staged.pop(key)
                    base, dst = views[index]
                    lo, hi = _pieces(dst, segment)[key[1]]
                    base = dst if base is None else base
                    if data is None:
                        combine(dst[lo:hi], base[lo:hi], transport.received(handle))
                        transport.release(handle)
                    else:
                        combine(dst[lo:hi], base[lo:hi], data)
                left[index] -= 1
                if left[index]:
                    continue
                if index in temps:
                    self._give_back(temps.pop(index))
                if clock:
                    finished_at[index] = clock()
                finished += 1
                for child in children[index]:
                    waiting[child] -= 1
                    if not waiting[child]:
                        heapq.heappush(ready, child)
        if recorder is not None:
            recorder.phase(progress.Phase.IDLE)
        if clock:
            self.trace = list(zip(started_at, finished_at))

    def _run_ordered(self, views: _Views, combine: Combine) -> None:
        """Stream-ordered transports: issue in program order; a dependency on a message
        becomes a stream wait, and a received reduction is applied when first needed."""
        transport, tag = self.transport, self.tag_base
        handles: dict[int, object] = {}
        temps: dict[int, torch.Tensor] = {}

        def settle(index: int) -> None:
            handle = handles.pop(index, None)
            if handle is None:
                return
            transport.order_after(handle)
            temp = temps.pop(index, None)
            if temp is not None:
                base, dst = views[index]
                combine(dst, dst if base is None else base, temp)
                self._give_back(temp)

        for index, op in enumerate(self.program.ops):
            for dep in op.deps:
                settle(dep)
            src, dst = views[index]
            if op.kind is OpKind.LOCAL:
                self._local(op, src, dst, combine)
            elif op.kind is OpKind.SEND:
                handles[index] = transport.isend(src, op.peer, tag + op.transfer)
            elif op.reduce:
                temp = temps[index] = self._temp(dst)
                handles[index] = transport.irecv(temp, op.peer, tag + op.transfer)
            else:
                handles[index] = transport.irecv(dst, op.peer, tag + op.transfer)
        for index in sorted(handles):
            settle(index)

    # ------------------------------------------------------------ faults

    def _peer_fault(self, op: Operation, detail: str) -> RuntimeFault:
        rank, peer = self.transport.rank, op.peer
        self.transport.report_loss(peer)
        direction = "to" if op.kind is OpKind.SEND else "from"
        return RuntimeFault(
            f"rank {rank}: {self.transport.explain_loss(peer)}; {op.kind.value} of transfer "
            f"{op.transfer} {direction} rank {peer} failed ({detail})")

    def _stall(self, pending: list[int]) -> RuntimeFault:
        ops = self.program.ops
        peers = sorted({ops[i].peer for i in pending})
        first = ops[pending[0]]
        direction = "to" if first.kind is OpKind.SEND else "from"
        return RuntimeFault(
            f"rank {self.transport.rank}: no transfer finished in {self.timeout:g} s; "
            f"waiting on {len(pending)} transfer(s) with rank(s) "
            f"{', '.join(map(str, peers))} (first: {first.kind.value} of transfer "
            f"{first.transfer} {direction} rank {first.peer}); a peer hung or died, or "
            "messages are slower than the timeout (raise --timeout)")


@contextlib.contextmanager
def intra_op_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``threads`` inside, restored after."""
    before = torch.get_num_threads()
    if threads is None or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _pieces(tensor: torch.Tensor, segment_bytes: int | None) -> list[tuple[int, int]]:
    """Element ranges of at most ``segment_bytes`` each (one range when None or small);
    a function of the size alone, so sender and receiver cut a message alike."""
    numel = tensor.numel()
    if not segment_bytes:
        return [(0, numel)]
    per = max(1, segment_bytes // tensor.element_size())
    if numel <= per:
        return [(0, numel)]
    return [(begin, min(begin + per, numel)) for begin in range(0, numel, per)]


def _split(tensor: torch.Tensor, chunks: int, name: str) -> int:
    numel = tensor.numel()
    if numel < chunks or numel % chunks:
        raise InputError(f"the {name} tensor has {numel} elements, which do not split into "
                         f"{chunks} equal chunks; use a multiple of {chunks} elements")
    return numel // chunks


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    return a0 != b0 and a0 < b1 and b0 < a1
