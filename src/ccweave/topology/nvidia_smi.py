"""Import the text of ``nvidia-smi topo -m`` as a Topology.

The matrix says, for every pair of GPUs and NICs, what joins them: ``NV#`` (a bonded set
of # NVLinks), ``PIX`` (at most one PCIe bridge), ``PXB`` (several bridges, no host
bridge), ``PHB`` (a PCIe host bridge), ``NODE`` (host bridges within one NUMA node) or
``SYS`` (the socket interconnect; ``SOC`` in old drivers). We build: one CPU node per
socket (devices not joined by ``SYS``, or sharing a NUMA Affinity, are on one socket),
one PCIe switch per group of devices joined by ``PIX``/``PXB``, NVLinks from ``NV#`` (an
NVSwitch when a GPU shows more NVLinks than its generation has), and figures from
:mod:`ccweave.topology.link_table` for the GPU generation given, since the matrix does
not say it. An ``NV#`` cell hides the PCIe relation of that GPU pair.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ccweave.errors import InputError, TopologyError
from ccweave.topology import gpu_fabric, host_memory, link_table, zoo
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.topology.provenance import Provenance
from ccweave.units import GB_PER_S, US

PCIE_RELATIONS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_SAME_SWITCH = {"PIX", "PXB"}
_SAME_SOCKET = {"PIX", "PXB", "PHB", "NODE"}
_NV = re.compile(r"NV(\d+)")


@dataclass
class _Matrix:
    devices: list[str]
    lines: dict[str, int]
    cells: dict[tuple[str, str], str] = field(default_factory=dict)
    numa: dict[str, str] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)


def read(path: str | Path, *, gpu: str, nodes: int = 1, nic_gbits: float | None = None,
         name: str | None = None, network: str = "switch") -> Topology:
    """The Topology in a file holding ``nvidia-smi topo -m`` output; ``gpu`` is the GPU
    generation (``v100``, ``a100``, ``h100``...), ``nic_gbits`` the NIC speed (default:
    the generation's usual NIC); ``network`` joins ``nodes`` > 1 copies (``switch`` or
    ``rails``)."""
    from ccweave.infile import read_text

    path = Path(path)
    text = read_text(path, "give the text `nvidia-smi topo -m` prints")
    return parse(text, gpu=gpu, source=str(path), nodes=nodes, nic_gbits=nic_gbits,
                 name=name or path.stem, network=network)


def parse(text: str, *, gpu: str, source: str = "nvidia-smi topo -m", nodes: int = 1,
          nic_gbits: float | None = None, name: str = "nvidia-smi",
          network: str = "switch") -> Topology:
    """The Topology in ``nvidia-smi topo -m`` ``text``; ``source`` names it in errors."""
    gen = link_table.generation(gpu)
    matrix = _read_matrix(text, source)
    gpus = [d for d in matrix.devices if d.startswith("GPU")]
    nics = [d for d in matrix.devices if not d.startswith("GPU")]
    if not gpus:
        raise InputError(f"{source}: the matrix has no GPU rows")
    rank = {device: number for number, device in enumerate(gpus)}
    notes: list[str] = []
    sockets = _sockets(matrix, gpus, notes)
    switches = _groups(matrix, _SAME_SWITCH)

    links: list[Link] = []
    fabric: dict[str, NodeKind] = {f"cpu{k}": NodeKind.CPU for k in range(max(sockets.values())
                                                                          + 1)}
    pcie = link_table.pcie_gbps(gen.pcie_gen, 16)

    def node(device: str):
        return rank[device] if device in rank else _nic_name(matrix, device)

    for number, members in enumerate(g for g in switches if len(g) > 1):
        switch = f"pcie{number}"
        fabric[switch] = NodeKind.PCIE
        for device in members:
            links += link_table.duplex(node(device), switch, pcie, link_table.PCIE_ALPHA_US,
                                       "pcie")
        links += link_table.duplex(switch, f"cpu{sockets[members[0]]}", pcie,
                                   link_table.PCIE_ALPHA_US, "pcie")
    for members in (g for g in switches if len(g) == 1):
        device = members[0]
        links += link_table.duplex(node(device), f"cpu{sockets[device]}", pcie,
                                   link_table.PCIE_ALPHA_US, "pcie")
    nic_gbps = {}
    for device in nics:
        fabric[_nic_name(matrix, device)] = NodeKind.NIC
        nic_gbps[_nic_name(matrix, device)] = (nic_gbits or gen.nic_gbits) / 8.0
    cpu_gbps = link_table.CPU_LINK_GBPS[gen.cpu]
    links += link_table.full_mesh([c for c in fabric if fabric[c] is NodeKind.CPU], cpu_gbps,
                                  "sys")
    links += _nvlinks(matrix, gpus, rank, gen, fabric, notes)
    by_socket: dict[int, list[int]] = {}
    for device in gpus:
        by_socket.setdefault(sockets[device], []).append(rank[device])
    groups = {"node": (tuple(range(len(gpus))),),
              "socket": tuple(tuple(by_socket[k]) for k in sorted(by_socket))}
    described = (f"nvidia-smi topo -m {source} ({gen.name}: {gen.max_nvlinks} NVLinks of "
                 f"{link_table.nvlink_gbps(gen.sm):g} GB/s, PCIe Gen{gen.pcie_gen} x16, "
                 f"{(nic_gbits or gen.nic_gbits):g} Gb/s NICs); figures from ccweave's link "
                 "table (docs/profiling.md)" + "".join(f"; {note}" for note in notes))
    links, fabric, memory = host_memory.through_memory(
        links, fabric, {cpu: gen.cpu for cpu, kind in fabric.items() if kind is NodeKind.CPU})
    origin = Provenance({
        "nvlink": (f"NV# cells of {source}, {link_table.nvlink_gbps(gen.sm):g} GB/s per NVLink "
                   f"({gen.name}, --gpu)"),
        "pcie": (f"PCIe Gen{gen.pcie_gen} x16 for every device ({gen.name}, --gpu): the matrix "
                 "says which devices share a switch, not how fast"),
        "sys": f"{gen.cpu} socket link, {cpu_gbps:g} GB/s (ccweave's link table)",
        **({host_memory.MEMORY_KIND: f"{memory} (the usual CPU of a {gen.name} server, --gpu)"}
           if memory else {})})
    nic_source = (f"NIC speed {nic_gbits:g} Gb/s (--nic-gbits)" if nic_gbits else
                  f"NIC speed {gen.nic_gbits:g} Gb/s, a {gen.name} server's usual NIC")
    try:
        server = Topology(name, len(gpus), tuple(links), fabric, groups, source=described,
                          cost=zoo.GPU_SERVER_COST, provenance=origin)
        topology = link_table.join_nodes(server, nic_gbps, nodes, fabric=network,
                                         nic_source=nic_source)
        topology.check_connected()
    except TopologyError as error:
        raise TopologyError(f"{source}: {error}") from None
    return topology


def _nic_name(matrix: _Matrix, device: str) -> str:
    return matrix.nic_names.get(device, device)


def _read_matrix(text: str, source: str) -> _Matrix:
    lines = text.splitlines()
    header_at = next((n for n, line in enumerate(lines)
                      if line.split()[:1] == ["GPU0"]), None)
    if header_at is None:
        raise InputError(f"{source}: no header line starting with GPU0; paste the whole "
                         "output of `nvidia-smi topo -m`")
    devices = []
    for token in lines[header_at].split():
        if token in ("CPU", "NUMA", "GPU"):
            break
        devices.append(token)
    extra = [c.strip() for c in lines[header_at].split("\t") if c.strip()][len(devices):]
    matrix = _Matrix(devices, {})
    for number in range(header_at + 1, len(lines)):
        line = lines[number]
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0].rstrip(":") == "Legend":
            break
        if tokens[0] not in devices:
            raise InputError(f"{source}: line {number + 1}: row {tokens[0]!r} is not one of "
                             f"the header's devices {devices}")
        row = tokens[0]
        if row in matrix.lines:
            raise InputError(f"{source}: line {number + 1}: a second row for {row}")
        matrix.lines[row] = number + 1
        cells = tokens[1:1 + len(devices)]
        if len(cells) < len(devices):
            raise InputError(f"{source}: line {number + 1}: row {row} has {len(cells)} cells, "
                             f"the header names {len(devices)} devices")
        for column, cell in zip(devices, cells):
            _check_cell(source, number + 1, row, column, cell)
            matrix.cells[row, column] = "SYS" if cell == "SOC" else cell
        rest = tokens[1 + len(devices):]
        if "NUMA Affinity" in extra and len(rest) > extra.index("NUMA Affinity"):
            matrix.numa[row] = rest[extra.index("NUMA Affinity")]
    missing = [d for d in devices if d not in matrix.lines]
    if missing:
        raise InputError(f"{source}: no row for {', '.join(missing)}; paste the whole matrix")
    for line in lines:
        legend = re.match(r"\s*(NIC\d+):\s*(\S+)\s*$", line)
        if legend and legend.group(1) in devices:
            matrix.nic_names[legend.group(1)] = legend.group(2)
    _check_symmetric(matrix, source)
    return matrix


def _check_cell(source: str, line: int, row: str, column: str, cell: str) -> None:
    if row == column:
        if cell != "X":
            raise InputError(f"{source}: line {line}: {row} to itself is {cell!r}, expected X")
        return
    if cell in (*PCIE_RELATIONS, "SOC"):
        return
    if _NV.fullmatch(cell):
        if not (row.startswith("GPU") and column.startswith("GPU")):
            raise InputError(f"{source}: line {line}: {row} to {column} is {cell}; NVLinks "
                             "join GPUs only")
        return
    raise InputError(f"{source}: line {line}: {row} to {column} is {cell!r}; expected one of "
                     f"X, NV#, {', '.join(PCIE_RELATIONS)}")


def _check_symmetric(matrix: _Matrix, source: str) -> None:
    for (row, column), cell in matrix.cells.items():
        other = matrix.cells[column, row]
        if cell != other and not (_NV.fullmatch(cell) and _NV.fullmatch(other)):
            raise InputError(f"{source}: line {matrix.lines[row]}: {row} to {column} is "
                             f"{cell} but {column} to {row} (line {matrix.lines[column]}) is "
                             f"{other}; the matrix must be symmetric")


def _groups(matrix: _Matrix, relations: set[str],
            extra: set[tuple[str, str]] = frozenset()) -> list[list[str]]:
    """Devices joined (transitively) by a relation in ``relations`` or a pair in ``extra``,
    in device order."""
    parent = {d: d for d in matrix.devices}

    def find(d: str) -> str:
        while parent[d] != d:
            parent[d] = parent[parent[d]]
            d = parent[d]
        return d

    pairs = [pair for pair, cell in matrix.cells.items() if cell in relations]
    for row, column in [*pairs, *extra]:
        parent[find(row)] = find(column)
    groups: dict[str, list[str]] = {}
    for device in matrix.devices:
        groups.setdefault(find(device), []).append(device)
    return list(groups.values())


def _sockets(matrix: _Matrix, gpus: list[str], notes: list[str]) -> dict[str, int]:
    """Socket number per device: joined below SYS, or the same NUMA Affinity (an NV# cell
    hides the PCIe relation; NUMA Affinity still tells)."""
    same_numa = {(a, b) for a, numa_a in matrix.numa.items()
                 for b, numa_b in matrix.numa.items()
                 if a != b and numa_a == numa_b and numa_a.isdigit()
                 and matrix.cells[a, b] != "SYS"}
    groups = _groups(matrix, _SAME_SOCKET, same_numa)
    unknown = [g for g in groups if len(g) == 1 and g[0] in gpus
               and all(o == g[0] or _NV.fullmatch(matrix.cells[g[0], o])
                       for o in matrix.devices)]
    if unknown:
        notes.append(f"socket of {', '.join(g[0] for g in unknown)} unknown (NVLink hides "
                     "it and no NUMA Affinity); placed on the first socket")
        rest = [g for g in groups if g not in unknown]
        first = rest[0] if rest else []
        for g in unknown:
            first.extend(g)
        groups = rest if rest else [first]
    order = sorted(groups, key=lambda g: matrix.devices.index(g[0]))
    return {device: number for number, group in enumerate(order) for device in group}


def nvlink_counts(text: str, source: str = "nvidia-smi topo -m") -> list[list[int]]:
    """The NVLinks between each pair of GPUs (``NV#`` cells; 0 elsewhere) in
    ``nvidia-smi topo -m`` ``text``, GPUs in the matrix's order."""
    matrix = _read_matrix(text, source)
    gpus = [d for d in matrix.devices if d.startswith("GPU")]
    if not gpus:
        raise InputError(f"{source}: the matrix has no GPU rows")
    return [[int(m.group(1)) if (m := _NV.fullmatch(matrix.cells[a, b])) else 0 for b in gpus]
            for a in gpus]


def _nvlinks(matrix: _Matrix, gpus: list[str], rank: dict[str, int],
             gen: link_table.GpuGeneration, fabric: dict[str, NodeKind],
             notes: list[str]) -> list[Link]:
    """Direct NVLinks from NV#, or an NVSwitch when a GPU shows more than it has."""
    counts = [[int(m.group(1)) if (m := _NV.fullmatch(matrix.cells[a, b])) else 0
               for b in gpus] for a in gpus]
    switch, pairs, note = gpu_fabric.nvlinks_from_counts(counts, gen)
    if note:
        notes.append(note)
    links: list[Link] = []
    if switch:
        fabric["nvswitch"] = NodeKind.SWITCH
    for a, gbps in switch.items():
        links += link_table.duplex(rank[gpus[a]], "nvswitch", gbps, link_table.NVLINK_ALPHA_US,
                                   "nvlink")
    for (a, b), gbps in pairs.items():
        links.append(Link(rank[gpus[a]], rank[gpus[b]], gbps * GB_PER_S,
                          link_table.NVLINK_ALPHA_US * US, "nvlink"))
    return links
