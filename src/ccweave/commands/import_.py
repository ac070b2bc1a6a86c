"""``ccweave import algo.xml|plan.json -o sched.json``: an MSCCL XML algorithm or an MSCCL++
execution plan as a schedule.

The schedule is proven as the collective the file names (exit 1 when it is not, the file
still written, and for a plan what it computes instead where that is another
collective); what the MSCCL runtime would refuse is listed; what MSCCL++'s executor would
do that is no schedule (a race between threadblocks on one channel, signals that never
come) is refused with the reason (exit 2).
"""

from __future__ import annotations

from ccweave import schedule as schedule_io
from ccweave.commands import _inputs, _output
from ccweave.export import msccl_xml, mscclpp
from ccweave.verify import check

ORDER = 66


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("import", help="read an MSCCL XML algorithm or an MSCCL++ "
                                                  "execution plan as a schedule")
    parser.add_argument("xml", metavar="FILE",
                        help="MSCCL XML (as msccl-tools prints it) or an MSCCL++ execution "
                             "plan (JSON, as MSCCL++'s DSL writes it)")
    parser.add_argument("-o", "--output", required=True, help="schedule JSON to write")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    replaced = _inputs.output(args.output, args.xml)
    text, xml = _inputs.read_input(args.xml)  # once: a pipe has no suffix and one reading
    if xml:
        sched = msccl_xml.from_xml(text, args.xml)
        result = check(sched)
        proven, verdict, computes = result.ok, (result.problems[0].message if result.problems
                                                else ""), None
    else:
        from ccweave.jsonfile import parse

        sched = mscclpp.from_data(parse(text, args.xml, "give an MSCCL++ execution plan "
                                        "(JSON)"), args.xml)
        judged = mscclpp.judge(sched)
        result = judged.result
        proven, verdict, computes = judged.ok, judged.message, judged.computes
    schedule_io.save(sched, args.output)
    warnings = list(sched.metadata.get("msccl_runtime_problems", []))  # type: ignore[call-overload]
    notes = list(sched.metadata.get("notes", []))  # type: ignore[call-overload]
    if args.json:
        problems = [mscclpp.annotate(p.message, sched) for p in result.problems] \
            if result is not None else []
        _output.print_json({**sched.stats(), "input": args.xml, "output": args.output,
                            "replaced": replaced, "verified": proven, "problems": problems,
                            "computes": computes.describe() if computes else None,
                            "runtime_problems": warnings, "notes": notes})
        return 0 if proven else 1
    shown = "proven" if proven else f"NOT proven: {verdict}"
    _output.console.print(f"{_output.plain(args.xml)}: {sched.collective.describe()}, "
                          f"{len(sched.transfers)} transfers on {sched.num_channels} "
                          f"channel(s); {_output.plain(shown)}; "
                          f"{_output.wrote(args.output, replaced)}")
    for warning in warnings[:5]:
        _output.console.print(f"  runtime: {_output.plain(warning)}")
    if len(warnings) > 5:
        _output.console.print(f"  runtime: ... and {len(warnings) - 5} more")
    for note in notes[:5]:
        _output.console.print(f"  note: {_output.plain(note)}")
    return 0 if proven else 1
