"""Start N local ranks and supervise them: if one fails, the others get a grace period to
report what they saw, then the whole process group is stopped; Ctrl-C or SIGTERM stops
it too. No rank outlives the launcher (each asks the kernel to kill it if its parent
dies), so an error never leaves orphans.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from ccweave.errors import Interrupted, RuntimeFault
from ccweave.runtime import progress, secret
from ccweave.runtime.job import HOSTED_STORE, LAUNCHER_PID

WRONG_EXIT = 3
"""A rank's exit code when it ran but found wrong elements (the launcher then returns 1)."""
GRACE_S = 10.0
"""After the first rank fails, how long the others may take to report before being stopped."""
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Outcome:
    """How one rank ended: its exit code (negative: killed by that signal)."""

    rank: int
    code: int

    @property
    def died(self) -> bool:
        """Killed by a signal or ended other than by success (0), a ccweave error (2) or
        wrong elements (:data:`WRONG_EXIT`): a crash."""
        return self.code not in (0, 2, WRONG_EXIT)

    def describe(self) -> str:
        if self.code < 0:
            try:
                name = signal.Signals(-self.code).name
            except ValueError:
                name = f"signal {-self.code}"
            return f"rank {self.rank} was killed by {name}"
        return f"rank {self.rank} exited with code {self.code}"


RANK_BYTES = 300 * 2**20
"""Memory of one rank process before its buffers: Python with torch loaded (250-350 MB
measured on CPU)."""


def check_memory(subject: str, backend: str, ranks_here: int, buffer_bytes: int,
                 when: str = "") -> None:
    """Refuse, before any rank starts, a job whose ``ranks_here`` ranks on this host (each
    a process and ``buffer_bytes`` of buffers) would not fit its memory (for NCCL the
    buffers go on the GPUs)."""
    from ccweave.errors import LimitError
    from ccweave.units import human_size as format_size

    host = _available_memory()
    on_gpu = backend == "nccl"
    need = ranks_here * (RANK_BYTES + (0 if on_gpu else buffer_bytes))
    at = f" {when}" if when else ""
    buffers = "" if on_gpu or not buffer_bytes else " and its buffers"
    if host is not None and need > host:
        raise LimitError(f"{subject}: {ranks_here} rank(s) on this host need about "
                         f"{format_size(need)}{at} (a process of ~{format_size(RANK_BYTES)} "
                         f"each{buffers}), over the "
                         f"{format_size(host)} of memory available; run fewer ranks per "
                         "host or smaller sizes")
    if on_gpu:
        import torch

        if torch.cuda.is_available():
            per_gpu = -(-ranks_here // torch.cuda.device_count())
            free = min(torch.cuda.mem_get_info(d)[0] for d in range(torch.cuda.device_count()))
            if per_gpu * buffer_bytes > free:
                raise LimitError(f"{subject}: {per_gpu} rank(s) per GPU need about "
                                 f"{format_size(per_gpu * buffer_bytes)} of GPU memory{at}, "
                                 f"over the {format_size(free)} free; give smaller sizes")


def _available_memory() -> int | None:
    """Bytes of memory available on this host (Linux's MemAvailable; else physical)."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return None


def die_with_parent() -> None:
    """In a rank started by the launcher: ask Linux to kill this process when the launcher
    dies, and exit now if it already has."""
    parent = os.environ.get(LAUNCHER_PID)
    if not parent or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(parent):
        os._exit(1)


class _Signals:
    """Turn SIGINT, SIGTERM and SIGHUP (the terminal closed: its default killed the
    launcher and left its folder of progress records) into a flag while supervising
    (restored afterwards); a signal the launcher was started ignoring stays ignored."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup's stays ignored
                    self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def _stop(group: int, procs: Sequence[subprocess.Popen], wait_s: float = 3.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after ``wait_s``."""
    for sig, pause in ((signal.SIGTERM, wait_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
        deadline = time.monotonic() + pause
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.02)
        if all(p.poll() is not None for p in procs):
            # the group may still hold grandchildren: make sure they go too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
            return


def _spawn(command: Sequence[str], env: dict[str, str], group: int | None,
           **kwargs: object) -> subprocess.Popen:
    if sys.version_info >= (3, 11):
        return subprocess.Popen(command, env=env, process_group=group or 0, **kwargs)
    target = group or 0
    return subprocess.Popen(command, env=env, preexec_fn=lambda: os.setpgid(0, target),
                            **kwargs)


def launch_local(argv: Sequence[str], nproc: int, *, grace: float = GRACE_S,
                 threads: int | None = None, module: str = "ccweave.cli",
                 script: str | None = None, on_line: Callable[[str], None] | None = None
                 ) -> int:
    """Run ``python -m MODULE ARGV`` (or ``python SCRIPT ARGV``) as ``nproc`` ranks of one
    job on this host (torch.distributed rendezvous on a store the launcher hosts) and
    supervise them. ``on_line`` takes rank 0's output lines instead of the terminal.

    Returns 0 when every rank succeeded, 1 when ranks found wrong elements; raises
    ``RuntimeFault`` naming the rank that died, or on Ctrl-C.
    """
    from ccweave.runtime.prerequisites import check_rank_environment
    from ccweave.runtime.store import host

    check_rank_environment(nproc)
    # on loopback only: the ranks are on this host, and the store has no authentication
    store, _ = host("127.0.0.1", 0, nproc, timedelta(seconds=60))
    base = dict(os.environ)
    base.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # ccweave names the faults itself
    base.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port),
                 "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
                 HOSTED_STORE: "1", LAUNCHER_PID: str(os.getpid()),
                 secret.ENV: secret.new_secret()})  # admits the ranks' data connections
    if "OMP_NUM_THREADS" not in base:
        base["OMP_NUM_THREADS"] = str(threads or max(1, (os.cpu_count() or 1) // nproc))
    command = [sys.executable, *_entry(module, script), *argv]
    procs: list[subprocess.Popen] = []
    readers: list[threading.Thread] = []
    records = tempfile.mkdtemp(prefix="ccweave-progress-")
    base[progress.ENV] = progress.folder_for_ranks(records)
    with _Signals() as signals:
        try:
            for rank in range(nproc):
                env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
                piped = on_line is not None and rank == 0
                procs.append(_spawn(command, env, procs[0].pid if procs else None,
                                    **_piped() if piped else {}))
                if piped:
                    readers.append(_pump(procs[-1].stdout, on_line))
            watchdog = progress.Watchdog(
                records, nproc, lambda: {rank: proc.pid for rank, proc in enumerate(procs)})
            return _supervise(procs, signals, grace, watchdog)
        finally:
            if procs:
                _stop(procs[0].pid, procs)
            for reader in readers:
                reader.join(timeout=2.0)
            shutil.rmtree(records, ignore_errors=True)
            del store


def _piped() -> dict[str, object]:
    return {"stdout": subprocess.PIPE, "text": True, "errors": "replace"}


def _pump(stream, on_line: Callable[[str], None]) -> threading.Thread:
    """A thread that hands each line of ``stream`` to ``on_line``."""

    def pump() -> None:
        for line in stream:
            on_line(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    return reader


def _supervise(procs: Sequence[subprocess.Popen], signals: _Signals, grace: float,
               watchdog: progress.Watchdog | None = None) -> int:
    """Wait for the ranks. After the first failure the others have ``grace`` seconds to
    report (1 s when the rank holding them up is stopped: nothing will change); with no
    failure, a job whose records show no progress past the ranks' timeout is stopped."""
    first_failure: float | None = None
    hung: list[int] = []
    diagnosis, why = None, ""
    while True:
        codes = [p.poll() for p in procs]
        if signals.received is not None:
            _stop(procs[0].pid, procs)
            raise Interrupted(f"interrupted ({signal.Signals(signals.received).name}); "
                              f"stopped all {len(procs)} ranks", signals.received)
        if all(code is not None for code in codes):
            break
        now = time.monotonic()
        if first_failure is None and any(code not in (None, 0) for code in codes):
            first_failure = now
            if watchdog is not None and watchdog.stopped():
                grace = min(grace, 1.0)
        stuck = first_failure is None and watchdog is not None and watchdog.hung()
        if stuck or (first_failure is not None and now - first_failure > grace):
            hung = [rank for rank, code in enumerate(codes) if code is None]
            diagnosis = watchdog.diagnosis() if watchdog is not None else None
            if stuck:
                why = "no rank made progress for longer than their timeout"
            else:
                why = f"they did not stop within {grace:g} s of the first failure"
            _stop(procs[0].pid, procs)
            break
        time.sleep(0.02)
    outcomes = [Outcome(rank, p.returncode) for rank, p in enumerate(procs)]
    return _verdict(outcomes, hung, why if hung else "", diagnosis)


def _verdict(outcomes: Sequence[Outcome], hung: Sequence[int] = (),
             why: str = f"they did not stop within {GRACE_S:g} s of the first failure",
             diagnosis: str | None = None) -> int:
    if all(o.code == 0 for o in outcomes):
        return 0
    died = [o for o in outcomes if o.died and o.rank not in hung]
    parts = ([diagnosis] if diagnosis else []) + [o.describe() for o in died]
    if hung:
        parts.append(f"the launcher stopped rank(s) {', '.join(map(str, hung))}: {why}")
    reported = [o.rank for o in outcomes if o.code == 2]
    if parts:
        tail = (f"; rank(s) {', '.join(map(str, reported))} stopped with the errors above"
                if reported else "")
        raise RuntimeFault("; ".join(parts) + tail)
    if reported:
        raise RuntimeFault(f"rank(s) {', '.join(map(str, reported))} failed (errors above)")
    return 1


# ------------------------------------------------------------------ mpirun

_MPI_RANK_RE = re.compile(r"process rank (\d+)")
_STALL_RE = re.compile(r"ccweave: error: rank (\d+): no transfer finished in (\S+) s; waiting "
                       r"on \d+ transfer\(s\) with rank\(s\) ([\d, ]+)")
"""A rank's report that it waited ``--timeout`` seconds on peers (executor.py's stall)."""
_MPI_MARK = "CCWEAVE_MPI_LAUNCHER"
"""Set in the environment of the MPI ranks ccweave launches: the launcher's pid."""
_EXEC_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
    "os.getppid() == int(sys.argv[1]) or sys.exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n")
"""Exec a command that gets SIGTERM when the launcher dies (Linux PR_SET_PDEATHSIG),
so mpirun and its ranks never outlive ``ccweave run``, even a SIGKILLed one."""


def _entry(module: str, script: str | None) -> list[str]:
    return [script] if script else ["-m", module]


def mpirun_command(nproc: int, argv: Sequence[str], module: str = "ccweave.cli",
                   script: str | None = None) -> list[str]:
    """``mpirun`` for ``nproc`` local ranks running ``python -m MODULE ARGV``."""
    command = ["mpirun", "-np", str(nproc), "--oversubscribe"]
    if sys.platform.startswith("linux"):
        command = [sys.executable, "-c", _EXEC_WITH_PARENT, str(os.getpid()), *command]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-run-as-root")
    return [*command, sys.executable, *_entry(module, script), *argv]


def launch_mpi(argv: Sequence[str], nproc: int, *, threads: int | None = None,
               module: str = "ccweave.cli", script: str | None = None,
               on_line: Callable[[str], None] | None = None) -> int:
    """Run ``ARGV`` under ``mpirun -np nproc`` and supervise it like :func:`launch_local`:
    mpirun stops the job when a rank fails; this names the rank that was stopped (SIGSTOP,
    a debugger) when the first one gave up waiting, else the one mpirun reports dead.
    ``on_line`` takes the ranks' output lines instead of the terminal."""
    from ccweave.runtime.prerequisites import check_rank_environment

    check_rank_environment(nproc)
    records = tempfile.mkdtemp(prefix="ccweave-progress-")
    try:
        return _launch_mpi(argv, nproc, threads, module, script, on_line, records)
    finally:
        shutil.rmtree(records, ignore_errors=True)


def _launch_mpi(argv: Sequence[str], nproc: int, threads: int | None, module: str,
                script: str | None, on_line: Callable[[str], None] | None, records: str
                ) -> int:
    env = dict(os.environ, **{_MPI_MARK: str(os.getpid()),
                              progress.ENV: progress.folder_for_ranks(records)})
    watchdog = progress.Watchdog(records, nproc, lambda: mpi_ranks(os.getpid()))
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(threads or max(1, (os.cpu_count() or 1) // nproc))
    if shutil.which("mpirun") is None:
        raise RuntimeFault("mpirun is not on PATH; install Open MPI (Debian: openmpi-bin) "
                           "or use --backend gloo")
    proc = _spawn(mpirun_command(nproc, argv, module, script), env, None, stderr=subprocess.PIPE,
                  text=True, errors="replace",
                  **({"stdout": subprocess.PIPE} if on_line is not None else {}))
    if on_line is not None:
        _pump(proc.stdout, on_line)
    dead: list[str] = []
    stalls: list[re.Match] = []
    stopped: list[int] = []
    looked: list[bool] = []
    named: list[str | None] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            sys.stderr.write(line)
            found = _MPI_RANK_RE.search(line)
            if found and not dead:
                dead.append(found.group(1))
            stall = _STALL_RE.search(line)
            if stall and not stalls:
                stalls.append(stall)
            if (found or stall or line.startswith("ccweave: error:")) and not looked:
                looked.append(True)  # the first sign of trouble: who is stopped right now,
                stopped.extend(stopped_ranks(os.getpid()))  # and who held the others up?
                named.append(progress.Watchdog(records, nproc,
                                               lambda: mpi_ranks(os.getpid())).diagnosis())

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    diagnosis: list[str] = []
    with _Signals() as signals:
        try:
            while proc.poll() is None:
                if signals.received is not None:
                    _stop(proc.pid, [proc], wait_s=5.0)
                    raise Interrupted(f"interrupted ({signal.Signals(signals.received).name});"
                                      f" stopped mpirun and its {nproc} ranks",
                                      signals.received)
                if watchdog.hung():  # a wait with no timeout of its own (MPI's barrier)
                    diagnosis.append(watchdog.diagnosis() or "no rank made progress")
                    _stop(proc.pid, [proc], wait_s=5.0)
                    break
                time.sleep(0.02)
        finally:
            if proc.poll() is None:
                _stop(proc.pid, [proc], wait_s=5.0)
            else:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            reader.join(timeout=2.0)
    code = proc.returncode
    if diagnosis:
        raise RuntimeFault(f"{diagnosis[0]}; no rank made progress for longer than their "
                           "timeout, and the launcher stopped mpirun")
    if code == 0:
        return 0

    if code == WRONG_EXIT:
        return 1
    if named and named[0] and (stopped or stalls):
        raise RuntimeFault(f"{named[0]} (errors above); mpirun stopped the job")
    if stopped:
        raise RuntimeFault(f"rank(s) {', '.join(map(str, stopped))} stopped progressing: "
                           "stopped (SIGSTOP, or a debugger) when the first rank gave up "
                           "waiting on it (errors above); mpirun stopped the job")
    if stalls:  # no rank is stopped: one hangs or is slow; say who gave up on whom first
        waiter, seconds, peers = stalls[0].groups()
        peers = ", ".join(part.strip() for part in peers.split(",") if part.strip())
        raise RuntimeFault(f"rank {waiter} gave up first, after {seconds} s without a "
                           f"finished transfer with rank(s) {peers}: a rank stopped "
                           "progressing (errors above); mpirun stopped the job")
    if dead:
        raise RuntimeFault(f"rank {dead[0]} died (mpirun's report above); mpirun stopped the "
                           "other ranks")
    raise RuntimeFault(f"mpirun exited with code {code} (errors above)")


def stopped_ranks(launcher: int) -> list[int]:
    """MPI ranks of the job ``launcher`` started that are stopped right now (process state
    T: SIGSTOP or a debugger), read from /proc; [] where there is no /proc."""
    return sorted(rank for rank, pid in mpi_ranks(launcher).items()
                  if progress.process_stopped(pid))


def mpi_ranks(launcher: int) -> dict[int, int]:
    """The pid of each MPI rank of the job ``launcher`` started (their environment says
    which), read from /proc; {} where there is no /proc."""
    found = {}
    with contextlib.suppress(OSError):
        for pid in (name for name in os.listdir("/proc") if name.isdigit()):
            try:
                with open(f"/proc/{pid}/environ", "rb") as handle:
                    env = dict(pair.split(b"=", 1) for pair in handle.read().split(b"\0")
                               if b"=" in pair)
            except OSError:
                continue
            rank = env.get(b"OMPI_COMM_WORLD_RANK")
            if env.get(_MPI_MARK.encode()) == str(launcher).encode() and rank is not None \
                    and rank.isdigit():
                found[int(rank)] = int(pid)
    return found
