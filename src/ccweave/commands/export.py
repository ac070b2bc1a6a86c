"""``ccweave export sched.json|plan.json -o algo.xml|dir/``: MSCCL XML the runtime loads,
or with ``--format mscclpp`` MSCCL++ execution plans (JSON, one per size range).

A schedule becomes one XML file; a plan (several size ranges) a directory of them plus
``msccl_config.xml``. Schedules are proven first (``--unverified`` skips that); an
MSCCL++ plan is read back and proven after it is written.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import replace
from pathlib import Path

from ccweave import plan as plan_io
from ccweave.commands import _inputs, _output
from ccweave.errors import InputError, VerificationError
from ccweave.export import msccl_spec as spec
from ccweave.export import msccl_xml, mscclpp, mscclpp_spec, ncclize
from ccweave.jsonfile import parse, read_json
from ccweave.lint import lint_written
from ccweave.plan import Plan
from ccweave.units import format_size, parse_size
from ccweave.verify import check

ORDER = 65


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("export", help="write a schedule or plan as MSCCL XML or "
                                                  "MSCCL++ execution plans")
    parser.add_argument("input", help="schedule JSON, plan JSON, MSCCL XML or an MSCCL++ plan")
    parser.add_argument("-o", "--output", required=True,
                        help="an .xml (.json for mscclpp) file for one schedule, or a directory")
    parser.add_argument("--format", default="msccl", choices=["msccl", "mscclpp"],
                        help="msccl: MSCCL XML (default); mscclpp: MSCCL++ execution plans")
    parser.add_argument("--topology", help="mscclpp: the machine whose ranks the plan runs on "
                        "(memory channels inside a node, port channels across); msccl: the "
                        "machine the schedule is timed on to give what it runs at once "
                        "channels of its own; default: the schedule's own")
    parser.add_argument("--instances", type=int, default=1, metavar="K",
                        help="K copies on their own channels, each on 1/K of every chunk")
    parser.add_argument("--proto", choices=sorted({*spec.PROTOCOLS, *mscclpp_spec.PROTOCOLS}),
                        help="msccl: Simple (default), LL or LL128; mscclpp: Simple or LL "
                             "(default: LL where it pays, docs/mscclpp.md)")
    buffers = parser.add_mutually_exclusive_group()
    buffers.add_argument("--in-place", dest="inplace", action="store_true", default=None,
                         help="mscclpp: a plan for calls that pass one buffer (default for "
                              "allreduce, as PyTorch's all_reduce does)")
    buffers.add_argument("--out-of-place", dest="inplace", action="store_false",
                         help="mscclpp: a plan for calls with separate input and output")
    parser.add_argument("--max-threadblocks", type=int, default=80, metavar="N",
                        help="mscclpp: threadblocks per GPU at most, all resident at once "
                             "(default 80: V100's SMs; A100 108, H100 132)")
    parser.add_argument("--runtime", default=spec.Runtime.MSCCL.value,
                        choices=[r.value for r in spec.Runtime],
                        help="msccl: microsoft/msccl (MSCCL_XML_FILES / MSCCL_CONFIG); azure: "
                             "the Azure MSCCL executor (MSCCL_ALGO_DIR)")
    parser.add_argument("--channel-policy", default=ncclize.ChannelPolicy.AS_SCHEDULED.value,
                        choices=[p.value for p in ncclize.ChannelPolicy],
                        help="msccl: which channels transfers take, as TACCL's ncclize: "
                             "as-scheduled (default), one, match-topology (TACCL's default: "
                             "a connection's transfers take its links' channels in turn), "
                             "max-concurrency (a step's transfers on one connection side by "
                             "side)")
    parser.add_argument("--scale-remote", type=int, default=1, metavar="K",
                        help="with --channel-policy match-topology: K times the channels on "
                             "connections between nodes (TACCL's --scale-remote)")
    parser.add_argument("--max-bytes", metavar="SIZE",
                        help="largest size one schedule serves, e.g. 1GB (default: no limit)")
    parser.add_argument("--unverified", action="store_true",
                        help="export without proving the schedule first")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    if args.format == "mscclpp":
        return _run_mscclpp(args)
    if args.proto is None:
        args.proto = msccl_xml.DEFAULT_PROTO
    elif args.proto not in spec.PROTOCOLS:
        raise InputError(f"--proto {args.proto}: MSCCL XML is {', '.join(spec.PROTOCOLS)}")
    if not args.output.strip():
        raise InputError("-o '': give an .xml file (one schedule) or a directory (a plan)")
    output = _output_place(args.output)
    plan = _load(args.input)
    _proven(plan, args.input, args.unverified)
    plan = _with_channel_policy(args, plan)
    single = not output.is_dir() and output.suffix.lower() == ".xml"
    if single and len(plan.entries) > 1:
        raise InputError(f"{args.input}: a plan of {len(plan.entries)} size ranges exports to a "
                         "directory (one XML per range and the config); give -o DIR")
    if single:
        max_bytes = parse_size(args.max_bytes) if args.max_bytes else None
        replaced = {str(output): _inputs.output(args.output, args.input)}
        msccl_xml.write(plan.entries[0].schedule, output, proto=args.proto,
                        instances=args.instances, runtime=args.runtime, max_bytes=max_bytes,
                        topology=_known_topology(args, plan))
        files = [output]
    else:
        if output.exists() and not output.is_dir():
            raise InputError(f"-o {_output.plain(args.output)}: not a directory; a plan (or "
                             "an -o without .xml) exports to a directory")
        replaced = {str(path): _inputs.output(str(path), args.input)
                    for path in msccl_xml.plan_files(plan, output, args.runtime)
                    if path.parent.is_dir()}
        files = msccl_xml.export_plan(plan, output, proto=args.proto, instances=args.instances,
                                      runtime=args.runtime, topology=_known_topology(args, plan))
    rows = [{**_summary(path), "replaced": replaced.get(str(path), False)} for path in files]
    notes = [note for entry in plan.entries for note in msccl_xml.export_notes(entry.schedule)]
    warnings = _lint([row["file"] for row in rows if not row.get("config")], args.runtime)
    if args.json:
        _output.print_json({"input": args.input, "runtime": args.runtime, "files": rows,
                            "notes": notes, "lint": warnings})
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
    _print_lint(warnings)
    return 0


def _with_channel_policy(args, plan: Plan) -> Plan:
    """``plan`` with ``--channel-policy`` (and ``--scale-remote``) applied to each
    schedule (:mod:`ccweave.export.ncclize`)."""
    policy = ncclize.ChannelPolicy.parse(args.channel_policy)
    if policy is ncclize.ChannelPolicy.AS_SCHEDULED and args.scale_remote == 1:
        return plan
    topology = None
    if policy is ncclize.ChannelPolicy.MATCH_TOPOLOGY:
        try:
            topology = _topology(args, plan)
        except InputError as error:
            raise InputError(f"--channel-policy match-topology counts the links joining each "
                             f"pair: {error}") from None
    return replace(plan, entries=tuple(
        replace(entry, schedule=ncclize.apply(entry.schedule, policy, topology,
                                              args.scale_remote))
        for entry in plan.entries))


def _output_place(text: str) -> Path:
    """``-o`` as a path whose kind (file, folder, nothing yet) can be told: a name too long
    or a loop of links is refused here (it was an OSError traceback)."""
    path = Path(text)
    try:
        path.is_dir()
    except OSError as error:
        raise InputError(f"-o {_output.plain(text)}: cannot be written there: "
                         f"{error.strerror or error}; give another name") from None
    return path


def _load(path: str) -> Plan:
    text, xml = _inputs.read_input(path)  # once: a pipe gives its text one time
    if xml:
        return Plan.single(_inputs.schedule_from_text(text, True, path))
    data = parse(text, path, _inputs.SCHEDULE_FIX)
    if mscclpp.is_plan(data):
        return Plan.single(mscclpp.from_data(data, path))
    return plan_io.from_data(data, path)


def _proven(plan: Plan, source: str, unverified: bool) -> None:
    for entry in plan.entries:
        result = check(entry.schedule)
        if result.malformed or not (result.ok or unverified):
            how = "is malformed" if result.malformed else "is not proven"
            fix = "fix it" if result.malformed else "fix it or pass --unverified"
            raise VerificationError(f"{source}: {entry.schedule.name or 'the schedule'} "
                                    f"{how} ({result.problems[0].message}); {fix}")


def _run_mscclpp(args) -> int:
    """One MSCCL++ plan per size range: into ``-o`` if it ends in .json (one range), else
    into the directory ``-o``; each read back and proven."""
    if args.instances != 1:
        raise InputError("--instances is for MSCCL XML; an MSCCL++ plan's threadblocks "
                         "already run every chunk that can go at once")
    if args.proto == "LL128":
        raise InputError("--proto LL128: MSCCL++ plans are Simple or LL")
    if not args.output.strip():
        raise InputError("-o '': give a directory (or a .json file for one schedule)")
    _output_place(args.output)
    plan = _load(args.input)
    _proven(plan, args.input, args.unverified)
    topo = _topology(args, plan)
    options = mscclpp.ExportOptions(protocol=args.proto, inplace=args.inplace,
                                    max_threadblocks=args.max_threadblocks)
    output = Path(args.output)
    if not output.is_dir() and output.suffix.lower() == ".json":
        if len(plan.entries) > 1:
            raise InputError(f"{args.input}: a plan of {len(plan.entries)} size ranges exports "
                             "to a directory (one execution plan per range); give -o DIR")
        max_bytes = parse_size(args.max_bytes) if args.max_bytes else None
        replaced = {str(output): _inputs.output(args.output, args.input)}
        mscclpp.write(plan.entries[0].schedule, topo, output,
                      replace(options, max_bytes=max_bytes))
        files = [(output, plan.entries[0].schedule)]
    else:
        if output.exists() and not output.is_dir():
            raise InputError(f"-o {_output.plain(args.output)}: not a directory; give a "
                             "directory, or a .json file for one schedule")
        if args.max_bytes:
            raise InputError("--max-bytes is for one schedule; a plan's ranges give each "
                             "execution plan its sizes")
        replaced = {str(path): _inputs.output(str(path), args.input)
                    for path in mscclpp.plan_files(plan, output) if path.parent.is_dir()}
        paths = mscclpp.export_plan(plan, topo, output, options)
        files = [(path, entry.schedule) for path, entry in zip(paths, plan.entries)]
    rows = [{**_plan_summary(path), "replaced": replaced.get(str(path), False)}
            for path, _ in files]
    notes = [note for _, sched in files
             for note in mscclpp.notes(sched, topo, options)]
    warnings = _lint([str(path) for path, _ in files], "mscclpp")
    if args.json:
        _output.print_json({"input": args.input, "format": "mscclpp", "topology": topo.name,
                            "files": rows, "notes": notes, "lint": warnings})
        return 0
    for row in rows:
        high = row["max_message_size"]
        _output.console.print(
            f"{_output.wrote(row['file'], row['replaced'])}: {_output.plain(row['collective'])} "
            f"on {row['gpus']} gpus, {row['protocol']}, {'in' if row['inplace'] else 'out of'} "
            f"place, sizes [{format_size(row['min_message_size'])}, {format_size(high + 1)}), "
            "up to "
            f"{row['threadblocks']} threadblocks per gpu and {row['max_operations']} operations "
            f"per threadblock; read back: {row['verdict']}")
    for note in notes:
        _output.console.print(f"note: {_output.plain(note)}")
    _print_lint(warnings)
    return 0


def _lint(paths: list[str], runtime: str) -> list[dict[str, str]]:
    """``ccweave lint``'s findings on each written file that the file alone decides
    (docs/lint.md): why the runtime would ignore it whatever the calls."""
    return [{"file": path, "rule": f.rule, "line": f.line()}
            for path in paths for f in lint_written(path, runtime).findings]


def _print_lint(warnings: list[dict[str, str]]) -> None:
    for warning in warnings:
        _output.console.print(f"warning: {_output.plain(warning['file'])}: "
                              f"{_output.plain(warning['line'])} (ccweave lint FILE --sizes "
                              "... checks the calls too)", soft_wrap=True)


def _topology(args, plan: Plan):
    """``--topology``, or the machine the schedule was made for (its metadata)."""
    if args.topology:
        return _inputs.topology(args.topology)
    named = plan.entries[0].schedule.metadata.get("topology")
    if not isinstance(named, str) or not named:
        raise InputError(f"{args.input}: the schedule does not say which machine it is for; "
                         "give --topology (memory channels inside a node, port channels "
                         "across nodes)")
    try:
        return _inputs.topology(named)
    except InputError as error:
        raise InputError(f"{args.input}: made for {named!r}, which cannot be loaded here "
                         f"({error}); give --topology") from None


def _known_topology(args, plan: Plan):
    """msccl: the machine the export times the schedule on to give the transfers it runs
    at once channels of their own (``--topology``, else the schedule's own if it names
    one that loads); None: the export's estimate, which knows no topology."""
    if args.topology:
        return _inputs.topology(args.topology)
    try:
        topology = _topology(args, plan)
    except InputError:
        return None
    ranks = {entry.schedule.num_ranks for entry in plan.entries}
    return topology if ranks == {topology.num_ranks} else None


def _plan_summary(path: Path) -> dict[str, object]:
    """What people ask of an exported plan, and its proof after reading it back."""
    data = read_json(path, "an MSCCL++ execution plan")
    gpus = data["gpus"]  # type: ignore[index]
    tbs = [tb for gpu in gpus for tb in gpu["threadblocks"]]
    verdict = mscclpp.judge(mscclpp.from_data(data, str(path)))
    if not verdict.ok:
        raise VerificationError(f"{path}: the plan ccweave wrote is not proven "
                                f"({verdict.message}); please report it")
    return {"file": str(path), "name": data["name"], "collective": data["collective"],
            "protocol": data["protocol"], "inplace": data["inplace"], "gpus": len(gpus),
            "min_message_size": data["min_message_size"],
            "max_message_size": data["max_message_size"],
            "threadblocks": max(len(gpu["threadblocks"]) for gpu in gpus),
            "max_operations": max((_count(tb["ops"]) for tb in tbs), default=0),
            "verdict": "proven"}


def _count(ops: list) -> int:
    return sum(1 + _count(op.get("ops", [])) for op in ops)


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
