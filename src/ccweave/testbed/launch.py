"""Run one job's ranks on a testbed, each in its rank's namespace: as torch.distributed
launchers start them (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` = rank 0's emulated
address), or under ``mpirun`` (Open MPI over the shaped links, its runtime over the
control bridge)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ccweave import interrupts
from ccweave.errors import RuntimeFault
from ccweave.runtime import progress, secret
from ccweave.runtime.job import LAUNCHER_PID
from ccweave.testbed.guard import Guard
from ccweave.testbed.netns import Testbed, signals_deferred

MASTER_PORT = 29517
Lines = Callable[[str], None]


def _python(module: str | None, script: str | None) -> list[str]:
    """How a rank's command starts: ``python SCRIPT``, ``python -m MODULE``, or (neither)
    the argv itself is the whole command."""
    if script:
        return [sys.executable, script]
    return [sys.executable, "-m", module] if module else []


def rank_env(bed: Testbed, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every rank shares: torchrun's variables, the job's secret (a new
    one per job: it admits the ranks' data connections), one OpenMP thread per rank
    unless the caller's environment says otherwise (torchrun's default too)."""
    env = dict(os.environ)
    env.update({"MASTER_ADDR": bed.emulation.address(0), "MASTER_PORT": str(MASTER_PORT),
                "WORLD_SIZE": str(bed.emulation.topology.num_ranks),
                secret.ENV: secret.new_secret()})
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def run_ranks(bed: Testbed, argv: Sequence[str], *, timeout: float = 300.0,
              module: str | None = "ccweave.cli", script: str | None = None,
              env: Mapping[str, str] | None = None, on_line: Lines | None = None,
              on_error_line: Lines | None = None) -> list[str]:
    """Start one rank per emulated rank (``python -m MODULE ARGV``; ``ARGV`` alone when
    ``module`` and ``script`` are ``None``), wait, and return each rank's standard output;
    ``on_line`` and ``on_error_line`` see rank 0's output and error lines as they come.

    Raises ``RuntimeFault`` naming the rank that failed first (its exit code or signal)
    with each failed rank's last lines (the others are stopped), or when ``timeout``
    seconds pass. The ranks and their folder of logs do not outlive this process, even
    one killed outright (a guard process removes them).
    """
    count = bed.emulation.topology.num_ranks
    base = rank_env(bed, env)
    command = [*_python(module, script), *argv]
    procs: list[subprocess.Popen] = []
    guard = Guard()
    folder = tempfile.mkdtemp(prefix="ccweave-testbed-")
    guard.watch("paths", [folder])
    guard.watch("ranks_in", [bed.emulation.namespace(rank) for rank in range(count)])
    logs = [_Logs(Path(folder), f"rank{rank}") for rank in range(count)]
    records = Path(folder, "progress")
    records.mkdir()
    watchdog = progress.Watchdog(records, count,
                                 lambda: {rank: proc.pid for rank, proc in enumerate(procs)})
    try:
        for rank in range(count):
            rank_env_ = dict(base, RANK=str(rank), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                             **{LAUNCHER_PID: str(os.getpid()),
                                progress.ENV: progress.folder_for_ranks(records)},
                             **bed.env(rank))
            # a SIGTERM inside Popen would lose the started rank's pid: held until the
            # rank is in ``procs`` (and its group with the guard), where clean-up finds it
            with signals_deferred(), logs[rank].open() as (out, err):
                procs.append(subprocess.Popen(
                    bed.command(rank, command), env=rank_env_, stdout=out, stderr=err,
                    start_new_session=True))
                guard.watch("groups", [procs[-1].pid])
        ended = _wait(procs, logs[0], timeout, on_line, on_error_line, watchdog)
    finally:
        _stop_all(procs)
        outputs = [log.read("out") for log in logs]
        errors = [log.read("err") for log in logs]
        shutil.rmtree(folder, ignore_errors=True)
        guard.close()
    failed = [(rank, code) for rank, code in ended.order if code != 0]
    if failed:
        raise _failure("testbed", failed, procs, outputs, errors, ended.diagnosis)
    return outputs


class _Logs:
    """Where one process's standard output and error go: two files in the job's folder
    (torch's c10d warnings on stderr stay out of what a rank prints)."""

    def __init__(self, folder: Path, name: str) -> None:
        self.out = folder / f"{name}.out"
        self.err = folder / f"{name}.err"

    @contextlib.contextmanager
    def open(self):
        with open(self.out, "w") as out, open(self.err, "w") as err:
            yield out, err

    def read(self, which: str) -> str:
        with contextlib.suppress(OSError):
            return getattr(self, which).read_text(errors="replace")
        return ""


def _failure(what: str, failed: Sequence[tuple[int, int]], procs: Sequence[subprocess.Popen],
             outputs: Sequence[str], errors: Sequence[str], diagnosis: str | None = None,
             lines: int = 8) -> RuntimeFault:
    """The first failure named (``failed`` is in the order the ranks ended) after what
    the progress records said (``diagnosis``), then each failed rank's last lines."""
    first_rank, first_code = failed[0]
    summary = f"{what} {_how(f'rank {first_rank}', first_code)} first"
    after = [_how(f"rank {rank}", code) for rank, code in failed[1:]]
    stopped = [rank for rank, proc in enumerate(procs)
               if rank not in {r for r, _ in failed} and proc.returncode not in (0, None)]
    if after:
        summary += "; then " + ", ".join(after)
    if stopped:
        summary += f"; rank(s) {', '.join(map(str, stopped))} were stopped by the launcher"
    if diagnosis:
        summary = f"{diagnosis}; {summary}"
    details = []
    for rank, _ in failed:
        text = (errors[rank].strip() or outputs[rank].strip()).splitlines()[-lines:]
        if text:
            details.append(f"rank {rank}'s last lines:")
            details += [f"  {line}" for line in text]
    return RuntimeFault(summary, details)


def _how(who: str, code: int) -> str:
    """``rank 2 was killed by SIGKILL`` or ``rank 0 exited with code 2``."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{who} was killed by {name}"
    return f"{who} exited with code {code}"


def mpirun_command(bed: Testbed, argv: Sequence[str], *, module: str | None = "ccweave.cli",
                   script: str | None = None, wrapper: str) -> list[str]:
    """``mpirun`` for every emulated rank, its runtime over the control bridge;
    ``wrapper`` enters the rank's namespace and points Open MPI's TCP BTL at one of the
    rank's devices (naming every device, which all carry the rank's address, hangs it)."""
    if bed.control_subnet is None:
        raise RuntimeFault("mpirun on a testbed needs its control bridge (Testbed(..., "
                           "control=True))")
    emu = bed.emulation
    command = ["mpirun", "-np", str(emu.topology.num_ranks), "--oversubscribe",
               "--bind-to", "none", "--mca", "oob_tcp_if_include", bed.bridge,
               "--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-run-as-root")
    return [*command, wrapper, *_python(module, script), *argv]


def run_mpi(bed: Testbed, argv: Sequence[str], *, timeout: float = 300.0,
            module: str | None = "ccweave.cli", script: str | None = None,
            env: Mapping[str, str] | None = None, on_line: Lines | None = None,
            on_error_line: Lines | None = None) -> str:
    """Run the job under ``mpirun`` on the testbed; returns its standard output (the
    ranks' lines as ``mpirun`` forwards them go to ``on_line`` and ``on_error_line`` as
    they come). Neither ``mpirun`` nor its folder outlives this process."""
    if shutil.which("mpirun") is None:
        raise RuntimeFault("mpirun is not on PATH; install Open MPI (Debian: openmpi-bin)")
    emu = bed.emulation
    guard = Guard()
    folder = tempfile.mkdtemp(prefix="ccweave-testbed-")
    guard.watch("paths", [folder])
    guard.watch("ranks_in", [emu.namespace(rank) for rank in emu.topology.ranks])
    logs = _Logs(Path(folder), "mpirun")
    records = Path(folder, "progress")
    records.mkdir()
    proc = None
    try:
        wrapper = Path(folder, "in-namespace")
        cases = "\n".join(f"  {rank}) ns={emu.namespace(rank)} dev={emu.data_device(rank)} ;;"
                          for rank in emu.topology.ranks)
        wrapper.write_text("#!/bin/sh\n# this rank's namespace; MPI data on one device\n"
                           f"case $OMPI_COMM_WORLD_RANK in\n{cases}\nesac\n"
                           "export OMPI_MCA_btl_tcp_if_include=$dev\n"
                           'exec ip netns exec "$ns" "$@"\n')
        wrapper.chmod(0o755)
        run_env = rank_env(bed, env)
        for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            run_env.pop(key, None)
        run_env.update({progress.ENV: progress.folder_for_ranks(records),
                        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                        "PMIX_MCA_ptl_tcp_if_include": bed.bridge,
                        "PMIX_MCA_ptl_tcp_remote_connections": "1"})
        with signals_deferred(), logs.open() as (out, err):
            proc = subprocess.Popen(mpirun_command(bed, argv, module=module, script=script,
                                                   wrapper=str(wrapper)),
                                    env=run_env, stdout=out, stderr=err,
                                    start_new_session=True)
            guard.watch("groups", [proc.pid])
        ended = _wait([proc], logs, timeout, on_line, on_error_line,
                      progress.Watchdog(records, emu.topology.num_ranks))
    finally:
        if proc is not None:
            _stop_all([proc])
        output, errors = logs.read("out"), logs.read("err")
        shutil.rmtree(folder, ignore_errors=True)
        guard.close()
    if proc.returncode != 0:
        tail = (errors.strip() or output.strip()).splitlines()[-10:]
        named = f"{ended.diagnosis}; " if ended.diagnosis else ""
        raise RuntimeFault(named + _how("mpirun on the testbed", proc.returncode)
                           + "; its last lines:", tail)
    return output


@dataclass
class _Ended:
    """How a job's processes ended: ``(index, exit code)`` in the order they did, and what
    the ranks' progress records said when the first failed or the job hung."""

    order: list[tuple[int, int]] = field(default_factory=list)
    diagnosis: str | None = None


def _wait(procs: Sequence[subprocess.Popen], watched: _Logs, timeout: float,
          on_line: Lines | None, on_error_line: Lines | None = None,
          watchdog: progress.Watchdog | None = None) -> _Ended:
    """Until every process ends, one fails (then the others get a second to name the
    cause, none when the rank holding them up is stopped), or ``timeout`` passes, or the
    ranks' records show no progress past their own timeout; feeds ``watched``'s new
    lines to ``on_line`` and ``on_error_line``."""
    deadline = time.monotonic() + timeout
    stop = threading.Event()
    readers = [threading.Thread(target=_follow, args=(path, take, stop), daemon=True)
               for path, take in ((watched.out, on_line), (watched.err, on_error_line))
               if take is not None]
    for reader in readers:
        reader.start()
    ended = _Ended()
    failed_at = None
    grace = 1.0
    try:
        while True:
            for index, proc in enumerate(procs):
                code = proc.poll()
                if code is not None and index not in {i for i, _ in ended.order}:
                    ended.order.append((index, code))
            now = time.monotonic()
            if len(ended.order) == len(procs):
                return ended
            if failed_at is None and any(code != 0 for _, code in ended.order):
                failed_at = now
                if watchdog is not None:
                    ended.diagnosis = watchdog.diagnosis()
                    grace = 0.2 if watchdog.stopped() else grace
            if failed_at is not None and now - failed_at >= grace:
                return ended  # the rest are stopped by the caller
            if failed_at is None and watchdog is not None and watchdog.hung():
                raise RuntimeFault(f"{watchdog.diagnosis() or 'no rank made progress'}; no "
                                   "rank made progress for longer than their timeout, and the "
                                   "launcher stopped the job")
            interrupts.check()  # a Ctrl-C whose KeyboardInterrupt Python swallowed
            if now > deadline:
                running = [i for i, proc in enumerate(procs) if proc.poll() is None]
                which = (f"rank(s) {', '.join(map(str, running))} were still running"
                         if len(procs) > 1 else "it was still running")
                named = watchdog.diagnosis() if watchdog is not None else None
                raise RuntimeFault(f"the testbed job ran past {timeout:g} s and was stopped "
                                   f"({which})" + (f"; {named}" if named else ""))
            time.sleep(0.05)
    finally:
        stop.set()
        for reader in readers:
            reader.join(timeout=2.0)


def _follow(path: Path, on_line: Lines, stop: threading.Event) -> None:
    position = 0
    pending = ""
    while True:
        finished = stop.is_set()
        with contextlib.suppress(OSError), open(path, errors="replace") as stream:
            stream.seek(position)
            pending += stream.read()
            position = stream.tell()
        *lines, pending = pending.split("\n")
        for line in lines:
            on_line(line)
        if finished:
            if pending:
                on_line(pending)
            return
        time.sleep(0.1)


def _stop_all(procs: Sequence[subprocess.Popen]) -> None:
    """SIGTERM each process's session, SIGKILL what is left after 3 s."""
    for sig, pause in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        alive = [proc for proc in procs if proc.poll() is None]
        if not alive:
            return
        for proc in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + pause
        while time.monotonic() < deadline and any(p.poll() is None for p in alive):
            time.sleep(0.02)
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
