"""``ccweave profile --nproc N -o topo.json``: measure alpha and bandwidth between every pair
of ranks (and the CUDA copy paths on a GPU) and write a topology ``synth`` takes.

Started by hand it launches ``--nproc`` local ranks (gloo over loopback, NCCL, or
``mpirun`` for MPI); under torchrun or mpirun it joins that job and rank 0 reports.
"""

from __future__ import annotations

import argparse

from ccweave import outfile
from ccweave.commands import _inputs, _output
from ccweave.errors import InputError
from ccweave.units import format_size

ORDER = 70


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "profile", help="measure links between ranks (ping-pong, CUDA copies) -> topology",
        description="Ping-pong between every pair of ranks over the executor's transport, "
                    "fit t = alpha + size/bandwidth (R^2 reported), time CUDA copies on a "
                    "GPU, and write a topology file. By hand it starts --nproc local ranks; "
                    "under torchrun or mpirun it joins the job.")
    parser.add_argument("--nproc", type=int, help="local ranks to start (not under a launcher)")
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl", "mpi"),
                        help="gloo (CPU/TCP), nccl (GPU) or mpi (mpi4py under mpirun)")
    parser.add_argument("--sizes", default="4KB:64MB",
                        help="message sizes, e.g. 4KB:64MB (doubling) or 1MB,16MB")
    parser.add_argument("--iters", type=int, default=5, help="timed round trips per size")
    parser.add_argument("--warmup", type=int, default=2, help="untimed round trips first")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for a peer before giving up (default 60)")
    parser.add_argument("--no-cuda", dest="cuda", action="store_false",
                        help="skip the CUDA copy paths even on a GPU")
    parser.add_argument("--no-pairs", dest="pairs", action="store_false",
                        help="skip the ping-pong of every pair (keep --base's link figures)")
    parser.add_argument("--calibrate", action="store_true",
                        help="also run calibration schedules and fit the cost model (per-"
                             "message overhead, host bandwidth) the simulator then uses")
    parser.add_argument("--calibrate-sizes", default="1MB,16MB",
                        help="sizes of the calibration schedules (default 1MB,16MB)")
    parser.add_argument("--base", metavar="TOPO",
                        help="keep this topology's structure, replace its link figures by "
                             "measured ones (a zoo name or JSON file, e.g. from topo import)")
    parser.add_argument("-o", "--out", dest="output", help="topology JSON to write")
    parser.add_argument("--raw", metavar="FILE", help="also write the measurements as JSON")
    parser.add_argument("--load", metavar="FILE",
                        help="measure nothing: build the topology from a --raw file")
    parser.add_argument("--name", help="the topology's name (default: profiled, or the base's)")
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    from ccweave.profile.result import Profile

    if not args.worker_out:
        for flag, path in (("-o", args.output), ("--raw", args.raw)):
            if path is not None:
                _inputs.output(path, args.base, args.load, flag=flag)
    if args.load:
        return _report(args, Profile.load(args.load))
    _check(args)
    from ccweave.runtime.job import check_backend, detect

    job = detect()
    check_backend(args.backend, job if job is not None and job.launcher != "ccweave" else None)
    if job is None:
        if args.nproc is None:
            raise InputError("ccweave profile measures between ranks: give --nproc N to start "
                             "N local ranks, or start it under torchrun or mpirun")
        if args.nproc < 2:
            raise InputError(f"--nproc {args.nproc}: need at least 2 ranks to measure a link")
        from ccweave.runtime.launch import check_memory

        check_memory(f"--nproc {args.nproc}", args.backend, args.nproc,
                     2 * max(_inputs.sizes(args.sizes)))
        return _launch(args)
    if args.nproc is not None and args.nproc != job.world_size:
        raise InputError(f"--nproc {args.nproc}: this process is one of {job.world_size} "
                         f"ranks started by {job.launcher}; drop --nproc")
    if job.world_size < 2:
        raise InputError("the job has one rank; profiling needs at least 2")
    profile = _work(args, job)
    if job.rank != 0:
        return 0
    if args.worker_out:
        profile.save(args.worker_out)
        return 0
    return _report(args, profile)


def _fit(args, profile, topo):
    from ccweave.profile.calibrate import fitted_topology

    say = None if args.json else _output.progress_printer()
    return fitted_topology(topo, profile, _structure(args, profile), progress=say)


def _check(args) -> None:
    _inputs.sizes(args.sizes)
    if not args.pairs and not args.base:
        raise InputError("--no-pairs keeps the link figures of --base TOPO: give --base")
    if args.calibrate:
        _inputs.sizes(args.calibrate_sizes)
    _inputs.count(args.iters, "--iters", 1)
    _inputs.count(args.warmup, "--warmup", 0)
    _inputs.timeout(args.timeout)  # the same checks as run's: 1e300 overflowed every rank


def worker_argv(args, out: str) -> list[str]:
    """The ``ccweave profile`` arguments each launched rank runs with."""
    argv = ["profile", "--backend", args.backend, "--sizes", args.sizes, "--iters",
            str(args.iters), "--warmup", str(args.warmup), "--timeout", str(args.timeout),
            "--worker-out", out]
    if not args.pairs:
        argv.append("--no-pairs")
    if args.calibrate:
        argv += ["--calibrate", "--calibrate-sizes", args.calibrate_sizes]
        if args.base:
            argv += ["--base", args.base]
    return argv if args.cuda else [*argv, "--no-cuda"]


def _launch(args) -> int:
    from ccweave.profile.result import Profile
    from ccweave.runtime import handoff
    from ccweave.runtime.launch import launch_local, launch_mpi

    with handoff.shared_files("profile.json", prefix="ccweave-profile-") as (out,):
        argv = worker_argv(args, out)
        code = (launch_mpi if args.backend == "mpi" else launch_local)(argv, args.nproc)
        if code != 0 or not handoff.read(out):
            from ccweave.errors import RuntimeFault

            raise RuntimeFault("the profiling ranks ended without a result (errors above)")
        profile = Profile.load(out)
    return _report(args, profile)


def _work(args, job):
    from ccweave.profile import cuda
    from ccweave.profile.measure import measure
    from ccweave.runtime.job import connect, disconnect, fail_fast, lost_peers
    from ccweave.runtime.launch import die_with_parent

    die_with_parent()
    transport = connect(args.backend, job, args.timeout)
    try:
        device = None
        if args.cuda and cuda.unavailable_reason() is None:
            import torch

            device = job.local_rank % torch.cuda.device_count()
        progress = (_output.progress_printer() if job.rank == 0 and not args.json
                    and not args.worker_out else None)
        if args.worker_out and job.rank == 0 and _output.progress_console.is_terminal:
            progress = _output.progress_console.print
        profile = measure(transport, _inputs.sizes(args.sizes), iters=args.iters,
                          warmup=args.warmup, timeout=args.timeout, device=device,
                          copies=args.cuda, progress=progress, pairs=args.pairs)
        if args.calibrate:
            profile = _calibrate(args, profile, transport, progress)
        transport.barrier()
    except RuntimeError as error:  # torch's, from a step a lost peer never joins
        fail_fast(lost_peers(job.rank, error))
    finally:
        disconnect(transport)
    return profile


def _structure(args, profile):
    """The topology whose strategies make the calibration schedules."""
    from ccweave.profile.build import flat

    return _inputs.topology(args.base) if args.base else flat(profile, args.name or "profiled")


def _calibrate(args, profile, transport, progress):
    """Every rank runs the calibration schedules; the times go into the profile."""
    import dataclasses

    from ccweave.profile.calibrate import ROUNDS, measure, workloads
    from ccweave.runtime.batch import run_cases

    loads = workloads(_structure(args, profile), _inputs.sizes(args.calibrate_sizes))
    if progress and transport.rank == 0:
        progress(f"calibration: {len(loads)} schedules run for real, {ROUNDS} rounds")
    seconds = measure(loads, lambda cases: run_cases(cases, transport, args.timeout))
    times = tuple((load.schedule.name, load.size_bytes, time_s)
                  for load, time_s in zip(loads, seconds))
    return dataclasses.replace(profile, workloads=times)


def _report(args, profile) -> int:
    from ccweave.profile.build import flat, override, warnings
    from ccweave.topology import io as topology_io

    if args.base:
        topo = override(_inputs.topology(args.base), profile, args.name)
    else:
        topo = flat(profile, args.name or "profiled")
    calibration = None
    if profile.workloads:
        calibration = _fit(args, profile, topo)
        topo = topo.with_cost(calibration.cost, calibration.hosts)
    replaced = {path: outfile.replaces(path) for path in (args.raw, args.output) if path}
    if args.raw:
        profile.save(args.raw)
    if args.output:
        topology_io.write(topo, args.output)
    if args.json:
        _output.print_json({"profile": profile.to_dict(), "topology": topo.summary(),
                            "cost_model": topo.cost.to_dict(),
                            "calibration": [dict(zip(("schedule", "size_bytes", "predicted_s",
                                                      "measured_s"), row))
                                            for row in (calibration.fit if calibration
                                                        else ())],
                            "warnings": warnings(profile), "output": args.output,
                            "raw": args.raw,
                            "replaced": [path for path, was in replaced.items() if was]})
        return 0
    if profile.pairs:
        sizes = profile.pairs[0].curve.sizes
        _output.print_table(
            f"{profile.backend} ping-pong, {format_size(sizes[0])}..{format_size(sizes[-1])}",
            ["pair", "alpha(us)", "bw(GB/s)", "R^2", "points"],
            [(f"{p.a} <-> {p.b}", p.curve.fit.alpha * 1e6, p.curve.fit.bandwidth / 1e9,
              f"{p.curve.fit.r2:.4f}", p.curve.fit.points) for p in profile.pairs])
    if profile.copies:
        _output.print_table(
            "CUDA copy paths (bytes copied per second)",
            ["rank", "path", "alpha(us)", "bw(GB/s)", "R^2"],
            [(c.rank, c.label, c.curve.fit.alpha * 1e6, c.curve.fit.bandwidth / 1e9,
              f"{c.curve.fit.r2:.4f}") for c in profile.copies])
    if calibration is not None:
        cost = calibration.cost
        host = ("unlimited" if cost.host_bandwidth is None
                else f"{cost.host_bandwidth / 1e9:.3g} GB/s")
        _output.print_table(
            f"cost model fitted on {len(calibration.fit)} calibration runs: message overhead "
            f"{cost.message_overhead * 1e6:.1f} us, host bandwidth {host}",
            ["schedule", "size", "predicted(us)", "measured(us)", "error"],
            [(name, format_size(size), predicted * 1e6, measured * 1e6,
              f"{(predicted - measured) / measured:+.0%}")
             for name, size, predicted, measured in calibration.fit])
    for note in [*profile.notes, *warnings(profile)]:
        _output.console.print(f"[dim]{_output.plain(note)}[/]")
    shape = f"figures onto {args.base}" if args.base else (
        "one switch" if "switch" in topo.fabric else "full mesh")
    written = (f"; {_output.wrote(args.output, replaced[args.output])}" if args.output
               else " (give -o FILE to keep it)")
    if args.raw:
        written += f"; measurements: {_output.wrote(args.raw, replaced[args.raw])}"
    _output.console.print(f"topology {_output.plain(topo.name)}: {topo.num_ranks} ranks, "
                          f"{_output.plain(shape)}{written}")
    return 0
