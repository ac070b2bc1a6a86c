"""Files a launcher shares with the ranks it starts (the plan in, rank 0's report out),
kept where nothing outlives the launcher: on Linux, anonymous memory files (``memfd``)
the ranks open through ``/proc/<launcher pid>/fd/N``, gone with the launcher however it
ends (even by SIGKILL); elsewhere, a temporary directory removed when the job ends."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def shared_files(*names: str, prefix: str = "ccweave-run-") -> Iterator[list[str]]:
    """Paths, one per name, that this process and its ranks (on this host) can open."""
    fd_dir = f"/proc/{os.getpid()}/fd"
    if hasattr(os, "memfd_create") and os.path.isdir(fd_dir):
        fds = [os.memfd_create(f"{prefix}{name}") for name in names]
        try:
            yield [f"{fd_dir}/{fd}" for fd in fds]
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        yield [os.path.join(folder, name) for name in names]


def read(path: str) -> str:
    """What a rank wrote to a shared file ('' when nothing was)."""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return ""
