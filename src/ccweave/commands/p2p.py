"""``ccweave p2p TOPO SRC DST --sizes 1MB:1GB``: multipath vs direct bandwidth per size,
with each path's share, like ``osu_bw`` beside the paths it used."""

from __future__ import annotations

import math

from ccweave import plan as plan_io
from ccweave.commands import _inputs, _output
from ccweave.errors import InputError, NotApplicableError
from ccweave.multipath import plan_p2p
from ccweave.multipath.p2p import DEFAULT_KINDS, PATH_KINDS, P2PPlan
from ccweave.multipath.plot import plot_bandwidth
from ccweave.plan import Plan
from ccweave.units import GB_PER_S, format_size

ORDER = 45


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "p2p", help="point-to-point bandwidth: one message striped over every useful path")
    parser.add_argument("topology", help=_inputs.TOPO_HELP)
    parser.add_argument("src", type=int, help="sending rank")
    parser.add_argument("dst", type=int, help="receiving rank")
    parser.add_argument("--sizes", default="1MB:1GB", help="e.g. 1MB:1GB or 64MB,1GB")
    parser.add_argument("--paths", default=",".join(DEFAULT_KINDS),
                        help="path kinds to use: direct, fabric (host memory, staged; other "
                             "switches), relay (peer ranks, beyond the multipath paper); "
                             "default direct,fabric as UCX")
    parser.add_argument("--max-relays", type=int, default=1,
                        help="relay ranks one path may cross (default 1)")
    parser.add_argument("-o", "--output", metavar="PLAN.json",
                        help="write the plan (sendrecv): each size's schedule for its range "
                             "of sizes")
    parser.add_argument("--plot", metavar="PNG",
                        help="draw bandwidth vs size for each path set (direct, then each "
                             "further kind of --paths added), osu_bw style")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    # `-o ''` is a name to refuse, not "no output" (it wrote nothing without a word)
    replaced = _inputs.output(args.output, args.topology) if args.output is not None \
        else False
    if args.plot is not None:
        _inputs.output(args.plot, args.topology, flag="--plot")
    topo = _inputs.topology(args.topology)
    kinds = tuple(_inputs.names(args.paths, "--paths", "direct,fabric"))
    if args.max_relays < 0:
        raise InputError(f"--max-relays {args.max_relays}: give 0 or more")
    sizes = _inputs.sizes(args.sizes)
    plans = [plan_p2p(topo, args.src, args.dst, size, kinds=kinds,
                      max_relays=args.max_relays) for size in sizes]
    if args.output:
        plan_io.save(Plan.from_sizes({p.size_bytes: p.to_schedule() for p in plans},
                                     name=f"multipath({args.src}->{args.dst}, {topo.name})"),
                     args.output)
    if args.plot:
        written = plot_bandwidth(_curves(topo, args, kinds, sizes, plans),
                                 f"p2p {args.src} -> {args.dst} on {topo.name} (simulated)",
                                 args.plot)
        _output.progress_console.print(f"wrote {_output.plain(written)}")
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
        _output.console.print(f"{_output.wrote(args.output, replaced)} (a plan: each size's "
                              "paths for its range of sizes)")
    return 0


def path_sets(kinds: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Direct alone, then each further kind added in ``PATH_KINDS`` order (those asked)."""
    ordered = [kind for kind in PATH_KINDS if kind in kinds]
    return [tuple(ordered[:k]) for k in range(1, len(ordered) + 1)]


def _curves(topo, args, kinds, sizes, plans) -> dict[str, list[tuple[int, float]]]:
    curves = {}
    for subset in path_sets(kinds):
        if subset == tuple(k for k in PATH_KINDS if k in kinds):
            shown = plans  # the full set: the plans of the table
        else:
            try:
                shown = [plan_p2p(topo, args.src, args.dst, size, kinds=subset,
                                  max_relays=args.max_relays) for size in sizes]
            except NotApplicableError:  # e.g. no direct route: that set has no curve
                continue
        curves["+".join(subset)] = [(p.size_bytes, p.bandwidth) for p in shown]
    return curves


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
