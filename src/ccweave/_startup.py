"""What the ``ccweave`` command sets up before its libraries load (numpy and scipy take a
second or two on a loaded host): Ctrl-C in that time ends it as Ctrl-C later does, with
one line and no traceback (Python still exits by SIGINT, 130 to a shell). Only for the
command itself (``ccweave``, ``python -m ccweave.cli``), never for a program that imports
the library."""

from __future__ import annotations

import os
import sys


def _quiet_interrupt(kind, value, traceback) -> None:
    if issubclass(kind, KeyboardInterrupt):
        if sys.stderr is not None:
            sys.stderr.write("ccweave: interrupted\n")
        return
    sys.__excepthook__(kind, value, traceback)


def _is_the_command() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return (os.path.basename(sys.argv[0] if sys.argv else "") == "ccweave"
            or getattr(spec, "name", "") in ("ccweave.cli", "ccweave.__main__"))


if _is_the_command():
    sys.excepthook = _quiet_interrupt
