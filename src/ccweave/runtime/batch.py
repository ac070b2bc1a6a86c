"""Check many schedules in one job: one process start-up for a whole matrix of
collectives, strategies, dtypes and modes (what the test suite and benchmarks run).

``python -m ccweave.runtime.batch CASES.json OUT.json --backend gloo`` as every rank of
a job (see :func:`launch`); rank 0 writes one result per case and size.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ccweave import schedule as schedule_io
from ccweave.collectives import Collective, Kind
from ccweave.errors import CCWeaveError, InputError, NotApplicableError, printable, say
from ccweave.peak_rss import peak_rss_bytes
from ccweave.runtime.layout import layout_for_bytes
from ccweave.runtime.measure import Options, Result, Runner, measure_call, parse_dtype, type_name
from ccweave.runtime.native import native_call, native_name
from ccweave.runtime.reduce_ops import RedOp
from ccweave.schedule import Schedule
from ccweave.units import format_size
from ccweave.verify import verify

CASES_FORMAT = "ccweave.cases"
"""The header of a cases file (JSON lines: the header, then a case per line)."""


@dataclass(frozen=True)
class Case:
    """One schedule to run at ``sizes`` with ``dtype``, ``op`` and ``modes``; or, when
    ``native`` is set instead, the backend's own collective (out of place)."""

    name: str
    schedule: Schedule | None
    sizes: tuple[int, ...]
    dtype: str = "float32"
    op: str = "sum"
    modes: tuple[bool, ...] = (False, True)
    iters: int = 1
    warmup: int = 0
    tags: dict[str, object] = field(default_factory=dict)
    native: Collective | None = None
    reps: int = 1
    target_s: float | None = None
    """Run as many of ``iters`` as last about this long (:class:`Options`)."""

    def __post_init__(self) -> None:
        if (self.schedule is None) == (self.native is None):
            raise InputError(f"case {self.name!r}: give a schedule or a native collective")


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
    """Write ``cases`` as JSON lines: a header with the number of measurements, then one
    case per line, so each rank reads one case at a time (:func:`iter_cases`)."""
    with open(path, "w") as out:
        out.write(json.dumps({"format": CASES_FORMAT,
                              "measurements": sum(len(c.sizes) for c in cases)}) + "\n")
        for c in cases:
            out.write(json.dumps({
                "name": c.name, "sizes": list(c.sizes), "dtype": c.dtype, "op": c.op,
                "modes": list(c.modes), "iters": c.iters, "warmup": c.warmup,
                "tags": c.tags, "reps": c.reps, "target_s": c.target_s,
                "schedule": schedule_io.to_dict(c.schedule) if c.schedule is not None
                else None,
                "native": _collective_dict(c.native) if c.native is not None else None})
                + "\n")


def measurements(path: str | Path) -> int:
    """How many (case, size) measurements the cases file holds (its header)."""
    with open(path) as lines:
        header = json.loads(lines.readline())
    if not isinstance(header, dict) or header.get("format") != CASES_FORMAT:
        raise InputError(f"{path}: not a cases file written by ccweave.runtime.batch.save")
    return int(header["measurements"])


def iter_cases(path: str | Path) -> Iterator[Case]:
    """The cases of a file :func:`save` wrote, one at a time (a rank holds one schedule
    at a time: a bench's whole matrix took 1.4 GB per rank read at once)."""
    measurements(path)
    with open(path) as lines:
        lines.readline()
        for line in lines:
            item = json.loads(line)
            yield Case(item["name"],
                       schedule_io.from_dict(item["schedule"]) if item["schedule"] else None,
                       tuple(item["sizes"]), item["dtype"], item["op"], tuple(item["modes"]),
                       item["iters"], item["warmup"], item["tags"],
                       Collective(**item["native"]) if item["native"] else None,
                       item["reps"], item.get("target_s"))


def load(path: str | Path) -> list[Case]:
    """Every case of a file :func:`save` wrote."""
    return list(iter_cases(path))


def _collective_dict(coll: Collective) -> dict[str, object]:
    return {"kind": coll.kind.value, "num_ranks": coll.num_ranks,
            "chunks_per_rank": coll.chunks_per_rank, "root": coll.root, "peer": coll.peer}


def run_cases(cases: Iterable[Case], transport, timeout: float = 60.0,
              progress: Callable[[str], None] | None = None, total: int | None = None
              ) -> list[dict]:
    """Every case at every size on this rank; the same list on every rank.

    ``progress`` hears ``"i/total label"`` before each measurement (on rank 0 only);
    ``total`` is the number of measurements when ``cases`` is an iterator."""
    results = []
    if total is None:
        cases = list(cases)
        total = sum(len(case.sizes) for case in cases)
    for case in cases:
        options = Options(parse_dtype(case.dtype), RedOp.parse(case.op), case.iters,
                          case.warmup, True, case.modes, timeout, reps=case.reps,
                          target_s=case.target_s)
        runner = Runner(case.schedule, transport, options) if case.schedule else None
        for size in case.sizes:
            if progress and transport.rank == 0:
                progress(f"{len(results) + 1}/{total} {case.name} {format_size(size)}")
            if runner is not None:
                row = runner.row(size).to_dict()
            else:
                assert case.native is not None
                row = native_row(case.native, size, transport, options)
            results.append({"case": case.name, "tags": case.tags,
                            "type": type_name(options.dtype), **row})
        del runner, case  # the next case's schedule replaces this one's
    return results


def native_row(coll: Collective, size: int, transport, options: Options) -> dict:
    """The backend's own collective at one size, as a row like a schedule's (out of place)."""
    layout = layout_for_bytes(coll, size, options.dtype.itemsize)
    result = measure_call(native_call(transport, coll, options.op), coll, layout, transport,
                          options)
    return {"size_bytes": layout.size_bytes(options.dtype.itemsize), "count": layout.count,
            "redop": options.op.value if coll.kind.is_reduction else "none",
            "root": coll.root if coll.kind.is_rooted else -1,
            "schedule": native_name(transport.name, coll.kind),
            "out_of_place": asdict(result), "in_place": asdict(Result(skipped="native"))}


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


PROGRESS = "PROGRESS "
"""Prefix of the lines ``--progress`` prints (a launcher following rank 0 reads them)."""


def _print_progress(text: str) -> None:
    print(PROGRESS + text, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    from ccweave.errors import RuntimeFault
    from ccweave.runtime.job import connect, detect, disconnect, fail_fast, lost_peers
    from ccweave.runtime.launch import die_with_parent

    parser = argparse.ArgumentParser(prog="python -m ccweave.runtime.batch")
    parser.add_argument("cases")
    parser.add_argument("output")
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--progress", action="store_true",
                        help="rank 0 prints a PROGRESS line before each measurement")
    args = parser.parse_args(argv)
    try:
        job = detect()
        if job is None:
            raise CCWeaveError("run this under a launcher (ccweave.runtime.batch.launch, "
                               "torchrun or mpirun)")
        die_with_parent()
        transport = connect(args.backend, job, args.timeout)
        try:
            results = run_cases(iter_cases(args.cases), transport, args.timeout,
                                progress=_print_progress if args.progress else None,
                                total=measurements(args.cases))
            rss = peak_rss_bytes() / 2**20
            peaks = transport.sum_values([rss if r == job.rank else 0.0
                                          for r in range(job.world_size)])
            transport.barrier()
        except RuntimeFault as error:
            fail_fast(error)
        except RuntimeError as error:  # torch's, from a step a lost peer never joins
            fail_fast(lost_peers(job.rank, error))
        disconnect(transport)
    except CCWeaveError as error:
        say(f"ccweave: error: {printable(error)}")
        return 2
    if job.rank == 0:
        Path(args.output).write_text(json.dumps(results))
        Path(args.output + ".rss").write_text(json.dumps(peaks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
