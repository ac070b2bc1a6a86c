"""``ccweave verify sched.json``: exit 0 when proven, 1 with the reason.

Routes a schedule pins (``via``) name fabric nodes of a machine: they are checked on
``--topology``, else on the machine the schedule names in its metadata (``synth`` writes
it) when that loads, else the output says they were not checked.
"""

from __future__ import annotations

from ccweave.commands import _inputs, _output
from ccweave.errors import CCWeaveError
from ccweave.schedule import Schedule
from ccweave.topology.model import Topology
from ccweave.verify import check

ORDER = 30


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("verify", help="prove a schedule implements its collective")
    parser.add_argument("schedule", help="schedule JSON (or MSCCL XML)")
    parser.add_argument("--topology", help="also check every transfer has a route here "
                                           "(default for pinned routes: the schedule's own)")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    sched = _inputs.load_schedule(args.schedule)
    topo, routes = _route_topology(args.topology, sched)
    result = check(sched, topo)
    if args.json:
        _output.print_json({"schedule": args.schedule, "ok": result.ok,
                            "problems": [p.message for p in result.problems],
                            "routes": routes})
    elif result.ok:
        _output.console.print(f"{_output.plain(args.schedule)}: proven: "
                              f"{sched.collective.describe()}, {len(sched.transfers)} transfers")
        if routes:
            _output.console.print(f"  {_output.plain(routes)}")
    else:
        _output.console.print(f"{_output.plain(args.schedule)}: NOT proven: "
                              f"{_output.plain(result.problems[0].message)}")
        for problem in result.problems[1:5]:
            _output.console.print(f"  also: {_output.plain(problem.message)}")
    return 0 if result.ok else 1


def _route_topology(spec: str | None, sched: Schedule) -> tuple[Topology | None, str | None]:
    """The machine routes are checked on, and a line saying where pinned routes were
    checked (``None`` when the schedule pins none and no ``--topology`` was given)."""
    if spec:
        return _inputs.topology(spec), None
    pinned = sum(t.via is not None for t in sched.transfers)
    if not pinned:
        return None, None
    name = sched.metadata.get("topology")
    if isinstance(name, str) and name:
        try:
            return _inputs.topology(name), (f"{pinned} pinned route(s) checked on {name} "
                                            "(the schedule's metadata; --topology to choose)")
        except CCWeaveError:
            why = f"its machine {name} does not load here"
    else:
        why = "it names no machine"
    return None, (f"{pinned} pinned route(s) NOT checked ({why}); give --topology to check "
                  "that they exist")
