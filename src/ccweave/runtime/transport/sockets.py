"""Point-to-point messages over ccweave's own TCP connections, beside a gloo process group
that keeps rendezvous, barriers and small reductions.

Why not gloo's send/recv for the data: its works cannot be polled, so an executor either
blocks on its oldest message (one late receive from a slow link holds up every send a
fast link made ready) or parks a thread on each message (8 ranks on 2 cores: 256
independent 4 KB messages took 85 ms that way, 23 ms blocking on the oldest); and it has
one connection per peer. Here one thread drives every connection with ``epoll``
(``selectors``): a message completes when its bytes are in the kernel (send) or in the
buffer (receive), whichever connection it is on, and the executor hears of it at once.

A connection is opened per (peer, channel, route) on first use: messages on one channel
go in order, those on different channels travel side by side, as NCCL's channels do (and
as the simulator's cost model assumes). A transfer pinned to a route (``Transfer.via``: a
multipath stripe on a second rail or the host path) gets a connection of its own, bound
and connected to the addresses of that route where the job knows them (the testbed
lists them in the file ``CCWEAVE_ROUTES`` names), so it takes those links; elsewhere it
takes the pair's usual path, beside the other connections.

Each message is a 16-byte header (tag, length) and its bytes; a message that arrives
before its receive is posted is kept aside (as MPI's unexpected messages) and copied
when the receive comes, so no receive order can block a connection.

The listener faces whoever can reach it. A connection is admitted only with a hello that
carries an HMAC made with the job's secret (:mod:`ccweave.runtime.secret`), bound to the
job, the dialled rank and the lane, and only once per lane; anything else is closed and
its address named in one line on stderr while the job goes on. Every header is checked
before a byte is allocated for it: against its posted receive, else against the largest
message the executor said this rank receives (:meth:`SocketTransport.expect_messages`).
"""

from __future__ import annotations

import collections
import errno
import itertools
import os
import secrets
import selectors
import socket
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ccweave.errors import InputError, RuntimeFault, say
from ccweave.runtime import secret as job_secret
from ccweave.runtime.transport.base import Layered, PeerFailure, Transport

_HEADER = struct.Struct("<qq")  # tag, length in bytes
_HELLO = struct.Struct("<qqq")  # rank, channel, route name length (-1: the usual path): what
# a connecting rank sends first, then the route's name (its fabric nodes joined by "/"),
# then the hello's MAC (ccweave.runtime.secret.hello_mac)
ROUTES_ENV = "CCWEAVE_ROUTES"
"""A JSON file of pinned routes' addresses (``ccweave.testbed`` writes it)."""
Route = tuple[str, ...] | None
MAX_CHANNELS = 64
"""Connections per peer at most; higher channels share them (channel modulo this)."""
LISTEN_BACKLOG = 256
"""Connections the kernel completes before the rank accepts them. 32 made trees on the
shared-NIC testbed time out dialling. (4096 seemed to hang 8 local gloo ranks; the cause
was sends left queued across a barrier, see :meth:`SocketTransport.flush`.)"""
SEND_PARTS = 64
"""Queued pieces (headers and messages' bytes) handed to one ``sendmsg`` at most."""
FLUSH_SECONDS = 60.0
"""How long a barrier first waits for queued sends to reach the kernel."""
BUFFER_BYTES = 4 << 20
"""Socket send and receive buffers: a link's bandwidth-delay product stays far below.
Set before ``listen`` and ``connect`` (see :func:`_size_buffers`)."""
PORTS_ENV = "CCWEAVE_DATA_PORTS"
"""``LOW-HIGH`` (or one port): the ranks' data listeners take the first free port of the
range, so a firewall between hosts can let exactly those in (default: any free port)."""
EARLY_BYTES = 1 << 20
"""A message that comes before its receive is kept aside up to this size until the
executor says how large this rank's messages are (:meth:`SocketTransport.expect_messages`);
a larger one waits in the kernel for its receive."""
MAX_ROUTE_NAME = 4096
"""The longest route name a hello may carry (fabric node names joined by "/")."""
HELLO_SECONDS = 10.0
"""How long a connection may take to send its whole hello (a rank sends it at once)."""
NAMED_REFUSALS = 20
"""Refused connections named on stderr at most; the rest are counted when the rank ends."""


def _size_buffers(sock: socket.socket) -> None:
    """Give a socket :data:`BUFFER_BYTES` of send and receive buffer, before it listens or
    connects: TCP fixes a connection's largest receive window (its clamp) from the buffer
    at the handshake (tcp(7)), so a buffer set on a connection already made leaves the
    accepting side's window at what the default buffer allowed (~117 KB here). Every
    connection a rank accepted was capped at one window per round trip: on the shared-NIC
    testbed, with 25-30 ms of queueing, a lower rank's sends to a higher one ran at a
    third of the other direction's rate (``ss -ti``: rwnd_limited 60% of the time)."""
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, option, BUFFER_BYTES)


class _Message:
    """One posted send or receive: its bytes and how far they got."""

    __slots__ = ("done", "error", "lane", "nbytes", "offset", "tag", "view")

    def __init__(self, lane: _Lane, tag: int, view: memoryview) -> None:
        self.lane = lane
        self.tag = tag
        self.view = view
        self.nbytes = view.nbytes
        self.offset = 0
        self.done = False
        self.error: str | None = None


class _Lane:
    """The connection to one peer on one channel and route: messages to send in order,
    receives posted and messages that came first, both by tag, the message being read."""

    def __init__(self, peer: int, channel: int, route: Route) -> None:
        self.peer = peer
        self.channel = channel
        self.route = route
        self.sock: socket.socket | None = None
        self.sending: collections.deque[tuple[memoryview, _Message, bool]] = \
            collections.deque()  # (bytes left, message, whether they end it)
        self.posted: dict[int, collections.deque[_Message]] = {}
        self.early: dict[int, collections.deque[bytearray]] = {}
        self.header = bytearray(_HEADER.size)
        self.header_got = 0
        self.reading: _Message | None = None
        self.stash: bytearray | None = None  # an early message being read
        self.stash_tag = 0
        self.stash_got = 0
        self.error: str | None = None
        self.address = ""  # the peer's end of the connection, for messages
        self.parked = False  # a header waits for its receive or a larger cap
        self.watched = 0  # the events the selector watches (0: not registered)


class _Greeting:
    """A connection accepted and not yet admitted: the hello so far, whence, until when."""

    __slots__ = ("address", "data", "deadline")

    def __init__(self, address: str) -> None:
        self.address = address
        self.data = bytearray()
        self.deadline = time.monotonic() + HELLO_SECONDS


def _bytes(tensor: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor (any dtype, bfloat16 included)."""
    if tensor.device.type != "cpu":
        raise ValueError("the socket transport moves CPU tensors; GPU tensors use NCCL")
    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy()).cast("B")


class SocketTransport(Layered):
    """``inner``'s ranks joined by TCP connections of their own for messages.

    Parameters
    ----------
    inner: the gloo transport (rendezvous, barriers, :meth:`sum_values`, fault notes).
    gather: returns every rank's object (``all_gather_object`` over the group), used once
        to learn where each rank listens (and, without ``secret``, rank 0's secret).
    address: the local address to listen on (the one the rank's traffic leaves from).
    routes: pinned routes' addresses, ``(src, dst, via) -> (src address, dst address)``
        (then the rank listens on all its addresses, to take connections on them).
    secret: the job's secret, the same on every rank (``None`` on every rank: rank 0
        draws one and gives it to the others through ``gather``).
    ports: the ports the listener may take, the first free one (``None``: any).
    """

    def __init__(self, inner: Transport, gather: Callable[[object], list], address: str,
                 routes: dict[tuple[int, int, tuple[str, ...]], tuple[str, str]] | None = None,
                 secret: bytes | None = None, ports: range | None = None) -> None:
        super().__init__(inner)
        self.routes = routes or {}
        self.selector = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            _size_buffers(self.listener)  # accepted connections inherit it
            _bind(self.listener, "0.0.0.0" if self.routes else address, ports)
        except BaseException:
            self.listener.close()
            raise
        # every lane a peer dials may arrive while this rank is itself dialling (a
        # blocking connect): the kernel must complete them all without an accept, or
        # ranks wait on each other's full queues (trees on 8 ranks: hundreds of lanes)
        self.listener.listen(LISTEN_BACKLOG)
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        port = self.listener.getsockname()[1]
        # rank 0 names the job (a nonce every hello's MAC covers) and, where the launcher
        # gave no secret, draws one
        drawn = ((secrets.token_bytes(16), None if secret else
                  job_secret.new_secret().encode()) if self.rank == 0 else None)
        everyone = gather((address, port, secret is not None, drawn))
        self.addresses: list[tuple[str, int]] = [(a, p) for a, p, _, _ in everyone]
        given = [rank for rank, entry in enumerate(everyone) if entry[2]]
        if given and len(given) < self.world_size:
            self.listener.close()
            lacking = sorted(set(range(self.world_size)) - set(given))
            raise InputError(f"{job_secret.ENV} is set for rank(s) {_ranks(given)} but not "
                             f"for rank(s) {_ranks(lacking)}; give every rank the same one "
                             "(or none: then rank 0 draws one)")
        self.job: bytes = everyone[0][3][0]
        self.secret: bytes = secret if secret is not None else everyone[0][3][1]
        self.largest = EARLY_BYTES
        """The most bytes kept aside for one message before its receive is posted."""
        self.memory = _host_memory()
        self.refused = 0
        self.queued: set[_Lane] = set()
        """Lanes with bytes waiting for the kernel (what :meth:`flush` waits on)."""
        self.lanes: dict[tuple[int, int, Route, bool | None], _Lane] = {}
        """(peer, channel, route, way) -> lane. The usual path is one connection both ways
        (``way`` None); a pinned route is one connection per direction (the route back
        may differ), ``way`` True for the one this rank sends on."""
        self._greeting: dict[socket.socket, _Greeting] = {}

    # ---------------------------------------------------------- connections

    def _lane(self, peer: int, channel: int, route: Route = None, sending: bool = True
              ) -> _Lane:
        route = tuple(route) if route is not None else None
        key = (peer, channel % MAX_CHANNELS, route, None if route is None else sending)
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = _Lane(*key[:3])
            # the lower rank connects on the usual path; a pinned route's sender does
            if (self.rank < peer) if route is None else sending:
                self._connect(lane)
        return lane

    def _connect(self, lane: _Lane) -> None:
        host, port = self.addresses[lane.peer]
        local = None
        if lane.route is not None:
            pinned = self.routes.get((self.rank, lane.peer, lane.route))
            if pinned is not None:
                local, host = (pinned[0], 0), pinned[1]
        lane.address = f"{host}:{port}"
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            _size_buffers(sock)
            sock.settimeout(60.0)
            if local is not None:
                sock.bind(local)
            sock.connect((host, port))
            name = "/".join(lane.route).encode() if lane.route is not None else b""
            hello = _HELLO.pack(self.rank, lane.channel,
                                len(name) if lane.route is not None else -1) + name
            sock.sendall(hello + job_secret.hello_mac(self.secret, self.job, lane.peer, hello))
        except OSError as error:
            sock.close()
            on = f" on route {'/'.join(lane.route) or 'direct'}" if lane.route is not None \
                else ""
            lane.error = (f"cannot connect to rank {lane.peer} at {host}:{port}{on} from "
                          f"{local[0] if local else 'this host'}: {error.strerror or error}")
            return  # its messages fail with this reason
        self._attach(lane, sock)

    def _attach(self, lane: _Lane, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        lane.sock = sock
        self._watch(lane)

    def _watch(self, lane: _Lane) -> None:
        """Have the selector watch what the lane waits for: reading unless a header waits
        (parked), writing while bytes are queued."""
        if lane.sock is None:
            return
        events = ((0 if lane.parked else selectors.EVENT_READ)
                  | (selectors.EVENT_WRITE if lane.sending else 0))
        if events == lane.watched:
            return
        if not events:
            self.selector.unregister(lane.sock)
        elif lane.watched:
            self.selector.modify(lane.sock, events, lane)
        else:
            self.selector.register(lane.sock, events, lane)
        lane.watched = events

    def _accept(self) -> None:
        while True:
            try:
                sock, peer = self.listener.accept()
            except BlockingIOError:
                return
            except OSError:
                return  # out of descriptors, or the connection went: the rest wait
            sock.setblocking(False)
            self._greeting[sock] = _Greeting(f"{peer[0]}:{peer[1]}")
            self.selector.register(sock, selectors.EVENT_READ, "hello")

    def _greet(self, sock: socket.socket) -> None:
        """Read a connecting rank's hello (rank, channel, route, MAC); admit the socket to
        its lane when the MAC is the job's and the lane has no connection yet."""
        greeting = self._greeting[sock]
        got = greeting.data
        while True:
            need = _HELLO.size
            if len(got) >= _HELLO.size:
                rank, channel, length = _HELLO.unpack_from(got)
                wrong = self._wrong_hello(rank, channel, length)
                if wrong:
                    self._refuse(sock, f"not a rank of this job (bad hello: {wrong})")
                    return
                need += max(length, 0) + job_secret.MAC_BYTES
                if len(got) == need:
                    break
            try:
                chunk = sock.recv(need - len(got))
            except BlockingIOError:
                return
            except OSError as error:
                self._refuse(sock, f"{error.strerror or error} before its hello was complete")
                return
            if not chunk:
                self._refuse(sock, "not a rank of this job (it closed the connection before "
                                   "its hello was complete)")
                return
            got += chunk
        end = len(got) - job_secret.MAC_BYTES
        if not job_secret.hello_is_genuine(self.secret, self.job, self.rank, bytes(got[:end]),
                                           bytes(got[end:])):
            self._refuse(sock, f"not a rank of this job (bad hello: claims rank {rank} "
                               "without the job's secret)")
            return
        route = tuple(got[_HELLO.size:end].decode().split("/")) if length >= 0 else None
        if route == ("",):
            route = ()
        key = (rank, channel, route, None if route is None else False)
        lane = self.lanes.get(key)
        if lane is not None and (lane.sock is not None or lane.address):
            self._refuse(sock, f"rank {rank}'s lane on channel {channel} is connected "
                               f"already, from {lane.address} (a replayed hello?)")
            return
        del self._greeting[sock]
        self.selector.unregister(sock)
        if lane is None:
            lane = self.lanes[key] = _Lane(*key[:3])
        lane.address = greeting.address
        self._attach(lane, sock)
        self._pump(lane)
        self._watch(lane)

    def _wrong_hello(self, rank: int, channel: int, length: int) -> str | None:
        """What is impossible in a hello's fields (``None``: nothing), before reading on."""
        if not 0 <= rank < self.world_size or rank == self.rank:
            return f"rank {rank} is not another rank of 0..{self.world_size - 1}"
        if not 0 <= channel < MAX_CHANNELS:
            return f"channel {channel} is not one of 0..{MAX_CHANNELS - 1}"
        if not -1 <= length <= MAX_ROUTE_NAME:
            return f"a route name of {length} bytes, over {MAX_ROUTE_NAME}"
        if length < 0 and rank > self.rank:
            return f"rank {rank} dials rank {self.rank}'s usual path, which the lower rank does"
        return None

    def _refuse(self, sock: socket.socket, why: str) -> None:
        """Close a connection that is not admitted and name it (the first few) on stderr."""
        greeting = self._greeting.pop(sock)
        self.selector.unregister(sock)
        sock.close()
        self.refused += 1
        if self.refused <= NAMED_REFUSALS:
            say(f"ccweave rank {self.rank}: refused a connection from {greeting.address}: "
                f"{why}")
        elif self.refused == NAMED_REFUSALS + 1:
            say(f"ccweave rank {self.rank}: refused more connections; the rest are not named "
                "(their count comes when the rank ends)")

    def _expire_greetings(self) -> None:
        now = time.monotonic()
        for sock, greeting in list(self._greeting.items()):
            if now > greeting.deadline:
                self._refuse(sock, f"not a rank of this job (no whole hello within "
                                   f"{HELLO_SECONDS:g} s)")

    # ---------------------------------------------------------- messages

    def expect_messages(self, largest_bytes: int) -> None:
        if largest_bytes <= self.largest:
            return
        self.largest = largest_bytes
        for lane in list(self.lanes.values()):
            if lane.parked:  # a peer ahead of this rank sent a larger size first
                self._pump(lane)
                self._watch(lane)

    def isend(self, tensor: torch.Tensor, peer: int, tag: int, channel: int = 0,
              route: tuple[str, ...] | None = None) -> object:
        lane = self._lane(peer, channel, route, sending=True)
        view = _bytes(tensor)
        message = _Message(lane, tag, view)
        if lane.error:
            message.error = lane.error
            return message
        lane.sending.append((memoryview(_HEADER.pack(tag, view.nbytes)), message, False))
        lane.sending.append((view, message, True))
        self.queued.add(lane)
        if len(lane.sending) == 2 and lane.sock is not None:
            self._write(lane)  # an idle connection starts at once
            self._watch(lane)
        return message

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int, channel: int = 0,
              route: tuple[str, ...] | None = None) -> object:
        lane = self._lane(peer, channel, route, sending=False)
        message = _Message(lane, tag, _bytes(tensor))
        early = lane.early.get(tag)
        if early:
            data = early.popleft()
            if len(data) != message.nbytes:
                message.error = (f"{_who(lane)} sent {len(data)} bytes with tag {tag}, "
                                 f"{message.nbytes} expected")
            else:
                message.view[:] = data
                message.done = True
        elif lane.error:
            message.error = lane.error
        else:
            lane.posted.setdefault(tag, collections.deque()).append(message)
            if lane.parked:  # its header may be the one waiting
                self._pump(lane)
                self._watch(lane)
        return message

    def _write(self, lane: _Lane) -> None:
        """Hand the lane's queued bytes to the kernel, up to :data:`SEND_PARTS` pieces a
        ``sendmsg``, so a message's header and bytes (and the messages queued behind it)
        leave in one system call and, under ``TCP_NODELAY``, one segment where they fit:
        a header sent alone was a packet, a wake-up of the receiver and a system call at
        each end of every message."""
        sock = lane.sock
        assert sock is not None
        sending = lane.sending
        while sending:
            parts = [view for view, _, _ in itertools.islice(sending, SEND_PARTS)]
            try:
                sent = sock.sendmsg(parts)
                short = sent < sum(view.nbytes for view in parts)
            except BlockingIOError:
                return
            except OSError as error:
                self._fail(lane, f"send to rank {lane.peer} failed: {error.strerror or error}")
                return
            while sending and sending[0][0].nbytes <= sent:
                view, message, last = sending.popleft()
                sent -= view.nbytes
                if last:
                    message.done = True
            if sent:  # part of the next piece went
                view, message, last = sending[0]
                sending[0] = (view[sent:], message, last)
            if short:
                return  # the kernel's buffer is full
        self.queued.discard(lane)

    def _pump(self, lane: _Lane) -> None:
        """Read what the connection holds up to the end of one message: a header, then the
        bytes into the posted receive (or aside, when it is not posted yet). It returns
        when a message lands, so the executor hears of it before this connection's next
        message is read (epoll, level-triggered, comes back for the rest): reading on
        while data kept coming held a rank's completions back for 60 ms and more on the
        rail testbed, with the next step's sends waiting on them."""
        while lane.sock is not None:
            if lane.reading is None and lane.stash is None:
                if lane.header_got < _HEADER.size:
                    got = self._recv(lane, memoryview(lane.header)[lane.header_got:])
                    if got is None:
                        return
                    lane.header_got += got
                    if lane.header_got < _HEADER.size:
                        continue
                if not self._place(lane):
                    return
                continue
            reading = lane.reading
            if reading is not None:
                got = self._recv(lane, reading.view[reading.offset:])
                if got is None:
                    return
                reading.offset += got
                if reading.offset == reading.nbytes:
                    self._landed(lane)
                    return
            else:
                assert lane.stash is not None
                got = self._recv(lane, memoryview(lane.stash)[lane.stash_got:])
                if got is None:
                    return
                lane.stash_got += got
                if lane.stash_got == len(lane.stash):
                    self._landed(lane)
                    return

    def _place(self, lane: _Lane) -> bool:
        """Find where the message of the header just read goes, checking the header first:
        its posted receive must be as long; unposted, it is kept aside up to
        :attr:`largest` bytes, and a longer one parks the lane (read no further) until its
        receive is posted or the executor expects larger messages. ``False``: parked, or
        the lane failed on a header no rank of this job would send."""
        tag, nbytes = _HEADER.unpack(lane.header)
        waiting = lane.posted.get(tag)
        if waiting:
            if waiting[0].nbytes != nbytes:
                self._fail(lane, f"{_who(lane)} sent a header of {nbytes} bytes with tag "
                                 f"{tag}, where its receive is {waiting[0].nbytes} bytes")
                return False
            lane.reading = waiting.popleft()
        elif not 0 <= nbytes <= self.largest:
            if not 0 <= nbytes <= self.memory:
                self._fail(lane, f"{_who(lane)} sent a header of {nbytes} bytes with tag "
                                 f"{tag}: no message of this job is that long")
                return False
            lane.parked = True
            return False
        else:
            lane.stash, lane.stash_tag, lane.stash_got = bytearray(nbytes), tag, 0
        lane.parked = False
        lane.header_got = 0
        if nbytes == 0:
            self._landed(lane)
        return True

    def _recv(self, lane: _Lane, into: memoryview) -> int | None:
        """Bytes read into ``into``; ``None`` when nothing is there (or the peer is gone)."""
        assert lane.sock is not None
        try:
            got = lane.sock.recv_into(into)
        except BlockingIOError:
            return None
        except OSError as error:
            self._fail(lane, f"rank {lane.peer}: {error.strerror or error}")
            return None
        if not got:
            self._fail(lane, f"connection closed by rank {lane.peer}")
            return None
        return got

    def _landed(self, lane: _Lane) -> None:
        """The message being read is complete."""
        if lane.reading is not None:
            lane.reading.done = True
            lane.reading = None
            return
        data, tag = lane.stash, lane.stash_tag
        assert data is not None
        lane.stash = None
        waiting = lane.posted.get(tag)
        if waiting:  # posted while it was being read
            message = waiting.popleft()
            if len(data) != message.nbytes:
                message.error = (f"{_who(lane)} sent {len(data)} bytes with tag {tag}, "
                                 f"{message.nbytes} expected")
            else:
                message.view[:] = data
                message.done = True
        else:
            lane.early.setdefault(tag, collections.deque()).append(data)

    def _fail(self, lane: _Lane, why: str) -> None:
        lane.error = why
        for _, message, _ in lane.sending:
            message.error = why
        lane.sending.clear()
        self.queued.discard(lane)
        for waiting in lane.posted.values():
            for message in waiting:
                message.error = why
        lane.posted.clear()
        if lane.reading is not None:
            lane.reading.error = why
            lane.reading = None
        lane.stash = None
        lane.parked = False
        if lane.sock is not None:
            if lane.watched:
                self.selector.unregister(lane.sock)
            lane.watched = 0
            lane.sock.close()
            lane.sock = None

    def _progress(self, timeout: float) -> None:
        for key, events in self.selector.select(timeout):
            if key.data is None:
                self._accept()
            elif key.data == "hello":
                if key.fileobj in self._greeting:
                    self._greet(key.fileobj)  # type: ignore[arg-type]
            else:
                lane: _Lane = key.data
                if events & selectors.EVENT_READ and lane.sock is not None:
                    self._pump(lane)
                if events & selectors.EVENT_WRITE and lane.sock is not None:
                    self._write(lane)
                self._watch(lane)
        if self._greeting:
            self._expire_greetings()

    def wait_some(self, handles: Sequence[object], timeout: float) -> list[int]:
        messages: Sequence[_Message] = handles  # type: ignore[assignment]
        deadline = time.monotonic() + timeout
        # read what has come even when a send is done already: sends finish as soon as
        # the kernel takes them, and returning on those alone left the receives that gate
        # the next step unread until every ready send was issued (trees on the rail
        # testbed: first reductions ~100 ms late, rails idle meanwhile)
        self._progress(0.0)
        while True:
            done = [position for position, m in enumerate(messages) if m.done or m.error]
            for position in done:
                message = messages[position]
                if message.error:
                    raise PeerFailure(position, message.error, message.lane.peer)
            if done:
                return done
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            self._progress(left)

    # ---------------------------------------------------------- the rest

    def barrier(self) -> None:
        self.flush()
        self.inner.barrier()

    def sum_values(self, values: Sequence[float]) -> list[float]:
        self.flush()
        return self.inner.sum_values(values)

    def flush(self, timeout: float = FLUSH_SECONDS) -> None:
        """Hand every queued byte to the kernel before a blocking step of the inner
        transport, which runs no epoll loop, and before a progress thread goes idle
        (``ccweave.torch``): a peer may be waiting on those bytes. A send
        the layer above counts done can still be queued here (a shared-memory header on a
        lane whose peer has not dialled yet); left queued, the peer waited for it while
        this rank waited in the barrier, and 8 local ranks hung until gloo's timeout."""
        deadline = time.monotonic() + timeout
        while self.queued:
            left = deadline - time.monotonic()
            if left <= 0:
                return  # the step below times out and names the peer
            self._progress(min(left, 1.0))

    def close(self) -> None:
        # name the connections that came since the last wait (one late in the job)
        self._accept()
        for sock in list(self._greeting):
            if sock in self._greeting:
                self._greet(sock)
        if self.refused > NAMED_REFUSALS:
            say(f"ccweave rank {self.rank}: refused {self.refused} connections in all")
        for lane in self.lanes.values():
            if lane.sock is not None:
                lane.sock.close()
        for sock in self._greeting:
            sock.close()
        self.lanes.clear()
        self.queued.clear()
        self.listener.close()
        self.selector.close()
        self.inner.close()


def with_sockets(inner: Transport, address: str, group: object | None = None) -> Transport:
    """``inner`` (a gloo transport) with its messages on ccweave's own connections, unless
    ``CCWEAVE_SOCKETS=0`` (then gloo's send and receive carry them); every rank of the
    group must call it. Pinned routes' addresses come from the file ``CCWEAVE_ROUTES``
    names, if any; the job's secret from ``CCWEAVE_JOB_SECRET``, the listener's ports
    from ``CCWEAVE_DATA_PORTS``."""
    import os

    if os.environ.get("CCWEAVE_SOCKETS", "1") == "0" or inner.device.type != "cpu":
        return inner
    import torch.distributed as dist

    def gather(obj: object) -> list:
        out: list = [None] * inner.world_size
        dist.all_gather_object(out, obj, group=group)
        return out

    return SocketTransport(inner, gather, address, read_routes(os.environ.get(ROUTES_ENV)),
                           job_secret.from_env(), data_ports(os.environ.get(PORTS_ENV)))


def data_ports(text: str | None) -> range | None:
    """The ports :data:`PORTS_ENV` allows (``LOW-HIGH`` or one port; ``None``: any)."""
    if not text:
        return None
    low, _, high = text.partition("-")
    try:
        ports = range(int(low), int(high or low) + 1)
    except ValueError:
        ports = range(0)
    if not ports or ports.start < 1 or ports.stop > 65536:
        raise InputError(f"{PORTS_ENV}={text!r} is not a port range; give LOW-HIGH within "
                         "1..65535 (e.g. 29600-29663), or one port")
    return ports


def _bind(listener: socket.socket, host: str, ports: range | None) -> None:
    """Bind ``listener`` to the first free port of ``ports`` (any port when ``None``)."""
    if ports is None:
        listener.bind((host, 0))
        return
    for port in ports:
        try:
            listener.bind((host, port))
            return
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise
    raise RuntimeFault(f"{PORTS_ENV}: every port of {ports.start}-{ports.stop - 1} is in use "
                       f"on {host}; give a wider range (a rank takes one)")


def _host_memory() -> int:
    """This host's memory in bytes: no message a rank receives can be longer."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def _who(lane: _Lane) -> str:
    """The peer of a lane for messages: its rank and the address of its connection."""
    return f"rank {lane.peer} ({lane.address})" if lane.address else f"rank {lane.peer}"


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(map(str, ranks))


def read_routes(path: str | None) -> dict[tuple[int, int, tuple[str, ...]], tuple[str, str]]:
    """Pinned routes' addresses from a JSON file (a list of objects with ``src``, ``dst``,
    ``via``, ``src_address``, ``dst_address``); none without a file."""
    if not path:
        return {}
    import json

    from ccweave.errors import InputError

    try:
        items = json.loads(Path(path).read_text())
        return {(int(r["src"]), int(r["dst"]), tuple(r["via"])):
                (str(r["src_address"]), str(r["dst_address"])) for r in items}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"{ROUTES_ENV}={path}: not a list of pinned routes "
                         f"({type(error).__name__}: {error})") from None


def local_address(peer_address: str) -> str:
    """The address this host's traffic to ``peer_address`` leaves from (a UDP socket's
    route lookup; nothing is sent)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((peer_address, 9))
        return probe.getsockname()[0]
    except OSError as error:
        if error.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return "127.0.0.1"
        raise
    finally:
        probe.close()
