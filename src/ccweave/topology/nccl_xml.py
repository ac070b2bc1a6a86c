"""Import NCCL's topology dump (``NCCL_TOPO_DUMP_FILE``) as a Topology.

The dump is a tree: ``<system>`` holds ``<cpu numaid arch vendor ...>`` (one per NUMA
node; ``host_hash`` tells hosts apart), which hold ``<pci busid class link_speed
link_width>`` elements: PCIe switches (nested ``<pci>``), GPUs (a ``<gpu dev sm rank>``
child with ``<nvlink target count tclass>`` and ``<c2c bw count>`` children) and NICs (a
``<nic>`` child with ``<net name speed ...>`` ports). We read it as NCCL's
``src/graph/topo.cc`` does: every ``<pci>`` links to its parent at its own link speed and
width, an NVLink's ``tclass`` names its far end (``0x03..`` a GPU, ``0x068001`` the CPU,
anything else the NVSwitch fabric, all of a host's NVSwitches merged into one), and
figures come from :mod:`ccweave.topology.link_table`.
"""

from __future__ import annotations

import re
import xml.parsers.expat
from dataclasses import dataclass, field
from pathlib import Path

from ccweave.errors import InputError, TopologyError
from ccweave.topology import link_table
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.units import GB_PER_S, US

_GpuKey = tuple[str, str, int]
"""(host prefix, bus id, index among the ranks sharing that GPU) until ranks are known."""


@dataclass
class _Element:
    tag: str
    attrs: dict[str, str]
    line: int
    children: list[_Element] = field(default_factory=list)


@dataclass
class _Gpu:
    key: _GpuKey
    element: _Element
    sm: int
    rank: int | None
    cpu: str
    host: int


def read(path: str | Path, *, nodes: int = 1, name: str | None = None) -> Topology:
    """The Topology in an NCCL topology dump file; ``nodes`` > 1 joins that many copies
    of a one-host dump through their NICs on one network switch."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(f"{path}: cannot read the NCCL topology dump: "
                         f"{error.strerror or error}") from None
    return parse(text, source=str(path), nodes=nodes, name=name or path.stem)


def parse(text: str, *, source: str = "NCCL topology", nodes: int = 1,
          name: str = "nccl-topology") -> Topology:
    """The Topology described by NCCL topology XML ``text``; ``source`` names it in errors."""
    root = _parse_xml(text, source)
    if root.tag != "system":
        raise InputError(f"{source}: line {root.line}: the root element is <{root.tag}>; an "
                         "NCCL topology dump starts with <system version=...>")
    return _Importer(source).build(root, nodes, name)


def _parse_xml(text: str, source: str) -> _Element:
    """A tree of elements with their line numbers (expat; no external entities)."""
    parser = xml.parsers.expat.ParserCreate()
    stack: list[_Element] = []
    roots: list[_Element] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        element = _Element(tag, dict(attrs), parser.CurrentLineNumber)
        (stack[-1].children if stack else roots).append(element)
        stack.append(element)

    parser.StartElementHandler = start
    parser.EndElementHandler = lambda tag: stack.pop()
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as error:
        raise InputError(f"{source}: line {error.lineno}: not valid XML: "
                         f"{xml.parsers.expat.ErrorString(error.code)}") from None
    if not roots:
        raise InputError(f"{source}: empty; expected an NCCL topology dump (<system>...)")
    return roots[0]


def _busid(text: str) -> str:
    text = text.strip().lower()
    return "0000:" + text if re.fullmatch(r"[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]", text) else text


class _Importer:
    """One pass over the tree collects fabric, links and GPUs; a second adds NVLinks."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.links: list[Link] = []
        self.fabric: dict[str, NodeKind] = {}
        self.gpus: list[_Gpu] = []
        self.nics: dict[str, float] = {}
        self.notes: list[str] = []

    # ---------------------------------------------------------------- attributes

    def _where(self, element: _Element) -> str:
        return f"{self.source}: line {element.line}: <{element.tag}>"

    def _attr(self, element: _Element, key: str) -> str:
        if key not in element.attrs:
            raise InputError(f"{self._where(element)} lacks attribute {key!r}; NCCL writes "
                             f"it in every dump (re-dump with NCCL_TOPO_DUMP_FILE)")
        return element.attrs[key]

    def _int(self, element: _Element, key: str, default: int | None = None) -> int:
        if default is not None and key not in element.attrs:
            return default
        text = self._attr(element, key)
        try:
            return int(text, 0)
        except ValueError:
            raise InputError(f"{self._where(element)}: attribute {key}={text!r} is not an "
                             "integer") from None

    # -------------------------------------------------------------------- walk

    def build(self, root: _Element, nodes: int, name: str) -> Topology:
        cpus = [child for child in root.children if child.tag == "cpu"]
        if not cpus:
            raise InputError(f"{self.source}: line {root.line}: <system> has no <cpu> "
                             "element; is this an NCCL topology dump?")
        hosts: list[str] = []
        for cpu in cpus:
            host = cpu.attrs.get("host_hash", "")
            if host not in hosts:
                hosts.append(host)
        if len(hosts) > 1 and nodes > 1:
            raise InputError(f"{self.source}: the dump already holds {len(hosts)} hosts; "
                             "--nodes replicates a one-host dump only")
        self.prefixes = [f"n{k}." if len(hosts) > 1 else "" for k in range(len(hosts))]
        sockets: dict[int, list[str]] = {}
        families: dict[int, str] = {}
        for cpu in cpus:
            host = hosts.index(cpu.attrs.get("host_hash", ""))
            cpu_name = self._cpu(cpu, host)
            sockets.setdefault(host, []).append(cpu_name)
            families.setdefault(host, self._family(cpu))
        for host, members in sockets.items():
            family = families[host]
            self.links += link_table.full_mesh(members, link_table.CPU_LINK_GBPS[family],
                                               _CPU_LINK_KIND.get(family, "sys"))
        if not self.gpus:
            raise InputError(f"{self.source}: no <gpu> element with a rank; the dump must "
                             "come from a job that used the GPUs (NCCL_TOPO_DUMP_FILE)")
        ranks = self._ranks()
        for gpu in self.gpus:
            self._gpu_links(gpu)
        self._mirror_nvlinks()
        links = [Link(ranks.get(lk.src, lk.src), ranks.get(lk.dst, lk.dst), lk.bandwidth,
                      lk.alpha, lk.kind) for lk in self.links]
        groups = {
            "node": tuple(tuple(sorted(ranks[g.key] for g in self.gpus if g.host == host))
                          for host in range(len(hosts))),
            "socket": tuple(part for part in (
                tuple(sorted(ranks[g.key] for g in self.gpus if g.cpu == cpu_name))
                for host in sorted(sockets) for cpu_name in sockets[host]) if part),
        }
        groups["node"] = tuple(part for part in groups["node"] if part)
        source = (f"NCCL topology dump {self.source}; figures from ccweave's link table "
                  "(docs/profiling.md)" + "".join(f"; {note}" for note in self.notes))
        try:
            server = Topology(name, len(ranks), tuple(links), dict(self.fabric), groups,
                              source=source)
            if len(hosts) > 1:
                server = self._join_hosts(server, hosts)
            topology = link_table.join_nodes(server, self.nics, nodes)
            topology.check_connected()
        except TopologyError as error:
            raise TopologyError(f"{self.source}: {error}") from None
        return topology

    def _family(self, cpu: _Element) -> str:
        return link_table.cpu_family(cpu.attrs.get("arch", ""), cpu.attrs.get("vendor", ""),
                                     self._int(cpu, "familyid", 0), self._int(cpu, "modelid", 0))

    def _cpu(self, element: _Element, host: int) -> str:
        numa = self._int(element, "numaid")
        cpu_name = f"{self.prefixes[host]}cpu{numa}"
        if cpu_name in self.fabric:
            raise InputError(f"{self._where(element)}: a second <cpu> with numaid={numa} "
                             "on one host")
        self.fabric[cpu_name] = NodeKind.CPU
        for child in element.children:
            if child.tag == "pci":
                self._pci(child, cpu_name, cpu_name, host)
            elif child.tag == "nic":
                self._nic(child, cpu_name, None, host)
        return cpu_name

    def _pci(self, element: _Element, parent: str, cpu: str, host: int) -> bool:
        """Add a PCI device under ``parent``; False when nothing of use hangs below it."""
        pci_class = self._attr(element, "class").lower()
        busid = _busid(self._attr(element, "busid"))
        gbps = self._pcie_gbps(element, busid)
        gpus = [child for child in element.children if child.tag == "gpu"]
        nic = next((child for child in element.children if child.tag == "nic"), None)
        if gpus:
            if len(gpus) > 1:
                self.notes.append(f"{busid}: {len(gpus)} ranks share one GPU, each given its "
                                  "full links")
            for index, gpu in enumerate(gpus):
                key = (self.prefixes[host], busid, index)
                self.gpus.append(_Gpu(key, gpu, self._int(gpu, "sm"),
                                      self._int(gpu, "rank") if "rank" in gpu.attrs else None,
                                      cpu, host))
                self.links += link_table.duplex(key, parent, gbps, link_table.PCIE_ALPHA_US,
                                                "pcie")
            return True
        if nic is not None:
            nic_name = self._nic(nic, parent, gbps, host, busid)
            return nic_name is not None
        if pci_class.startswith("0x03"):  # a GPU this job did not use
            return False
        switch = f"{self.prefixes[host]}pcie@{busid}"
        self.fabric[switch] = NodeKind.PCIE
        used = [self._pci(child, switch, cpu, host)
                for child in element.children if child.tag == "pci"]
        if any(used):
            self.links += link_table.duplex(switch, parent, gbps, link_table.PCIE_ALPHA_US,
                                            "pcie")
            return True
        del self.fabric[switch]
        self.links = [lk for lk in self.links if switch not in (lk.src, lk.dst)]
        return False

    def _pcie_gbps(self, element: _Element, busid: str) -> float:
        width = self._int(element, "link_width")
        speed = self._attr(element, "link_speed")
        gen = link_table.pcie_gen(speed)
        if gen is None:
            self.notes.append(f"{busid}: link_speed {speed!r} unknown, taken as PCIe Gen3 "
                              "(as NCCL does)")
            gen = 3
        return link_table.pcie_gbps(gen, width)

    def _nic(self, element: _Element, parent: str, gbps: float | None, host: int,
             busid: str = "") -> str | None:
        nets = [child for child in element.children if child.tag == "net"]
        if not nets:
            return None
        speed = sum(link_table.net_gbps(self._int(net, "speed", -1)) for net in nets)
        label = nets[0].attrs.get("name") or f"nic@{busid or parent}"
        nic_name = f"{self.prefixes[host]}{label}"
        if nic_name in self.fabric:
            nic_name = f"{nic_name}@{busid or len(self.fabric)}"
        self.fabric[nic_name] = NodeKind.NIC
        self.nics[nic_name] = speed
        self.links += link_table.duplex(nic_name, parent, speed if gbps is None else gbps,
                                        link_table.PCIE_ALPHA_US, "pcie")
        return nic_name

    # ----------------------------------------------------------------- GPUs

    def _ranks(self) -> dict[_GpuKey, int]:
        with_rank = [gpu for gpu in self.gpus if gpu.rank is not None]
        if with_rank and len(with_rank) != len(self.gpus):
            lacking = next(gpu for gpu in self.gpus if gpu.rank is None)
            raise InputError(f"{self._where(lacking.element)} has no 'rank' while other "
                             "GPUs have one; give every <gpu> a rank or none")
        if not with_rank:
            order = sorted(self.gpus, key=lambda g: (g.host, self._int(g.element, "dev", 0)))
            return {gpu.key: number for number, gpu in enumerate(order)}
        ranks: dict[_GpuKey, int] = {}
        seen: dict[int, _Gpu] = {}
        for gpu in self.gpus:
            assert gpu.rank is not None
            if gpu.rank in seen:
                raise InputError(f"{self._where(gpu.element)}: rank {gpu.rank} again (first "
                                 f"at line {seen[gpu.rank].element.line}); ranks must differ")
            seen[gpu.rank] = gpu
            ranks[gpu.key] = gpu.rank
        expected = set(range(len(self.gpus)))
        if set(seen) != expected:
            bad = min(set(seen) - expected)
            raise InputError(f"{self._where(seen[bad].element)}: rank {bad} out of range; "
                             f"{len(self.gpus)} GPUs need ranks 0..{len(self.gpus) - 1}")
        return ranks

    def _gpu_links(self, gpu: _Gpu) -> None:
        prefix = gpu.key[0]
        per_link = link_table.nvlink_gbps(gpu.sm)
        by_bus = {g.key[:2]: g.key for g in self.gpus if g.key[2] == 0}
        for child in gpu.element.children:
            if child.tag == "nvlink":
                count = self._int(child, "count")
                tclass = self._attr(child, "tclass").lower()
                if count < 1:
                    raise InputError(f"{self._where(child)}: count must be at least 1")
                gbps = count * per_link
                if tclass.startswith("0x03"):
                    target = _busid(self._attr(child, "target"))
                    if (prefix, target) in by_bus:
                        self.links.append(Link(gpu.key, by_bus[prefix, target],
                                               gbps * GB_PER_S,
                                               link_table.NVLINK_ALPHA_US * US, "nvlink"))
                    else:
                        self.notes.append(f"NVLink to {target} ignored: not a GPU of the job")
                elif tclass.startswith("0x068001"):
                    self.links += link_table.duplex(gpu.key, gpu.cpu, gbps,
                                                    link_table.NVLINK_ALPHA_US, "nvlink")
                else:
                    switch = f"{prefix}nvswitch"
                    self.fabric[switch] = NodeKind.SWITCH
                    self.links += link_table.duplex(gpu.key, switch, gbps,
                                                    link_table.NVLINK_ALPHA_US, "nvlink")
            elif child.tag == "c2c":
                gbps = self._int(child, "bw") * self._int(child, "count") / 1000.0
                if gbps > 0:
                    self.links += link_table.duplex(gpu.key, gpu.cpu, gbps,
                                                    link_table.C2C_ALPHA_US, "c2c")

    def _mirror_nvlinks(self) -> None:
        """A GPU-GPU NVLink listed on one side only gets its other direction."""
        direct = {(lk.src, lk.dst): lk for lk in self.links
                  if lk.kind == "nvlink" and isinstance(lk.src, tuple)
                  and isinstance(lk.dst, tuple)}
        for (src, dst), link in direct.items():
            if (dst, src) not in direct:
                self.links.append(Link(dst, src, link.bandwidth, link.alpha, link.kind))

    def _join_hosts(self, server: Topology, hosts: list[str]) -> Topology:
        """A multi-host dump: every NIC on one network switch ``net``."""
        if not self.nics:
            raise InputError(f"{self.source}: {len(hosts)} hosts but no NIC joins them")
        links = list(server.links)
        for nic, gbps in self.nics.items():
            links += link_table.duplex(nic, "net", gbps, link_table.NIC_ALPHA_US, "net")
        fabric = {**server.fabric, "net": NodeKind.SWITCH}
        return Topology(server.name, server.num_ranks, tuple(links), fabric, server.groups,
                        server.local_bandwidth, server.source)


_CPU_LINK_KIND = {"intel-bdw": "qpi", "intel-skl": "upi", "intel-srp": "upi", "intel-erp": "upi",
                  "amd": "xgmi", "power": "xbus"}
