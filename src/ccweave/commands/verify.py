"""``ccweave verify sched.json``: exit 0 when proven, 1 with the reason."""

from __future__ import annotations

from ccweave.commands import _inputs, _output
from ccweave.verify import check

ORDER = 30


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("verify", help="prove a schedule implements its collective")
    parser.add_argument("schedule", help="schedule JSON (or MSCCL XML)")
    parser.add_argument("--topology", help="also check every transfer has a route here")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    sched = _inputs.load_schedule(args.schedule)
    topo = _inputs.topology(args.topology) if args.topology else None
    result = check(sched, topo)
    if args.json:
        _output.print_json({"schedule": args.schedule, "ok": result.ok,
                            "problems": [p.message for p in result.problems]})
    elif result.ok:
        _output.console.print(f"{_output.plain(args.schedule)}: proven: "
                              f"{sched.collective.describe()}, {len(sched.transfers)} transfers")
    else:
        _output.console.print(f"{_output.plain(args.schedule)}: NOT proven: "
                              f"{_output.plain(result.problems[0].message)}")
        for problem in result.problems[1:5]:
            _output.console.print(f"  also: {_output.plain(problem.message)}")
    return 0 if result.ok else 1
