"""An ``NCCL_TOPO_FILE`` that holds only the PCI tree, as cloud VMs ship it.

Azure's file for its ND H100 v5 VMs lists each GPU and NIC as a ``<pci>`` element known
by its class code alone, with no ``<gpu>`` or ``<nic>`` child: NCCL fills those in at
run time. We read the tree as NCCL's ``src/graph/topo.cc`` reads a ``<pci>`` (its
``kvDictPciClass``, matched as a prefix): ``0x060400`` a bridge, ``0x068000`` an NVSwitch
(left out: the GPU fabric comes from ``--gpu-fabric``), ``0x03`` a GPU, ``0x02`` a NIC
(Ethernet ``0x0200`` as well as InfiniBand ``0x0207``), anything else a PCI switch. A
VGA controller (``0x0300``) whose ``vendor`` is neither NVIDIA nor AMD is a server's
management display, not a GPU. The link of each ``<pci>`` to its parent is ``link_width``
x ``link_speed`` (width 0, unreported, taken as x16 and an unknown speed as Gen3, as
NCCL does, each with a warning).
"""

from __future__ import annotations

from ccweave.errors import InputError
from ccweave.topology import link_table
from ccweave.topology.pci_tree import BRIDGE, GPU, NIC, PciMachine, PciNode, Socket

GPU_VENDORS = ("0x10de", "0x1002")
"""NVIDIA and AMD: a VGA-class device of another vendor is a BMC's display."""
PCIE_SOURCE = ("the file's link_speed x link_width per <pci> (width 0 taken as x16, an "
               "unknown speed as Gen3, as NCCL's topo.cc does), ccweave's per-lane figures")


def has_gpu_elements(root) -> bool:
    """Whether the parsed NCCL XML ``root`` names any GPU with a ``<gpu>`` element."""
    stack = [root]
    while stack:
        element = stack.pop()
        if element.tag == "gpu":
            return True
        stack.extend(element.children)
    return False


def read_tree(root, source: str) -> PciMachine:
    """The PCI tree under ``<system>`` (parsed by :func:`nccl_xml.parse_xml`)."""
    cpus = [child for child in root.children if child.tag == "cpu"]
    if not cpus:
        raise InputError(f"{source}: line {root.line}: <system> has no <cpu> element; is "
                         "this an NCCL topology file?")
    hosts = {cpu.attrs.get("host_hash", "") for cpu in cpus}
    if len(hosts) > 1:
        raise InputError(f"{source}: a PCI tree of {len(hosts)} hosts (host_hash); import one "
                         "host's tree and join copies with --nodes K")
    reader = _Reader(source)
    machine = PciMachine(source, PCIE_SOURCE)
    for cpu in cpus:
        numa = reader.integer(cpu, "numaid")
        name = f"cpu{numa}"
        if any(socket.name == name for socket in machine.sockets):
            raise InputError(f"{reader.where(cpu)}: a second <cpu> with numaid={numa}")
        family = link_table.cpu_family(cpu.attrs.get("arch", ""), cpu.attrs.get("vendor", ""),
                                       reader.integer(cpu, "familyid", 0),
                                       reader.integer(cpu, "modelid", 0))
        socket = Socket(name, family)
        socket.children = [node for child in cpu.children if child.tag == "pci"
                            if (node := reader.pci(child)) is not None]
        machine.sockets.append(socket)
    if reader.width_zero:
        shown = ", ".join(reader.width_zero[:4])
        more = f" and {len(reader.width_zero) - 4} more" if len(reader.width_zero) > 4 else ""
        machine.warnings.append(f"link_width 0 (unreported) on {len(reader.width_zero)} "
                                f"device(s) ({shown}{more}): taken as x16, as NCCL does")
    machine.warnings += reader.unknown_speed
    return machine


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source
        self.width_zero: list[str] = []
        self.unknown_speed: list[str] = []

    def where(self, element) -> str:
        return f"{self.source}: line {element.line}: <{element.tag}>"

    def attr(self, element, key: str) -> str:
        if key not in element.attrs:
            raise InputError(f"{self.where(element)} lacks attribute {key!r}; NCCL needs it "
                             "in every <pci> (write it as lspci/sysfs shows it)")
        return element.attrs[key]

    def integer(self, element, key: str, default: int | None = None) -> int:
        if default is not None and key not in element.attrs:
            return default
        text = self.attr(element, key)
        try:
            return int(text, 0)
        except ValueError:
            raise InputError(f"{self.where(element)}: attribute {key}={text!r} is not an "
                             "integer") from None

    def pci(self, element) -> PciNode | None:
        """The device ``element`` is, with its subtree; None for an NVSwitch."""
        pci_class = self.attr(element, "class").strip().lower()
        busid = _busid(self.attr(element, "busid"))
        width = self.integer(element, "link_width")
        speed = self.attr(element, "link_speed")
        gen = link_table.pcie_gen(speed)
        if width < 0:
            raise InputError(f"{self.where(element)}: link_width={width} is negative")
        if width == 0:
            self.width_zero.append(busid)
        if gen is None:
            self.unknown_speed.append(f"{busid}: link_speed {speed!r} unknown, taken as PCIe "
                                      "Gen3, as NCCL does")
        gbps = link_table.pcie_gbps(gen or 3, width)
        figure = f"{speed.strip() or 'no speed'} x{width}"
        nic = next((child for child in element.children if child.tag == "nic"), None)
        role = _role(pci_class, element.attrs.get("vendor", "").lower(), nic is not None)
        if role is None:
            return None
        node = PciNode(busid, role, gbps, figure, f"line {element.line}")
        if role == NIC and nic is not None:
            nets = [child for child in nic.children if child.tag == "net"]
            if nets:
                node.name = nets[0].attrs.get("name", "")
                node.nic_gbps = sum(link_table.net_gbps(self.integer(net, "speed", -1))
                                    for net in nets)
        if role == BRIDGE:
            node.children = [child_node for child in element.children if child.tag == "pci"
                             if (child_node := self.pci(child)) is not None]
        return node


def _role(pci_class: str, vendor: str, has_nic: bool) -> str | None:
    if has_nic or pci_class.startswith("0x02"):
        return NIC
    if pci_class.startswith("0x068000"):
        return None
    if pci_class.startswith("0x03"):
        if pci_class.startswith("0x0300") and vendor and vendor not in GPU_VENDORS:
            return BRIDGE  # a BMC's display: nothing below it, so it is dropped
        return GPU
    return BRIDGE


def _busid(text: str) -> str:
    from ccweave.topology.nccl_xml import normal_busid

    return normal_busid(text)
