"""``ccweave bench TOPO COLLECTIVE``: ccweave's schedules and the incumbents (gloo's and
Open MPI's own collectives) measured side by side on real processes, on the emulated
network of TOPO (or on this machine), with the model's prediction beside each time."""

from __future__ import annotations

import os

from ccweave import outfile
from ccweave.commands import _inputs, _output
from ccweave.errors import InputError, RuntimeFault, printable, say
from ccweave.units import format_size, shown

ORDER = 85
CALIBRATE_SIZES = "1MB,16MB"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench", help="measure schedules vs gloo / Open MPI on real processes (netns testbed)",
        description="Synthesize, prove and simulate every strategy, then run each schedule "
                    "and the incumbents' own collectives for real on the emulated network of "
                    "TOPO (netns testbed, root) or on this machine (--testbed none): "
                    "nccl-tests rows with predicted beside measured time.")
    parser.add_argument("topology", help=_inputs.TOPO_HELP)
    parser.add_argument("collective")
    parser.add_argument("--sizes", default="1MB:64MB:4", help="e.g. 1MB:64MB:4 or 16MB,64MB")
    parser.add_argument("--strategies",
                        help="comma-separated strategies, 'auto' among them (default: every "
                             "fast strategy and auto)")
    parser.add_argument("--baselines", default=None,
                        help="incumbents to run: gloo, mpi, both (default) or '' for none")
    parser.add_argument("--testbed", default="netns", choices=("netns", "none"),
                        help="netns: emulate TOPO's links with namespaces (root); none: run "
                             "on this machine as it is")
    parser.add_argument("--max-rate", type=float, metavar="MBIT",
                        help="fastest emulated link (Mbit/s, default 400); faster machines "
                             "are scaled down and every time scaled back")
    parser.add_argument("--reps", type=int, default=3,
                        help="rounds: every schedule timed once per round, every other round "
                             "in reverse order; median round kept (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    parser.add_argument("--root", type=int, default=0, help="root of rooted collectives")
    parser.add_argument("--option", action="append", metavar="STRATEGY:KEY=VALUE",
                        help="a strategy's option, e.g. multipath:kinds=direct,relay "
                             "(repeatable)")
    parser.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                        help="predict with the plain link model instead of first fitting "
                             "the cost model on the machine (ccweave profile --calibrate)")
    parser.add_argument("--calibrate-sizes",
                        help=f"sizes of the calibration runs (default {CALIBRATE_SIZES})")
    parser.add_argument("--save-model", metavar="FILE",
                        help="write the calibrated machine (as emulated, with its cost "
                             "model) to FILE, for a later --model")
    parser.add_argument("--model", metavar="FILE",
                        help="predict with this topology file's cost model (written by "
                             "ccweave profile --calibrate on this machine) instead of "
                             "calibrating now")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds the whole measurement may take (default 3600)")
    parser.add_argument("--plot", metavar="PREFIX",
                        help="write PREFIX-busbw.png and PREFIX-predicted.png")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    from ccweave.bench.cases import batch_cases, plan_entries
    from ccweave.bench.jobs import calibrate, job_failure, run_jobs, site
    from ccweave.bench.report import error_stats, plot, rows_for, summarize
    from ccweave.collectives import Collective

    topo = _inputs.topology(args.topology)
    kind = _inputs.kind(args.collective)
    collective = Collective(kind, topo.num_ranks, root=args.root,
                            peer=(args.root + 1) % topo.num_ranks)  # sendrecv: to the next
    if not 0 <= args.root < topo.num_ranks:  # synthesis refuses it, after the calibration
        raise InputError(f"--root {args.root}: not a rank of {shown(topo.name)} "
                         f"(0..{topo.num_ranks - 1})")
    sizes = _inputs.measured_sizes(args.sizes)
    _inputs.count(args.reps, "--reps", 1, _inputs.MAX_REPS)
    _inputs.count(args.warmup, "--warmup", 0)
    _inputs.timeout(args.timeout)
    max_rate = _max_rate(args)
    names = _strategies(args.strategies, kind)
    options = _options(args.option, names)
    baselines, dropped = _baselines(args.baselines, kind)
    _check_testbed(args.testbed)
    calibrate_sizes = _calibration_sizes(args)
    fitted = _model(args.model, topo) if args.model else None
    _check_memory(args, topo, collective, sizes, calibrate_sizes)
    if options:  # a strategy's options are refused now, not after the calibration
        from ccweave.bench.cases import check_options

        check_options(topo, kind, sizes, options, root=args.root)
    # outputs refused before the minutes of measuring, not after
    if args.save_model:
        outfile.check(args.save_model, [args.topology, args.model], flag="--save-model")
    if args.plot is not None and not args.plot.strip():
        raise InputError(f"--plot {args.plot!r}: give a prefix for the plots' files, e.g. "
                         "--plot out/allreduce")
    if args.plot:
        for suffix in ("-busbw.png", "-predicted.png"):
            outfile.check(args.plot + suffix, flag="--plot")
    for skip in dropped:
        say(f"ccweave: note: {printable(skip.label)} left out: {printable(skip.reason)}")
    load_before = os.getloadavg()
    progress = None if args.json else _output.progress_printer()
    calibration = None
    with site(topo, args.testbed, max_rate_mbit=max_rate, mpi="mpi" in baselines) as place:
        model = place.emulated
        if fitted is not None:
            model = model.with_cost(fitted.cost, fitted.groups.get("host"))
        elif calibrate_sizes is not None:
            if progress:
                progress("calibrating the cost model on the machine (ccweave profile "
                         "--calibrate)")
            try:
                calibration = calibrate(place, args.topology, calibrate_sizes,
                                        timeout=args.timeout, progress=progress)
            except RuntimeFault as error:
                failure = job_failure("calibration", error)
                for line in failure.lines:
                    say(f"  {printable(line)}")
                raise RuntimeFault(f"the calibration job failed: {failure.error}") from None
            model = model.with_cost(calibration.cost, calibration.hosts)
            if args.save_model:
                from ccweave.topology import io as topology_io

                topology_io.write(model, args.save_model)
        entries, skipped = plan_entries(model, kind, sizes, names, baselines, root=args.root,
                                        scale=place.scale, options=options,
                                        progress=progress)
        skipped = [*dropped, *skipped]
        jobs = {backend: batch_cases(entries, sizes, collective, backend, reps=args.reps,
                                     warmup=args.warmup, scale=place.scale)
                for backend in dict.fromkeys(["gloo", *baselines])}
        place.pin([case.schedule for cases in jobs.values() for case in cases
                   if case.schedule is not None])
        total = sum(len(cases) for cases in jobs.values())
        with _progress(total, args.json) as advance:
            measured = run_jobs(place, jobs, timeout=args.timeout, on_progress=advance)
    load_after = os.getloadavg()
    rows = rows_for(entries, measured, sizes)
    summaries = summarize(rows, sizes)
    stats = error_stats(rows)
    plots = plot(rows, collective, f"{kind.value} on {topo.name}", args.plot) \
        if args.plot and rows else []
    load = {"before": load_before, "after": load_after, "cores": os.cpu_count()}
    cost = None if model.cost.is_empty else model.cost.to_dict()
    if args.json:
        _output.print_json({
            "topology": topo.name, "collective": kind.value, "testbed": measured.testbed,
            "scale": measured.scale, "load_average": load, "cost_model": cost,
            "calibration": [dict(zip(("schedule", "size_bytes", "predicted_s", "measured_s"),
                                     row)) for row in (calibration.fit if calibration else ())],
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "rows": [row.to_dict() for row in rows],
            "summary": [s.__dict__ for s in summaries],
            "prediction_error": stats.__dict__ if stats else None,
            "peak_rss_MB": measured.peak_rss_mb, "plots": plots,
            "skipped": [s.__dict__ for s in skipped],
            "failed": [failure.to_dict() for failure in measured.failed]})
        return _outcome(rows, measured.failed)
    where = "the netns testbed" if measured.testbed == "netns" else "this machine"
    scaled = (f"; bandwidths x{measured.scale:.4g}, times scaled back" if measured.scale != 1
              else "")
    _output.print_table(
        f"{kind.value} on {topo.name}, measured on {where}{scaled} (median of "
        f"{args.reps}; predicted: the model's time)",
        ["algorithm", "schedule", "size", "count", "time(us)", "predicted(us)", "error",
         "algbw(GB/s)", "busbw(GB/s)", "#wrong"],
        [(r.algorithm, r.schedule, format_size(r.size_bytes), r.count, r.measured_s * 1e6,
          "-" if r.predicted_s is None else r.predicted_s * 1e6,
          "-" if r.error is None else f"{r.error:+.0%}", r.algbw_GBps, r.busbw_GBps, r.wrong)
         for r in sorted(rows, key=lambda r: (r.size_bytes, r.measured_s))])
    for s in summaries:
        parts = [f"{format_size(s.size_bytes)}: fastest measured {s.fastest}"]
        if s.auto_over_fastest is not None:
            parts.append(f"auto ({s.auto_schedule}) {s.auto_over_fastest:.2f}x its time")
        parts += [f"{name} {ratio:.2f}x slower" if ratio >= 1 else
                  f"{name} {1 / ratio:.2f}x faster" for name, ratio in s.speedup.items()]
        _output.console.print(_output.plain("; ".join(parts)))
    if calibration:
        fitted = calibration.cost
        host = ("unlimited" if fitted.host_bandwidth is None
                else f"{fitted.host_bandwidth / 1e9:.3g} GB/s")
        _output.console.print(
            f"cost model fitted on {len(calibration.fit)} calibration runs (median error "
            f"{calibration.median_error:.0%}): message overhead "
            f"{fitted.message_overhead * 1e6:.1f} us, message latency "
            f"{fitted.message_latency * 1e6:.0f} us, link efficiency "
            f"{fitted.link_efficiency:.2f}, host bandwidth {host}"
            + (f", {fitted.host_cores} cores a host" if fitted.host_cores else "")
            + ", one message at a time per connection")
    if stats:
        _output.console.print(f"prediction error |predicted - measured| / measured over "
                              f"{stats.cases} cases: median {stats.median:.0%}, worst "
                              f"{stats.worst:.0%} ({stats.worst_row})")
    rss = ", ".join(f"{backend} {max(values):.0f} MB" for backend, values in
                    measured.peak_rss_mb.items())
    _output.console.print(
        f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after, on "
        f"{os.cpu_count()} cores; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
        f"; peak RSS per rank: {rss}")
    for skip in skipped:
        _output.console.print(f"[dim]{_output.plain(skip.label)}: not applicable: "
                              f"{_output.plain(skip.reason)}[/]")
    for path in plots:
        _output.console.print(f"wrote {_output.plain(path)}")
    for failure in measured.failed:
        _output.console.print(f"the {_output.plain(failure.backend)} job failed: "
                              f"{_output.plain(failure.error)}")
        for line in failure.lines:
            _output.console.print(f"  {_output.plain(line)}")
    return _outcome(rows, measured.failed)


def _strategies(text: str | None, kind) -> list[str]:
    """``--strategies``: the default list when left out; named, each checked now."""
    from ccweave.bench.cases import strategy_names

    named = None if text is None else _inputs.names(text, "--strategies", "ring,direct")
    return strategy_names(named, kind)


def _options(pairs: list[str] | None, names: list[str]) -> dict[str, dict[str, object]]:
    """``--option STRATEGY:KEY=VALUE`` as options per strategy; an option for a strategy
    the bench does not run, or one that has a flag of its own, is refused (it would be
    ignored, or clash with the flag)."""
    from ccweave.bench.cases import AUTO

    found: dict[str, dict[str, object]] = {}
    for pair in pairs or []:
        name, sep, rest = pair.partition(":")
        if not sep or not name:
            raise InputError(f"--option {shown(pair)}: write STRATEGY:KEY=VALUE, e.g. "
                             "multipath:kinds=direct,relay")
        if name == AUTO:
            raise InputError(f"--option {shown(pair)}: auto takes no options (it picks among "
                             "the strategies with their defaults); name the strategy")
        if name not in names:
            raise InputError(f"--option {shown(pair)}: {shown(name)} is not among the "
                             f"strategies this bench runs ({', '.join(names)}); add it to "
                             "--strategies or drop the option")
        options = _inputs.strategy_options([rest])
        _inputs.refuse_flag_options(options, {**_inputs.SYNTHESIS_ARGUMENTS,
                                              "strategy": "--strategies", "size": "--sizes"},
                                    f"--option {name}:")
        found.setdefault(name, {}).update(options)
    return found


def _baselines(text: str | None, kind) -> tuple[list[str], list]:
    """The incumbents to run, and those the default leaves out because they cannot run
    here (each with the reason, said before anything starts). Named ones that cannot
    run are refused, naming what is missing, the fix and the flag that drops them."""
    from ccweave.bench.cases import BASELINES, Skipped, check_baselines
    from ccweave.runtime.native import NATIVE_KINDS
    from ccweave.runtime.prerequisites import mpi_missing, torch_missing

    missing = torch_missing()  # ccweave's own schedules run over gloo in every bench
    if missing:
        raise InputError(f"ccweave bench runs its ranks over torch.distributed: {missing}")
    dropped = []
    if text is None:
        names = list(BASELINES)
        if kind not in NATIVE_KINDS:
            return [], [Skipped("baselines", f"gloo and MPI have no native {kind.value}")]
    else:
        names = _inputs.names(text, "--baselines", "gloo,mpi") if text.strip() else []
        check_baselines(names, kind)
    if "mpi" in names:
        missing = mpi_missing()
        if missing and text is None:
            names.remove("mpi")
            dropped.append(Skipped("mpi baseline", f"{missing}; --baselines gloo leaves it "
                                                   "out without this note"))
        elif missing:
            keep = ",".join(name for name in names if name != "mpi") or "''"
            raise InputError(f"--baselines {shown(text)}: the mpi baseline cannot run: "
                             f"{missing}; or drop it with --baselines {keep}")
    return names, dropped


def _max_rate(args) -> float | None:
    if args.testbed != "netns":
        if args.max_rate is not None:
            raise InputError(f"--max-rate {args.max_rate:g}: shapes the netns testbed's links; "
                             "--testbed none runs on this machine as it is: drop --max-rate")
        return None
    return _inputs.max_rate(args.max_rate)


def _model(path: str, topo):
    """``--model``: a topology file with the cost model fitted on this machine (one
    without is the plain link model, ``--no-calibrate``; one of another machine's ranks
    cannot be this one's)."""
    fitted = _inputs.topology(path)
    if fitted.cost.is_empty:
        raise InputError(f"--model {path}: has no cost model; give a file written by "
                         "ccweave bench --save-model or ccweave profile --calibrate, or "
                         "predict with the plain link model: --no-calibrate")
    if fitted.num_ranks != topo.num_ranks:
        raise InputError(f"--model {path}: a model of {fitted.num_ranks} ranks, but "
                         f"{shown(topo.name)} has {topo.num_ranks}; give a model calibrated "
                         "on this machine (ccweave bench --save-model)")
    return fitted


def _calibration_sizes(args) -> str | None:
    """The calibration's sizes when the bench calibrates, else ``None``. ``--calibrate-sizes``
    and ``--save-model`` take effect only then: with ``--no-calibrate`` or ``--model``
    they are refused, not ignored."""
    calibrating = args.calibrate and not args.model
    for flag, given in (("--save-model", args.save_model),
                        ("--calibrate-sizes", args.calibrate_sizes)):
        if given is not None and not calibrating:
            instead = "--model" if args.model else "--no-calibrate"
            raise InputError(f"{flag}: the bench does not calibrate with {instead}; drop "
                             f"{flag} or {instead}")
    if not calibrating:
        return None
    text = CALIBRATE_SIZES if args.calibrate_sizes is None else args.calibrate_sizes
    _inputs.measured_sizes(text, "--calibrate-sizes")
    return text


def _check_memory(args, topo, collective, sizes: list[int], calibration: str | None) -> None:
    """Refuse sizes whose buffers could not fit this host's memory before any rank starts:
    every rank is on this host and holds at least the collective's input and output
    (``calibration``'s sizes: allreduces, among others)."""
    from ccweave.collectives import Collective, Kind

    ranks = topo.num_ranks
    _inputs.check_buffers(f"--sizes {args.sizes}", "gloo", ranks, sizes,
                          lambda size: _inputs.rank_buffer_bytes(collective, size, 4))
    if calibration is not None:
        allreduce = Collective(Kind.ALLREDUCE, ranks)
        _inputs.check_buffers(f"--calibrate-sizes {calibration}", "gloo", ranks,
                              _inputs.measured_sizes(calibration, "--calibrate-sizes"),
                              lambda size: _inputs.rank_buffer_bytes(allreduce, size, 4))


def _check_testbed(testbed: str) -> None:
    if testbed != "netns":
        return
    from ccweave.testbed import unavailable_reason

    reason = unavailable_reason()
    if reason:
        raise InputError(f"--testbed netns: {reason}; run as root, or measure on this machine "
                         "as it is with --testbed none")


def _outcome(rows, failed) -> int:
    """The exit code once everything measured is printed: a failed job is an error
    (exit 2, one line naming it), wrong elements exit 1."""
    if failed:
        jobs = " and ".join(f"the {failure.backend} job" for failure in failed)
        kept = "what the others measured is above" if rows else "nothing was measured"
        raise RuntimeFault(f"{jobs} failed ({failed[0].error}); {kept}")
    return 1 if any(row.wrong for row in rows) else 0


class _progress:
    """A progress bar over the measurements (on a terminal), advanced by rank 0's
    announcements."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total = total
        self.quiet = quiet or not _output.progress_console.is_terminal
        self._bar = None

    def __enter__(self):
        if self.quiet:
            return lambda text: None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                             MofNCompleteColumn(), TimeElapsedColumn(),
                             console=_output.progress_console, transient=True)
        self._bar.start()
        task = self._bar.add_task("measuring", total=self.total)
        started = [0]

        def advance(text: str) -> None:  # each announcement starts one measurement
            _, _, label = text.partition(" ")
            self._bar.update(task, completed=started[0], description=label[:60])
            started[0] += 1

        return advance

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
