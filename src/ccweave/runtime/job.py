"""Join a job: find rank and world size from the launcher's environment (torchrun,
mpirun, or ``ccweave run`` itself) and connect a transport."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import NoReturn

from ccweave.errors import CCWeaveError, InputError, RuntimeFault
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


def detect(environ: Mapping[str, str] | None = None) -> JobEnv | None:
    """The job this process belongs to, or ``None`` when started by hand."""
    env = os.environ if environ is None else environ
    if "OMPI_COMM_WORLD_RANK" in env:
        return JobEnv("mpirun", int(env["OMPI_COMM_WORLD_RANK"]),
                      int(env["OMPI_COMM_WORLD_SIZE"]),
                      int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", 0)))
    if "PMIX_RANK" in env and "RANK" not in env:
        return JobEnv("mpirun", int(env["PMIX_RANK"]), int(env.get("PMIX_SIZE", 0)), 0)
    if "RANK" in env and "WORLD_SIZE" in env:
        launcher = ("ccweave" if HOSTED_STORE in env
                    else "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env")
        port = env.get("MASTER_PORT")
        return JobEnv(launcher, int(env["RANK"]), int(env["WORLD_SIZE"]),
                      int(env.get("LOCAL_RANK", 0)), env.get("MASTER_ADDR", "127.0.0.1"),
                      int(port) if port else None,
                      HOSTED_STORE in env or env.get("TORCHELASTIC_USE_AGENT_STORE") == "True")
    return None


def check_backend(backend: str, job: JobEnv | None) -> None:
    """Refuse a backend that cannot work in this job, before any communication."""
    if backend not in BACKENDS:
        raise InputError(f"--backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if job is None:
        return
    if backend == "mpi" and job.launcher != "mpirun":
        raise InputError(f"--backend mpi needs mpirun, but this process was started by "
                         f"{job.launcher}; start it under mpirun or use --backend gloo")
    if backend != "mpi" and job.master_port is None:
        raise InputError(f"--backend {backend} needs MASTER_ADDR and MASTER_PORT (set by "
                         "torchrun); start it under torchrun, or use --backend mpi under mpirun")


def connect(backend: str, job: JobEnv, timeout: float = 60.0) -> Transport:
    """Initialise the backend for ``job`` and return a transport on the whole world."""
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

    from ccweave.runtime.faults import FaultBoard
    from ccweave.runtime.transport.torchdist import TorchTransport

    wait = timedelta(seconds=max(timeout, 10.0))
    store = dist.TCPStore(job.master_addr or "127.0.0.1", int(job.master_port or 0),
                          job.world_size, is_master=not job.hosted_store and job.rank == 0,
                          timeout=wait, wait_for_workers=False)
    options: dict[str, object] = {}
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise InputError("--backend nccl needs CUDA GPUs; use --backend gloo on CPU")
        torch.cuda.set_device(job.local_rank % torch.cuda.device_count())
        options["device_id"] = torch.device("cuda", torch.cuda.current_device())
    if not dist.is_initialized():
        dist.init_process_group(backend, store=dist.PrefixStore("ccweave/pg", store),
                                rank=job.rank, world_size=job.world_size, timeout=wait,
                                **options)
    transport = TorchTransport(board=FaultBoard(store, job.rank, job.world_size))
    if backend == "gloo":
        from ccweave.runtime.transport.shm import with_shared_memory
        from ccweave.runtime.transport.sockets import local_address, with_sockets

        address = local_address(job.master_addr or "127.0.0.1")
        return with_shared_memory(with_sockets(transport, address))
    return transport


def _raise_on_sigterm(rank: int) -> None:
    """mpirun stops every rank with SIGTERM when one fails: say so instead of vanishing."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, frame: object) -> None:
        raise RuntimeFault(f"rank {rank}: stopped by mpirun (SIGTERM), which stops the job "
                           "when a rank fails; its report names that rank")

    signal.signal(signal.SIGTERM, stop)


def disconnect(transport: Transport) -> None:
    """Tear down what :func:`connect` set up (process group, MPI stays to atexit)."""
    transport.close()
    if transport.name in ("gloo", "nccl"):
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def fail_fast(error: CCWeaveError) -> NoReturn:
    """Print ``error`` as the CLI does and leave at once (exit 2): a process group with a
    dead peer can hang in its destructor, which would keep this rank alive."""
    sys.stdout.flush()
    print(f"ccweave: error: {error}", file=sys.stderr, flush=True)
    os._exit(2)
