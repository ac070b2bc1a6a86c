"""``ccweave bounds TOPO COLLECTIVE --sizes ...``: the best any algorithm could do."""

from __future__ import annotations

from ccweave.bounds import lower_bound
from ccweave.commands import _inputs, _output
from ccweave.units import GB_PER_S, format_size

ORDER = 50


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("bounds", help="lower bounds on a collective's time")
    parser.add_argument("topology", help=_inputs.TOPO_HELP)
    parser.add_argument("collective")
    parser.add_argument("--sizes", default="1MB,1GB")
    parser.add_argument("--root", type=int, default=0)
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    topo = _inputs.topology(args.topology)
    kind = _inputs.kind(args.collective)
    bounds = [lower_bound(topo, kind, size, root=args.root) for size in _inputs.sizes(args.sizes)]
    if args.json:
        _output.print_json([{"size_bytes": b.size_bytes, "bound_s": b.time_s,
                             "bandwidth_s": b.bandwidth_s, "cut_s": b.cut_s,
                             "latency_s": b.latency_s, "method": b.method,
                             **({"rs_ag_s": b.rs_ag_s} if b.rs_ag_s is not None else {}),
                             "algbw_GBps": b.algbw / GB_PER_S, "busbw_GBps": b.busbw / GB_PER_S}
                            for b in bounds])
        return 0
    unit, scale = _output.time_unit(b.time_s for b in bounds)
    rows = [(format_size(b.size_bytes), b.time_s / scale, b.bandwidth_s / scale,
             b.latency_s / scale, b.algbw / GB_PER_S, b.busbw / GB_PER_S, b.method)
            for b in bounds]
    _output.print_table(f"{kind.value} lower bounds on {topo.name}",
                        ["size", f"bound({unit})", f"bandwidth({unit})", f"latency({unit})",
                         "algbw(GB/s)", "busbw(GB/s)", "binding bound"], rows)
    if kind.value == "allreduce":
        shown = ", ".join(f"{format_size(b.size_bytes)} {b.rs_ag_s * 1e6:.6g} us"
                          for b in bounds if b.rs_ag_s is not None)
        _output.console.print(f"allreduce: rs+ag (reduce-scatter bound + allgather bound, what "
                              f"RS then AG reaches at best; not a bound): {shown}")
    return 0

