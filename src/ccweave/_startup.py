"""What the ``ccweave`` command sets up before its libraries load (numpy and scipy take a
second or two on a loaded host): Ctrl-C in that time ends it as Ctrl-C later does, with
one line and no traceback (Python still exits by SIGINT, 130 to a shell), and one that
Python swallows in an import's weakref callback is remembered (:mod:`ccweave.interrupts`),
so the command still stops before it runs anything. Only for the command itself
(``ccweave``, ``python -m ccweave.cli``), never for a program that imports the library."""

from __future__ import annotations

import os
import signal
import sys

from ccweave import interrupts


def _quiet_interrupt(kind, value, traceback) -> None:
    if issubclass(kind, KeyboardInterrupt):
        if sys.stderr is not None:
            sys.stderr.write("ccweave: interrupted\n")
        return
    sys.__excepthook__(kind, value, traceback)


def _quiet_unraisable(unraisable) -> None:
    """A Ctrl-C raised where Python cannot raise it (a callback) is not a traceback: it
    is remembered, and the command stops at its next check."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        return
    sys.__unraisablehook__(unraisable)


def _is_the_command() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return (os.path.basename(sys.argv[0] if sys.argv else "") == "ccweave"
            or getattr(spec, "name", "") in ("ccweave.cli", "ccweave.__main__"))


if _is_the_command():
    sys.excepthook = _quiet_interrupt
    sys.unraisablehook = _quiet_unraisable
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not if ignored
        signal.signal(signal.SIGINT, interrupts.ctrl_c)
