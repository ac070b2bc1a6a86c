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


def detect_format(path: Path) -> str:
    """``hwloc`` for XML whose root is ``<topology>``, ``nccl-xml`` for other XML (by
    suffix or a leading '<'), else ``nvidia-smi``."""
    try:
        head = path.read_text(errors="replace")[:4096].lstrip()
    except OSError as error:
        raise InputError(f"{path}: cannot read it: {error.strerror or error}") from None
    if head.startswith("<") or path.suffix.lower() == ".xml":
        from ccweave.topology import hwloc_xml

        return "hwloc" if hwloc_xml.looks_like_hwloc(head) else "nccl-xml"
    return "nvidia-smi"


def run_import(args) -> int:
    replaced = _inputs.output(args.output, args.file, *args.gpu_fabric)
    path = Path(args.file)
    fmt = detect_format(path) if args.format == "auto" else args.format
    if fmt in ("nccl-xml", "hwloc"):
        from ccweave.topology import hwloc_xml, nccl_xml

        options = nccl_xml.Options(tuple(args.gpu_fabric), args.gpu, args.nic_gbits,
                                   args.keep_link_speeds, args.fabric)
        module = nccl_xml if fmt == "nccl-xml" else hwloc_xml
        topo = module.read(path, nodes=args.nodes, name=args.name, options=options)
    else:
        from ccweave.topology import nvidia_smi

        if args.gpu_fabric:
            raise InputError(f"{path}: `nvidia-smi topo -m` names its NVLinks itself; "
                             "--gpu-fabric is for PCI trees (drop it)")
        if not args.gpu:
            raise InputError(f"{path}: `nvidia-smi topo -m` does not say the GPU generation; "
                             f"give --gpu ({', '.join(link_table.GPU_GENERATIONS)})")
        topo = nvidia_smi.read(path, gpu=args.gpu, nodes=args.nodes, nic_gbits=args.nic_gbits,
                               name=args.name, network=args.fabric)
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
