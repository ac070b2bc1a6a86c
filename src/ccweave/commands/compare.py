"""``ccweave compare TOPO COLLECTIVE``: every strategy over sizes, the bound beside it."""

from __future__ import annotations

from ccweave.commands import _inputs, _output
from ccweave.compare import compare
from ccweave.synth.registry import strategies_for
from ccweave.units import format_size

ORDER = 60


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("compare", help="table of strategies vs sizes vs bound")
    parser.add_argument("topology", help=_inputs.TOPO_HELP)
    parser.add_argument("collective")
    parser.add_argument("--sizes", default="1KB:1GB:32", help="e.g. 1KB:1GB or 1MB,1GB")
    parser.add_argument("--strategies",
                        help="comma-separated, or 'all' to add taccl (default: every "
                             "strategy auto tries: all but taccl)")
    parser.add_argument("--root", type=int, default=0)
    parser.add_argument("--chunks", type=int)
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    topo = _inputs.topology(args.topology)
    kind = _inputs.kind(args.collective)
    names = [s.strip() for s in args.strategies.split(",")] if args.strategies else None
    if names == ["all"]:
        names = strategies_for(kind)
    progress = None if args.json else _output.progress_printer()
    result = compare(topo, kind, _inputs.sizes(args.sizes), names, root=args.root,
                     chunks=args.chunks, progress=progress)
    if args.json:
        _output.print_json({"topology": result.topology, "collective": kind.value,
                            "results": [row.to_dict() for row in result.results],
                            "refused": [{"strategy": s.strategy, "reason": s.reason}
                                        for s in result.skipped]})
        return 0
    rows = sorted(result.results, key=lambda r: (r.size_bytes, r.time_s))
    unit, scale = _output.time_unit([r.time_s for r in rows] + [r.bound_s for r in rows])
    rs_ag = all(r.rs_ag_s for r in rows)  # allreduce: the RS + AG reference beside the bound
    _output.print_table(
        f"{kind.value} on {topo.name} (simulated; best per size in bold; bound: "
        f"{result.bounds[-1].method} at {format_size(result.bounds[-1].size_bytes)}"
        + ("; rs+ag: reduce-scatter + allgather bounds, not a bound" if rs_ag else "") + ")",
        ["strategy", "size", f"time({unit})", "algbw(GB/s)", "busbw(GB/s)", f"bound({unit})",
         "time/bound"] + ([f"rs+ag({unit})", "time/(rs+ag)"] if rs_ag else []),
        [(r.schedule, format_size(r.size_bytes), r.time_s / scale, r.algbw_GBps, r.busbw_GBps,
          r.bound_s / scale, r.ratio_to_bound)
         + ((r.rs_ag_s / scale, r.time_s / r.rs_ag_s) if rs_ag and r.rs_ag_s else ())
         for r in rows],
        highlight=[r.best for r in rows])
    for skipped in result.skipped:
        _output.console.print(f"[dim]{_output.plain(skipped.strategy)}: not applicable: "
                              f"{_output.plain(skipped.reason)}[/]")
    return 0
