"""``ccweave explain INSPECTOR_OUTPUT --topology TOPO``: per collective and size, what NCCL
ran (NCCL Inspector's records) and its bus bandwidth beside the bound, NCCL's model and
ccweave's best schedule on the machine, flagging where another choice would be faster
(docs/lint.md)."""

from __future__ import annotations

from ccweave.commands import _inputs, _output
from ccweave.nccl import inspector
from ccweave.nccl.explain import FASTER_BY, explain
from ccweave.nccl.model import nccl_model
from ccweave.topology import link_table
from ccweave.units import format_size

ORDER = 68


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "explain", help="what NCCL ran (NCCL Inspector output) beside the bound, NCCL's model "
                        "and ccweave's best, and what would be faster")
    parser.add_argument("records", nargs="+", metavar="OUTPUT",
                        help="NCCL Inspector files or their directory "
                             "(NCCL_INSPECTOR_DUMP_DIR): JSON, or Prometheus with "
                             "NCCL_INSPECTOR_PROM_DUMP=1 (which records the algorithm)")
    parser.add_argument("--topology", required=True, help="the machine the job ran on: "
                                                          + _inputs.TOPO_HELP)
    parser.add_argument("--gpu", help="GPU generation, where the topology does not say it: "
                                      + ", ".join(link_table.GPU_GENERATIONS))
    parser.add_argument("--nccl-graphs", metavar="DUMP",
                        help="NCCL's own graphs (NCCL_GRAPH_DUMP_FILE) for its model")
    parser.add_argument("--strategies", help="ccweave strategies to offer, comma-separated "
                                             "(default: every strategy auto tries)")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    reading = inspector.read(args.records)
    topo = _inputs.topology(args.topology)
    model = nccl_model(topo, args.gpu, args.nccl_graphs)
    names = (_inputs.names(args.strategies, "--strategies", "ring,trees")
             if args.strategies else None)
    progress = None if args.json else _output.progress_printer()
    result = explain(reading.calls, topo, model, names, progress)
    skipped = [*reading.skipped, *result.skipped]
    if args.json:
        _output.print_json({"topology": result.topology, "faster_by": FASTER_BY,
                            "rows": [_row_dict(row) for row in result.rows],
                            "skipped": skipped})
        return 0
    rows = result.rows
    unit, scale = _output.time_unit([r.time_s for r in rows])
    _output.print_table(
        f"NCCL Inspector records on {topo.name}: measured beside the bound, NCCL's model "
        "(its time for what ran, its pick) and ccweave's best (simulated)",
        ["collective", "size", "records", "ran", f"time({unit})", "busbw(GB/s)",
         "bound busbw", "time/bound", f"nccl model({unit})", "nccl pick", "ccweave best",
         "busbw(GB/s)"],
        [(r.collective.value, format_size(r.size_bytes)
          + (f" (bucket {r.bucket})" if r.bucket else ""), r.records,
          (r.ran or "not recorded") + (f" x{r.channels}" if r.channels else ""),
          r.time_s / scale, r.busbw_GBps, r.bound_busbw_GBps, r.ratio_to_bound,
          r.nccl_ran.time_s / scale if r.nccl_ran else "-",
          r.nccl_pick.label.removeprefix("nccl "),
          r.ccweave.label.removeprefix("ccweave ") if r.ccweave else "-",
          r.ccweave.busbw_GBps if r.ccweave else "-") for r in rows],
        highlight=[bool(r.flags) for r in rows])
    if any(r.ran is None for r in rows):
        _output.console.print("[dim]ran: the Inspector's JSON records no algorithm or protocol;"
                              " its Prometheus output does (NCCL_INSPECTOR_PROM_DUMP=1)[/]")
    for row in rows:
        for flag in row.flags:
            _output.console.print(f"{row.collective.value} {format_size(row.size_bytes)}: "
                                  f"{_output.plain(flag)}", soft_wrap=True)
    for line in skipped:
        _output.console.print(f"[dim]left out: {_output.plain(line)}[/]", soft_wrap=True)
    return 0


def _row_dict(row) -> dict[str, object]:
    def option(o):
        return None if o is None else {"label": o.label, "time_s": o.time_s,
                                       "busbw_GBps": o.busbw_GBps}

    return {"collective": row.collective.value, "size_bytes": row.size_bytes,
            "records": row.records, "ran": row.ran, "channels": row.channels,
            "bucket": row.bucket,
            "time_s": row.time_s, "busbw_GBps": row.busbw_GBps, "bound_s": row.bound_s,
            "bound_busbw_GBps": row.bound_busbw_GBps, "ratio_to_bound": row.ratio_to_bound,
            "nccl_ran": option(row.nccl_ran), "nccl_pick": option(row.nccl_pick),
            "ccweave": option(row.ccweave), "flags": list(row.flags)}
