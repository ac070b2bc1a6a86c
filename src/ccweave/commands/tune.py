"""``ccweave tune TOPO --nccl-tuner -o nccl_tuner.conf``: the rules NCCL's example tuner plugin
reads, from NCCL's model of the machine or fitted to measurements (``--measured``); and
``ccweave tune TOPO --nccl-graph -o graph.xml``: ccweave's rings and trees for
``NCCL_GRAPH_FILE`` (docs/nccl.md)."""

from __future__ import annotations

from ccweave.commands import _inputs, _output
from ccweave.errors import InputError
from ccweave.nccl import constants as C
from ccweave.nccl import graph_xml, measured, tuner
from ccweave.nccl.fit import fit
from ccweave.nccl.model import function, nccl_model
from ccweave.topology import link_table
from ccweave.units import format_size

ORDER = 67


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "tune", help="files that tune stock NCCL: its tuner plugin's rules, its graph file")
    parser.add_argument("topology", help=_inputs.TOPO_HELP)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--nccl-tuner", action="store_true",
                      help="write the CSV NCCL's example tuner plugin reads "
                           "(NCCL_TUNER_CONFIG_FILE)")
    what.add_argument("--nccl-graph", action="store_true",
                      help="write ccweave's intra-node rings and trees as NCCL graph XML "
                           "(NCCL_GRAPH_FILE)")
    parser.add_argument("-o", "--output", required=True, help="the file to write")
    parser.add_argument("--measured", action="append", metavar="FILE",
                        help="nccl-tests output under NCCL_ALGO/NCCL_PROTO sweeps, or the CSV "
                             "optimize_config.py reads; fit NCCL's model to them (repeatable)")
    parser.add_argument("--collectives", default=",".join(C.FUNCTIONS),
                        help="comma-separated (default: all five NCCL's tuner knows)")
    parser.add_argument("--gpu", help="GPU generation where the topology does not say it: "
                                      + ", ".join(link_table.GPU_GENERATIONS))
    parser.add_argument("--nccl-graphs", metavar="DUMP",
                        help="NCCL's own graphs (its NCCL_GRAPH_DUMP_FILE) instead of "
                             "ccweave's model of its search")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    inputs = [*(args.measured or ()), args.nccl_graphs]
    replaced = _inputs.output(args.output, *inputs, flag="-o")
    topo = _inputs.topology(args.topology)
    if args.nccl_graph:
        if args.measured or args.nccl_graphs:
            raise InputError("--nccl-graph writes ccweave's rings; --measured and "
                             "--nccl-graphs belong to --nccl-tuner")
        found = graph_xml.write(args.output, topo, args.gpu)
        return _report_graph(args, topo.name, found, replaced)
    names = _collectives(args.collectives)
    model = nccl_model(topo, args.gpu, args.nccl_graphs)
    scales = []
    if args.measured:
        rows = [m for path in args.measured for m in measured.read(path)]
        unknown = sorted({m.collective for m in rows} - set(names))
        if unknown:
            raise InputError(f"--measured: rows of {', '.join(unknown)}, which --collectives "
                             f"{args.collectives} leaves out; add them or drop the rows")
        fitted = fit(model, rows)
        model, scales = fitted.model, fitted.scales
        for why in fitted.ignored:
            _output.console.print(f"[dim]--measured: left out {_output.plain(why)}[/]")
    rules = tuner.rules(model, names)
    comments = [f"ccweave tune {topo.name} --nccl-tuner: {model.source} (NCCL "
                f"{C.NCCL_VERSION}, src/graph/tuning.cc); graphs: {model.system.graphs_from}",
                f"{model.system.ranks} ranks on {model.system.nodes} node(s); every size of "
                "each collective has a rule naming its channels (the example plugin runs "
                "one channel where no rule matches)"]
    tuner.write(args.output, rules, comments)
    if args.json:
        _output.print_json({"file": args.output, "model": model.source,
                            "graphs": model.system.graphs_from,
                            "rules": [r.__dict__ for r in rules],
                            "fit": [s.__dict__ for s in scales]})
        return 0
    _output.print_table(
        f"NCCL on {topo.name}: what the tuner file makes it run ({model.source})",
        ["collective", "sizes", "algorithm", "protocol", "channels"],
        _summary(rules))
    for scale in scales:
        _output.console.print(
            f"fit {scale.collective} {scale.algorithm}/{scale.protocol}: latency x"
            f"{scale.latency:.3g}, transfer x{scale.transfer:.3g} over {scale.measurements} "
            f"measurement(s), worst error {scale.worst_error:.1%}")
    _output.console.print(f"{_output.wrote(args.output, replaced)}: {len(rules)} rules; use "
                          f"NCCL_TUNER_PLUGIN=<libnccl-tuner-example.so> "
                          f"NCCL_TUNER_CONFIG_FILE={_output.plain(args.output)}")
    return 0


def _collectives(text: str) -> list[str]:
    """``--collectives``: each named once (a name twice, or an empty one, is refused, as
    ``bench`` refuses its lists)."""
    names = []
    for item in _inputs.names(text, "--collectives", "allreduce,allgather"):
        name = C.FUNCTIONS[function(item)]
        if name in names:
            raise InputError(f"--collectives {_output.plain(text)}: {name} comes twice; "
                             "name each once")
        names.append(name)
    return names


def _summary(rules: list[tuner.Rule]) -> list[tuple[object, ...]]:
    """Runs of rules with one algorithm and protocol, their channels as a range."""
    rows: list[list[object]] = []
    for rule in rules:
        last = rows[-1] if rows else None
        if last and last[0] == rule.collective and (last[2], last[3]) == (rule.algorithm,
                                                                           rule.protocol):
            last[1] = (last[1][0], rule.max_bytes)
            last[4] = (min(last[4][0], rule.channels), max(last[4][1], rule.channels))
            continue
        rows.append([rule.collective, (rule.min_bytes, rule.max_bytes), rule.algorithm,
                     rule.protocol, (rule.channels, rule.channels)])
    return [(name, _range(*sizes), algo, proto,
             str(ch[0]) if ch[0] == ch[1] else f"{ch[0]}-{ch[1]}")
            for name, sizes, algo, proto, ch in rows]


def _range(lo: int, hi: int) -> str:
    high = "max" if hi == tuner.MAX_BYTES else format_size(hi)
    return f"{format_size(lo)}..{high}"


def _report_graph(args, name: str, found: graph_xml.GraphFile, replaced: bool) -> int:
    ring = found.ring
    if args.json:
        _output.print_json({"file": args.output, "channels": ring.channels,
                            "speed_GBps": ring.bw_intra,
                            "type": C.PATH_NAMES[ring.type_intra],
                            "orders": [list(o) for o in ring.orders]})
        return 0
    _output.print_table(
        f"{name}: ccweave's rings as NCCL channels (ring graph; the tree graph chains the "
        "same orders)", ["channel", "GPUs in order", "speed (GB/s, NCCL's figures)"],
        [(number, " ".join(map(str, order)), ring.bw_intra)
         for number, order in enumerate(ring.orders)])
    _output.console.print(f"{_output.wrote(args.output, replaced)}: use "
                          f"NCCL_GRAPH_FILE={_output.plain(args.output)} (one node)")
    return 0
