"""``ccweave testbed up|run|down|show TOPO``: emulate a topology on this host (root): one
network namespace per rank and fabric node, a shaped veth per link, routes as the model
routes. ``run`` starts a command as every rank (as torchrun would, or under mpirun)."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from ccweave.commands import _inputs, _output
from ccweave.errors import InputError, Interrupted, printable, say

ORDER = 86


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "testbed", help="emulate a topology with network namespaces (root): up, run, down",
        description="Emulate any topology on this host: a namespace per rank and fabric "
                    "node, a veth per link shaped with tc at the link's bandwidth (scaled "
                    "to --max-rate), host routes along the model's routes.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="build it and leave it standing")
    show = actions.add_parser("show", help="print what would be built (no root needed)")
    run = actions.add_parser(
        "run", help="run a command as every rank (builds the testbed unless it is up)",
        description="Start COMMAND once per rank, each in its rank's namespace, with "
                    "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (as torchrun sets them) and "
                    "GLOO_SOCKET_IFNAME; or under mpirun (--backend mpi). Example: "
                    "ccweave testbed run rail.json -- ccweave run rail.json allreduce")
    down = actions.add_parser(
        "down", help="remove a testbed (without TOPO: every one whose maker has ended)",
        description="Remove the testbed `up TOPO` left standing; without TOPO, every "
                    "testbed ccweave made (its marker or record proves it) whose maker has "
                    "ended. Names that only look like a testbed's, and testbeds a running "
                    "process still uses, are left alone and listed.")
    for sub in (up, show, run):
        sub.add_argument("topology", help=_inputs.TOPO_HELP)
        _build_options(sub)
    up.add_argument("--control", action="store_true",
                    help="also an unshaped control bridge (mpirun needs it)")
    _run_options(run)
    run.add_argument("command", nargs=argparse.REMAINDER,
                     help="the command every rank runs (after --)")
    down.add_argument("topology", nargs="?", help="the topology given to `up`")
    for sub in (up, show, run, down):
        _output.add_json_flag(sub)
        sub.set_defaults(run=_run)
    run.set_defaults(reparse=_options_parser().parse_args)


def _build_options(parser) -> None:
    from ccweave.testbed.emulation import DEFAULT_MAX_NAMESPACES

    parser.add_argument("--max-rate", type=float, metavar="MBIT",
                        help="fastest emulated link in Mbit/s (default 400); faster "
                             "machines are scaled down")
    parser.add_argument("--max-namespaces", type=int, default=DEFAULT_MAX_NAMESPACES,
                        metavar="N", help="refuse a testbed of more namespaces than this "
                                          f"(default {DEFAULT_MAX_NAMESPACES})")


def _run_options(parser) -> None:
    parser.add_argument("--backend", default="gloo", choices=("gloo", "mpi"),
                        help="gloo: torchrun-style environment; mpi: under mpirun")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds before the ranks are stopped (default 3600)")


def _options_parser() -> argparse.ArgumentParser:
    """``testbed run``'s options without the command: options written after TOPO land in
    the command (argparse's remainder) and are parsed again with this."""
    parser = argparse.ArgumentParser(prog="ccweave testbed run")
    parser.add_argument("topology")
    _build_options(parser)
    _run_options(parser)
    _output.add_json_flag(parser)
    return parser


def _run(args) -> int:
    return {"up": _up, "show": _show, "run": _run_command, "down": _down}[args.action](args)


def _plan(args, tag: str = "0", subnet: int = 100, max_rate: float | None = None):
    from ccweave.testbed.emulation import emulate

    topo = _inputs.topology(args.topology)
    return emulate(topo, max_rate_mbit=_inputs.max_rate(max_rate or args.max_rate), tag=tag,
                   subnet=subnet)


def _fresh_plan(args):
    from ccweave.testbed.emulation import MAX_NAMESPACES, free_subnet
    from ccweave.testbed.netns import fresh_tag, host_networks

    _require_host()
    _inputs.count(args.max_namespaces, "--max-namespaces", 2, MAX_NAMESPACES)
    return _plan(args, fresh_tag(), free_subnet(host_networks()))


def _testbed(args, emulation, control: bool):
    from ccweave.testbed import Testbed

    return Testbed(emulation, control=control, max_namespaces=args.max_namespaces,
                   on_progress=None if args.json else _progress())


def _progress():
    """Prints how far a build has got every 2 s once it has taken 2 s (513 namespaces
    once took minutes without a word)."""
    began = time.monotonic()
    last = [began]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 2.0 or (done == total and last[0] > began):
            last[0] = now
            say(f"testbed: {done}/{total} namespaces set up ({now - began:.0f} s)")
    return show


def _require_host() -> None:
    from ccweave.testbed import unavailable_reason

    reason = unavailable_reason()
    if reason:
        raise InputError(f"ccweave testbed: {reason}")


def _describe(emulation, bed=None) -> dict[str, object]:
    topo = emulation.topology
    return {"topology": topo.name, "tag": emulation.tag, "scale": emulation.scale,
            "namespaces": {str(node): emulation.namespace(node) for node in topo.nodes},
            "addresses": [emulation.address(rank) for rank in topo.ranks],
            "devices": {rank: emulation.data_device(rank) for rank in topo.ranks},
            "veth_pairs": len(emulation.wires),
            "control_subnet": bed.control_subnet if bed is not None else None}


def _print_description(args, emulation, info: dict) -> None:
    if args.json:
        _output.print_json(info)
        return
    _output.console.print(_output.plain(emulation.describe()))
    topo = emulation.topology
    _output.print_table(
        f"ranks of {topo.name}", ["rank", "namespace", "address", "device"],
        [(rank, emulation.namespace(rank), emulation.address(rank),
          emulation.data_device(rank)) for rank in topo.ranks])


def _show(args) -> int:
    emulation = _plan(args)
    _print_description(args, emulation, _describe(emulation))
    return 0


def _standing(spec: str):
    """The record of the testbed `up SPEC` left, or ``None``; unreadable records are
    named (they are not trusted, and `down` removes them)."""
    from ccweave.testbed.records import standing_record

    record, bad = standing_record(spec)
    for item in bad:
        say(f"ccweave: note: skipped the unreadable testbed record {printable(item.path)} "
            f"({printable(item.reason)}); `ccweave testbed down` removes it")
    return record


def _up(args) -> int:
    from ccweave.testbed.records import check_state_dir

    check_state_dir()
    record = _standing(args.topology)
    if record is not None:
        raise InputError(f"a testbed for {args.topology} is already up (tag {record.tag}); "
                         f"`ccweave testbed down {args.topology}` first")
    emulation = _fresh_plan(args)
    bed = _testbed(args, emulation, args.control)
    bed.__enter__()  # stays up: `down` removes it
    try:
        info = _describe(emulation, bed) | {"spec": args.topology, "max_rate": args.max_rate,
                                            "subnet": emulation.subnet}
        bed.leave_standing(args.topology, info)
    except BaseException:
        bed.close()
        raise
    name = _output.plain(args.topology)
    try:
        _print_description(args, emulation, info)
        if not args.json:
            _output.console.print(f"up; `ccweave testbed run {name} -- COMMAND` runs in "
                                  f"it, `ccweave testbed down {name}` removes it")
    except (KeyboardInterrupt, Interrupted) as error:  # it stands: say so, not just "stop"
        number = getattr(error, "signal_number", signal.SIGINT)
        raise Interrupted(f"interrupted ({signal.Signals(number).name}) once the testbed "
                          f"was up; it stays up: `ccweave testbed down {name}` removes it",
                          number) from None
    return 0


def _run_command(args) -> int:
    from ccweave.testbed import Testbed, run_mpi, run_ranks

    command = list(args.command)
    if "--" in command:  # options given after TOPO land in the command: parse them again
        cut = command.index("--")
        args = args.reparse([args.topology, *command[:cut]])
        command = command[cut + 1:]
    if not command:
        raise InputError("ccweave testbed run TOPO -- COMMAND: give the command every rank "
                         "runs after --")
    timeout = _inputs.timeout(args.timeout)
    record = _standing(args.topology)
    if record is not None:
        emulation = _plan(args, record.tag, record.subnet, record.max_rate)
        bed = Testbed.attach(emulation, record.control_subnet)
        if args.backend == "mpi" and bed.control_subnet is None:
            raise InputError(f"the testbed for {args.topology} was brought up without a "
                             "control bridge; `testbed down` it and `up --control` again")
    else:
        bed = _testbed(args, _fresh_plan(args), args.backend == "mpi")
    launcher = run_mpi if args.backend == "mpi" else run_ranks
    with bed:  # rank 0's lines as they come (under mpirun, every rank's); errors apart
        launcher(bed, command, module=None, timeout=timeout, on_line=_line(_output.stdout),
                 on_error_line=_line(sys.stderr))
    return 0


def _line(stream):
    def write(line: str) -> None:
        stream.write(line + "\n")
        stream.flush()
    return write


def _down(args) -> int:
    from ccweave.testbed import clear_testbeds

    _require_host()
    if args.topology:
        record = _standing(args.topology)
        if record is None:
            raise InputError(f"no testbed for {args.topology} is up (`ccweave testbed down` "
                             "without a topology removes every testbed whose maker has "
                             "ended)")
        done = clear_testbeds(record.tag)
    else:
        done = clear_testbeds()
    if args.json:
        _output.print_json({
            "removed": [{"tag": bed.tag, "namespaces": list(bed.namespaces),
                         "links": list(bed.links)} for bed in done.removed],
            "left_alone": [{"name": item.name, "why": item.why} for item in done.left_alone],
            "unreadable_records": [{"path": str(item.path), "why": item.reason}
                                   for item in done.bad_records],
            "namespaces": done.namespaces, "links": done.links})
        return 0
    _output.console.print(f"removed {done.namespaces} namespace(s) and {done.links} link(s)"
                          f" of {len(done.removed)} testbed(s)")
    for item in done.left_alone:
        _output.console.print(f"left alone: {printable(item.name)}: {printable(item.why)}",
                              markup=False)
    for item in done.bad_records:
        _output.console.print(f"removed the unreadable record {printable(item.path)} "
                              f"({printable(item.reason)})", markup=False)
    return 0
