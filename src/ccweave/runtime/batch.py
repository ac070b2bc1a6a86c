"""Check many schedules in one job: one process start-up for a whole matrix of
collectives, strategies, dtypes and modes (what the test suite and benchmarks run).

``python -m ccweave.runtime.batch CASES.json OUT.json --backend gloo`` as every rank of
a job (see :func:`launch`); rank 0 writes one result per case and size.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ccweave import schedule as schedule_io
from ccweave.collectives import Kind
from ccweave.errors import CCWeaveError, InputError, NotApplicableError
from ccweave.runtime.bench import Options, Runner, parse_dtype, type_name
from ccweave.runtime.reduce_ops import RedOp
from ccweave.schedule import Schedule
from ccweave.verify import verify


@dataclass(frozen=True)
class Case:
    """One schedule to run at ``sizes`` with ``dtype``, ``op`` and ``modes``."""

    name: str
    schedule: Schedule
    sizes: tuple[int, ...]
    dtype: str = "float32"
    op: str = "sum"
    modes: tuple[bool, ...] = (False, True)
    iters: int = 1
    warmup: int = 0
    tags: dict[str, object] = field(default_factory=dict)


def classic_schedules(topology, kinds: Sequence[Kind] | None = None,
                      root: int = 0) -> list[tuple[str, Schedule]]:
    """``(strategy, schedule)`` for every classic strategy and collective (``kinds``,
    default all eight) that builds on ``topology``, verified; the rest are skipped."""
    from ccweave.synth.registry import strategies, synthesize

    wanted = list(kinds) if kinds is not None else list(Kind.collectives())
    found = []
    for strategy in strategies().values():
        if not strategy.classic or strategy.slow:
            continue
        for kind in wanted:
            if kind not in strategy.collectives:
                continue
            try:
                schedule = synthesize(topology, kind, strategy.name, root=root)
            except (NotApplicableError, InputError):
                continue
            verify(schedule)
            found.append((strategy.name, schedule))
    return found


def save(cases: Sequence[Case], path: str | Path) -> None:
    Path(path).write_text(json.dumps([
        {"name": c.name, "schedule": schedule_io.to_dict(c.schedule), "sizes": list(c.sizes),
         "dtype": c.dtype, "op": c.op, "modes": list(c.modes), "iters": c.iters,
         "warmup": c.warmup, "tags": c.tags} for c in cases]))


def load(path: str | Path) -> list[Case]:
    return [Case(item["name"], schedule_io.from_dict(item["schedule"]), tuple(item["sizes"]),
                 item["dtype"], item["op"], tuple(item["modes"]), item["iters"],
                 item["warmup"], item["tags"]) for item in json.loads(Path(path).read_text())]


def run_cases(cases: Sequence[Case], transport, timeout: float = 60.0) -> list[dict]:
    """Every case at every size on this rank; the same list on every rank."""
    results = []
    for case in cases:
        options = Options(parse_dtype(case.dtype), RedOp.parse(case.op), case.iters,
                          case.warmup, True, case.modes, timeout)
        runner = Runner(case.schedule, transport, options)
        for size in case.sizes:
            row = runner.row(size)
            results.append({"case": case.name, "tags": case.tags,
                            "type": type_name(options.dtype), **row.to_dict()})
    return results


def launch(cases: Sequence[Case], nproc: int, folder: str | Path, backend: str = "gloo",
           timeout: float = 60.0) -> list[dict]:
    """Run ``cases`` on ``nproc`` local ranks over ``backend``; rank 0's results (each
    rank's peak RSS in MB lands beside them, in ``results.json.rss``)."""
    from ccweave.runtime.launch import launch_local, launch_mpi

    folder = Path(folder)
    cases_path, out_path = folder / "cases.json", folder / "results.json"
    save(cases, cases_path)
    argv = [str(cases_path), str(out_path), "--backend", backend, "--timeout", str(timeout)]
    if backend == "mpi":
        launch_mpi(argv, nproc, module=__name__)
    else:
        launch_local(argv, nproc, module=__name__)
    return json.loads(out_path.read_text())


def main(argv: Sequence[str] | None = None) -> int:
    from ccweave.errors import RuntimeFault
    from ccweave.runtime.job import connect, detect, disconnect, fail_fast
    from ccweave.runtime.launch import die_with_parent

    parser = argparse.ArgumentParser(prog="python -m ccweave.runtime.batch")
    parser.add_argument("cases")
    parser.add_argument("output")
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    try:
        job = detect()
        if job is None:
            raise CCWeaveError("run this under a launcher (ccweave.runtime.batch.launch, "
                               "torchrun or mpirun)")
        die_with_parent()
        transport = connect(args.backend, job, args.timeout)
        try:
            results = run_cases(load(args.cases), transport, args.timeout)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            peaks = transport.sum_values([rss if r == job.rank else 0.0
                                          for r in range(job.world_size)])
            transport.barrier()
        except RuntimeFault as error:
            fail_fast(error)
        disconnect(transport)
    except CCWeaveError as error:
        print(f"ccweave: error: {error}", file=sys.stderr)
        return 2
    if job.rank == 0:
        Path(args.output).write_text(json.dumps(results))
        Path(args.output + ".rss").write_text(json.dumps(peaks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
