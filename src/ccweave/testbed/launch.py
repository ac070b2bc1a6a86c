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
from pathlib import Path

from ccweave.errors import RuntimeFault
from ccweave.runtime.job import LAUNCHER_PID
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
    """The environment every rank shares: torchrun's variables, one OpenMP thread per
    rank unless the caller's environment says otherwise (torchrun's default too)."""
    env = dict(os.environ)
    env.update({"MASTER_ADDR": bed.emulation.address(0), "MASTER_PORT": str(MASTER_PORT),
                "WORLD_SIZE": str(bed.emulation.topology.num_ranks)})
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def run_ranks(bed: Testbed, argv: Sequence[str], *, timeout: float = 300.0,
              module: str | None = "ccweave.cli", script: str | None = None,
              env: Mapping[str, str] | None = None, on_line: Lines | None = None
              ) -> list[str]:
    """Start one rank per emulated rank (``python -m MODULE ARGV``; ``ARGV`` alone when
    ``module`` and ``script`` are ``None``), wait, and return each rank's output;
    ``on_line`` sees rank 0's lines as they come.

    Raises ``RuntimeFault`` with the failing rank's last lines when one fails (the others
    are stopped), or when ``timeout`` seconds pass.
    """
    count = bed.emulation.topology.num_ranks
    base = rank_env(bed, env)
    command = [*_python(module, script), *argv]
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="ccweave-testbed-") as folder:
        logs = [Path(folder, f"rank{rank}.log") for rank in range(count)]
        try:
            for rank in range(count):
                # ccweave's own ranks die with this process (runtime.launch.die_with_parent):
                # a launcher killed outright left 8 ranks running in their namespaces
                rank_env_ = dict(base, RANK=str(rank), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                                 **{LAUNCHER_PID: str(os.getpid())}, **bed.env(rank))
                # a SIGTERM inside Popen would lose the started rank's pid: held until
                # the rank is in ``procs``, where the clean-up below finds it
                with signals_deferred(), open(logs[rank], "w") as log:
                    procs.append(subprocess.Popen(
                        bed.command(rank, command), env=rank_env_, stdout=log,
                        stderr=subprocess.STDOUT, start_new_session=True))
            _wait(procs, logs[0], timeout, on_line)
        finally:
            _stop_all(procs)
        outputs = [log.read_text(errors="replace") for log in logs]
    bad = [rank for rank, proc in enumerate(procs) if proc.returncode != 0]
    if bad:
        tail = "\n".join(outputs[bad[0]].strip().splitlines()[-8:])
        raise RuntimeFault(f"testbed rank {bad[0]} ended with code {procs[bad[0]].returncode}"
                           f" (ranks {bad} failed or were stopped):\n{tail}")
    return outputs


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
            env: Mapping[str, str] | None = None, on_line: Lines | None = None) -> str:
    """Run the job under ``mpirun`` on the testbed; returns its output (rank 0's lines go
    to ``on_line`` too, as ``mpirun`` forwards them)."""
    if shutil.which("mpirun") is None:
        raise RuntimeFault("mpirun is not on PATH; install Open MPI (Debian: openmpi-bin)")
    emu = bed.emulation
    with tempfile.TemporaryDirectory(prefix="ccweave-testbed-") as folder:
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
        run_env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                        "PMIX_MCA_ptl_tcp_if_include": bed.bridge,
                        "PMIX_MCA_ptl_tcp_remote_connections": "1"})
        log = Path(folder, "mpirun.log")
        with open(log, "w") as out:
            proc = subprocess.Popen(mpirun_command(bed, argv, module=module, script=script,
                                                   wrapper=str(wrapper)),
                                    env=run_env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            _wait([proc], log, timeout, on_line)
        finally:
            _stop_all([proc])
        output = log.read_text(errors="replace")
    if proc.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-10:])
        raise RuntimeFault(f"mpirun on the testbed ended with code {proc.returncode}:\n{tail}")
    return output


def _wait(procs: Sequence[subprocess.Popen], watched: Path, timeout: float,
          on_line: Lines | None) -> None:
    """Until every process ends, one fails, or ``timeout`` passes; feeds ``watched``'s new
    lines to ``on_line``."""
    deadline = time.monotonic() + timeout
    stop = threading.Event()
    reader = None
    if on_line is not None:
        reader = threading.Thread(target=_follow, args=(watched, on_line, stop), daemon=True)
        reader.start()
    try:
        while any(proc.poll() is None for proc in procs):
            if any(proc.poll() not in (None, 0) for proc in procs):
                time.sleep(1.0)  # the others may still name the cause
                break
            if time.monotonic() > deadline:
                raise RuntimeFault(f"the testbed job ran past {timeout:g} s and was stopped")
            time.sleep(0.05)
    finally:
        stop.set()
        if reader is not None:
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
