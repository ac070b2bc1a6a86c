"""``ccweave bench TOPO COLLECTIVE``: ccweave's schedules and the incumbents (gloo's and
Open MPI's own collectives) measured side by side on real processes, on the emulated
network of TOPO (or on this machine), with the model's prediction beside each time."""

from __future__ import annotations

import os
import shutil

from ccweave import outfile
from ccweave.commands import _inputs, _output
from ccweave.errors import InputError
from ccweave.units import format_size

ORDER = 85


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
    parser.add_argument("--calibrate-sizes", default="1MB,16MB",
                        help="sizes of the calibration runs (default 1MB,16MB)")
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
    from ccweave.bench.jobs import calibrate, run_jobs, site
    from ccweave.bench.report import error_stats, plot, rows_for, summarize
    from ccweave.collectives import Collective

    topo = _inputs.topology(args.topology)
    kind = _inputs.kind(args.collective)
    sizes = _inputs.sizes(args.sizes)
    if args.reps < 1 or args.warmup < 0:
        raise InputError("--reps must be >= 1 and --warmup >= 0")
    baselines = _baselines(args.baselines)
    _check_testbed(args.testbed)
    names = [s.strip() for s in args.strategies.split(",") if s.strip()] \
        if args.strategies else None
    if args.calibrate:
        _inputs.sizes(args.calibrate_sizes)
    # outputs refused before the minutes of measuring, not after
    if args.save_model:
        outfile.check(args.save_model, [args.topology, args.model], flag="--save-model")
    if args.plot:
        for suffix in ("-busbw.png", "-predicted.png"):
            outfile.check(args.plot + suffix, flag="--plot")
    load_before = os.getloadavg()
    say = None if args.json else _output.progress_printer()
    collective = Collective(kind, topo.num_ranks, root=args.root,
                            peer=(args.root + 1) % topo.num_ranks)  # sendrecv: to the next
    calibration = None
    with site(topo, args.testbed, max_rate_mbit=args.max_rate,
              mpi="mpi" in baselines) as place:
        model = place.emulated
        if args.model:
            fitted = _inputs.topology(args.model)
            model = model.with_cost(fitted.cost, fitted.groups.get("host"))
        elif args.calibrate:
            if say:
                say("calibrating the cost model on the machine (ccweave profile --calibrate)")
            calibration = calibrate(place, args.topology, args.calibrate_sizes,
                                    timeout=args.timeout, progress=say)
            model = model.with_cost(calibration.cost, calibration.hosts)
            if args.save_model:
                from ccweave.topology import io as topology_io

                topology_io.write(model, args.save_model)
        entries, skipped = plan_entries(model, kind, sizes, names, baselines, root=args.root,
                                        scale=place.scale, options=_options(args.option),
                                        progress=say)
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
        if args.plot else []
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
            "skipped": [s.__dict__ for s in skipped]})
        return _wrong_code(rows)
    where = ("netns testbed" if measured.testbed == "netns" else "this machine")
    scaled = (f"; bandwidths x{measured.scale:.4g}, times scaled back" if measured.scale != 1
              else "")
    _output.print_table(
        f"{kind.value} on {topo.name}, measured on the {where}{scaled} (median of "
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
    return _wrong_code(rows)


def _options(pairs: list[str] | None) -> dict[str, dict[str, object]]:
    """``--option STRATEGY:KEY=VALUE`` as options per strategy."""
    found: dict[str, dict[str, object]] = {}
    for pair in pairs or []:
        name, sep, rest = pair.partition(":")
        if not sep or not name:
            raise InputError(f"--option {pair!r}: write STRATEGY:KEY=VALUE, e.g. "
                             "multipath:kinds=direct,relay")
        found.setdefault(name, {}).update(_inputs.strategy_options([rest]))
    return found


def _baselines(text: str | None) -> list[str]:
    if text is None:
        return ["gloo", "mpi"] if shutil.which("mpirun") else ["gloo"]
    names = [part.strip() for part in text.split(",") if part.strip()]
    if "mpi" in names and shutil.which("mpirun") is None:
        raise InputError("--baselines mpi needs mpirun (Debian: openmpi-bin); drop it or "
                         "install Open MPI")
    return names


def _check_testbed(testbed: str) -> None:
    if testbed != "netns":
        return
    from ccweave.testbed import unavailable_reason

    reason = unavailable_reason()
    if reason:
        raise InputError(f"--testbed netns: {reason}; run as root, or measure on this machine "
                         "as it is with --testbed none")


def _wrong_code(rows) -> int:
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
