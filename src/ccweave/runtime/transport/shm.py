"""Shared memory between ranks on one host, under another transport (gloo): large CPU
messages are copied into the sender's outbox (a ``memfd`` the receiver maps through
``/proc/<pid>/fd``) and only a 40-byte header travels over the inner transport; the
receiver reads, or reduces, straight out of the outbox and acknowledges, so the sender
may reuse the space. Gloo's own allreduce takes the same shortcut on one host; without
it a ring over TCP loopback moves every byte through the kernel twice.

Anonymous memory: nothing is left in /dev/shm when a rank dies. Small messages, GPU
tensors and peers on other hosts go through the inner transport unchanged.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ccweave.runtime.transport.base import Layered, PeerFailure, Transport

MIN_BYTES = int(os.environ.get("CCWEAVE_SHM_MIN_BYTES", 256 << 10))
"""Messages at least this large go through shared memory (env CCWEAVE_SHM_MIN_BYTES)."""
_HEADER = 5  # generation, offset, nbytes, pid, fd (int64)


@dataclass
class _Send:
    """Data already in the outbox: done for the executor; the header send and the
    acknowledgement are reaped before the outbox is reused."""

    peer: int
    header: torch.Tensor
    header_work: object
    ack: torch.Tensor
    ack_work: object
    done: bool = True


@dataclass
class _Recv:
    """A header on its way; the data is read from the sender's outbox when it lands."""

    peer: int
    tag: int
    header: torch.Tensor
    work: object
    target: torch.Tensor | None  # copy here on arrival (None: the caller reads it)
    data: torch.Tensor | None = None


class _Mapping:
    def __init__(self, pid: int, fd: int, size: int) -> None:
        handle = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)
        try:
            self.map = mmap.mmap(handle, size)
        finally:
            os.close(handle)
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)


class ShmTransport(Layered):
    """``inner`` plus a shared-memory path to the ``local`` peers (same host)."""

    zero_copy = True

    def __init__(self, inner: Transport, local: set[int], min_bytes: int = MIN_BYTES) -> None:
        super().__init__(inner)
        self.min_bytes = min_bytes
        self.local = local
        self.generation = 0
        self.capacity = 0
        self.used = 0
        self._fd: int | None = None
        self._map: mmap.mmap | None = None
        self.outbox = torch.empty(0, dtype=torch.uint8)
        self._outstanding: list[_Send] = []
        self._acks: list[tuple[int, object]] = []
        self._peers: dict[int, tuple[int, _Mapping]] = {}

    # ---------------------------------------------------------- setup

    @staticmethod
    def probe(inner: Transport, gather) -> set[int]:
        """Peers on this host whose memory this rank can map, agreed by everyone;
        ``gather(obj)`` returns every rank's ``obj`` (e.g. all_gather_object)."""
        host = socket.gethostname() + _boot_id() + _net_namespace()
        fd = os.memfd_create("ccweave-probe")
        os.ftruncate(fd, mmap.PAGESIZE)
        try:
            peers = gather((host, os.getpid(), fd))
            ok = set()
            for rank, (other, pid, their_fd) in enumerate(peers):
                if rank == inner.rank or other != host:
                    continue
                with contextlib.suppress(OSError, ValueError):
                    _Mapping(pid, their_fd, mmap.PAGESIZE)
                    ok.add(rank)
            verdicts = gather(sorted(ok))
        finally:
            os.close(fd)
        return {rank for rank in ok if inner.rank in verdicts[rank]}

    def _grow(self, need: int) -> None:
        size = max(need, 2 * self.capacity, 1 << 20)
        fd = os.memfd_create(f"ccweave-outbox-{self.rank}")
        os.ftruncate(fd, size)
        new_map = mmap.mmap(fd, size)
        self._close_outbox()
        self._fd, self._map, self.capacity = fd, new_map, size
        self.outbox = torch.frombuffer(new_map, dtype=torch.uint8)
        self.generation += 1

    def _close_outbox(self) -> None:
        self.outbox = torch.empty(0, dtype=torch.uint8)
        if self._map is not None:
            with contextlib.suppress(BufferError):
                self._map.close()
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._map = None, None

    def _uses_shm(self, tensor: torch.Tensor, peer: int) -> bool:
        return (peer in self.local and tensor.device.type == "cpu"
                and tensor.numel() * tensor.element_size() >= self.min_bytes)

    def begin(self, send_bytes: int, timeout: float) -> None:
        """Before a run: every message of the last run was read (acknowledged), and the
        outbox holds all of this run's sends at once."""
        self._reap(timeout)
        if send_bytes > self.capacity:
            self._grow(send_bytes)
        self.used = 0

    def _reap(self, timeout: float) -> None:
        works = [(send.peer, work) for send in self._outstanding
                 for work in (send.header_work, send.ack_work)]
        works += self._acks
        try:
            for peer, work in works:
                try:
                    done = self.inner.wait_some([work], timeout)
                except PeerFailure as failure:
                    raise PeerFailure(0, failure.detail, peer) from None
                if not done:
                    raise PeerFailure(0, f"rank {peer} read nothing for {timeout:g} s", peer)
        finally:
            self._outstanding.clear()
            self._acks.clear()

    # ---------------------------------------------------------- messages

    def isend(self, tensor: torch.Tensor, peer: int, tag: int, channel: int = 0,
              route: tuple[str, ...] | None = None) -> object:
        if not self._uses_shm(tensor, peer):
            return self.inner.isend(tensor, peer, tag, channel, route)
        nbytes = tensor.numel() * tensor.element_size()
        if self.used + nbytes > self.capacity:  # begin() was not told: grow, keep going
            self._reap(3600.0)
            self._grow(self.used + nbytes)
            self.used = 0
        offset, self.used = self.used, self.used + nbytes
        region = self.outbox[offset:offset + nbytes]
        region.copy_(tensor.reshape(-1).view(torch.uint8))
        header = torch.tensor([self.generation, offset, nbytes, os.getpid(), self._fd or 0],
                              dtype=torch.int64)
        ack = torch.zeros(1, dtype=torch.int64)
        send = _Send(peer, header, self.inner.isend(header, peer, tag), ack,
                     self.inner.irecv(ack, peer, tag))
        self._outstanding.append(send)
        return send

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int, channel: int = 0,
              route: tuple[str, ...] | None = None) -> object:
        if not self._uses_shm(tensor, peer):
            return self.inner.irecv(tensor, peer, tag, channel, route)
        header = torch.zeros(_HEADER, dtype=torch.int64)
        return _Recv(peer, tag, header, self.inner.irecv(header, peer, tag), tensor)

    def irecv_data(self, like: torch.Tensor, peer: int, tag: int) -> object | None:
        """Receive a message shaped like ``like`` without copying it anywhere: after it
        finished, :meth:`received` is the data (valid until :meth:`release`); ``None``
        when this message does not go through shared memory."""
        if not self._uses_shm(like, peer):
            return None
        header = torch.zeros(_HEADER, dtype=torch.int64)
        recv = _Recv(peer, tag, header, self.inner.irecv(header, peer, tag), None)
        recv.data = like  # shape and dtype, until the real data arrives
        return recv

    def received(self, handle: _Recv) -> torch.Tensor:
        assert handle.data is not None
        return handle.data

    def release(self, handle: _Recv) -> None:
        """The data was read: let the sender reuse its outbox."""
        self._acks.append((handle.peer, self.inner.isend(torch.ones(1, dtype=torch.int64),
                                                         handle.peer, handle.tag)))

    def _land(self, handle: _Recv) -> None:
        generation, offset, nbytes, pid, fd = handle.header.tolist()
        known = self._peers.get(handle.peer)
        if known is None or known[0] != generation:
            known = self._peers[handle.peer] = (generation, _Mapping(pid, fd, _size(pid, fd)))
        raw = known[1].bytes[offset:offset + nbytes]
        like = handle.target if handle.target is not None else handle.data
        assert like is not None
        data = raw.view(like.dtype)
        if handle.target is not None:
            handle.target.view(-1).copy_(data)
            self.release(handle)
        else:
            handle.data = data

    def wait_some(self, handles: Sequence[object], timeout: float) -> list[int]:
        ready = [i for i, h in enumerate(handles) if isinstance(h, _Send)]
        if ready:
            return ready
        inner = [h.work if isinstance(h, _Recv) else h for h in handles]
        done = self.inner.wait_some(inner, timeout)
        for position in done:
            handle = handles[position]
            if isinstance(handle, _Recv):
                self._land(handle)
        return done

    # ---------------------------------------------------------- the rest

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._reap(5.0)
        self._peers.clear()
        self._close_outbox()
        self.inner.close()


def _size(pid: int, fd: int) -> int:
    return os.stat(f"/proc/{pid}/fd/{fd}").st_size


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _net_namespace() -> str:
    """Ranks in different network namespaces stand for different hosts (the emulated
    testbed): their traffic must cross the emulated links, not shared memory."""
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return ""


def with_shared_memory(inner: Transport, group: object | None = None) -> Transport:
    """``inner`` (a gloo transport) with the shared-memory path to same-host peers, unless
    ``CCWEAVE_SHM=0`` or no peer can be mapped; every rank of the group must call it."""
    if os.environ.get("CCWEAVE_SHM", "1") == "0" or inner.device.type != "cpu":
        return inner
    import torch.distributed as dist

    def gather(obj: object) -> list:
        out: list = [None] * inner.world_size
        dist.all_gather_object(out, obj, group=group)
        return out

    local = ShmTransport.probe(inner, gather)
    return ShmTransport(inner, local) if local else inner
