"""Run one job's ranks on a testbed: rank ``r`` as ``python -m ccweave.cli ARGV`` in host
``r``'s namespace, with the environment torch.distributed's launchers set (rank 0 hosts
the rendezvous store at its emulated address)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from ccweave.errors import RuntimeFault
from ccweave.testbed.netns import Testbed

MASTER_PORT = 29517


def run_ranks(bed: Testbed, argv: Sequence[str], *, ranks: int | None = None,
              timeout: float = 300.0, module: str = "ccweave.cli") -> list[str]:
    """Start ``ranks`` ranks (default: one per host) and wait; returns each rank's output.

    Raises ``RuntimeFault`` with the failing rank's last lines when one fails, and stops
    the others; every rank is stopped after ``timeout`` seconds.
    """
    count = ranks or len(bed.namespaces)
    hosts = len(bed.namespaces)
    base = dict(os.environ)
    base.update({"MASTER_ADDR": bed.address(0), "MASTER_PORT": str(MASTER_PORT),
                 "WORLD_SIZE": str(count), "LOCAL_WORLD_SIZE": "1",
                 "OMP_NUM_THREADS": base.get("OMP_NUM_THREADS", "1")})
    procs, logs = [], []
    with tempfile.TemporaryDirectory(prefix="ccweave-testbed-") as folder:
        try:
            for rank in range(count):
                host = rank % hosts
                env = dict(base, RANK=str(rank), LOCAL_RANK="0", **bed.env(host))
                log = open(os.path.join(folder, f"rank{rank}.log"), "w+")  # noqa: SIM115
                logs.append(log)
                procs.append(subprocess.Popen(
                    bed.command(host, [sys.executable, "-m", module, *argv]), env=env,
                    stdout=log, stderr=subprocess.STDOUT))
            deadline = time.monotonic() + timeout
            while any(p.poll() is None for p in procs):
                failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        outputs = []
        for log in logs:
            log.seek(0)
            outputs.append(log.read())
            log.close()
    bad = [r for r, p in enumerate(procs) if p.returncode != 0]
    if bad:
        tail = "\n".join(outputs[bad[0]].strip().splitlines()[-8:])
        raise RuntimeFault(f"testbed rank {bad[0]} ended with code {procs[bad[0]].returncode}"
                           f" (ranks {bad} failed or were stopped):\n{tail}")
    return outputs
