"""``ccweave p2p TOPO SRC DST --sizes 1MB:1GB``: multipath vs direct bandwidth per size,
with each path's share, like ``osu_bw`` beside the paths it used."""

from __future__ import annotations

import math

from ccweave import schedule as schedule_io
from ccweave.commands import _inputs, _output
from ccweave.errors import InputError
from ccweave.multipath import plan_p2p
from ccweave.multipath.p2p import PATH_KINDS, P2PPlan
from ccweave.units import GB_PER_S, format_size

ORDER = 45


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "p2p", help="point-to-point bandwidth: one message striped over every useful path")
    parser.add_argument("topology", help=_inputs.TOPO_HELP)
    parser.add_argument("src", type=int, help="sending rank")
    parser.add_argument("dst", type=int, help="receiving rank")
    parser.add_argument("--sizes", default="1MB:1GB", help="e.g. 1MB:1GB or 64MB,1GB")
    parser.add_argument("--paths", default=",".join(PATH_KINDS),
                        help="path kinds to use: direct, fabric (host memory, other "
                             "switches), relay (peer ranks); default all")
    parser.add_argument("--max-relays", type=int, default=1,
                        help="relay ranks one path may cross (default 1)")
    parser.add_argument("-o", "--output", metavar="SCHED.json",
                        help="write the largest size's schedule (sendrecv) here")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    topo = _inputs.topology(args.topology)
    kinds = tuple(k.strip() for k in args.paths.split(",") if k.strip())
    if args.max_relays < 0:
        raise InputError(f"--max-relays {args.max_relays}: give 0 or more")
    plans = [plan_p2p(topo, args.src, args.dst, size, kinds=kinds,
                      max_relays=args.max_relays) for size in _inputs.sizes(args.sizes)]
    if args.output:
        schedule_io.save(plans[-1].to_schedule(), args.output)
    if args.json:
        _output.print_json([_row(plan) for plan in plans])
        return 0
    names = list(dict.fromkeys(p.path.describe() for plan in plans for p in plan.paths))
    rows = []
    for plan in plans:
        shares = {p.path.describe(): p for p in plan.paths}
        rows.append((format_size(plan.size_bytes),
                     _gbps(plan.direct_bandwidth, plan.direct_s),
                     plan.bandwidth / GB_PER_S,
                     "-" if math.isinf(plan.direct_s) else f"{plan.speedup:.2f}x",
                     *(_share(shares.get(name)) for name in names)))
    _output.print_table(
        f"p2p {args.src} -> {args.dst} on {topo.name} (simulated; share % / pipeline pieces)",
        ["size", "direct(GB/s)", "multipath(GB/s)", "speedup", *names], rows)
    if args.output:
        _output.console.print(f"wrote {args.output} ({format_size(plans[-1].size_bytes)})")
    return 0


def _gbps(bandwidth: float, time_s: float) -> object:
    return "no route" if math.isinf(time_s) else bandwidth / GB_PER_S


def _share(part) -> str:
    if part is None:
        return "-"
    return f"{100 * part.share:.1f}%" + (f" /{part.pieces}" if part.pieces > 1 else "")


def _row(plan: P2PPlan) -> dict[str, object]:
    direct = None if math.isinf(plan.direct_s) else plan.direct_s
    return {"size_bytes": plan.size_bytes, "time_s": plan.time_s,
            "bandwidth_GBps": plan.bandwidth / GB_PER_S, "direct_s": direct,
            "direct_GBps": None if direct is None else plan.direct_bandwidth / GB_PER_S,
            "speedup": None if direct is None else plan.speedup,
            "paths": [{"path": p.path.describe(), "kind": p.path.kind, "share": p.share,
                       "chunks": p.chunks, "pieces": p.pieces, "finish_s": p.finish_s}
                      for p in plan.paths]}
