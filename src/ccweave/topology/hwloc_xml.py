"""Import hwloc's XML (``lstopo --of xml``, ``hwloc-ls``) as a Topology.

hwloc 2.x and 3.x XML (``<topology version="2.0">``, its ``hwloc2.dtd``): ``<object>``
elements nest Machine, Package, Group and NUMANode objects, and I/O objects hang below
the non-I/O object they are local to: ``Bridge`` (``bridge_type="0-1"``: a host bridge,
the CPU's root complex; ``1-1``: a PCI bridge or switch port), ``PCIDev`` and ``OSDev``.
We read, unchanged:

- ``pci_busid``; ``pci_type`` ("CCCC [vvvv:dddd] ..."): the class (``03xx`` display,
  ``02xx`` network, ``0680`` NVSwitch) and the vendor;
- ``pci_link_speed``: the link to the parent in GB/s (hwloc's ``linkspeed``: "the
  currently configured speed of the entire PCI link (sum of the bandwidth of all PCI
  lanes in that link)", hwloc.h), per direction, encoding overhead already out
  (15.75 GB/s for Gen3 x16); 0 means hwloc could not tell;
- NUMA nodes: each becomes a CPU node ``cpuN`` (as NCCL makes one ``<cpu>`` per NUMA
  node), and an I/O object belongs to the NUMA node of its nearest non-I/O ancestor
  that has one; the Package's ``CPUVendor``/``CPUFamilyNumber``/``CPUModelNumber`` info
  picks the socket-link figure;
- the ``NVLinkBandwidth`` distances matrix (hwloc's NVML backend: unidirectional MB/s
  between GPUs, NVSwitches and POWER CPUs), when present, as the GPU fabric.

A GPU is a ``03xx`` device of NVIDIA, or one with a GPU or co-processor OS device (hwloc's
CUDA, NVML, RSMI or OpenCL backends found it): a server's VGA display is not one. A NIC
is a device with an OpenFabrics (RDMA) OS device, or class ``0207`` (InfiniBand);
Ethernet ports without RDMA are left out (NCCL's IB/RoCE transport needs RDMA), and said
so.
"""

from __future__ import annotations

from pathlib import Path

from ccweave.errors import InputError
from ccweave.topology import gpu_fabric, link_table, pci_tree
from ccweave.topology.gpu_fabric import GpuFabric
from ccweave.topology.model import Topology
from ccweave.topology.nccl_xml import DEFAULT_OPTIONS, Element, Options, parse_xml
from ccweave.topology.pci_tree import BRIDGE, GPU, NIC, PciMachine, PciNode, Socket

PCIE_SOURCE = "hwloc's pci_link_speed per object, GB/s, read unchanged"
GPU_VENDOR = "10de"
_IO = ("Bridge", "PCIDev", "OSDev")
_GPU_OSDEV = {2: (1, 5), 3: (4, 8)}
"""OS device types that mark a GPU: hwloc 2's enum GPU (1) and COPROC (5); hwloc 3's
bits GPU (4) and COPROC (8)."""
_RDMA_OSDEV = {2: (3,), 3: (32,)}
"""OpenFabrics: hwloc 2's enum value 3; hwloc 3's bit 32."""


def looks_like_hwloc(text: str) -> bool:
    """Whether ``text`` is hwloc XML (its root element is ``<topology>``)."""
    head = text[:4096]
    return "<topology" in head and "<system" not in head


def read(path: str | Path, *, nodes: int = 1, name: str | None = None,
         options: Options = DEFAULT_OPTIONS) -> Topology:
    """The Topology in an hwloc XML file (see the module docstring)."""
    from ccweave.infile import read_text

    path = Path(path)
    text = read_text(path, "give hwloc's XML (lstopo --of xml)")
    return parse(text, source=str(path), nodes=nodes, name=name or path.stem, options=options)


def parse(text: str, *, source: str = "hwloc XML", nodes: int = 1, name: str = "hwloc",
          options: Options = DEFAULT_OPTIONS) -> Topology:
    """The Topology in hwloc XML ``text``; ``source`` names it in errors."""
    root = parse_xml(text, source, "hwloc's XML (lstopo --of xml)")
    if root.tag != "topology":
        raise InputError(f"{source}: line {root.line}: the root element is <{root.tag}>; "
                         "hwloc's XML starts with <topology version=...>")
    version = root.attrs.get("version", "")
    major = version.split(".")[0]
    if major not in ("2", "3"):
        raise InputError(f"{source}: line {root.line}: hwloc XML version {version or 'none'} "
                         "(hwloc 1.x); export it with hwloc 2 or later: lstopo --of xml")
    reader = _Reader(source, int(major))
    machine = reader.machine(root)
    gpus = machine.devices(GPU)
    if not gpus:
        raise InputError(f"{source}: no GPU among the PCI devices (class 03xx of NVIDIA or "
                         "AMD); was lstopo run with its I/O discovery on (not --no-io)?")
    busids = [gpu.busid for gpu in gpus]
    from_file = reader.nvlink_fabric(root, busids)
    if from_file is not None and options.gpu_fabric:
        raise InputError(f"{source}: the file has hwloc's NVLinkBandwidth matrix, which says "
                         "how the GPUs are joined; drop --gpu-fabric")
    fabric = from_file or gpu_fabric.resolve(options.gpu_fabric, busids, gpu=options.gpu,
                                             source=source)
    return pci_tree.build(machine, fabric, name=name, nic_gbits=options.nic_gbits,
                          keep_link_speeds=options.keep_link_speeds, nodes=nodes,
                          network=options.network)


class _Reader:
    def __init__(self, source: str, major: int) -> None:
        self.source = source
        self.major = major
        self.sockets: dict[int, Socket] = {}
        self.ignored: list[str] = []
        self.by_gp: dict[str, Element] = {}
        self.parent_of: dict[int, Element] = {}
        self.speedless: list[str] = []

    def where(self, element: Element) -> str:
        kind = element.attrs.get("type", element.tag)
        return f"{self.source}: line {element.line}: <object type={kind!r}>"

    # ----------------------------------------------------------------- the tree

    def machine(self, root: Element) -> PciMachine:
        machine = PciMachine(self.source, PCIE_SOURCE)
        arch = ""
        for element in root.children:
            if element.tag == "object":
                arch = arch or _info(element, "Architecture")
                self._walk(element, None, "other", arch)
        machine.sockets = [self.sockets[numa] for numa in sorted(self.sockets)
                           if self.sockets[numa].children]
        if self.ignored:
            machine.notes.append(f"left out: {', '.join(self.ignored[:4])}"
                                 + (f" and {len(self.ignored) - 4} more"
                                    if len(self.ignored) > 4 else ""))
        if self.speedless:
            machine.warnings.append(f"pci_link_speed 0 (hwloc could not tell) on "
                                    f"{len(self.speedless)} object(s) "
                                    f"({', '.join(self.speedless[:4])}"
                                    + (" ..." if len(self.speedless) > 4 else "") + ")")
        return machine

    def _walk(self, element: Element, numa: int | None, family: str, arch: str) -> None:
        """Visit the non-I/O ``element``; its I/O children go to NUMA node ``numa``."""
        self._index(element)
        kind = element.attrs.get("type", "")
        if kind == "Package":
            family = link_table.cpu_family(
                arch, _info(element, "CPUVendor"),
                _number(_info(element, "CPUFamilyNumber")),
                _number(_info(element, "CPUModelNumber")))
        numas = [child for child in element.children
                 if child.tag == "object" and child.attrs.get("type") == "NUMANode"]
        if numas:
            numa = self._os_index(numas[0])
        for child in element.children:
            if child.tag != "object":
                continue
            child_kind = child.attrs.get("type", "")
            if child_kind == "NUMANode":
                self._index(child)
                index = self._os_index(child)
                self.sockets.setdefault(index, Socket(f"cpu{index}", family))
            elif child_kind in _IO:
                home = 0 if numa is None else numa
                socket = self.sockets.setdefault(home, Socket(f"cpu{home}", family))
                if socket.family == "other":
                    socket.family = family
                socket.children += self._io(child, element)
            else:
                self._walk(child, numa, family, arch)

    def _io(self, element: Element, parent: Element) -> list[PciNode]:
        """The PCI devices of the I/O object ``element`` (a host bridge is transparent)."""
        self._index(element)
        self.parent_of[id(element)] = parent
        kind = element.attrs.get("type", "")
        children = [child for child in element.children if child.tag == "object"]
        if kind == "OSDev":
            return []
        if kind == "Bridge" and element.attrs.get("bridge_type", "").startswith("0-"):
            return [node for child in children for node in self._io(child, element)]
        busid = _busid(element.attrs.get("pci_busid", ""))
        if not busid:
            raise InputError(f"{self.where(element)} lacks attribute 'pci_busid'; hwloc "
                             "writes it on every PCI bridge and device")
        gbps, figure = self._speed(element, busid)
        if kind == "Bridge":
            node = PciNode(busid, BRIDGE, gbps, figure, f"line {element.line}")
            node.children = [n for child in children for n in self._io(child, element)]
            return [node]
        if kind != "PCIDev":
            raise InputError(f"{self.where(element)}: unknown object type below a PCI bridge; "
                             "expected Bridge, PCIDev or OSDev")
        role, name = self._role(element, busid, children)
        if role is None:
            return []
        for child in children:
            self._index(child)
            self.parent_of[id(child)] = element
        return [PciNode(busid, role, gbps, figure, f"line {element.line}", name=name)]

    def _role(self, element: Element, busid: str, osdevs: list[Element]
              ) -> tuple[str | None, str]:
        pci_class, vendor = _pci_type(element.attrs.get("pci_type", ""))
        if not pci_class:
            raise InputError(f"{self.where(element)}: pci_type "
                             f"{element.attrs.get('pci_type', '')!r} is not 'CCCC [vvvv:dddd] "
                             "...' as hwloc writes it")
        types = [_number(child.attrs.get("osdev_type", "")) for child in osdevs
                 if child.attrs.get("type") == "OSDev"]
        rdma = next((child.attrs.get("name", "") for child in osdevs
                     if child.attrs.get("type") == "OSDev"
                     and self._is(child, _RDMA_OSDEV)), None)
        if pci_class.startswith("03"):
            if vendor == GPU_VENDOR or any(self._type_in(t, _GPU_OSDEV) for t in types):
                return GPU, ""
            self.ignored.append(f"display {busid} [{vendor}] (not a GPU vendor)")
            return None, ""
        if rdma is not None or pci_class.startswith("0207"):
            return NIC, rdma or ""
        if pci_class.startswith("02"):
            self.ignored.append(f"network {busid} (no RDMA device)")
        return None, ""

    def _is(self, osdev: Element, table: dict[int, tuple[int, ...]]) -> bool:
        return self._type_in(_number(osdev.attrs.get("osdev_type", "")), table)

    def _type_in(self, value: int, table: dict[int, tuple[int, ...]]) -> bool:
        if self.major >= 3:
            return any(value & bit for bit in table[3])
        return value in table[2]

    def _speed(self, element: Element, busid: str) -> tuple[float | None, str]:
        text = element.attrs.get("pci_link_speed", "0")
        try:
            gbps = float(text)
        except ValueError:
            raise InputError(f"{self.where(element)}: pci_link_speed={text!r} is not a number "
                             "(GB/s)") from None
        if not gbps >= 0 or gbps == float("inf"):
            raise InputError(f"{self.where(element)}: pci_link_speed={text!r} must be a "
                             "finite number >= 0")
        if gbps == 0:
            self.speedless.append(busid)
            return None, "pci_link_speed 0"
        return gbps, f"pci_link_speed {gbps:g} GB/s"

    def _os_index(self, element: Element) -> int:
        text = element.attrs.get("os_index", "")
        try:
            return int(text)
        except ValueError:
            raise InputError(f"{self.where(element)}: os_index={text!r} is not an integer") \
                from None

    def _index(self, element: Element) -> None:
        if "gp_index" in element.attrs:
            self.by_gp[element.attrs["gp_index"]] = element

    # --------------------------------------------------------------- NVLinks

    def nvlink_fabric(self, root: Element, busids: list[str]) -> GpuFabric | None:
        """The GPU fabric from hwloc's NVLinkBandwidth matrix, or None without one."""
        matrix = next((child for child in root.children
                       if child.tag in ("distances2", "distances2hetero")
                       and child.attrs.get("name") == "NVLinkBandwidth"), None)
        if matrix is None:
            return None
        where = f"{self.source}: line {matrix.line}: <{matrix.tag} name='NVLinkBandwidth'>"
        refs = " ".join(c.text for c in matrix.children if c.tag == "indexes").split()
        values = " ".join(c.text for c in matrix.children if c.tag == "u64values").split()
        count = _number(matrix.attrs.get("nbobjs", ""))
        if count < 1 or len(refs) != count or len(values) != count * count:
            raise InputError(f"{where}: nbobjs={matrix.attrs.get('nbobjs')!r} with "
                             f"{len(refs)} indexes and {len(values)} values; expected n "
                             "indexes and n x n values")
        ends = [self._end(ref, matrix, busids, where) for ref in refs]
        rank = {busid: number for number, busid in enumerate(busids)}
        switch: dict[int, float] = {}
        pairs: dict[tuple[int, int], float] = {}
        cpu: dict[int, float] = {}
        for i, a in enumerate(ends):
            for j, b in enumerate(ends):
                mbps = _number(values[i * count + j])
                if i == j or mbps <= 0 or a[0] != "gpu":
                    continue
                gbps = mbps / 1000.0
                if b[0] == "gpu":
                    pairs[rank[a[1]], rank[b[1]]] = gbps
                elif b[0] == "switch":
                    switch[rank[a[1]]] = switch.get(rank[a[1]], 0) + gbps
                elif b[0] == "cpu":
                    cpu[rank[a[1]]] = cpu.get(rank[a[1]], 0) + gbps
        return GpuFabric(f"hwloc's NVLinkBandwidth matrix in {self.source} (NVML; MB/s read "
                         "unchanged; all NVSwitches merged into one, as NCCL does)",
                         switch, pairs, cpu)

    def _end(self, ref: str, matrix: Element, busids: list[str], where: str
             ) -> tuple[str, str]:
        """("gpu", busid), ("switch", busid), ("cpu", "") or ("other", "") for one index."""
        kind, _, gp = ref.rpartition(":")
        if not kind:
            kind = matrix.attrs.get("type", "")
        if matrix.attrs.get("indexing", "gp") == "os" and matrix.tag == "distances2":
            raise InputError(f"{where}: indexing='os'; hwloc writes NVLinkBandwidth with gp "
                             "indexes")
        element = self.by_gp.get(gp)
        if element is None:
            raise InputError(f"{where}: index {ref!r} names no object of the file")
        if kind == "Package":
            return "cpu", ""
        device = self.parent_of.get(id(element)) if kind == "OSDev" else element
        busid = _busid(device.attrs.get("pci_busid", "")) if device else ""
        if busid in busids:
            return "gpu", busid
        if device is not None and (device.attrs.get("subtype") == "NVSwitch"
                                   or _pci_type(device.attrs.get("pci_type", ""))[0] == "0680"):
            return "switch", busid
        return "other", ""


def _busid(text: str) -> str:
    from ccweave.topology.nccl_xml import normal_busid

    return normal_busid(text) if text.strip() else ""


def _pci_type(text: str) -> tuple[str, str]:
    """(class as 4 hex digits, vendor as 4 hex digits) of hwloc's ``pci_type``."""
    parts = text.split()
    if len(parts) < 2 or len(parts[0]) != 4 or not parts[1].startswith("["):
        return "", ""
    return parts[0].lower(), parts[1].strip("[]").split(":")[0].lower()


def _info(element: Element, name: str) -> str:
    return next((child.attrs.get("value", "") for child in element.children
                 if child.tag == "info" and child.attrs.get("name") == name), "")


def _number(text: str) -> int:
    try:
        return int(text.strip(), 0)
    except ValueError:
        return -1
