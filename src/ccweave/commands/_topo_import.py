"""``ccweave topo import FILE -o topo.json``: what a machine reports (NCCL's topology dump or
``NCCL_TOPO_FILE``, hwloc's XML, ``nvidia-smi topo -m`` text) as a topology file
(registered under ``topo`` by commands/topo.py)."""

from __future__ import annotations

from pathlib import Path

from ccweave.commands import _inputs, _output
from ccweave.errors import InputError
from ccweave.topology import gpu_fabric, link_table, replicate
from ccweave.topology import io as topology_io

FORMATS = ("auto", "nccl-xml", "hwloc", "nvidia-smi")


def add_action(actions) -> None:
    """Add the ``import`` action to the ``topo`` command's sub-parsers."""
    parser = actions.add_parser(
        "import", help="NCCL topology XML, hwloc XML or `nvidia-smi topo -m` text -> "
                       "topology JSON")
    parser.add_argument("file", help="NCCL_TOPO_DUMP_FILE output or an NCCL_TOPO_FILE (.xml), "
                                     "`lstopo --of xml` output, or a file holding "
                                     "`nvidia-smi topo -m` output")
    parser.add_argument("--format", choices=FORMATS, default="auto",
                        help="default: hwloc for <topology>, NCCL for other XML, else "
                             "nvidia-smi")
    parser.add_argument("--gpu-fabric", action="append", default=[], metavar="FAMILY|FILE",
                        help="how the GPUs are joined, for a file that lists them by PCI class "
                             f"only: {', '.join(gpu_fabric.names())}, or an NCCL dump, "
                             "`nvidia-smi topo -m` or `nvidia-smi nvlink -s` text of the same "
                             "machine (give twice: a family and nvlink -s)")
    parser.add_argument("--gpu", help="GPU generation for nvidia-smi text: "
                                      + ", ".join(link_table.GPU_GENERATIONS))
    parser.add_argument("--nodes", type=int, default=1,
                        help="join K copies through their NICs (default 1)")
    parser.add_argument("--fabric", choices=replicate.FABRICS, default="switch",
                        help="network for --nodes: one non-blocking switch, or rail-optimized "
                             "(NIC k of every node on leaf k, leaves on a spine)")
    parser.add_argument("--nic-gbits", type=float,
                        help="NIC speed in Gb/s where the file does not say it (default: the "
                             "GPU generation's usual NIC)")
    parser.add_argument("--keep-link-speeds", action="store_true",
                        help="keep a PCI bridge's figure even where it is slower than the "
                             "devices below it (default: model it at their speed, warned)")
    parser.add_argument("--name", help="the topology's name (default: the file name)")
    parser.add_argument("-o", "--output", required=True, help="topology JSON to write")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run_import)


def detect_format(path: Path, text: str) -> str:
    """``hwloc`` for XML whose root is ``<topology>``, ``nccl-xml`` for other XML (by
    suffix or a leading '<'), else ``nvidia-smi``; from the file's text, read once (a
    second read of a pipe or /dev/stdin finds nothing)."""
    head = text[:4096].lstrip()
    if head.startswith("<") or path.suffix.lower() == ".xml":
        from ccweave.topology import hwloc_xml

        return "hwloc" if hwloc_xml.looks_like_hwloc(head) else "nccl-xml"
    return "nvidia-smi"


def _check_numbers(args) -> None:
    """``--nodes`` and ``--nic-gbits`` before the file is read (``--nodes 100000`` built
    for minutes; a NIC of ``inf`` Gb/s was written into the topology)."""
    from ccweave.limits import MAX_RANKS
    from ccweave.topology.plausible import PLAUSIBLE_GBPS

    if not 1 <= args.nodes <= MAX_RANKS:
        raise InputError(f"--nodes {args.nodes}: give a whole number of nodes from 1 to "
                         f"{MAX_RANKS} (ccweave models machines of up to {MAX_RANKS} ranks)")
    low, high = (8 * gbps for gbps in PLAUSIBLE_GBPS)
    if args.nic_gbits is not None and not low <= args.nic_gbits <= high:
        raise InputError(f"--nic-gbits {args.nic_gbits:g}: give the NIC's speed in Gb/s, "
                         f"from {low:g} to {high:g} (e.g. 200 for HDR InfiniBand)")


def run_import(args) -> int:
    from ccweave.infile import read_text

    replaced = _inputs.output(args.output, args.file, *args.gpu_fabric)
    _check_numbers(args)
    path = Path(args.file)
    text = read_text(path, "give NCCL's topology XML, hwloc's XML or `nvidia-smi topo -m` "
                     "text")
    fmt = detect_format(path, text) if args.format == "auto" else args.format
    name = args.name or path.stem
    if fmt in ("nccl-xml", "hwloc"):
        from ccweave.topology import hwloc_xml, nccl_xml

        options = nccl_xml.Options(tuple(args.gpu_fabric), args.gpu, args.nic_gbits,
                                   args.keep_link_speeds, args.fabric)
        module = nccl_xml if fmt == "nccl-xml" else hwloc_xml
        topo = module.parse(text, source=str(path), nodes=args.nodes, name=name,
                            options=options)
    else:
        from ccweave.topology import nvidia_smi

        if args.gpu_fabric:
            raise InputError(f"{path}: `nvidia-smi topo -m` names its NVLinks itself; "
                             "--gpu-fabric is for PCI trees (drop it)")
        if not args.gpu:
            raise InputError(f"{path}: `nvidia-smi topo -m` does not say the GPU generation; "
                             f"give --gpu ({', '.join(link_table.GPU_GENERATIONS)})")
        topo = nvidia_smi.parse(text, gpu=args.gpu, source=str(path), nodes=args.nodes,
                                nic_gbits=args.nic_gbits, name=name, network=args.fabric)
    topology_io.write(topo, args.output)
    warnings = list(topo.provenance.warnings)
    if args.json:
        _output.print_json({**topo.summary(), "format": fmt, "output": args.output,
                            "replaced": replaced, "link_sources": topo.provenance.links,
                            "warnings": warnings})
        return 0
    summary = topo.summary()
    _output.console.print(f"{_output.plain(topo.name)}: {topo.num_ranks} ranks, fabric "
                          f"{_output.plain(summary['fabric'] or 'none')}, "
                          f"{len(topo.links)} directed links, from {fmt}; "
                          f"{_output.wrote(args.output, replaced)}")
    for warning in warnings:
        _output.console.print(f"warning: {_output.plain(warning)}", emoji=False,
                              soft_wrap=True)
    return 0
