"""The transport interface the executor drives: post sends and receives, learn which
finished. Transports know nothing of schedules (NCCL's ``transport/`` layer)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is loaded by the transports, not by commands that only read this
    import torch


class PeerFailure(Exception):
    """A posted send or receive failed; ``position`` indexes the handles waited on
    (``peer`` names the rank when the transport knows it better)."""

    def __init__(self, position: int, detail: str, peer: int | None = None) -> None:
        super().__init__(detail)
        self.position = position
        self.detail = detail
        self.peer = peer


class Transport(abc.ABC):
    """Point-to-point messages between the ``world_size`` ranks of one job.

    Host-driven transports (gloo, MPI) complete handles seen through :meth:`wait_some`;
    stream-ordered ones (NCCL) run operations on device streams in issue order, and the
    executor orders later work after a handle with :meth:`order_after` instead.
    """

    name: str = "transport"
    stream_ordered: bool = False

    def __init__(self, rank: int, world_size: int, device: torch.device) -> None:
        self.rank = rank
        self.world_size = world_size
        self.device = device

    @abc.abstractmethod
    def isend(self, tensor: torch.Tensor, peer: int, tag: int, channel: int = 0,
              route: tuple[str, ...] | None = None) -> object:
        """Start sending a contiguous tensor on ``channel``, along ``route`` (the fabric
        nodes a pinned route passes; ``None``: the pair's usual path) where the transport
        can choose; returns a handle."""

    @abc.abstractmethod
    def irecv(self, tensor: torch.Tensor, peer: int, tag: int, channel: int = 0,
              route: tuple[str, ...] | None = None) -> object:
        """Start receiving into a contiguous tensor on ``channel`` (and ``route``, as the
        sender's); returns a handle."""

    def open_channels(self, count: int) -> None:
        """Make ``count`` channels usable (every rank calls it with the same count). A
        channel is a connection per peer of its own, so messages on different channels
        travel side by side; on one channel they go one after another, in the order
        both ends posted them (what the simulator assumes). Transports with one path per
        peer keep it."""
        del count

    def expect_messages(self, largest_bytes: int) -> None:
        """This rank's receives are at most ``largest_bytes`` long (the executor says so
        when it binds buffers; it only grows). Transports that keep a message aside until
        its receive is posted allocate no more than this for one: a peer's word is not
        enough."""
        del largest_bytes

    @abc.abstractmethod
    def wait_some(self, handles: Sequence[object], timeout: float) -> list[int]:
        """Positions of handles that finished (at least one), or ``[]`` after ``timeout``
        seconds without any; ``handles`` come oldest first. Raises :class:`PeerFailure`."""

    # Optional, for transports that can hand over received data without a copy (shm):
    # ``irecv_data(like, peer, tag) -> handle | None``, ``received(handle) -> Tensor``,
    # ``release(handle)``; and ``begin(send_bytes, timeout)`` before each run.

    def order_after(self, handle: object) -> None:
        """Stream-ordered transports: make later device work wait for ``handle``."""
        raise NotImplementedError

    def flush(self, timeout: float) -> None:
        """Hand every byte queued for a peer to the network, waiting up to ``timeout``
        seconds: a rank about to go idle (a collective finished on a progress thread)
        must not keep a message a peer still waits on. Nothing to do for transports that
        queue nothing of their own."""
        del timeout

    @abc.abstractmethod
    def barrier(self) -> None:
        """Every rank reaches this point before any leaves it."""

    @abc.abstractmethod
    def sum_values(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum of small float vectors over ranks (timings, error counts)."""

    def explain_loss(self, peer: int) -> str:
        """Why ``peer`` went away, as far as this transport can tell (see faults.py)."""
        return f"peer rank {peer} stopped (it died or failed; see its own error)"

    def report_loss(self, peer: int) -> None:
        """Tell the job this rank lost ``peer``, so others can name the root cause."""
        del peer  # transports without a job-wide store have nowhere to say it

    def close(self) -> None:
        """Release what the transport holds (nothing, unless a transport says otherwise)."""
        return None


class Layered(Transport):
    """A transport that carries some messages its own way and leaves the rest of the job
    (barriers, sums, fault notes, channels) to the ``inner`` one it wraps."""

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner.rank, inner.world_size, inner.device)
        self.inner = inner
        self.name = inner.name

    def open_channels(self, count: int) -> None:
        self.inner.open_channels(count)

    def order_after(self, handle: object) -> None:
        self.inner.order_after(handle)

    def expect_messages(self, largest_bytes: int) -> None:
        self.inner.expect_messages(largest_bytes)

    def flush(self, timeout: float) -> None:
        self.inner.flush(timeout)

    def barrier(self) -> None:
        self.inner.barrier()

    def sum_values(self, values: Sequence[float]) -> list[float]:
        return self.inner.sum_values(values)

    def explain_loss(self, peer: int) -> str:
        return self.inner.explain_loss(peer)

    def report_loss(self, peer: int) -> None:
        self.inner.report_loss(peer)

    def close(self) -> None:
        self.inner.close()
