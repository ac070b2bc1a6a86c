"""The signals a command was stopped with, remembered where Python may lose them.

Ctrl-C raises ``KeyboardInterrupt`` wherever the main thread is; when that is inside a
finalizer or a weakref callback (an import's module lock, a collected object), Python
prints "Exception ignored" and goes on: a ``testbed run`` once ran its ranks to the end and
exited 0 after one. The CLI's handlers :func:`note` each signal before they raise, and
long waits :func:`check`, so a swallowed one still stops the command at the next check.
"""

from __future__ import annotations

import signal
import threading

_received: list[int] = []


def note(signum: int) -> None:
    """Remember that the command got ``signum`` (a handler calls this before it raises)."""
    _received.append(signum)


def ctrl_c(signum: int, frame: object) -> None:
    """SIGINT's handler for the command: remember it, then raise ``KeyboardInterrupt`` as
    Python's own handler does."""
    note(signum)
    signal.default_int_handler(signum, frame)


def check() -> None:
    """Raise :class:`~ccweave.errors.Interrupted` for a signal the command got but that
    did not stop it (its exception was swallowed); nothing otherwise. Main thread only,
    where Python delivers signals."""
    from ccweave.errors import Interrupted

    if _received and threading.current_thread() is threading.main_thread():
        number = _received[-1]
        _received.clear()
        raise Interrupted(f"interrupted ({signal.Signals(number).name})", number)


def forget() -> None:
    """The signal stopped the command as it should: nothing is pending any more."""
    _received.clear()
