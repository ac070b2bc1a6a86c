"""``ccweave topo import FILE -o topo.json``: NCCL's topology dump or ``nvidia-smi topo -m``
text as a topology file (registered under ``topo`` by commands/topo.py)."""

from __future__ import annotations

from pathlib import Path

from ccweave.commands import _inputs, _output
from ccweave.errors import InputError
from ccweave.topology import io as topology_io
from ccweave.topology import link_table

FORMATS = ("auto", "nccl-xml", "nvidia-smi")


def add_action(actions) -> None:
    """Add the ``import`` action to the ``topo`` command's sub-parsers."""
    parser = actions.add_parser(
        "import", help="NCCL topology dump XML or `nvidia-smi topo -m` text -> topology JSON")
    parser.add_argument("file", help="NCCL_TOPO_DUMP_FILE output (.xml) or a file holding "
                                     "`nvidia-smi topo -m` output")
    parser.add_argument("--format", choices=FORMATS, default="auto",
                        help="default: XML when the file starts with '<', else nvidia-smi")
    parser.add_argument("--gpu", help="GPU generation for nvidia-smi text: "
                                      + ", ".join(link_table.GPU_GENERATIONS))
    parser.add_argument("--nodes", type=int, default=1,
                        help="join K copies through their NICs on one switch (default 1)")
    parser.add_argument("--nic-gbits", type=float,
                        help="NIC speed in Gb/s for nvidia-smi text (default: the GPU "
                             "generation's usual NIC)")
    parser.add_argument("--name", help="the topology's name (default: the file name)")
    parser.add_argument("-o", "--output", required=True, help="topology JSON to write")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run_import)


def detect_format(path: Path) -> str:
    """``nccl-xml`` for XML (by suffix or a leading '<'), else ``nvidia-smi``."""
    if path.suffix.lower() == ".xml":
        return "nccl-xml"
    try:
        head = path.read_text()[:4096].lstrip()
    except OSError as error:
        raise InputError(f"{path}: cannot read it: {error.strerror or error}") from None
    return "nccl-xml" if head.startswith("<") else "nvidia-smi"


def run_import(args) -> int:
    replaced = _inputs.output(args.output, args.file)
    path = Path(args.file)
    fmt = detect_format(path) if args.format == "auto" else args.format
    if fmt == "nccl-xml":
        from ccweave.topology import nccl_xml

        topo = nccl_xml.read(path, nodes=args.nodes, name=args.name)
    else:
        from ccweave.topology import nvidia_smi

        if not args.gpu:
            raise InputError(f"{path}: `nvidia-smi topo -m` does not say the GPU generation; "
                             f"give --gpu ({', '.join(link_table.GPU_GENERATIONS)})")
        topo = nvidia_smi.read(path, gpu=args.gpu, nodes=args.nodes, nic_gbits=args.nic_gbits,
                               name=args.name)
    topology_io.write(topo, args.output)
    if args.json:
        _output.print_json({**topo.summary(), "format": fmt, "output": args.output,
                            "replaced": replaced})
    else:
        summary = topo.summary()
        _output.console.print(f"{_output.plain(topo.name)}: {topo.num_ranks} ranks, fabric "
                              f"{_output.plain(summary['fabric'] or 'none')}, "
                              f"{len(topo.links)} directed links, from {fmt}; "
                              f"{_output.wrote(args.output, replaced)}")
    return 0
