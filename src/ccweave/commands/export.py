"""``ccweave export sched.json|plan.json -o algo.xml|dir/``: MSCCL XML the runtime loads.

A schedule becomes one XML file; a plan (several size ranges) a directory of them plus
``msccl_config.xml``. Schedules are proven first (``--unverified`` skips that).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from ccweave import plan as plan_io
from ccweave.commands import _inputs, _output
from ccweave.errors import InputError, VerificationError
from ccweave.export import msccl_spec as spec
from ccweave.export import msccl_xml
from ccweave.plan import Plan
from ccweave.units import parse_size
from ccweave.verify import check

ORDER = 65


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("export", help="write a schedule or plan as MSCCL XML")
    parser.add_argument("input", help="schedule JSON, plan JSON, or MSCCL XML")
    parser.add_argument("-o", "--output", required=True,
                        help="an .xml file (one schedule) or a directory (a plan)")
    parser.add_argument("--instances", type=int, default=1, metavar="K",
                        help="K copies on their own channels, each on 1/K of every chunk")
    parser.add_argument("--proto", default=msccl_xml.DEFAULT_PROTO, choices=spec.PROTOCOLS)
    parser.add_argument("--runtime", default=spec.Runtime.MSCCL.value,
                        choices=[r.value for r in spec.Runtime],
                        help="msccl: microsoft/msccl (MSCCL_XML_FILES / MSCCL_CONFIG); azure: "
                             "the Azure MSCCL executor (MSCCL_ALGO_DIR)")
    parser.add_argument("--max-bytes", metavar="SIZE",
                        help="largest size one schedule serves, e.g. 1GB (default: no limit)")
    parser.add_argument("--unverified", action="store_true",
                        help="export without proving the schedule first")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    plan = _load(args.input)
    for entry in plan.entries:
        result = check(entry.schedule)
        if result.malformed or not (result.ok or args.unverified):
            how = "is malformed" if result.malformed else "is not proven"
            fix = "fix it" if result.malformed else "fix it or pass --unverified"
            raise VerificationError(f"{args.input}: {entry.schedule.name or 'the schedule'} "
                                    f"{how} ({result.problems[0].message}); {fix}")
    if not args.output.strip():
        raise InputError("-o '': give an .xml file (one schedule) or a directory (a plan)")
    output = Path(args.output)
    single = not output.is_dir() and output.suffix.lower() == ".xml"
    if single and len(plan.entries) > 1:
        raise InputError(f"{args.input}: a plan of {len(plan.entries)} size ranges exports to a "
                         "directory (one XML per range and the config); give -o DIR")
    if single:
        max_bytes = parse_size(args.max_bytes) if args.max_bytes else None
        replaced = {str(output): _inputs.output(args.output, args.input)}
        msccl_xml.write(plan.entries[0].schedule, output, proto=args.proto,
                        instances=args.instances, runtime=args.runtime, max_bytes=max_bytes)
        files = [output]
    else:
        if output.exists() and not output.is_dir():
            raise InputError(f"-o {_output.plain(args.output)}: not a directory; a plan (or "
                             "an -o without .xml) exports to a directory")
        replaced = {str(path): _inputs.output(str(path), args.input)
                    for path in msccl_xml.plan_files(plan, output, args.runtime)
                    if path.parent.is_dir()}
        files = msccl_xml.export_plan(plan, output, proto=args.proto, instances=args.instances,
                                      runtime=args.runtime)
    rows = [{**_summary(path), "replaced": replaced.get(str(path), False)} for path in files]
    notes = [note for entry in plan.entries for note in msccl_xml.export_notes(entry.schedule)]
    if args.json:
        _output.print_json({"input": args.input, "runtime": args.runtime, "files": rows,
                            "notes": notes})
        return 0
    for row in rows:
        wrote = _output.wrote(row["file"], row["replaced"])
        if row.get("config"):
            _output.console.print(f"{wrote}: the MSCCL config that selects the algorithms by "
                                  f"size (MSCCL_CONFIG={_output.plain(row['file'])})")
            continue
        steps = ", ".join(f"{code} {count}" for code, count in row["step_types"].items())
        _output.console.print(
            f"{wrote}: {_output.plain(row['coll'])} on {row['ngpus']} gpus, "
            f"{row['nchannels']} channel(s), up to {row['threadblocks']} threadblocks and "
            f"{row['max_steps']} steps per threadblock ({_output.plain(steps)}); proto "
            f"{_output.plain(row['proto'])}")
    for note in notes:
        _output.console.print(f"note: {_output.plain(note)}")
    return 0


def _load(path: str) -> Plan:
    if Path(path).suffix.lower() == ".xml":
        return Plan.single(_inputs.load_schedule(path))
    return plan_io.load(path)


def _summary(path: Path) -> dict[str, object]:
    """What people ask of an exported file: size, threadblocks, steps by type."""
    root = ET.parse(path).getroot()
    if root.tag != "algo":
        return {"file": str(path), "config": True}
    tbs = [tb for gpu in root.findall("gpu") for tb in gpu.findall("tb")]
    types = Counter(step.get("type") for tb in tbs for step in tb.findall("step"))
    return {"file": str(path), "name": root.get("name"), "coll": root.get("coll"),
            "ngpus": int(root.get("ngpus", 0)), "nchannels": int(root.get("nchannels", 0)),
            "proto": root.get("proto"), "minBytes": root.get("minBytes"),
            "maxBytes": root.get("maxBytes"),
            "threadblocks": max((len(gpu.findall("tb")) for gpu in root.findall("gpu")),
                                default=0),
            "max_steps": max((len(tb.findall("step")) for tb in tbs), default=0),
            "step_types": dict(types.most_common())}
