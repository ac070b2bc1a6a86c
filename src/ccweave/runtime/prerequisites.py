"""What a job's ranks need before any of them starts, checked in the Python the ranks run
(this interpreter, this environment): ``mpirun`` and an mpi4py that loads its MPI library
for MPI, torch for gloo. A missing piece is one line at once, not a job that fails after
minutes of other measurements (``bench``'s MPI job ran last, after 7 minutes)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

from ccweave.errors import InputError

MPI_PROBE = ("import mpi4py\n"
             "mpi4py.rc.initialize = mpi4py.rc.finalize = False\n"
             "from mpi4py import MPI\n")
"""Imports mpi4py and loads the MPI library it was built for, without starting MPI."""
PROBE_TIMEOUT_S = 60.0


def mpi_missing(env: Mapping[str, str] | None = None) -> str | None:
    """Why MPI ranks cannot start here (``mpirun`` not on PATH, mpi4py not importable in
    the ranks' Python under ``env``, default this process's), with the fix; ``None``
    when they can."""
    env = dict(os.environ if env is None else env)
    if shutil.which("mpirun", path=env.get("PATH")) is None:
        return "mpirun is not on PATH (Debian: apt-get install openmpi-bin)"
    try:
        probe = subprocess.run([sys.executable, "-c", MPI_PROBE], env=env, text=True,
                               capture_output=True, errors="replace",
                               timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return (f"the ranks' Python ({sys.executable}) took over {PROBE_TIMEOUT_S:g} s to "
                "import mpi4py; check the MPI installation")
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        why = lines[-1].strip() if lines else f"exit code {probe.returncode}"
        return (f"the ranks' Python ({sys.executable}) cannot import mpi4py ({why}); "
                "pip install mpi4py")
    return None


def check_rank_environment(ranks_here: int, env: Mapping[str, str] | None = None) -> None:
    """Refuse, before any rank starts, a variable every rank would refuse at once:
    ``CCWEAVE_DATA_PORTS`` that is no port range, or fewer ports than the ``ranks_here``
    ranks on this host take (one each): each rank said so, then the launcher, three error
    lines for one variable. Its parser is the ranks' own, which loads torch: only read when
    the variable is set."""
    env = os.environ if env is None else env
    if env.get("CCWEAVE_DATA_PORTS"):
        from ccweave.runtime.transport.sockets import PORTS_ENV, data_ports

        ports = data_ports(env[PORTS_ENV])
        if ports is not None and len(ports) < ranks_here:
            raise InputError(f"{PORTS_ENV}={env[PORTS_ENV]!r} holds {len(ports)} port(s), "
                             f"but the {ranks_here} ranks on this host listen on one each; "
                             "give a wider range")


def torch_missing() -> str | None:
    """Why gloo ranks (torch.distributed) cannot start here, or ``None``."""
    if importlib.util.find_spec("torch") is None:
        return f"the ranks' Python ({sys.executable}) cannot import torch; pip install torch"
    return None
