"""``ccweave testbed up|run|down|show TOPO``: emulate a topology on this host (root): one
network namespace per rank and fabric node, a shaped veth per link, routes as the model
routes. ``run`` starts a command as every rank (as torchrun would, or under mpirun)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ccweave import outfile
from ccweave.commands import _inputs, _output
from ccweave.errors import InputError

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
    down = actions.add_parser("down", help="remove a testbed (every leftover without TOPO)")
    for sub in (up, show, run):
        sub.add_argument("topology", help=_inputs.TOPO_HELP)
        sub.add_argument("--max-rate", type=float, metavar="MBIT",
                         help="fastest emulated link in Mbit/s (default 400); faster "
                              "machines are scaled down")
    up.add_argument("--control", action="store_true",
                    help="also an unshaped control bridge (mpirun needs it)")
    run.add_argument("--backend", default="gloo", choices=("gloo", "mpi"),
                     help="gloo: torchrun-style environment; mpi: under mpirun")
    run.add_argument("--timeout", type=float, default=3600.0,
                     help="seconds before the ranks are stopped (default 3600)")
    run.add_argument("command", nargs=argparse.REMAINDER,
                     help="the command every rank runs (after --)")
    down.add_argument("topology", nargs="?", help="the topology given to `up`")
    for sub in (up, show, run, down):
        _output.add_json_flag(sub)
        sub.set_defaults(run=_run)
    run.set_defaults(reparse=run.parse_args)


def _run(args) -> int:
    return {"up": _up, "show": _show, "run": _run_command, "down": _down}[args.action](args)


def _plan(args, tag: str = "0", subnet: int = 100):
    from ccweave.testbed.emulation import emulate

    topo = _inputs.topology(args.topology)
    return emulate(topo, max_rate_mbit=_inputs.max_rate(args.max_rate), tag=tag,
                   subnet=subnet)


def _fresh_plan(args):
    from ccweave.testbed.emulation import free_subnet
    from ccweave.testbed.netns import fresh_tag, host_networks

    _require_host()
    return _plan(args, fresh_tag(), free_subnet(host_networks()))


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


def _state_path(spec: str) -> Path:
    from ccweave.testbed.netns import STATE_DIR

    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(spec).name)
    return STATE_DIR / f"{safe}.json"


def _up(args) -> int:
    from ccweave.testbed import Testbed

    path = _state_path(args.topology)
    if path.exists():
        raise InputError(f"a testbed for {args.topology} is already up (tag "
                         f"{json.loads(path.read_text())['tag']}); `ccweave testbed down "
                         f"{args.topology}` first")
    emulation = _fresh_plan(args)
    bed = Testbed(emulation, control=args.control)
    bed.__enter__()  # stays up: `down` removes it
    info = _describe(emulation, bed) | {"spec": args.topology, "max_rate": args.max_rate,
                                        "subnet": emulation.subnet}
    path.parent.mkdir(parents=True, exist_ok=True)
    outfile.write_text(path, json.dumps(info))
    _print_description(args, emulation, info)
    if not args.json:
        name = _output.plain(args.topology)
        _output.console.print(f"up; `ccweave testbed run {name} -- COMMAND` runs in "
                              f"it, `ccweave testbed down {name}` removes it")
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
    path = _state_path(args.topology)
    if path.exists():
        state = json.loads(path.read_text())
        emulation = _plan(args, state["tag"], state["subnet"])
        bed = Testbed.attach(emulation, state.get("control_subnet"))
        if args.backend == "mpi" and bed.control_subnet is None:
            raise InputError(f"the testbed for {args.topology} was brought up without a "
                             "control bridge; `testbed down` it and `up --control` again")
    else:
        bed = Testbed(_fresh_plan(args), control=args.backend == "mpi")
    launcher = run_mpi if args.backend == "mpi" else run_ranks
    with bed:
        output = launcher(bed, command, module=None, timeout=args.timeout)
    sys.stdout.write(output if isinstance(output, str) else output[0])
    return 0


def _down(args) -> int:
    from ccweave.testbed import clear_leftovers

    _require_host()
    if args.topology:
        path = _state_path(args.topology)
        if not path.exists():
            raise InputError(f"no testbed for {args.topology} is up (`ccweave testbed down` "
                             "without a topology clears every leftover)")
        tag = json.loads(path.read_text())["tag"]
        spaces, links = clear_leftovers(tag)
        path.unlink()
    else:
        spaces, links = clear_leftovers()
        from ccweave.testbed.netns import STATE_DIR

        for state in STATE_DIR.glob("*.json") if STATE_DIR.exists() else []:
            state.unlink()
    if args.json:
        _output.print_json({"namespaces": spaces, "links": links})
    else:
        _output.console.print(f"removed {spaces} namespace(s) and {links} link(s)")
    return 0
