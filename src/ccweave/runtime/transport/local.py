"""Ranks as threads of one process, messages through shared memory: runs every rank's
executor in one process, for tests and for measuring the executor's own overhead.

Sends are eager (copied into the mailbox at once and complete); a receive completes when
a message with its (source, tag) has arrived. ``fail(rank)`` makes every operation with
that rank fail, as a dead peer would.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from collections.abc import Sequence

import torch

from ccweave.runtime.transport.base import PeerFailure, Transport


class LocalFabric:
    """The shared mailboxes of ``world_size`` in-process ranks."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.condition = threading.Condition()
        self.mail: dict[tuple[int, int, int], deque[torch.Tensor]] = defaultdict(deque)
        self.failed: set[int] = set()
        self._barrier = threading.Barrier(world_size)
        self._sums: list[list[float]] = []
        self._sum_lock = threading.Lock()

    def transports(self) -> list[LocalTransport]:
        return [LocalTransport(self, rank) for rank in range(self.world_size)]

    def fail(self, rank: int) -> None:
        """Make ``rank`` look dead to everyone."""
        with self.condition:
            self.failed.add(rank)
            self.condition.notify_all()


class _Recv:
    __slots__ = ("done", "key", "peer", "tensor")

    def __init__(self, tensor: torch.Tensor, key: tuple[int, int, int], peer: int) -> None:
        self.tensor, self.key, self.peer, self.done = tensor, key, peer, False


class _Send:
    __slots__ = ("done", "peer")

    def __init__(self, peer: int) -> None:
        self.peer, self.done = peer, True


class LocalTransport(Transport):
    """One rank's view of a :class:`LocalFabric`."""

    name = "local"

    def __init__(self, fabric: LocalFabric, rank: int) -> None:
        super().__init__(rank, fabric.world_size, torch.device("cpu"))
        self.fabric = fabric

    def isend(self, tensor: torch.Tensor, peer: int, tag: int, channel: int = 0,
              route: tuple[str, ...] | None = None) -> object:
        with self.fabric.condition:
            self.fabric.mail[(self.rank, peer, tag)].append(tensor.clone())
            self.fabric.condition.notify_all()
        return _Send(peer)

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int, channel: int = 0,
              route: tuple[str, ...] | None = None) -> object:
        return _Recv(tensor, (peer, self.rank, tag), peer)

    def _poll(self, handles: Sequence[object]) -> list[int]:
        done = []
        for position, handle in enumerate(handles):
            if handle.peer in self.fabric.failed:  # type: ignore[attr-defined]
                raise PeerFailure(position, f"rank {handle.peer} is gone")  # type: ignore
            if isinstance(handle, _Recv) and not handle.done:
                queue = self.fabric.mail.get(handle.key)
                if queue:
                    handle.tensor.copy_(queue.popleft())
                    handle.done = True
            if handle.done:  # type: ignore[attr-defined]
                done.append(position)
        return done

    def wait_some(self, handles: Sequence[object], timeout: float) -> list[int]:
        deadline = time.monotonic() + timeout
        with self.fabric.condition:
            while True:
                done = self._poll(handles)
                left = deadline - time.monotonic()
                if done or left <= 0:
                    return done
                self.fabric.condition.wait(left)

    def barrier(self) -> None:
        self.fabric._barrier.wait()

    def sum_values(self, values: Sequence[float]) -> list[float]:
        fabric = self.fabric
        fabric._barrier.wait()
        with fabric._sum_lock:
            fabric._sums.append(list(values))
        fabric._barrier.wait()
        total = [sum(column) for column in zip(*fabric._sums)]
        fabric._barrier.wait()
        if self.rank == 0:
            fabric._sums.clear()
        fabric._barrier.wait()
        return total


def run_threads(world_size: int, work, timeout: float = 120.0) -> list[object]:
    """Call ``work(transport)`` for every rank of a new fabric, one thread each; returns
    the results by rank and re-raises the first rank's exception (others are stopped by
    marking that rank failed)."""
    fabric = LocalFabric(world_size)
    results: list[object] = [None] * world_size
    errors: list[tuple[int, BaseException]] = []

    def target(transport: LocalTransport) -> None:
        try:
            results[transport.rank] = work(transport)
        except BaseException as error:
            errors.append((transport.rank, error))
            fabric.fail(transport.rank)
            fabric._barrier.abort()

    threads = [threading.Thread(target=target, args=(t,), daemon=True)
               for t in fabric.transports()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    if errors:
        raise sorted(errors, key=lambda item: item[0])[0][1]
    if any(thread.is_alive() for thread in threads):
        raise TimeoutError(f"ranks still running after {timeout:g} s")
    return results
