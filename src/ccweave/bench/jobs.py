"""Where ``ccweave bench`` runs its jobs and how: a :class:`Site` is the netns testbed of
the topology (or this machine as it is); on it, one job per backend (gloo through
torch.distributed, Open MPI through ``mpirun``) runs :mod:`ccweave.runtime.batch` on
every rank, and rank 0 reports. The profiler's calibration runs on the same site."""

from __future__ import annotations

import json
import re
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ccweave.bench.cases import median_row
from ccweave.errors import InputError, RuntimeFault
from ccweave.runtime import batch
from ccweave.runtime.batch import Case
from ccweave.schedule import Schedule
from ccweave.topology.model import Topology

TESTBEDS = ("netns", "none")
BATCH_MODULE = "ccweave.runtime.batch"
Lines = Callable[[str], None]
MAX_LINES = 40
"""A failed job's lines kept: its failed ranks' last lines, or its ranks' errors."""
_OWN_ERROR = re.compile(r"^(ccweave: error: .*|\w+(\.\w+)*(Error|Exception|Interrupt)(: .*)?)$")
"""A line a rank writes about its own failure: ccweave's one-line error, or the last line
of a Python traceback."""


@dataclass(frozen=True)
class JobFailure:
    """A job that failed: which (``gloo``, ``mpi``, ``calibration``), the launcher's
    one-line account, and the failing rank's own error as lines."""

    backend: str
    error: str
    lines: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"job": self.backend, "error": self.error, "last_lines": list(self.lines)}


def job_failure(backend: str, error: BaseException, seen: Iterable[str] = ()) -> JobFailure:
    """``error`` (a launcher's RuntimeFault: one line, then the failed ranks' last lines,
    in its text or its ``details``) as a :class:`JobFailure`. An MPI job's last lines are
    mpirun's own report, not the rank's: the ranks' errors are then picked from those and
    from ``seen``, what the job printed; so too when the launcher gave no lines."""
    first, *rest = str(error).strip().splitlines() or [type(error).__name__]
    rest += [str(line) for line in getattr(error, "details", ())]
    if backend == "mpi" or not rest:
        own = [line.strip() for line in [*seen, *rest] if _OWN_ERROR.match(line.strip())]
        rest = list(dict.fromkeys(own)) or rest
    lines = [line.rstrip() for line in rest if line.strip()]
    return JobFailure(backend, first.strip().rstrip(":"), tuple(lines[-MAX_LINES:]))


@dataclass(frozen=True)
class Measured:
    """Rank 0's rows by case name; each rank's peak RSS (MB) per backend; the factor that
    turns an emulated time into the machine's (1.0 off the testbed); the jobs that
    failed (the others' rows are kept)."""

    rows: dict[str, dict]
    peak_rss_mb: dict[str, list[float]]
    scale: float
    testbed: str
    failed: tuple[JobFailure, ...] = ()


@dataclass
class Site:
    """Where jobs run: ``bed`` (a built testbed) or this machine (``bed is None``).

    ``topology`` is the machine asked for; ``emulated`` what the jobs really run on (its
    bandwidths times ``scale``, no link latency; ``topology`` itself off the testbed),
    which predictions of measured times must simulate."""

    topology: Topology
    emulated: Topology
    testbed: str
    bed: object | None
    scale: float
    folder: Path

    def pin(self, schedules: Sequence[Schedule]) -> None:
        """Make the routes ``schedules`` pin real on the testbed (nothing elsewhere)."""
        if self.bed is None:
            return
        routes = {(t.src, t.dst, t.via) for schedule in schedules for t in schedule.transfers
                  if t.via is not None and t.src != t.dst}
        if routes:
            self.bed.pin(sorted(routes, key=str))  # type: ignore[attr-defined]

    def run(self, module: str, argv: Sequence[str], backend: str, timeout: float,
            on_line: Lines | None = None) -> None:
        """``python -m MODULE ARGV`` as every rank, over ``backend``."""
        from ccweave.runtime.transport.sockets import ROUTES_ENV
        from ccweave.testbed import run_mpi, run_ranks

        if self.bed is None:
            _run_here(module, argv, self.topology.num_ranks, backend, on_line)
            return
        env = {ROUTES_ENV: self.bed.routes_file(self.folder)}  # type: ignore[attr-defined]
        if backend == "mpi":
            run_mpi(self.bed, argv, module=module, timeout=timeout, on_line=on_line, env=env)
        else:
            run_ranks(self.bed, argv, module=module, timeout=timeout, on_line=on_line,
                      env=env)


@contextmanager
def site(topology: Topology, testbed: str = "netns", *, max_rate_mbit: float | None = None,
         mpi: bool = False) -> Iterator[Site]:
    """The testbed of ``topology`` built for the duration (torn down after, whatever
    happens), or this machine; ``mpi`` adds the control bridge mpirun needs."""
    from ccweave.testbed import Testbed, emulate
    from ccweave.testbed.emulation import DEFAULT_MAX_RATE_MBIT, free_subnet
    from ccweave.testbed.netns import fresh_tag, host_networks

    if testbed not in TESTBEDS:
        raise InputError(f"--testbed {testbed!r}: choose one of {', '.join(TESTBEDS)}")
    with tempfile.TemporaryDirectory(prefix="ccweave-bench-") as folder:
        if testbed == "none":
            yield Site(topology, topology, testbed, None, 1.0, Path(folder))
            return
        rate = DEFAULT_MAX_RATE_MBIT if max_rate_mbit is None else max_rate_mbit
        emulation = emulate(topology, max_rate_mbit=rate,
                            tag=fresh_tag(), subnet=free_subnet(host_networks()))
        with Testbed(emulation, control=mpi) as bed:
            yield Site(topology, emulation.emulated_topology(), testbed, bed,
                       emulation.scale, Path(folder))


def run_jobs(place: Site, jobs: dict[str, list[Case]], *, timeout: float = 3600.0,
             on_progress: Lines | None = None) -> Measured:
    """Run each backend's cases (``{"gloo": [...], "mpi": [...]}``) and collect the rows
    (a case run in several rounds gives one row, :func:`median_row`). A job that fails
    is recorded in ``failed`` and the next job still runs: one backend's fault does not
    cost the others' measurements.

    ``on_progress`` hears each ``"i/n name size"`` rank 0 announces.
    """
    rounds: dict[str, list[dict]] = {}
    rss: dict[str, list[float]] = {}
    failed: list[JobFailure] = []
    for backend, cases in jobs.items():
        if not cases:
            continue
        seen: deque[str] = deque(maxlen=200)
        follow = _follower(seen, on_progress)
        cases_path = place.folder / f"{backend}-cases.json"
        out_path = place.folder / f"{backend}-results.json"
        batch.save(cases, cases_path)
        argv = [str(cases_path), str(out_path), "--backend", backend, "--timeout",
                str(min(timeout, 600.0)), "--progress"]
        try:
            place.run(BATCH_MODULE, argv, backend, timeout, follow)
            if not out_path.exists():
                raise RuntimeFault(f"the {backend} job ended without results")
        except RuntimeFault as error:
            failed.append(job_failure(backend, error, seen))
            continue
        for row in json.loads(out_path.read_text()):
            rounds.setdefault(row["case"], []).append(row)
        rss[backend] = json.loads(Path(f"{out_path}.rss").read_text())
    rows = {name: median_row(group) for name, group in rounds.items()}
    return Measured(rows, rss, place.scale, place.testbed, tuple(failed))


def _follower(seen: deque[str], on_progress: Lines | None) -> Lines:
    """Hands rank 0's progress announcements to ``on_progress`` and keeps the job's other
    lines in ``seen`` (a failure's account picks the ranks' errors from them)."""
    def follow(line: str) -> None:
        if not line.startswith(batch.PROGRESS):
            seen.append(line)
        elif on_progress:
            on_progress(line[len(batch.PROGRESS):].strip())

    return follow


def calibrate(place: Site, spec: str, sizes: str, *, timeout: float = 3600.0,
              on_line: Lines | None = None, progress: Lines | None = None):
    """Fit the cost model on ``place`` (``ccweave profile --calibrate`` with the links as
    the topology ``spec`` gives them, which the testbed shapes exactly); returns the
    :class:`ccweave.profile.calibrate.Calibration`."""
    from ccweave.profile.calibrate import fitted_topology
    from ccweave.profile.result import Profile

    out = place.folder / "profile.json"
    argv = ["profile", "--no-pairs", "--no-cuda", "--calibrate", "--calibrate-sizes", sizes,
            "--base", spec, "--timeout", str(min(timeout, 600.0)), "--worker-out", str(out)]
    place.run("ccweave.cli", argv, "gloo", timeout, on_line)
    return fitted_topology(place.emulated, Profile.load(out), place.topology,
                           progress=progress)


def _run_here(module: str, argv: Sequence[str], nproc: int, backend: str,
              follow: Lines | None) -> None:
    """This machine as it is: local ranks (gloo) or ``mpirun``; rank 0's output lines
    come through its standard output."""
    from ccweave.runtime.launch import launch_local, launch_mpi

    launch = launch_mpi if backend == "mpi" else launch_local
    code = launch(list(argv), nproc, module=module, on_line=follow)
    if code != 0:
        raise RuntimeFault(f"the {backend} job found wrong elements or failed (code {code})")
