"""Reading the files ccweave takes: once, whole, within a size limit, with one kind of error.

A reader that called ``Path.read_text`` took ``/dev/zero`` until the host's memory ran
out (22 GB, then the OOM killer), and one that read a file twice (to guess its format,
then to parse it) hung on a pipe (``<(...)``, a FIFO) and found ``/dev/stdin`` empty the
second time. Here a file is read once, in chunks, and refused past a limit (a regular
file by its size, before reading); the text goes to the parser. Pipes, ``/dev/stdin``
and FIFOs are read like files. Every failure is one :class:`~ccweave.errors.InputError`
naming the file, what is wrong and the fix.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ccweave.errors import InputError, LimitError
from ccweave.limits import MAX_INPUT_BYTES

_CHUNK = 1 << 20


def read_bytes(path: str | Path, fix: str = "", *, error: type[InputError] = InputError,
               limit: int = MAX_INPUT_BYTES, flag: str = "") -> bytes:
    """The bytes of ``path``; ``error`` names the file (after ``flag``, the option that gave
    it, where one did) and says ``fix`` when it is missing, a directory, unreadable, or
    larger than ``limit`` bytes (an endless stream such as ``/dev/zero`` included)."""
    name = f"{flag} {os.fspath(path)}" if flag else os.fspath(path)
    hint = f" ({fix})" if fix else ""
    try:
        handle = os.open(os.fspath(path), os.O_RDONLY | os.O_CLOEXEC)
    except OSError as problem:
        raise error(f"{name}: {_why(problem)}{hint}") from None
    try:
        info = os.fstat(handle)
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{name}: is a directory, not a file{hint}")
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise _too_big(name, f"{info.st_size:,} bytes", limit)
        try:
            return _read_all(handle, name, limit)
        except MemoryError:
            raise _too_big(name, "more than this host's memory holds", limit) from None
        except OSError as problem:
            raise error(f"{name}: cannot read it: {_why(problem)}{hint}") from None
    finally:
        os.close(handle)


def _read_all(handle: int, name: str, limit: int) -> bytes:
    data = bytearray()
    while chunk := os.read(handle, _CHUNK):
        data += chunk
        if len(data) > limit:
            raise _too_big(name, "more (it does not end where a file would)", limit)
    return bytes(data)


def read_text(path: str | Path, fix: str = "", *, error: type[InputError] = InputError,
              limit: int = MAX_INPUT_BYTES, errors: str = "strict", flag: str = "") -> str:
    """:func:`read_bytes` decoded as UTF-8 (a byte-order mark dropped, as editors on
    Windows write one); ``errors="strict"`` refuses a file that is not UTF-8 text,
    naming where, ``"replace"`` reads it with U+FFFD in place of the bad bytes."""
    data = read_bytes(path, fix, error=error, limit=limit, flag=flag)
    name = f"{flag} {os.fspath(path)}" if flag else os.fspath(path)
    try:
        return data.decode("utf-8-sig", errors)
    except UnicodeDecodeError as problem:
        hint = f" ({fix})" if fix else ""
        raise error(f"{name}: not UTF-8 text (byte {problem.start:,} is "
                    f"0x{data[problem.start]:02x}){hint}") from None
    except MemoryError:
        raise _too_big(name, f"{len(data):,} bytes, more than this host's "
                       "memory decodes", MAX_INPUT_BYTES) from None


def _too_big(name: str, size: str, limit: int) -> LimitError:
    return LimitError(f"{name}: {size}, over the limit of {limit:,} bytes of input; give a "
                      "file (not an endless stream such as /dev/zero) of at most that size")


def _why(problem: OSError) -> str:
    if problem.errno == errno.ENOENT:
        return "no such file"
    if problem.errno == errno.ELOOP:
        return "a loop of symbolic links"
    if problem.errno == errno.EISDIR:
        return "is a directory, not a file"
    return problem.strerror or str(problem)
