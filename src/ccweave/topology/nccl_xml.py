"""Import NCCL's topology dump (``NCCL_TOPO_DUMP_FILE``) as a Topology.

The dump is a tree: ``<system>`` holds ``<cpu numaid arch vendor ...>`` (one per NUMA
node; ``host_hash`` tells hosts apart), which hold ``<pci busid class link_speed
link_width>`` elements: PCIe switches (nested ``<pci>``), GPUs (a ``<gpu dev sm rank>``
child with ``<nvlink target count tclass>`` and ``<c2c bw count>`` children) and NICs (a
``<nic>`` child with ``<net name speed ...>`` ports). We read it as NCCL's
``src/graph/topo.cc`` does: every ``<pci>`` links to its parent at its own link speed and
width, an NVLink's ``tclass`` names its far end (``0x03..`` a GPU, ``0x068001`` the CPU,
anything else the NVSwitch fabric, all of a host's NVSwitches merged into one), and
figures come from :mod:`ccweave.topology.link_table`. A bridge slower than the devices
below it (VMs' virtual bridges: x1 at 2.5 GT/s) is modelled at their speed, warned
(:func:`ccweave.topology.pci_tree.bridge_figure`). A file with no ``<gpu>`` element is a
bare PCI tree, read by :mod:`ccweave.topology.nccl_pci` with the GPU fabric the user names.
"""

from __future__ import annotations

import re
import xml.parsers.expat
from dataclasses import dataclass, field
from pathlib import Path

from ccweave.errors import InputError, TopologyError
from ccweave.topology import gpu_fabric, host_memory, link_table, nccl_pci, pci_tree, zoo
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.topology.provenance import Provenance
from ccweave.units import GB_PER_S, US

_GpuKey = tuple[str, str, int]
"""(host prefix, bus id, index among the ranks sharing that GPU) until ranks are known."""


@dataclass
class Element:
    """One XML element: its tag, attributes, line, children and text."""

    tag: str
    attrs: dict[str, str]
    line: int
    children: list[Element] = field(default_factory=list)
    text: str = ""


@dataclass
class _Gpu:
    key: _GpuKey
    element: Element
    sm: int
    rank: int | None
    cpu: str
    host: int


@dataclass(frozen=True)
class Options:
    """What ``ccweave topo import`` adds to an NCCL topology file.

    gpu_fabric: ``--gpu-fabric`` values, for a PCI tree whose GPUs have no ``<gpu>``
        element (:mod:`ccweave.topology.gpu_fabric`); refused for a dump.
    gpu: GPU generation for a ``nvidia-smi topo -m`` fabric source.
    nic_gbits: NIC speed where the file does not say it.
    keep_link_speeds: keep a bridge's figure even when slower than its devices.
    network: how ``nodes`` > 1 copies are joined: ``switch`` or ``rails``.
    """

    gpu_fabric: tuple[str, ...] = ()
    gpu: str | None = None
    nic_gbits: float | None = None
    keep_link_speeds: bool = False
    network: str = "switch"


DEFAULT_OPTIONS = Options()


def read(path: str | Path, *, nodes: int = 1, name: str | None = None,
         options: Options = DEFAULT_OPTIONS) -> Topology:
    """The Topology in an NCCL topology file (a dump, or a bare PCI tree with
    ``options.gpu_fabric``); ``nodes`` > 1 joins that many copies of a one-host file
    through their NICs (``options.network``)."""
    from ccweave.infile import read_text

    path = Path(path)
    text = read_text(path, "give NCCL topology XML (NCCL_TOPO_DUMP_FILE)")
    return parse(text, source=str(path), nodes=nodes, name=name or path.stem, options=options)


def parse(text: str, *, source: str = "NCCL topology", nodes: int = 1,
          name: str = "nccl-topology", options: Options = DEFAULT_OPTIONS) -> Topology:
    """The Topology described by NCCL topology XML ``text``; ``source`` names it in errors."""
    root = parse_xml(text, source)
    if root.tag != "system":
        raise InputError(f"{source}: line {root.line}: the root element is <{root.tag}>; an "
                         "NCCL topology dump starts with <system version=...>")
    if not nccl_pci.has_gpu_elements(root):
        machine = nccl_pci.read_tree(root, source)
        busids = [gpu.busid for gpu in machine.devices(pci_tree.GPU)]
        if busids:
            fabric = gpu_fabric.resolve(options.gpu_fabric, busids, gpu=options.gpu,
                                        source=source)
            return pci_tree.build(machine, fabric, name=name, nic_gbits=options.nic_gbits,
                                  keep_link_speeds=options.keep_link_speeds, nodes=nodes,
                                  network=options.network)
    elif options.gpu_fabric:
        raise InputError(f"{source}: an NCCL dump whose <gpu> elements list their NVLinks "
                         "already; --gpu-fabric is for PCI trees without them (drop it)")
    return _Importer(source, options).build(root, nodes, name)


def gpu_nvlinks(text: str, source: str) -> dict[str, tuple[int, list[tuple[str, int, str]]]]:
    """Per GPU bus id in an NCCL dump: its ``sm`` and its ``<nvlink>`` (target bus id,
    count, target class) elements (the first ``<gpu>`` of a ``<pci>``)."""
    root = parse_xml(text, source)
    reader = _Importer(source, DEFAULT_OPTIONS)
    found: dict[str, tuple[int, list[tuple[str, int, str]]]] = {}
    stack = [root]
    while stack:
        element = stack.pop()
        stack.extend(element.children)
        gpu = next((c for c in element.children if c.tag == "gpu"), None)
        if element.tag != "pci" or gpu is None:
            continue
        links = [(normal_busid(reader._attr(nv, "target")), reader._int(nv, "count"),
                  reader._attr(nv, "tclass").lower())
                 for nv in gpu.children if nv.tag == "nvlink"]
        found[normal_busid(reader._attr(element, "busid"))] = (reader._int(gpu, "sm"), links)
    return found


def parse_xml(text: str, source: str, expected: str = "an NCCL topology dump (<system>...)"
              ) -> Element:
    """A tree of elements with their line numbers and text (expat; no external entities)."""
    parser = xml.parsers.expat.ParserCreate()
    stack: list[Element] = []
    roots: list[Element] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        element = Element(tag, dict(attrs), parser.CurrentLineNumber)
        (stack[-1].children if stack else roots).append(element)
        stack.append(element)

    def characters(data: str) -> None:
        if stack:
            stack[-1].text += data

    parser.StartElementHandler = start
    parser.EndElementHandler = lambda tag: stack.pop()
    parser.CharacterDataHandler = characters
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as error:
        raise InputError(f"{source}: line {error.lineno}: not valid XML: "
                         f"{xml.parsers.expat.ErrorString(error.code)}") from None
    if not roots:
        raise InputError(f"{source}: empty; expected {expected}")
    return roots[0]


def normal_busid(text: str) -> str:
    text = text.strip().lower()
    return "0000:" + text if re.fullmatch(r"[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]", text) else text


class _Importer:
    """One pass over the tree collects fabric, links and GPUs; a second adds NVLinks."""

    def __init__(self, source: str, options: Options) -> None:
        self.source = source
        self.options = options
        self.links: list[Link] = []
        self.fabric: dict[str, NodeKind] = {}
        self.gpus: list[_Gpu] = []
        self.nics: dict[str, float] = {}
        self.nic_busids: dict[str, str] = {}
        self.notes: list[str] = []
        self.warnings: list[str] = []
        self.width_zero: list[str] = []

    # ---------------------------------------------------------------- attributes

    def _where(self, element: Element) -> str:
        return f"{self.source}: line {element.line}: <{element.tag}>"

    def _attr(self, element: Element, key: str) -> str:
        if key not in element.attrs:
            raise InputError(f"{self._where(element)} lacks attribute {key!r}; NCCL writes "
                             f"it in every dump (re-dump with NCCL_TOPO_DUMP_FILE)")
        return element.attrs[key]

    def _int(self, element: Element, key: str, default: int | None = None) -> int:
        if default is not None and key not in element.attrs:
            return default
        text = self._attr(element, key)
        try:
            return int(text, 0)
        except ValueError:
            raise InputError(f"{self._where(element)}: attribute {key}={text!r} is not an "
                             "integer") from None

    # -------------------------------------------------------------------- walk

    def build(self, root: Element, nodes: int, name: str) -> Topology:
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
        nics = dict(sorted(self.nics.items(),
                           key=lambda item: pci_tree.busid_key(self.nic_busids[item[0]])))
        nic_source = "NIC speeds from the dump's <net speed>"
        if self.options.nic_gbits is not None:
            if not self.options.nic_gbits > 0:
                raise InputError(f"--nic-gbits {self.options.nic_gbits:g}: give a positive "
                                 "speed in Gb/s")
            nics = {nic: self.options.nic_gbits / 8 for nic in nics}
            nic_source = f"NIC speed {self.options.nic_gbits:g} Gb/s (--nic-gbits)"
        links, fabric, memory = host_memory.through_memory(
            links, self.fabric, {cpu: families[host] for host, members in sockets.items()
                                 for cpu in members})
        provenance = self._provenance(families, links)
        if memory:
            provenance = Provenance({**provenance.links, host_memory.MEMORY_KIND: memory},
                                    provenance.warnings)
        try:
            server = Topology(name, len(ranks), tuple(links), fabric, groups,
                              source=source, cost=zoo.GPU_SERVER_COST,
                              provenance=provenance)
            if len(hosts) > 1:
                server = self._join_hosts(server, hosts)
            topology = link_table.join_nodes(server, nics, nodes,
                                             fabric=self.options.network,
                                             nic_source=nic_source)
            topology.check_connected()
        except TopologyError as error:
            raise TopologyError(f"{self.source}: {error}") from None
        return topology

    def _provenance(self, families: dict[int, str], links: list[Link]) -> Provenance:
        """Each link kind's source, and the import's corrections."""
        kinds = {lk.kind for lk in links}
        origin = {"pcie": nccl_pci.PCIE_SOURCE + (
            f"; {sum('bridge' in w for w in self.warnings)} bridge(s) modelled at their "
            "devices' speed (see warnings)" if any("modelled at" in w for w in self.warnings)
            else "")}
        if "nvlink" in kinds:
            origin["nvlink"] = ("the dump's <nvlink count tclass> per GPU, GB/s per NVLink by "
                                "its sm (ccweave's link table)")
        if "c2c" in kinds:
            origin["c2c"] = "the dump's <c2c bw count>"
        for family in set(families.values()):
            kind = _CPU_LINK_KIND.get(family, "sys")
            origin[kind] = (f"{family} socket link, {link_table.CPU_LINK_GBPS[family]:g} GB/s "
                            "(ccweave's link table)")
        warnings = list(self.warnings)
        if self.width_zero:
            shown = ", ".join(self.width_zero[:4])
            more = f" and {len(self.width_zero) - 4} more" if len(self.width_zero) > 4 else ""
            warnings.insert(0, f"link_width 0 (unreported) on {len(self.width_zero)} "
                               f"device(s) ({shown}{more}): taken as x16, as NCCL does")
        return Provenance(origin, tuple(warnings))

    def _family(self, cpu: Element) -> str:
        return link_table.cpu_family(cpu.attrs.get("arch", ""), cpu.attrs.get("vendor", ""),
                                     self._int(cpu, "familyid", 0), self._int(cpu, "modelid", 0))

    def _cpu(self, element: Element, host: int) -> str:
        numa = self._int(element, "numaid")
        cpu_name = f"{self.prefixes[host]}cpu{numa}"
        if cpu_name in self.fabric:
            raise InputError(f"{self._where(element)}: a second <cpu> with numaid={numa} "
                             "on one host")
        self.fabric[cpu_name] = NodeKind.CPU
        for child in element.children:
            if child.tag == "pci":
                self._pci(child, cpu_name, cpu_name, host, cpu_name)
            elif child.tag == "nic":
                self._nic(child, cpu_name, None, host)
        return cpu_name

    def _pci(self, element: Element, parent: str, cpu: str, host: int,
             path: str) -> tuple[float, list[str]] | None:
        """Add a PCI device under ``parent`` (``path``: the host path to it, for messages);
        the fastest device link below it and the devices' names, or None when nothing of
        use hangs below it."""
        pci_class = self._attr(element, "class").lower()
        busid = normal_busid(self._attr(element, "busid"))
        gbps = self._pcie_gbps(element, busid)
        path = f"{path} -> {busid}"
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
            return gbps, [f"GPU {busid}"]
        if nic is not None:
            nic_name = self._nic(nic, parent, gbps, host, busid)
            return None if nic_name is None else (gbps, [f"NIC {nic_name}"])
        if pci_class.startswith("0x03"):  # a GPU this job did not use
            return None
        switch = f"{self.prefixes[host]}pcie@{busid}"
        self.fabric[switch] = NodeKind.PCIE
        below = [found for child in element.children if child.tag == "pci"
                 if (found := self._pci(child, switch, cpu, host, path)) is not None]
        if below:
            fastest = max(figure for figure, _ in below)
            devices = [label for _, labels in below for label in labels]
            shown = ", ".join(devices[:3]) + (f" and {len(devices) - 3} more"
                                              if len(devices) > 3 else "")
            figure = (f"{element.attrs.get('link_speed', '').strip()} "
                      f"x{element.attrs.get('link_width')}")
            gbps, warning = pci_tree.bridge_figure(busid, f"{path} -> {shown}", gbps, figure,
                                                   fastest, self.options.keep_link_speeds)
            if warning:
                self.warnings.append(warning)
            self.links += link_table.duplex(switch, parent, gbps, link_table.PCIE_ALPHA_US,
                                            "pcie")
            return fastest, devices
        del self.fabric[switch]
        self.links = [lk for lk in self.links if switch not in (lk.src, lk.dst)]
        return None

    def _pcie_gbps(self, element: Element, busid: str) -> float:
        width = self._int(element, "link_width")
        speed = self._attr(element, "link_speed")
        gen = link_table.pcie_gen(speed)
        if gen is None:
            self.warnings.append(f"{busid}: link_speed {speed!r} unknown, taken as PCIe Gen3 "
                                 "(as NCCL does)")
            gen = 3
        if width < 0:
            raise InputError(f"{self._where(element)}: link_width={width} is negative")
        if width == 0:
            self.width_zero.append(busid)
        return link_table.pcie_gbps(gen, width)

    def _nic(self, element: Element, parent: str, gbps: float | None, host: int,
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
        self.nic_busids[nic_name] = busid or nic_name
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
                    target = normal_busid(self._attr(child, "target"))
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
        origin = {**server.provenance.links, "net": "NIC speeds from the dump's <net speed>; "
                  "every host's NICs on one non-blocking switch"}
        return Topology(server.name, server.num_ranks, tuple(links), fabric, server.groups,
                        server.local_bandwidth, server.source, server.cost,
                        Provenance(origin, server.provenance.warnings))


_CPU_LINK_KIND = {"intel-bdw": "qpi", "intel-skl": "upi", "intel-srp": "upi", "intel-erp": "upi",
                  "amd": "xgmi", "power": "xbus"}
