"""The few exception types ccweave raises; the CLI turns each into one line and exit code 2.

Every message names the input (file, field, argument) and says how to fix it.
"""

from __future__ import annotations

import sys

_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7f, 0xa0))}


def printable(text: object) -> str:
    """``text`` with every character a terminal would not show as itself escaped: control
    characters (escape sequences, newlines, carriage returns) as ``\\xNN``; bidi
    overrides (U+202E turns the rest of a line around), zero-width and other format
    characters, line separators, unassigned code points and lone surrogates as
    ``\\uNNNN``. The one helper between a name from a file or an argument and the
    console: it prints as itself and an error stays one line."""
    shown = str(text).translate(_CONTROL)
    if not shown.isprintable():  # beyond ASCII controls: Python's own test, by category
        shown = "".join(ch if ch.isprintable() else _escape(ch) for ch in shown)
    return shown


def _escape(character: str) -> str:
    code = ord(character)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def say(line: str) -> None:
    """Write ``line`` and its newline to stderr in one write. The ranks of a job share
    the launcher's stderr, and ``print`` sends the newline in a write of its own (stderr
    is write-through): two ranks' errors then ran into one line. With no stderr at all
    (``2>&-``, a closed terminal) there is nowhere to say it: the exit code still does."""
    if sys.stderr is None:
        return
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:  # a terminal that hung up (EIO): the exit code still says it
        pass


class CCWeaveError(Exception):
    """Base of every error ccweave raises on purpose. ``details``: lines the CLI prints
    after the one-line message (the last lines of a rank that died), each as a line."""

    details: tuple[str, ...] = ()


class InputError(CCWeaveError, ValueError):
    """A file, argument or option is malformed or names something unknown."""


class LimitError(InputError):
    """An input would need more memory or time than ccweave allows (a topology of a billion
    ranks, a million sizes); refused before anything is allocated, naming the limit and
    the estimate (see :mod:`ccweave.limits`)."""


class TopologyError(InputError):
    """A topology is malformed or cannot carry what was asked (e.g. disconnected ranks)."""


class NotApplicableError(CCWeaveError):
    """A strategy cannot build this collective on this topology (e.g. needs 2^k ranks)."""


class VerificationError(CCWeaveError):
    """A schedule does not implement its collective; the message names slot and transfer."""


class SolverError(CCWeaveError):
    """A solver failed, timed out without a solution, or found the model infeasible."""


class RuntimeFault(CCWeaveError):
    """Executing a schedule failed: a peer died, world size mismatch, a timeout."""

    def __init__(self, message: str, details: tuple[str, ...] | list[str] = ()) -> None:
        super().__init__(message)
        self.details = tuple(details)


class OutputError(CCWeaveError):
    """Standard output cannot be written (a full disk, ``> /dev/full``, ``>&-``); a reader
    that went away (``| head``) is not this, but a quiet exit 141."""

    @classmethod
    def of(cls, error: OSError | None) -> OutputError:
        why = "it is closed" if error is None else (error.strerror or str(error))
        return cls(f"cannot write to standard output: {why}; send it to a file or a "
                   "pipe that takes it")


class Interrupted(CCWeaveError):
    """The user stopped a job (Ctrl-C, SIGTERM); the CLI exits 128 + the signal's number,
    as a shell does (130 for Ctrl-C)."""

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.signal_number = signal_number
