"""Writing the files ccweave makes: atomically, never over an input, saying what happened.

A file is written to a temporary beside it, flushed to disk, then renamed over the target,
so a write that fails half way (a full disk, a signal) leaves the old file whole. Special
files (``/dev/stdout``, a pipe) are written in place: there is nothing to keep. Every
failure is one ``InputError`` naming the file and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from ccweave.errors import InputError


def check(path: str | Path, inputs: Iterable[str | Path | None] = (),
          flag: str = "-o") -> Path:
    """The target of an output argument, refused before any work when it cannot be
    written there: empty, a directory, a missing directory, or one of ``inputs``."""
    text = os.fspath(path)
    if not text.strip():
        raise InputError(f"{flag} {text!r}: give a file name")
    target = Path(text)
    try:
        if target.is_dir():
            raise InputError(f"{flag} {text!r}: is a directory; give a file name in it")
        parent = target.resolve().parent
        parent_is_dir = parent.is_dir()
    except OSError as error:  # a name too long, a loop of links
        raise InputError(f"{flag} {text!r}: cannot be written there: "
                         f"{error.strerror or error}; give another name") from None
    if not parent_is_dir:
        raise InputError(f"{flag} {text!r}: no such directory {str(parent)!r}; "
                         "create it first")
    for source in inputs:
        if source is not None and _same_file(target, Path(source)):
            raise InputError(f"{flag} {text!r}: is the input {os.fspath(source)!r}; "
                             "write to another file (the input would be lost)")
    return target


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def replaces(path: str | Path) -> bool:
    """Whether writing ``path`` replaces a file that is there now."""
    return os.path.lexists(path)


def verb(replaced: bool) -> str:
    """``wrote`` or ``replaced``, for the line that names an output file."""
    return "replaced" if replaced else "wrote"


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see the module docstring)."""
    write_with(path, lambda temp: temp.write_text(text))


def write_with(path: str | Path, writer: Callable[[Path], object]) -> None:
    """Let ``writer`` write the file at the temporary path it is given, then rename it
    over ``path``; a special file at ``path`` is handed to ``writer`` itself."""
    target = Path(os.fspath(path))
    if not os.fspath(path).strip():
        raise InputError(f"{os.fspath(path)!r}: give a file name")
    real = Path(os.path.realpath(target))  # through symlinks: the link stays a link
    try:
        mode: int | None = os.stat(real).st_mode
    except OSError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise InputError(f"{target}: is a directory; give a file name in it")
    # /dev/stdout, a pipe, /proc/PID/fd/N (a link to no path): nothing to keep, write in place
    in_place = (mode is not None and not stat.S_ISREG(mode)) or (
        mode is None and os.path.exists(target))
    try:
        if in_place:
            writer(target)
            return
        temp = _temporary(real)
        try:
            writer(temp)
            with open(temp, "rb+") as handle:
                os.fsync(handle.fileno())
            if mode is not None:
                os.chmod(temp, stat.S_IMODE(mode))
            os.replace(temp, real)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
    except OSError as error:
        raise InputError(f"{target}: cannot write it: {_why(error, real)}"
                         ) from None


def _temporary(real: Path) -> Path:
    """A new empty file beside ``real``, with its suffix (writers that pick a format by
    it still do), created with the umask's mode as ``open`` would."""
    for number in range(100):
        temp = real.with_name(f".{real.stem}.{os.getpid()}.{number}.tmp{real.suffix}")
        try:
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return temp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(real))


def _why(error: OSError, real: Path) -> str:
    """What went wrong and the fix, for people."""
    code = error.errno
    if code == errno.ENOENT:
        return f"no such directory {str(real.parent)!r}; create it first"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device (the old file, if any, is unchanged); free some"
    if code == errno.EROFS:
        return "the file system is read-only; write somewhere else"
    if code in (errno.EACCES, errno.EPERM):
        return (f"{error.strerror or 'permission denied'} (the directory or the file is not "
                "writable, or the file is immutable); write somewhere else")
    if code == errno.EISDIR:
        return "it is a directory; give a file name in it"
    if code == errno.ENAMETOOLONG:
        return "the name is too long; give a shorter one"
    return f"{error.strerror or error}; write somewhere else"
