"""``ccweave synth TOPO COLLECTIVE --strategy NAME -o sched.json``."""

from __future__ import annotations

from ccweave import plan as plan_io
from ccweave import schedule as schedule_io
from ccweave.commands import _inputs, _output
from ccweave.compare import build_verified
from ccweave.errors import InputError
from ccweave.select import AUTO, DEFAULT_SIZES, best_plan, strategy_plan
from ccweave.synth.registry import get_strategy, strategies
from ccweave.synth.taccl import cli as taccl_cli
from ccweave.units import format_size

ORDER = 20


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("synth", help="synthesize a schedule and prove it")
    parser.add_argument("topology", help=_inputs.TOPO_HELP)
    parser.add_argument("collective", help="allgather, reducescatter, allreduce, alltoall, "
                                           "broadcast, reduce, gather, scatter")
    parser.add_argument("--strategy", default="ring",
                        help=f"one of: {', '.join(strategies())}, or auto: the fastest "
                             "per size, written as a plan (default ring)")
    parser.add_argument("--sizes",
                        help="auto, and strategies tuned per size (multipath, the "
                             "pipelined allreduces, flow, taccl): write a plan with a "
                             "schedule per size, e.g. 1KB:1GB (auto's default: 1KB:1GB)")
    parser.add_argument("--strategies",
                        help="auto: the candidates, comma-separated (default: every "
                             "strategy but taccl)")
    parser.add_argument("--chunks", type=int, help="chunks per rank (default: the strategy's)")
    parser.add_argument("--root", type=int, default=0, help="root of rooted collectives")
    parser.add_argument("--option", action="append", metavar="KEY=VALUE",
                        help="a strategy option, e.g. channels=2 (repeatable)")
    taccl_cli.add_flags(parser)
    parser.add_argument("-o", "--output", required=True, help="schedule JSON to write")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    replaced = _inputs.output(args.output, args.topology)
    topo = _inputs.topology(args.topology)
    kind = _inputs.kind(args.collective)
    if args.strategies and args.strategy != AUTO:
        raise InputError("--strategies lists auto's candidates; use it with --strategy auto")
    if args.strategy == AUTO or (args.sizes and get_strategy(args.strategy).sized):
        return _run_plan(args, topo, kind, replaced)
    chunks, options = _inputs.chunks_and_options(args.chunks, args.option)
    options.update(taccl_cli.flag_options(args))
    with taccl_cli.progress_options(args.strategy, _output.progress_console) as progress:
        sched = build_verified(topo, kind, args.strategy, root=args.root, chunks=chunks,
                               **options, **progress)
    schedule_io.save(sched, args.output)
    stats = sched.stats()
    if args.json:
        _output.print_json({**stats, "verified": True, "output": args.output,
                            "replaced": replaced})
    else:
        _output.console.print(
            f"{_output.plain(sched.name)}: {kind.value} on {_output.plain(topo.name)}, "
            f"{stats['transfers']} transfers in {stats['steps']} steps over "
            f"{stats['channels']} channel(s); verified; {_output.wrote(args.output, replaced)}")
        for note in taccl_cli.notes(sched):
            _output.console.print(_output.plain(note))
    return 0


def _run_plan(args, topo, kind, replaced: bool) -> int:
    """``auto``, or a sized strategy over ``--sizes``: a plan with a schedule per size."""
    sizes = _inputs.sizes(args.sizes) if args.sizes else DEFAULT_SIZES
    progress = _output.progress_printer()
    if args.strategy == AUTO:
        names = [n.strip() for n in args.strategies.split(",")] if args.strategies else None
        if args.option:
            raise InputError("--option configures one strategy; auto tries each with its "
                             "defaults (tuned per size)")
        plan = best_plan(topo, kind, sizes, names, root=args.root, chunks=args.chunks,
                         progress=progress)
    else:
        chunks, options = _inputs.chunks_and_options(args.chunks, args.option)
        options.update(taccl_cli.flag_options(args))
        plan = strategy_plan(topo, kind, args.strategy, sizes, root=args.root,
                             chunks=chunks, progress=progress, **options)
    plan_io.save(plan, args.output)
    ranges = [(format_size(e.min_bytes), "inf" if e.max_bytes is None
               else format_size(e.max_bytes), e.schedule.name) for e in plan.entries]
    if args.json:
        _output.print_json({"plan": plan.name, "output": args.output, "verified": True,
                            "replaced": replaced,
                            "entries": [{"min_bytes": e.min_bytes, "max_bytes": e.max_bytes,
                                         "schedule": e.schedule.name} for e in plan.entries]})
    else:
        what = "fastest simulated schedule" if args.strategy == AUTO else "schedule tuned"
        _output.print_table(f"{plan.name}: {what} per size (each verified)",
                            ["from", "below", "schedule"], ranges)
        _output.console.print(_output.wrote(args.output, replaced))
    return 0
