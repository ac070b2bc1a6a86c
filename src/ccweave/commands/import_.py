"""``ccweave import algo.xml -o sched.json``: an MSCCL XML algorithm as a schedule.

The schedule is proven as the collective ``coll`` names (exit 1 when it is not, the
file still written); what the MSCCL runtime would refuse is listed.
"""

from __future__ import annotations

from ccweave import schedule as schedule_io
from ccweave.commands import _inputs, _output
from ccweave.export import msccl_xml
from ccweave.verify import check

ORDER = 66


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("import", help="read an MSCCL XML algorithm as a schedule")
    parser.add_argument("xml", help="MSCCL XML file (as msccl-tools prints it)")
    parser.add_argument("-o", "--output", required=True, help="schedule JSON to write")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    replaced = _inputs.output(args.output, args.xml)
    sched = msccl_xml.read(args.xml)
    schedule_io.save(sched, args.output)
    result = check(sched)
    warnings = list(sched.metadata.get("msccl_runtime_problems", []))  # type: ignore[call-overload]
    if args.json:
        _output.print_json({**sched.stats(), "input": args.xml, "output": args.output,
                            "replaced": replaced, "verified": result.ok,
                            "problems": [p.message for p in result.problems],
                            "runtime_problems": warnings})
        return 0 if result.ok else 1
    verdict = "proven" if result.ok else f"NOT proven: {result.problems[0].message}"
    _output.console.print(f"{_output.plain(args.xml)}: {sched.collective.describe()}, "
                          f"{len(sched.transfers)} transfers on {sched.num_channels} "
                          f"channel(s); {_output.plain(verdict)}; "
                          f"{_output.wrote(args.output, replaced)}")
    for warning in warnings[:5]:
        _output.console.print(f"  runtime: {_output.plain(warning)}")
    if len(warnings) > 5:
        _output.console.print(f"  runtime: ... and {len(warnings) - 5} more")
    return 0 if result.ok else 1
