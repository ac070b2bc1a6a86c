"""``ccweave run TOPO COLLECTIVE --strategy S --nproc N --sizes ...``: execute a schedule
on real processes, check every element, print nccl-tests rows.

Started by hand it launches ``--nproc`` local ranks (gloo/NCCL) or ``mpirun`` (MPI);
started by torchrun or mpirun it joins that job as one rank.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ccweave import plan as plan_io
from ccweave.commands import _inputs, _output
from ccweave.errors import InputError, RuntimeFault, VerificationError, printable, say
from ccweave.plan import Plan
from ccweave.synth.registry import strategies
from ccweave.units import format_size
from ccweave.verify import verify

ORDER = 80


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "run", help="execute a schedule on real processes (gloo, NCCL, MPI), nccl-tests rows",
        description="Run a schedule for real and check every element. By hand it starts "
                    "--nproc local ranks; under torchrun or mpirun it joins the job.")
    parser.add_argument("topology", nargs="?", help=_inputs.TOPO_HELP)
    parser.add_argument("collective", nargs="?",
                        help="allgather, reducescatter, allreduce, alltoall, broadcast, "
                             "reduce, gather, scatter")
    parser.add_argument("--strategy", default="ring",
                        help=f"one of: {', '.join(strategies())}, or auto: the fastest "
                             "simulated per size (default ring); strategies tuned per size "
                             "are built for each of --sizes")
    parser.add_argument("--chunks", type=int, help="chunks per rank (default: the strategy's)")
    parser.add_argument("--root", type=int, default=0, help="root of rooted collectives")
    parser.add_argument("--option", action="append", metavar="KEY=VALUE",
                        help="a strategy option, e.g. channels=2 (repeatable)")
    parser.add_argument("--schedule", metavar="FILE",
                        help="run this schedule or plan (JSON, or MSCCL XML) instead of "
                             "synthesizing one")
    parser.add_argument("--nproc", type=int,
                        help="local ranks to start (default: the schedule's ranks)")
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl", "mpi"),
                        help="gloo (CPU), nccl (GPU) or mpi (mpi4py under mpirun)")
    parser.add_argument("--sizes", default="1KB:64MB", help="e.g. 1KB:64MB or 1MB,64MB")
    parser.add_argument("--dtype", default="float32",
                        help="float32, float16, bfloat16, int32, int64 (default float32)")
    parser.add_argument("--op", default="sum", help="sum, prod, max, min (reductions)")
    parser.add_argument("--iters", type=int, default=20, help="timed iterations per size")
    parser.add_argument("--warmup", type=int, default=5, help="untimed iterations first")
    parser.add_argument("--modes", default="both", choices=("both", "out", "in"),
                        help="out of place, in place, or both (default)")
    parser.add_argument("--no-check", dest="check", action="store_false",
                        help="skip the element-by-element check")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds without progress before a rank gives up (default 60)")
    parser.add_argument("--progress", action="store_true",
                        help="print a line per measurement to stderr even when it is not a "
                             "terminal")
    parser.add_argument("--verified", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--report", help=argparse.SUPPRESS)  # rank 0 writes rows for the launcher
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    from ccweave.runtime.job import check_backend, detect

    job = detect()
    if job is not None and job.launcher == "ccweave":
        from ccweave.runtime.launch import die_with_parent

        die_with_parent()
    check_backend(args.backend, job if job is not None and job.launcher != "ccweave" else None)
    options = _options(args)
    sizes = _inputs.measured_sizes(args.sizes)
    if job is None and args.backend == "mpi":  # mpirun's ranks need mpi4py: say so now
        from ccweave.runtime.prerequisites import mpi_missing

        missing = mpi_missing()
        if missing:
            raise InputError(f"--backend mpi: {missing}; or use --backend gloo")
    plan = _plan(args, launching=job is None)
    ranks = plan.collective.num_ranks
    if job is None:
        nproc = args.nproc if args.nproc is not None else ranks
        if nproc != ranks:
            raise RuntimeFault(f"--nproc {nproc} != the schedule's {ranks} ranks; use --nproc "
                               f"{ranks} or a topology with {nproc} ranks")
        _check_memory(args, plan, sizes, options.dtype.itemsize, nproc)
        return _launch(args, plan, nproc)
    if job.world_size != ranks:
        raise RuntimeFault(f"world size {job.world_size} (from {job.launcher}) != the "
                           f"schedule's {ranks} ranks; start {ranks} processes")
    if not args.report:  # a rank of ccweave's own launcher: the launcher checked
        _check_memory(args, plan, sizes, options.dtype.itemsize, job.local_world_size)
    return _work(args, job, plan, sizes, options)


def _check_memory(args, plan: Plan, sizes: list[int], itemsize: int, ranks_here: int) -> None:
    """Refuse sizes whose buffers would not fit this host's memory (or the GPU's, for
    NCCL) before any rank starts or allocates (``bench`` makes the same check)."""
    def per_rank(size: int) -> int:
        schedule = plan.schedule_for(size)
        return _inputs.rank_buffer_bytes(schedule.collective, size, itemsize,
                                         schedule.scratch_chunks)

    _inputs.check_buffers(f"--sizes {args.sizes}", args.backend, ranks_here, sizes, per_rank)


def _options(args):
    from ccweave.runtime.measure import Options, parse_dtype
    from ccweave.runtime.reduce_ops import RedOp

    _inputs.count(args.iters, "--iters", 1)
    _inputs.count(args.warmup, "--warmup", 0)
    _inputs.timeout(args.timeout)
    modes = {"both": (False, True), "out": (False,), "in": (True,)}[args.modes]
    return Options(parse_dtype(args.dtype), RedOp.parse(args.op), args.iters, args.warmup,
                   args.check, modes, args.timeout)


def _plan(args, launching: bool = False) -> Plan:
    if args.schedule:
        path = Path(args.schedule)
        plan = (Plan.single(_inputs.load_schedule(str(path))) if path.suffix.lower() == ".xml"
                else plan_io.load(path))
        topo = _agrees(args, plan)
        if not args.verified:
            for entry in plan.entries:
                try:
                    verify(entry.schedule, topo)
                except VerificationError as error:
                    name = entry.schedule.name or "the schedule"
                    raise VerificationError(f"{args.schedule}: {name} is not proven: {error}; "
                                            "fix it (ccweave verify names the problems)"
                                            ) from None
        return plan
    if not args.topology or not args.collective:
        raise InputError("give TOPOLOGY and COLLECTIVE (e.g. `ccweave run ring:4 allreduce`), "
                         "or --schedule FILE")
    from ccweave.select import strategy_plan

    topo = _inputs.topology(args.topology)
    if launching:  # as many processes as ranks: refuse what cannot start before synthesis
        from ccweave.runtime.launch import check_memory

        check_memory(args.topology, args.backend, args.nproc or topo.num_ranks, 0)
    chunks, options = _inputs.chunks_and_options(args.chunks, args.option)
    plan = strategy_plan(topo, _inputs.kind(args.collective), args.strategy,
                         _inputs.sizes(args.sizes), root=args.root, chunks=chunks,
                         progress=None if args.json else _output.progress_printer(),
                         **options)
    instead = _inputs.channels_used(options, [entry.schedule for entry in plan.entries])
    if instead:
        say(f"ccweave: note: {printable(instead)}")
    return plan


def _agrees(args, plan: Plan):
    """With ``--schedule``, the positional TOPOLOGY and COLLECTIVE are optional; given,
    they must be what the schedule is for (the topology also checks its routes)."""
    coll = plan.collective
    if args.collective and _inputs.kind(args.collective) is not coll.kind:
        raise InputError(f"{args.collective!r} disagrees with --schedule {args.schedule}, "
                         f"which is {coll.describe()}; drop COLLECTIVE or give the matching "
                         "schedule")
    if not args.topology:
        return None
    topo = _inputs.topology(args.topology)
    if topo.num_ranks != coll.num_ranks:
        raise InputError(f"{args.topology} has {topo.num_ranks} ranks but --schedule "
                         f"{args.schedule} is {coll.describe()}; drop TOPOLOGY or give the "
                         "matching one")
    return topo


def _worker_argv(args, path: str, report: str) -> list[str]:
    argv = ["run", "--schedule", path, "--verified", "--report", report,
            "--backend", args.backend,
            "--sizes", args.sizes, "--dtype", args.dtype, "--op", args.op,
            "--iters", str(args.iters), "--warmup", str(args.warmup), "--modes", args.modes,
            "--timeout", str(args.timeout)]
    if not args.check:
        argv.append("--no-check")
    if args.json:
        argv.append("--json")
    if args.progress:
        argv.append("--progress")
    return argv


def _launch(args, plan: Plan, nproc: int) -> int:
    from ccweave.runtime import handoff
    from ccweave.runtime.launch import launch_local, launch_mpi

    with handoff.shared_files("plan.json", "report.json") as (path, report):
        plan_io.save(plan, path)
        argv = _worker_argv(args, path, report)
        code = (launch_mpi if args.backend == "mpi" else launch_local)(argv, nproc)
        text = handoff.read(report)
        if text:
            _print(args, json.loads(text))
        return code


def _work(args, job, plan: Plan, sizes: list[int], options) -> int:
    from ccweave.runtime.job import connect, disconnect, fail_fast, lost_peers
    from ccweave.runtime.launch import WRONG_EXIT
    from ccweave.runtime.measure import measure

    transport = connect(args.backend, job, args.timeout)
    progress = None
    if job.rank == 0:
        progress = (_output.progress_console.print if args.progress
                    else None if args.json else _output.progress_printer())
    try:
        rows = measure(plan, transport, sizes, options, progress)
        transport.barrier()
    except RuntimeFault as error:
        fail_fast(error)
    except RuntimeError as error:  # torch's, from a barrier or sum a lost peer never joins
        fail_fast(lost_peers(job.rank, error))
    disconnect(transport)
    if job.rank == 0:
        coll = plan.collective
        report = {"plan": plan.name, "collective": coll.kind.value,
                  "describe": coll.describe(), "ranks": job.world_size,
                  "backend": transport.name, "iters": args.iters,
                  "rows": [row.to_dict() for row in rows]}
        if args.report:
            Path(args.report).write_text(json.dumps(report))
        else:
            _print(args, report)
    wrong = sum((mode.wrong or 0) for row in rows for mode in (row.out_of_place, row.in_place))
    if not wrong:
        return 0
    return WRONG_EXIT if args.report else 1  # launched by `ccweave run` (local or mpirun)


def _print(args, report: dict) -> None:
    """nccl-tests rows (table or ``--json``) from a worker's report."""
    rows = report["rows"]
    modes = [mode for row in rows for mode in (row["out_of_place"], row["in_place"])
             if mode["busbw_GBps"] is not None]
    avg = sum(m["busbw_GBps"] for m in modes) / len(modes) if modes else 0.0
    total = sum(m["wrong"] or 0 for m in modes)
    if args.json:
        _output.print_json({key: value for key, value in report.items() if key != "describe"}
                           | {"avg_busbw_GBps": avg, "wrong": total})
        return
    cells = []
    skipped: dict[str, str] = {}
    unit, scale = _output.time_unit(mode["time_us"] * 1e-6 for mode in modes)
    for row in rows:
        line: list[object] = [format_size(row["size_bytes"]), row["count"], row["type"],
                              row["redop"], row["root"]]
        for name in ("out_of_place", "in_place"):
            mode = row[name]
            if mode["skipped"] is not None:
                skipped.setdefault(name.replace("_", "-"), mode["skipped"])
                line += ["n/a"] * 4
            else:
                line += [mode["time_us"] * 1e-6 / scale, mode["algbw_GBps"], mode["busbw_GBps"],
                         "-" if mode["wrong"] is None else mode["wrong"]]
        cells.append(line)
    _output.print_table(
        f"{report['plan'] or 'plan'}: {report['describe']} over {report['backend']}, "
        f"{report['iters']} iters (out-of-place | in-place)",
        ["size", "count", "type", "redop", "root", f"time({unit})", "algbw(GB/s)",
         "busbw(GB/s)", "#wrong", f"time({unit})", "algbw(GB/s)", "busbw(GB/s)", "#wrong"],
        cells)
    for name, reason in skipped.items():
        if reason != "not requested":
            _output.console.print(f"[dim]{name}: {_output.plain(reason)}[/]")
    _output.console.print(f"# Avg bus bandwidth    : {avg:.3f} GB/s")
    _output.console.print(f"# Wrong elements       : {total}" + ("" if total else " (OK)"))
