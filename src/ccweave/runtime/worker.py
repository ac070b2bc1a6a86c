"""A process group's progress thread: it runs the group's collectives one after another,
in the order they were called, while the caller goes on (DDP's backward pass computes
the next bucket's gradients while this one is summed).

Every rank of a group calls its collectives in the same order, and one thread per group
taking them first in, first out keeps that order on every rank (what a stream does for
NCCL): no rank can start bucket 2 while a peer still waits in bucket 1. A collective's
result or error lands in its ``torch.futures.Future``; a call whose group has nothing
in flight runs on the caller's thread instead, without the hand-over.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_STOP = object()


class Work:
    """What an asynchronous ccweave collective returns, as ``torch.distributed``'s work:
    :meth:`wait` (raises the collective's error), :meth:`is_completed`,
    :meth:`is_success`, :meth:`exception`, :meth:`get_future` (a future of the list of
    result tensors)."""

    def __init__(self, future: torch.futures.Future) -> None:
        self._future = future

    def wait(self, timeout: object = None) -> bool:
        """Block until the collective finished; raise its error if it failed."""
        del timeout  # the collective's own timeout bounds the wait
        self._future.wait()
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        return self._future.done() and self.exception() is None

    def exception(self) -> BaseException | None:
        """The collective's error (``None``: none, or not finished yet)."""
        if not self._future.done():
            return None
        try:
            self._future.value()
        except BaseException as error:  # the future holds any exception the task raised
            return error
        return None

    def get_future(self) -> torch.futures.Future:
        return self._future

    def result(self) -> Sequence[torch.Tensor]:
        """The result tensors, once finished (waits; raises the collective's error)."""
        return self._future.wait()


class GroupWorker:
    """One thread that runs a group's collectives first in, first out.

    Parameters
    ----------
    name: the thread's name (``ccweave-group-...``), shown by debuggers and ``py-spy``.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        """Whether a collective is queued or running."""
        with self._lock:
            return self._pending > 0

    def submit(self, task: Callable[[], object], future: torch.futures.Future | None = None
               ) -> torch.futures.Future:
        """Queue ``task``; its return value (or exception) completes ``future`` (a new
        one when ``None``), which is returned."""
        import torch

        future = future if future is not None else torch.futures.Future()
        with self._lock:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name,
                                                daemon=True)
                self._thread.start()
        self._tasks.put((task, future))
        return future

    def call(self, task: Callable[[], object]) -> object:
        """Run ``task`` now and return its value: on this thread when nothing is queued
        (no hand-over), else after what is queued, keeping the group's order."""
        with self._lock:
            idle = self._pending == 0
            if idle:
                self._pending += 1  # a submit meanwhile (another thread) queues behind
        if not idle:
            return self.submit(task).wait()
        try:
            return task()
        finally:
            self._done()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or running (``False``: still busy after
        ``timeout`` seconds)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread once what is queued has run (waiting ``timeout`` s at most)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._tasks.put((_STOP, None))
            thread.join(timeout)

    def _done(self) -> None:
        with self._idle:
            self._pending -= 1
            if self._pending == 0:
                self._idle.notify_all()

    def _loop(self) -> None:
        while True:
            task, future = self._tasks.get()
            if task is _STOP:
                return
            try:
                result = task()
            except BaseException as error:  # every error reaches the caller's future
                self._done()
                future.set_exception(error)
            else:
                self._done()  # idle before the waiter wakes: its next call runs inline
                future.set_result(result)
