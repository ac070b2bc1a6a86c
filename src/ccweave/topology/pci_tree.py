"""A machine known by its PCI tree only, and the Topology built from it.

Importers of bare PCI trees (an ``NCCL_TOPO_FILE`` of class codes, hwloc's XML) read
their file into :class:`PciMachine`: CPU sockets holding PCI bridges, GPUs and NICs,
each with the figure the file gives for its upstream link. :func:`build` then makes the
Topology: ranks for GPUs in PCI bus id order, a PCIe switch node per bridge that leads
to a GPU or NIC, the sockets joined by the link table's CPU figure, and the GPU fabric
the user named (:mod:`ccweave.topology.gpu_fabric`).

A bridge slower than a device below it cannot be real on a GPU server: VMs report their
virtual bridges as x1 at 2.5 GT/s (0.25 GB/s) above x16 GPUs, which would make every
host path useless. Such a bridge is modelled at the fastest device link below it, with
one warning naming it (:func:`bridge_figure`); ``keep_link_speeds`` keeps the file's
figure instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccweave.errors import InputError, TopologyError
from ccweave.topology import host_memory, link_table, zoo
from ccweave.topology.gpu_fabric import GpuFabric
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.topology.provenance import Provenance
from ccweave.topology.replicate import replicate

GPU, NIC, BRIDGE = "gpu", "nic", "bridge"


@dataclass
class PciNode:
    """One PCI device and the link to its parent, as the file gives it."""

    busid: str
    role: str
    """``gpu``, ``nic`` or ``bridge`` (anything else that may hold devices)."""
    gbps: float | None
    """GB/s per direction of its upstream link; None when the file gives no figure."""
    figure: str
    """The file's own words for that link, for messages (``2.5 GT/s PCIe x1``)."""
    where: str
    """Where it is in the file, for messages (``line 12``)."""
    children: list[PciNode] = field(default_factory=list)
    name: str = ""
    """A NIC's device name (``mlx5_0``), when the file says it."""
    nic_gbps: float | None = None
    """A NIC's network speed in GB/s, when the file says it."""


@dataclass
class Socket:
    """A CPU (NUMA node) and the PCI devices below it."""

    name: str
    family: str
    """Key of :data:`link_table.CPU_LINK_GBPS`."""
    children: list[PciNode] = field(default_factory=list)


@dataclass
class PciMachine:
    """A one-host machine as a PCI tree."""

    source: str
    """The file, for messages."""
    pcie: str
    """How the file's link figures were read (for ``topo show``)."""
    sockets: list[Socket] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the reader assumed, one line each."""
    warnings: list[str] = field(default_factory=list)
    """Figures the reader could not take as the file says them (``link_width="0"``)."""

    def devices(self, role: str) -> list[PciNode]:
        """Every device of ``role`` in ascending PCI bus id."""
        found: list[PciNode] = []

        def walk(nodes: list[PciNode]) -> None:
            for node in nodes:
                if node.role == role:
                    found.append(node)
                walk(node.children)

        for socket in self.sockets:
            walk(socket.children)
        return sorted(found, key=lambda node: busid_key(node.busid))


def busid_key(busid: str) -> tuple[int, ...]:
    """``dddd:bb:dd.f`` as numbers, for PCI bus id order (strings that are not bus ids
    sort after, by their text)."""
    parts = busid.replace(".", ":").split(":")
    try:
        return tuple(int(part, 16) for part in parts)
    except ValueError:
        return (1 << 32, *map(ord, busid))


def bridge_figure(busid: str, path: str, file_gbps: float | None, figure: str,
                  devices_gbps: float, keep: bool) -> tuple[float, str | None]:
    """The GB/s to model a bridge's upstream link at, and its warning (None when the
    file's figure is plausible: at least the fastest device link below it). ``path``
    names the host path through the bridge, ``figure`` the file's words for its link."""
    if file_gbps is not None and file_gbps >= devices_gbps:
        return file_gbps, None
    said = f"{figure} = {file_gbps:g} GB/s" if file_gbps is not None else f"{figure}, no figure"
    head = (f"bridge {busid} (host path {path}): the file says {said}, below its devices' "
            f"own {devices_gbps:g} GB/s")
    if keep and file_gbps is not None:
        return file_gbps, f"{head}; kept at the file's figure (--keep-link-speeds)"
    return devices_gbps, (f"{head}; modelled at {devices_gbps:g} GB/s (a virtual or "
                          "misreported bridge; --keep-link-speeds keeps the file's figure)")


def build(machine: PciMachine, fabric: GpuFabric, *, name: str, nic_gbits: float | None = None,
          keep_link_speeds: bool = False, nodes: int = 1, network: str = "switch") -> Topology:
    """The Topology of ``machine`` with the GPU ``fabric`` (see the module docstring);
    ``nodes`` > 1 replicates it on a ``switch`` or ``rails`` network
    (:mod:`ccweave.topology.replicate`)."""
    gpus = machine.devices(GPU)
    if not gpus:
        raise InputError(f"{machine.source}: no GPU in the PCI tree (class 0x03...); nothing "
                         "to rank")
    busids = [gpu.busid for gpu in gpus]
    if len(set(busids)) != len(busids):
        twice = next(b for b in busids if busids.count(b) > 1)
        raise InputError(f"{machine.source}: two GPUs with bus id {twice}; bus ids must differ")
    rank = {id(gpu): number for number, gpu in enumerate(gpus)}
    builder = _Builder(machine, rank, keep_link_speeds, fabric)
    cpu_of: dict[int, str] = {}
    for socket in machine.sockets:
        builder.fabric[socket.name] = NodeKind.CPU
        for child in socket.children:
            builder.place(child, socket.name, socket.name, cpu_of)
    families = {socket.family for socket in machine.sockets}
    family = sorted(families)[0]
    cpu_kind = _CPU_LINK_KIND.get(family, "sys")
    builder.links += link_table.full_mesh([s.name for s in machine.sockets],
                                          link_table.CPU_LINK_GBPS[family], cpu_kind)
    nvlinks, switch = fabric.links(list(range(len(gpus))),
                                   [cpu_of[number] for number in range(len(gpus))])
    builder.links += nvlinks
    builder.fabric.update(switch)
    groups = {"node": (tuple(range(len(gpus))),),
              "socket": tuple(part for part in (
                  tuple(sorted(r for r, cpu in cpu_of.items() if cpu == s.name))
                  for s in machine.sockets) if part)}
    nic_speeds, nic_source = _nic_speeds(builder.nics, nic_gbits, fabric, nodes,
                                         machine.source)
    origin = {"pcie": machine.pcie + (f"; {len(builder.warnings)} bridge(s) modelled at "
                                      "their devices' speed (see warnings)"
                                      if builder.corrected else ""),
              cpu_kind: (f"{family} socket link, {link_table.CPU_LINK_GBPS[family]:g} GB/s "
                         "(ccweave's link table)")}
    if nvlinks:
        origin["nvlink"] = fabric.description
    links, fabric_nodes, memory = host_memory.through_memory(
        builder.links, builder.fabric, {s.name: s.family for s in machine.sockets})
    if memory:
        origin[host_memory.MEMORY_KIND] = memory
    notes = [*machine.notes, *builder.notes]
    source = (f"PCI tree {machine.source}; GPU fabric: {fabric.description}"
              + "".join(f"; {note}" for note in notes))
    try:
        server = Topology(name, len(gpus), tuple(links), fabric_nodes, groups,
                          source=source, cost=zoo.GPU_SERVER_COST,
                          provenance=Provenance(origin, (*machine.warnings,
                                                         *builder.warnings)))
        topology = replicate(server, nic_speeds, nodes, network, nic_source=nic_source)
        topology.check_connected()
    except TopologyError as error:
        raise TopologyError(f"{machine.source}: {error}") from None
    return topology


_CPU_LINK_KIND = {"intel-bdw": "qpi", "intel-skl": "upi", "intel-srp": "upi", "intel-erp": "upi",
                  "amd": "xgmi", "power": "xbus"}


def _nic_speeds(nics: list[PciNode], nic_gbits: float | None, fabric: GpuFabric,
                nodes: int, source: str) -> tuple[dict[str, float], str]:
    """NIC name -> GB/s in PCI bus id order, and where the speeds came from."""
    ordered = sorted(nics, key=lambda nic: busid_key(nic.busid))
    if nic_gbits is not None:
        if not nic_gbits > 0:
            raise InputError(f"--nic-gbits {nic_gbits:g}: give a positive speed in Gb/s")
        return ({nic.name: nic_gbits / 8 for nic in ordered},
                f"NIC speed {nic_gbits:g} Gb/s (--nic-gbits)")
    if ordered and all(nic.nic_gbps for nic in ordered):
        return ({nic.name: nic.nic_gbps for nic in ordered},  # type: ignore[misc]
                "NIC speeds from the file's <net speed>")
    if fabric.generation is not None:
        gbits = fabric.generation.nic_gbits
        return ({nic.name: gbits / 8 for nic in ordered},
                f"NIC speed {gbits:g} Gb/s: the usual NIC of a {fabric.generation.name} "
                "server (ccweave's link table; --nic-gbits to change)")
    if nodes > 1 and ordered:
        raise InputError(f"{source}: the file does not say the NICs' speed and the GPU fabric "
                         "does not name a GPU generation; give --nic-gbits (e.g. 400)")
    return {nic.name: 0.0 for nic in ordered}, ""


class _Builder:
    """One walk over the tree: links, fabric nodes, NICs and bridge warnings."""

    def __init__(self, machine: PciMachine, rank: dict[int, int], keep: bool,
                 fabric: GpuFabric) -> None:
        self.machine = machine
        self.rank = rank
        self.keep = keep
        self.links: list[Link] = []
        self.fabric: dict[str, NodeKind] = {}
        self.nics: list[PciNode] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.corrected = False
        gen = fabric.generation
        self.default_gbps = link_table.pcie_gbps(gen.pcie_gen if gen else 3, 16)
        self.default_said = (f"PCIe Gen{gen.pcie_gen} x16, a {gen.name}'s" if gen else
                             "PCIe Gen3 x16, as NCCL takes an unknown speed")

    def place(self, node: PciNode, parent: str, cpu: str, cpu_of: dict[int, str],
              path: str = "") -> tuple[float, list[str]] | None:
        """Link ``node`` under ``parent``; the fastest device link below it and the
        devices' names, or None when nothing of use hangs below."""
        path = f"{path or parent} -> {node.busid}"
        if node.role in (GPU, NIC):
            gbps = node.gbps
            if gbps is None:
                gbps = self.default_gbps
                self.notes.append(f"{node.busid}: {node.figure}: no link figure; taken as "
                                  f"{gbps:g} GB/s ({self.default_said})")
            if node.role == GPU:
                number = self.rank[id(node)]
                cpu_of[number] = cpu
                end: object = number
                label = f"GPU {node.busid} (rank {number})"
            else:
                if not node.name or node.name in self.fabric:
                    node.name = f"nic@{node.busid}"
                self.fabric[node.name] = NodeKind.NIC
                self.nics.append(node)
                end = node.name
                label = f"NIC {node.name}"
            self.links += link_table.duplex(end, parent, gbps, link_table.PCIE_ALPHA_US, "pcie")
            return gbps, [label]
        switch = f"pcie@{node.busid}"
        self.fabric[switch] = NodeKind.PCIE
        below = [found for child in node.children
                 if (found := self.place(child, switch, cpu, cpu_of, path)) is not None]
        if not below:
            del self.fabric[switch]
            self.links = [lk for lk in self.links if switch not in (lk.src, lk.dst)]
            return None
        fastest = max(gbps for gbps, _ in below)
        devices = [label for _, labels in below for label in labels]
        shown = ", ".join(devices[:3]) + (f" and {len(devices) - 3} more" if len(devices) > 3
                                          else "")
        gbps, warning = bridge_figure(node.busid, f"{path} -> {shown}", node.gbps,
                                      node.figure, fastest, self.keep)
        if warning:
            self.warnings.append(warning)
            self.corrected = self.corrected or gbps != node.gbps
        self.links += link_table.duplex(switch, parent, gbps, link_table.PCIE_ALPHA_US, "pcie")
        return fastest, devices
