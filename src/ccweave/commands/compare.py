"""``ccweave compare TOPO COLLECTIVE``: every strategy over sizes, the bound beside it."""

from __future__ import annotations

from ccweave.commands import _inputs, _output
from ccweave.compare import compare
from ccweave.errors import NotApplicableError
from ccweave.nccl import constants as nccl_constants
from ccweave.nccl.compare import predict
from ccweave.nccl.model import nccl_model
from ccweave.synth.registry import strategies_for
from ccweave.topology import link_table
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
    parser.add_argument("--gpu", help="GPU generation, for NCCL's row where the topology does "
                                      "not say it: " + ", ".join(link_table.GPU_GENERATIONS))
    parser.add_argument("--nccl-graphs", metavar="DUMP",
                        help="NCCL's own graphs (NCCL_GRAPH_DUMP_FILE) for NCCL's row")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    topo = _inputs.topology(args.topology)
    kind = _inputs.kind(args.collective)
    names = [s.strip() for s in args.strategies.split(",")] if args.strategies else None
    if names == ["all"]:
        names = strategies_for(kind)
    progress = None if args.json else _output.progress_printer()
    sizes = _inputs.sizes(args.sizes)
    result = compare(topo, kind, sizes, names, root=args.root,
                     chunks=args.chunks, progress=progress)
    nccl, nccl_reason = [], None
    try:  # what stock NCCL would run, by its own model (docs/nccl.md)
        nccl = predict(nccl_model(topo, args.gpu, args.nccl_graphs), kind, sizes,
                       result.bounds)
    except NotApplicableError as error:
        nccl_reason = str(error)
    if args.json:
        _output.print_json({"topology": result.topology, "collective": kind.value,
                            "results": [row.to_dict() for row in result.results],
                            "nccl": [row.to_dict() for row in nccl],
                            "refused": [{"strategy": s.strategy, "reason": s.reason}
                                        for s in result.skipped]
                            + ([{"strategy": "nccl", "reason": nccl_reason}]
                               if nccl_reason else [])})
        return 0
    rows = sorted([*result.results, *nccl], key=lambda r: (r.size_bytes, r.time_s))
    unit, scale = _output.time_unit([r.time_s for r in rows] + [r.bound_s for r in rows])
    rs_ag = all(r.rs_ag_s for r in result.results)  # allreduce: RS + AG beside the bound
    reference = {b.size_bytes: b.rs_ag_s for b in result.bounds}
    _output.print_table(
        f"{kind.value} on {topo.name} (simulated; best per size in bold; bound: "
        f"{result.bounds[-1].method} at {format_size(result.bounds[-1].size_bytes)}"
        + ("; rs+ag: reduce-scatter + allgather bounds, not a bound" if rs_ag else "")
        + (f"; nccl: what NCCL {nccl_constants.NCCL_VERSION} runs and its own model's time, "
           "not simulated" if nccl else "") + ")",
        ["strategy", "size", f"time({unit})", "algbw(GB/s)", "busbw(GB/s)", f"bound({unit})",
         "time/bound"] + ([f"rs+ag({unit})", "time/(rs+ag)"] if rs_ag else []),
        [(getattr(r, "schedule", None) or r.label, format_size(r.size_bytes),
          r.time_s / scale, r.algbw_GBps, r.busbw_GBps, r.bound_s / scale, r.ratio_to_bound)
         + ((reference[r.size_bytes] / scale, r.time_s / reference[r.size_bytes])
            if rs_ag and reference.get(r.size_bytes) else ())
         for r in rows],
        highlight=[getattr(r, "best", False) for r in rows])
    for skipped in result.skipped:
        _output.console.print(f"[dim]{_output.plain(skipped.strategy)}: not applicable: "
                              f"{_output.plain(skipped.reason)}[/]")
    if nccl_reason:
        _output.console.print(f"[dim]nccl: not modelled: {_output.plain(nccl_reason)}[/]")
    return 0
