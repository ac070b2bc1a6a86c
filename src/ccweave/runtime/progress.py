"""Each rank's progress record: a small file its launcher reads to name a rank that stopped
making progress, with the collective, the step and the peer it was waiting on (NCCL
users ask exactly this: NVIDIA/nccl#1063, #1911, #1260).

A rank whose launcher set ``CCWEAVE_PROGRESS_DIR`` keeps ``rank<R>.progress`` there: one
fixed-size record in a shared mapping, rewritten in place (a few integer stores) when a
run starts, each time transfers finish, when it ends, and around barriers and small
reductions. A stopped or hung rank cannot say so itself; its record, frozen at its last
step, does. The launcher reads every record when a rank fails or when none has made
progress for longer than the ranks' own timeout (:func:`read_all`, :func:`diagnose`).
"""

from __future__ import annotations

import contextlib
import enum
import math
import mmap
import os
import stat
import struct
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

ENV = "CCWEAVE_PROGRESS_DIR"
"""The folder where a launcher's ranks keep their progress records; ``off`` (set by the
user) keeps them from keeping any."""
OFF = "off"


def folder_for_ranks(made: str | os.PathLike) -> str:
    """What a launcher sets :data:`ENV` to for its ranks: the folder it made, unless the
    user turned records off."""
    return OFF if os.environ.get(ENV) == OFF else str(made)
_LAYOUT = struct.Struct("<4sHHiidd12q")
_MAGIC = b"CCWP"
_VERSION = 1


class Phase(enum.IntEnum):
    """What a rank is doing."""

    SETUP = 0
    RUN = 1
    BARRIER = 2
    REDUCE_VALUES = 3
    IDLE = 4
    DONE = 5

    @property
    def label(self) -> str:
        return {Phase.SETUP: "setting up", Phase.RUN: "running", Phase.BARRIER: "in a barrier",
                Phase.REDUCE_VALUES: "in a reduction of timings",
                Phase.IDLE: "between collectives", Phase.DONE: "done"}[self]


@dataclass(frozen=True)
class Snapshot:
    """One rank's record as read: what it was doing at ``updated`` (``time.time()``)."""

    rank: int
    pid: int
    phase: Phase
    updated: float
    timeout: float
    kind: str
    size_bytes: int
    call: int
    ops_done: int
    ops: int
    peer: int
    sending: bool
    transfer: int
    waits: int

    def step(self) -> str:
        """``allreduce of 256 KB, call 37, 5 of 12 ops done, waiting on a receive of
        transfer 7 from rank 1`` (what this rank was doing)."""
        if self.phase is not Phase.RUN:
            return self.phase.label
        from ccweave.units import human_size

        text = (f"{self.kind or 'a collective'} of {human_size(self.size_bytes)}, call "
                f"{self.call}, {self.ops_done} of {self.ops} ops done")
        if self.peer >= 0:
            way, to = ("send", "to") if self.sending else ("receive", "from")
            more = f" (and {self.waits - 1} more)" if self.waits > 1 else ""
            text += f", waiting on a {way} of transfer {self.transfer} {to} rank {self.peer}{more}"
        return text


class Recorder:
    """This rank's record (a no-op where the launcher set no folder)."""

    def __init__(self, folder: str | os.PathLike | None, rank: int, timeout: float) -> None:
        self._map: mmap.mmap | None = None
        self._values = [0] * 12
        self.timeout = timeout
        self.rank = rank
        self._phase = Phase.SETUP
        self._updated = 0.0
        if not folder:
            return
        with contextlib.suppress(OSError):
            path = Path(folder) / f"rank{rank}.progress"
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.ftruncate(descriptor, _LAYOUT.size)
                self._map = mmap.mmap(descriptor, _LAYOUT.size)
            finally:
                os.close(descriptor)
        self._write()

    @classmethod
    def from_env(cls, rank: int, timeout: float) -> Recorder:
        folder = os.environ.get(ENV)
        return cls(None if folder == OFF else folder, rank, timeout)

    @property
    def active(self) -> bool:
        return self._map is not None

    def _write(self) -> None:
        self._updated = time.time()
        if self._map is not None:
            _LAYOUT.pack_into(self._map, 0, _MAGIC, _VERSION, int(self._phase), self.rank,
                              os.getpid(), self._updated, self.timeout, *self._values)

    def run(self, kind_code: int, size_bytes: int, call: int, ops: int) -> None:
        """A run of a schedule starts."""
        self._phase = Phase.RUN
        self._values = [kind_code, size_bytes, call, 0, ops, -1, 0, -1, 0, 0, 0, 0]
        self._write()

    def step(self, ops_done: int, peer: int, sending: bool, transfer: int, waits: int) -> None:
        """Transfers finished: ``ops_done`` so far; the oldest still pending is with
        ``peer`` (``-1``: none), ``waits`` are pending."""
        values = self._values
        values[3], values[5], values[6], values[7], values[8] = \
            ops_done, peer, int(sending), transfer, waits
        self._write()

    def phase(self, phase: Phase) -> None:
        self._phase = phase
        self._write()

    @contextlib.contextmanager
    def around(self, phase: Phase) -> Iterator[None]:
        """In ``phase`` inside (a barrier, a reduction of timings), idle after."""
        self.phase(phase)
        try:
            yield
        finally:
            self.phase(Phase.IDLE)

    def close(self) -> None:
        if self._map is not None:
            self._phase = Phase.DONE
            self._write()
            with contextlib.suppress(BufferError, ValueError):
                self._map.close()
            self._map = None


_NOWHERE = Recorder(None, -1, 0.0)


def of(transport: object) -> Recorder:
    """The progress record a transport keeps (:func:`ccweave.runtime.job.connect` gives
    it one), or one that records nothing."""
    return getattr(transport, "progress", None) or _NOWHERE


def read(path: Path) -> Snapshot | None:
    """The record in ``path``, ``None`` if it is not one (yet). A record is a small regular
    file its rank wrote; whatever else a rank left there (a FIFO would block the launcher
    for ever, a link to /dev/zero fill its memory) is not read."""
    from ccweave.collectives import Kind
    from ccweave.limits import MAX_RANKS

    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None
        data = os.pread(handle, _LAYOUT.size, 0)
        magic, version, phase, rank, pid, updated, timeout, *values = _LAYOUT.unpack(data)
    except (OSError, struct.error):
        return None
    finally:
        os.close(handle)
    if magic != _MAGIC or version != _VERSION:
        return None
    kinds = list(Kind)
    kind = kinds[values[0]].value if 0 <= values[0] < len(kinds) else ""
    try:
        phase = Phase(phase)
    except ValueError:
        return None
    size, call, done, ops, peer, _, transfer, waits = values[1:9]
    if not (0 <= rank < MAX_RANKS and pid > 0 and math.isfinite(updated)
            and 0 < timeout < math.inf and min(size, call, done, ops, waits) >= 0
            and done <= ops and -1 <= peer < MAX_RANKS and transfer >= -1
            and path.name == f"rank{rank}.progress"):
        return None  # not what a rank of ccweave writes: a lie is no diagnosis
    return Snapshot(rank, pid, phase, updated, timeout, kind, values[1], values[2],
                    values[3], values[4], values[5], bool(values[6]), values[7], values[8])


def read_all(folder: str | os.PathLike) -> dict[int, Snapshot]:
    """Every rank's record in ``folder``, by rank."""
    found = {}
    with contextlib.suppress(OSError):
        for path in Path(folder).glob("rank*.progress"):
            snapshot = read(path)
            if snapshot is not None:
                found[snapshot.rank] = snapshot
    return found


def kind_code(kind: object) -> int:
    """The number a record stores for a collective kind."""
    from ccweave.collectives import Kind

    return list(Kind).index(Kind.parse(kind))


def stalled_for(records: dict[int, Snapshot], now: float | None = None) -> float:
    """Seconds since any rank that is not done last made progress (0 when every rank is
    done or none has a record)."""
    now = time.time() if now is None else now
    live = [record.updated for record in records.values() if record.phase is not Phase.DONE]
    return max(0.0, now - max(live)) if live else 0.0


def culprit(records: dict[int, Snapshot], stopped: Collection[int] = frozenset()
            ) -> Snapshot | None:
    """The rank that most likely holds the others up: among those not done, one known to
    be stopped (``stopped``: SIGSTOP, a debugger; it cannot move again by itself), else
    the one that made progress last the longest ago (a stopped rank's record freezes
    first; its peers go on until they need it), preferring one that others wait on. A
    peer that waited on the stopped rank since before the stop has the older record, so
    age alone would name it."""
    live = [record for record in records.values() if record.phase is not Phase.DONE]
    if not live:
        return None
    waited_on = {record.peer for record in live if record.phase is Phase.RUN}
    return min(live, key=lambda record: (record.rank not in stopped,
                                         record.rank not in waited_on and len(live) > 1,
                                         record.updated))


def diagnose(records: dict[int, Snapshot], stopped: set[int] = frozenset(),
             ranks: int | None = None, now: float | None = None) -> str | None:
    """One line naming the rank that stopped making progress, its step, and who waited
    on it; ``stopped``: ranks known to be stopped (SIGSTOP, a debugger); ``ranks``: the
    job's size, so that a rank that never wrote a record is named first."""
    if not records:  # not a ccweave job, or none of its ranks got as far as a record
        return None
    now = time.time() if now is None else now

    def state(rank: int) -> str:
        return " (stopped: SIGSTOP or a debugger)" if rank in stopped else ""

    missing = [rank for rank in range(ranks or 0) if rank not in records]
    if missing:
        names = ", ".join(f"{rank}{state(rank)}" for rank in missing)
        return (f"rank(s) {names} never got as far as the job's setup (no progress record); "
                "the others waited on them")
    suspect = culprit(records, stopped)
    if suspect is None:
        return None
    waiting = sorted(record.rank for record in records.values()
                     if record.phase is Phase.RUN and record.peer == suspect.rank
                     and record.rank != suspect.rank)
    text = (f"rank {suspect.rank}{state(suspect.rank)} made no progress for "
            f"{now - suspect.updated:.0f} s, {suspect.step()}")
    if waiting:
        text += f"; rank(s) {', '.join(map(str, waiting))} waited on it"
    return text


WATCHDOG_GRACE_S = 5.0
"""How long past the ranks' own timeout a launcher waits, with no rank making progress,
before it stops the job itself (a rank's wait with no timeout of its own: MPI's barrier)."""


def process_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state T: SIGSTOP, or t: a debugger)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


class Watchdog:
    """A launcher's view of its ``ranks`` ranks' records in ``folder`` (read at most once
    a second); ``pids`` tells where each rank's process is (else the records say)."""

    def __init__(self, folder: str | os.PathLike, ranks: int,
                 pids: Callable[[], dict[int, int]] | None = None,
                 grace: float = WATCHDOG_GRACE_S) -> None:
        self.folder = folder
        self.ranks = ranks
        self.pids = pids
        self.grace = grace
        self._read_at = 0.0
        self._records: dict[int, Snapshot] = {}

    def records(self, fresh: bool = False) -> dict[int, Snapshot]:
        now = time.monotonic()
        if fresh or now - self._read_at >= 1.0:
            self._records = read_all(self.folder)
            self._read_at = now
        return self._records

    def hung(self) -> bool:
        """Some rank waits (setting up, in a run, a barrier, a reduction) and no rank has
        made progress for longer than the ranks' timeout and :attr:`grace`."""
        records = self.records()
        waiting = [r for r in records.values() if r.phase not in (Phase.IDLE, Phase.DONE)]
        if not waiting:
            return False
        limit = max(record.timeout for record in records.values()) + self.grace
        return stalled_for(records) > limit

    def stopped(self) -> set[int]:
        """Ranks whose process is stopped right now."""
        pids = self.pids() if self.pids is not None else {}
        for rank, record in self.records().items():
            pids.setdefault(rank, record.pid)
        return {rank for rank, pid in pids.items() if process_stopped(pid)}

    def diagnosis(self) -> str | None:
        """:func:`diagnose` on fresh records."""
        records = self.records(fresh=True)
        return diagnose(records, self.stopped(), self.ranks)
