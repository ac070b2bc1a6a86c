"""Join a job: find rank and world size from the launcher's environment (torchrun,
mpirun, or ``ccweave run`` itself) and connect a transport."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import NoReturn

from ccweave.errors import CCWeaveError, InputError, RuntimeFault, printable, say
from ccweave.runtime.transport.base import Transport

BACKENDS = ("gloo", "nccl", "mpi")
HOSTED_STORE = "CCWEAVE_STORE_HOSTED"
"""Set by ``ccweave run``'s launcher: it hosts the key-value store, so it outlives ranks."""
LAUNCHER_PID = "CCWEAVE_LAUNCHER_PID"


@dataclass(frozen=True)
class JobEnv:
    """Where this process stands in a job, as its launcher said."""

    launcher: str
    rank: int
    world_size: int
    local_rank: int
    master_addr: str | None = None
    master_port: int | None = None
    hosted_store: bool = False
    local_world_size: int = 1
    """Ranks of the job on this host (as far as the launcher says; 1 when it does not)."""


def detect(environ: Mapping[str, str] | None = None) -> JobEnv | None:
    """The job this process belongs to, or ``None`` when started by hand.

    Raises ``InputError`` naming the variable when the launcher's environment is
    inconsistent (``RANK=x``, a rank outside the world, half of a launcher's variables).
    """
    env = os.environ if environ is None else environ
    if "OMPI_COMM_WORLD_RANK" in env:
        size = _number(env, "OMPI_COMM_WORLD_SIZE", "mpirun")
        return _checked(JobEnv(
            "mpirun", _number(env, "OMPI_COMM_WORLD_RANK", "mpirun"), size,
            _number(env, "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun", 0),
            local_world_size=_number(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun", 1)),
            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")
    if "PMIX_RANK" in env and "RANK" not in env:
        return _checked(JobEnv("mpirun", _number(env, "PMIX_RANK", "mpirun"),
                               _number(env, "PMIX_SIZE", "mpirun"), 0),
                        "PMIX_RANK", "PMIX_SIZE")
    if "RANK" in env or "WORLD_SIZE" in env:
        if "RANK" not in env or "WORLD_SIZE" not in env:
            given, lacking = ("RANK", "WORLD_SIZE") if "RANK" in env else ("WORLD_SIZE", "RANK")
            raise InputError(f"{given}={env[given]!r} is set but {lacking} is not: a launcher "
                             "(torchrun) sets both; unset it to start local ranks, or set "
                             f"{lacking} (and MASTER_ADDR, MASTER_PORT) to join a job")
        launcher = ("ccweave" if HOSTED_STORE in env
                    else "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env")
        port = _number(env, "MASTER_PORT", launcher, None)
        if port is not None and not 0 < port < 65536:
            raise InputError(f"MASTER_PORT={env['MASTER_PORT']!r} (from {launcher}) is not a "
                             "TCP port; give 1..65535")
        world = _number(env, "WORLD_SIZE", launcher)
        return _checked(JobEnv(
            launcher, _number(env, "RANK", launcher), world,
            _number(env, "LOCAL_RANK", launcher, 0), env.get("MASTER_ADDR", "127.0.0.1"), port,
            HOSTED_STORE in env or env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
            _number(env, "LOCAL_WORLD_SIZE", launcher, 1)), "RANK", "WORLD_SIZE")
    return None


def _number(env: Mapping[str, str], name: str, launcher: str,
            default: int | str | None = "required") -> int:
    """The whole number in ``env[name]``; ``InputError`` naming it when it is not one."""
    if name not in env:
        if default == "required":
            raise InputError(f"{name} is not set, but the other variables of {launcher} are; "
                             "start the job with its launcher, or unset them to start local "
                             "ranks")
        return default  # type: ignore[return-value]
    text = env[name].strip()
    if not text.isdigit() or len(text) > 9:
        raise InputError(f"{name}={env[name]!r} (from {launcher}) is not a whole number; "
                         "fix the launcher's environment")
    return int(text)


def _checked(job: JobEnv, rank_name: str, size_name: str) -> JobEnv:
    if job.world_size < 1:
        raise InputError(f"{size_name}={job.world_size} (from {job.launcher}): a job has at "
                         "least one rank")
    if not 0 <= job.rank < job.world_size:
        raise InputError(f"{rank_name}={job.rank} is not a rank of the {job.world_size} "
                         f"{size_name} gives (0..{job.world_size - 1}); fix the launcher's "
                         "environment")
    if job.local_world_size < 1:
        return replace(job, local_world_size=1)
    return job


def check_backend(backend: str, job: JobEnv | None) -> None:
    """Refuse a backend that cannot work in this job, before any communication."""
    if backend not in BACKENDS:
        raise InputError(f"--backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if backend == "nccl":
        import torch

        if not torch.cuda.is_available():
            raise InputError("--backend nccl needs CUDA GPUs and this machine has none that "
                             "torch can use; use --backend gloo (CPU) or mpi")
    if job is None:
        return
    if backend == "mpi" and job.launcher != "mpirun":
        raise InputError(f"--backend mpi needs mpirun, but this process was started by "
                         f"{job.launcher}; start it under mpirun or use --backend gloo")
    if backend != "mpi" and job.master_port is None:
        raise InputError(f"--backend {backend} needs MASTER_ADDR and MASTER_PORT (set by "
                         "torchrun); start it under torchrun, or use --backend mpi under mpirun")


def connect(backend: str, job: JobEnv, timeout: float = 60.0) -> Transport:
    """Initialise the backend for ``job`` and return a transport on the whole world; it
    keeps this rank's progress record (``transport.progress``) where the launcher asked
    for one (:mod:`ccweave.runtime.progress`)."""
    from ccweave.runtime import progress

    recorder = progress.Recorder.from_env(job.rank, timeout)
    transport = _connect(backend, job, timeout)
    transport.progress = recorder  # type: ignore[attr-defined]
    recorder.phase(progress.Phase.IDLE)
    return transport


def _connect(backend: str, job: JobEnv, timeout: float) -> Transport:
    check_backend(backend, job)
    if backend == "mpi":
        from ccweave.runtime.transport.mpi import MPITransport

        _raise_on_sigterm(job.rank)
        transport = MPITransport()
        if transport.world_size != job.world_size:
            raise RuntimeFault(f"MPI reports {transport.world_size} ranks but the launcher "
                               f"said {job.world_size}")
        return transport
    import torch
    import torch.distributed as dist

    from ccweave.runtime import store as job_store
    from ccweave.runtime.faults import FaultBoard
    from ccweave.runtime.transport.torchdist import TorchTransport

    wait = timedelta(seconds=max(timeout, 10.0))
    addr, port = job.master_addr or "127.0.0.1", int(job.master_port or 0)
    where = f"{addr}:{port}"
    if not job.hosted_store and job.rank == 0:
        store, exposed = job_store.host(addr, port, job.world_size, wait)
        if exposed:
            say(f"ccweave: rank 0: {exposed}")
    else:
        store = job_store.join(addr, port, job.world_size, wait, job.rank)
    job_store.register(store, job.rank, "joined", where)
    options: dict[str, object] = {}
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise InputError("--backend nccl needs CUDA GPUs; use --backend gloo on CPU")
        torch.cuda.set_device(job.local_rank % torch.cuda.device_count())
        options["device_id"] = torch.device("cuda", torch.cuda.current_device())
    try:
        if not dist.is_initialized():
            dist.init_process_group(backend, store=dist.PrefixStore("ccweave/pg", store),
                                    rank=job.rank, world_size=job.world_size, timeout=wait,
                                    **options)
        job_store.register(store, job.rank, "ready", where)
        transport = TorchTransport(board=FaultBoard(store, job.rank, job.world_size))
        if backend == "gloo":
            from ccweave.runtime.transport.shm import with_shared_memory
            from ccweave.runtime.transport.sockets import local_address, with_sockets

            address = local_address(job.master_addr or "127.0.0.1")
            return with_shared_memory(with_sockets(transport, address))
        return transport
    except RuntimeError as error:  # torch's timeouts and lost peers while setting up
        raise RuntimeFault(_setup_failed(job, store, wait, error)) from None


def _setup_failed(job: JobEnv, store: object, wait: timedelta, error: BaseException) -> str:
    """Why the job did not come together, naming the ranks that never joined or never got
    their process group up (a rank stopped or killed before its first transfer)."""
    from ccweave.runtime import store as job_store

    detail = str(error).strip().splitlines()[0][:160] if str(error).strip() else "no detail"
    for stage, verb in (("joined", "never joined the job"),
                        ("ready", "joined but did not finish setting up")):
        absent = [r for r in job_store.missing(store, job.world_size, stage) if r != job.rank]
        if absent:
            return (f"rank {job.rank}: rank(s) {', '.join(map(str, absent))} {verb} within "
                    f"{wait.total_seconds():g} s (stopped, hung or dead before the first "
                    f"transfer; torch: {detail})")
    return (f"rank {job.rank}: the job did not come together within "
            f"{wait.total_seconds():g} s: a peer stopped, hung or died before the first "
            f"transfer (torch: {detail})")


def _raise_on_sigterm(rank: int) -> None:
    """mpirun stops every rank with SIGTERM when one fails: say so instead of vanishing."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, frame: object) -> None:
        raise RuntimeFault(f"rank {rank}: stopped (SIGTERM) by mpirun or ccweave's launcher, "
                           "which stop the job when a rank fails or hangs; the launcher's "
                           "report names that rank")

    signal.signal(signal.SIGTERM, stop)


def disconnect(transport: Transport) -> None:
    """Tear down what :func:`connect` set up (process group, MPI stays to atexit)."""
    recorder = getattr(transport, "progress", None)
    if recorder is not None:
        recorder.close()
    transport.close()
    if transport.name in ("gloo", "nccl"):
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def lost_peers(rank: int, error: BaseException) -> RuntimeFault:
    """A torch error out of a step every rank takes part in (a barrier, a sum of
    timings) as one line: a peer hung, stopped or died, and says so itself."""
    detail = (str(error).strip().splitlines() or ["no detail"])[-1][:200]
    return RuntimeFault(f"rank {rank}: a step with the other ranks failed ({detail}); a peer "
                        "hung, stopped or died (its own error names why)")


def fail_fast(error: CCWeaveError) -> NoReturn:
    """Print ``error`` as the CLI does and leave at once (exit 2): a process group with a
    dead peer can hang in its destructor, which would keep this rank alive."""
    sys.stdout.flush()
    say(f"ccweave: error: {printable(error)}")
    os._exit(2)
