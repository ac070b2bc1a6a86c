"""``ccweave topo show TOPO [--plot out.png]``: what ccweave thinks the machine is;
``ccweave topo import FILE -o topo.json`` (see _topo_import.py)."""

from __future__ import annotations

from ccweave.commands import _inputs, _output, _topo_import
from ccweave.topology import io as topology_io
from ccweave.units import GB_PER_S, US

ORDER = 10


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("topo", help="inspect topologies")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="print a topology's nodes, links and groups")
    show.add_argument("topology", help=_inputs.TOPO_HELP)
    show.add_argument("--plot", metavar="PNG", help="also draw it to this PNG file")
    show.add_argument("--links", action="store_true", help="list every link")
    _output.add_json_flag(show)
    show.set_defaults(run=run_show)
    _topo_import.add_action(actions)


def run_show(args) -> int:
    replaced = (_inputs.output(args.plot, args.topology, flag="--plot")
                if args.plot is not None else False)  # `--plot ''` is refused, not ignored
    topo = _inputs.topology(args.topology)
    if args.json:  # the file format itself (it loads back), with the counts beside it
        _output.print_json({"format": topology_io.FORMAT, **topology_io.to_dict(topo),
                            "summary": topo.summary()})
    else:
        summary = topo.summary()
        _output.console.print(f"[bold]{_output.plain(topo.name)}[/]: {topo.num_ranks} ranks, "
                              f"fabric {_output.plain(summary['fabric'] or 'none')}, "
                              f"{len(topo.links)} directed links")
        _output.console.print(f"figures: {_output.plain(topo.source)}")
        for kind, parts in topo.groups.items():
            shown = ", ".join(str(list(p)) for p in parts[:4])
            more = f" ... ({len(parts)} in all)" if len(parts) > 4 else ""
            _output.console.print(f"groups {_output.plain(kind)}: {_output.plain(shown)}{more}")
        _link_table(topo, every=args.links)
        _provenance(topo)
    if args.plot:
        from ccweave.topology.plot import plot

        written = plot(topo, args.plot)
        _output.progress_console.print(_output.wrote(written, replaced))
    return 0


def _link_table(topo, every: bool) -> None:
    """Links grouped by (kind, bandwidth, alpha) unless every link is asked for."""
    if every:
        rows = [(f"{lk.src} -> {lk.dst}", lk.kind, lk.bandwidth / GB_PER_S, lk.alpha / US)
                for lk in topo.links]
        _output.print_table("links", ["link", "kind", "GB/s", "alpha us"], rows)
        return
    classes: dict[tuple[str, str, str], list] = {}  # by the figures as shown
    for lk in topo.links:
        bw, alpha = lk.bandwidth / GB_PER_S, lk.alpha / US
        key = (lk.kind or "-", _output.fmt(bw), _output.fmt(alpha))
        classes.setdefault(key, [bw, alpha, 0])[2] += 1
    rows = [(kind, count, bw, alpha) for (kind, bw, alpha), (_, _, count) in
            sorted(classes.items(), key=lambda item: (item[0][0], *item[1][:2]))]
    _output.print_table("link classes (--links for each)", ["kind", "links", "GB/s", "alpha us"],
                        rows)


def _provenance(topo) -> None:
    """Where each link kind's figures came from, and what the import corrected (imported
    topologies; nothing for others)."""
    if topo.provenance.is_empty:
        return
    for kind in sorted({lk.kind or "-" for lk in topo.links}):
        origin = topo.provenance.source_of(kind) or "not recorded (see figures above)"
        _output.console.print(f"{_output.plain(kind)} links from: {_output.plain(origin)}",
                              emoji=False, soft_wrap=True)
    for warning in topo.provenance.warnings:
        _output.console.print(f"warning: {_output.plain(warning)}", emoji=False,
                              soft_wrap=True)
