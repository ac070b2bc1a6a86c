"""A watchdog that undoes what a testbed's maker made when the maker dies without undoing
it (SIGKILL, the OOM killer): its ranks stopped, its namespaces and links deleted, its
temporary folders removed. A ``testbed run`` killed outright once left its ranks running
in their namespaces and its folder of logs behind.

The maker holds the write end of a pipe to the guard process and tells it, line by line,
what to watch; the guard acts when the pipe closes without ``done``. This file is run by
path with the standard library only (``python -I guard.py``), so a guard starts in tens
of milliseconds and does not load ccweave, numpy or torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

DONE = "done"
"""The line that tells the guard its maker finished cleanly: it then exits, undoing nothing."""


def namespace_pids(spaces: Iterable[str]) -> set[int]:
    """Pids of the processes inside the network namespaces ``spaces`` (not this one)."""
    spaces = list(spaces)
    if not spaces:
        return set()
    listed = subprocess.run(["ip", "-force", "-batch", "-"], capture_output=True, text=True,
                            input="".join(f"netns pids {name}\n" for name in spaces)).stdout
    return {int(word) for word in listed.split() if word.isdigit()} - {os.getpid()}


def stop_processes_in(spaces: Iterable[str], wait: float = 3.0,
                      groups: Iterable[int] | None = None) -> None:
    """SIGKILL the processes inside the namespaces ``spaces`` (only those in the process
    groups ``groups`` where given) and wait (up to ``wait`` s) until none is left: a
    deleted namespace lives on while a process holds it."""
    spaces = list(spaces)
    wanted = None if groups is None else set(groups)
    deadline = time.monotonic() + wait
    while True:
        pids = namespace_pids(spaces)
        if wanted is not None:
            pids = {pid for pid in pids if _group(pid) in wanted}
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def delete(spaces: Iterable[str], links: Iterable[str] = ()) -> None:
    """Stop what runs in the namespaces ``spaces``, delete them (their veths go with
    them), then the root-namespace devices ``links``."""
    spaces = sorted(spaces)
    if spaces:
        stop_processes_in(spaces)
        subprocess.run(["ip", "-force", "-batch", "-"], capture_output=True, text=True,
                       input="".join(f"netns del {name}\n" for name in spaces))
    for link in sorted(links):
        subprocess.run(["ip", "link", "del", link], capture_output=True)


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def undo(watched: dict[str, set]) -> None:
    """Stop, delete and remove what ``watched`` lists (see :class:`Guard` for the keys)."""
    spaces = watched["namespaces"]
    if watched["groups"]:
        stop_processes_in(watched["ranks_in"] | spaces, groups=watched["groups"])
    for group in watched["groups"]:  # the ranks' own groups, wherever they run
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    delete(spaces, watched["links"])
    for path in watched["paths"]:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _watch(stream) -> None:
    """The guard's life: collect what to watch until ``done`` (exit) or the end of the
    pipe (the maker died: undo it all)."""
    watched: dict[str, set] = {key: set() for key in
                               ("namespaces", "links", "paths", "groups", "ranks_in")}
    for line in stream:
        line = line.strip()
        if line == DONE:
            return
        with contextlib.suppress(ValueError, KeyError, TypeError):
            change = json.loads(line)
            target = watched[change["key"]]
            values = set(change["values"])
            if change.get("drop"):
                target -= values
            else:
                target |= values
    undo(watched)


class Guard:
    """A guard process for this process's testbed work; :meth:`watch` adds to what it
    undoes if this process dies, :meth:`forget` takes away what was cleaned up in the
    usual way, :meth:`close` dismisses it.

    Keys: ``namespaces`` (processes in them stopped, then deleted), ``links`` (root
    namespace devices deleted), ``paths`` (files or folders removed), ``groups`` (process
    groups killed, with their members in ``ranks_in``'s namespaces)."""

    def __init__(self) -> None:
        read, self._write = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", os.path.abspath(__file__)], stdin=read,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)  # a Ctrl-C to the terminal's group is not for it
        except BaseException:
            os.close(self._write)
            raise
        finally:
            os.close(read)  # the write end is not inheritable (PEP 446): ranks started
        # later do not hold it, so the pipe ends exactly when this process does

    def watch(self, key: str, values: Iterable[object]) -> None:
        self._send({"key": key, "values": sorted(values, key=str)})

    def forget(self, key: str, values: Iterable[object]) -> None:
        self._send({"key": key, "values": sorted(values, key=str), "drop": True})

    def _send(self, change: dict) -> None:
        if self._write >= 0:
            with contextlib.suppress(OSError):
                os.write(self._write, (json.dumps(change) + "\n").encode())

    def close(self) -> None:
        """Dismiss the guard (this process cleaned up itself); safe to call twice."""
        if self._write < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._write, f"{DONE}\n".encode())
        os.close(self._write)
        self._write = -1
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5.0)


if __name__ == "__main__":
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # outlive the maker's terminal and its group
    _watch(sys.stdin)
