"""Run ``ccweave bench``'s cases as real jobs: one job per backend (gloo through
torch.distributed, Open MPI through ``mpirun``), on the netns testbed or on this machine
as it is. Every rank runs :mod:`ccweave.runtime.batch`; rank 0 reports."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from ccweave.errors import RuntimeFault
from ccweave.runtime import batch
from ccweave.runtime.batch import Case
from ccweave.topology.model import Topology

TESTBEDS = ("netns", "none")
BATCH_MODULE = "ccweave.runtime.batch"


@dataclass(frozen=True)
class Measured:
    """Rank 0's rows by case name; each rank's peak RSS (MB) per backend; the factor that
    turns an emulated time into the machine's (1.0 off the testbed)."""

    rows: dict[str, dict]
    peak_rss_mb: dict[str, list[float]]
    scale: float
    testbed: str


def run_jobs(topology: Topology, jobs: dict[str, list[Case]], *, testbed: str = "netns",
             max_rate_mbit: float | None = None, timeout: float = 3600.0,
             on_progress: Callable[[str], None] | None = None) -> Measured:
    """Run each backend's cases (``{"gloo": [...], "mpi": [...]}``) and collect the rows.

    ``on_progress`` hears each ``"i/n name size"`` rank 0 announces.
    """
    from ccweave.testbed import Testbed, emulate, run_mpi, run_ranks
    from ccweave.testbed.emulation import DEFAULT_MAX_RATE_MBIT, free_subnet
    from ccweave.testbed.netns import fresh_tag, host_networks

    jobs = {backend: cases for backend, cases in jobs.items() if cases}
    rows: dict[str, dict] = {}
    rss: dict[str, list[float]] = {}
    scale = 1.0

    def follow(line: str) -> None:
        if on_progress and line.startswith(batch.PROGRESS):
            on_progress(line[len(batch.PROGRESS):].strip())

    with tempfile.TemporaryDirectory(prefix="ccweave-bench-") as folder, ExitStack() as stack:
        bed = None
        if testbed == "netns":
            emulation = emulate(topology, max_rate_mbit=max_rate_mbit or DEFAULT_MAX_RATE_MBIT,
                                tag=fresh_tag(), subnet=free_subnet(host_networks()))
            scale = emulation.scale
            bed = stack.enter_context(Testbed(emulation, control="mpi" in jobs))
        elif testbed != "none":
            raise RuntimeFault(f"--testbed {testbed!r}: choose one of {', '.join(TESTBEDS)}")
        for backend, cases in jobs.items():
            cases_path = Path(folder, f"{backend}-cases.json")
            out_path = Path(folder, f"{backend}-results.json")
            batch.save(cases, cases_path)
            argv = [str(cases_path), str(out_path), "--backend", backend, "--timeout",
                    str(min(timeout, 600.0)), "--progress"]
            if bed is None:
                _run_here(argv, topology.num_ranks, backend, follow)
            elif backend == "mpi":
                run_mpi(bed, argv, module=BATCH_MODULE, timeout=timeout, on_line=follow)
            else:
                run_ranks(bed, argv, module=BATCH_MODULE, timeout=timeout, on_line=follow)
            if not out_path.exists():
                raise RuntimeFault(f"the {backend} job ended without results (errors above)")
            for row in json.loads(out_path.read_text()):
                rows[row["case"]] = row
            rss[backend] = json.loads(Path(f"{out_path}.rss").read_text())
    return Measured(rows, rss, scale, testbed)


def _run_here(argv: Sequence[str], nproc: int, backend: str,
              follow: Callable[[str], None]) -> None:
    """This machine as it is: local ranks (gloo) or ``mpirun``; rank 0's progress lines
    come through its standard output."""
    from ccweave.runtime.launch import launch_local, launch_mpi

    launch = launch_mpi if backend == "mpi" else launch_local
    code = launch(list(argv), nproc, module=BATCH_MODULE, on_line=follow)
    if code != 0:
        raise RuntimeFault(f"the {backend} job found wrong elements or failed (code {code})")
