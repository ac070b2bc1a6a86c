"""Host memory as a link of its own: what a socket's DRAM can move, on every route through
its CPU node.

An imported CPU node is where a host path stages its bytes (GPU -> PCIe -> host memory
-> PCIe -> GPU). Its PCIe links alone would let every GPU of a socket stage at its full
PCIe speed at once: on Azure's ND H100 v5 four GPUs at 64 GB/s each way are 512 GB/s of
DRAM traffic per socket, where a Sapphire Rapids socket's eight DDR5-4800 channels peak
at 307.2 GB/s. So each CPU node whose family has a published memory figure, and whose
PCIe links together can move more than half of it one way, gets two fabric nodes:
``CPU.write`` takes every link that came into the CPU from a non-CPU node and joins it by
a ``memory`` link of half the socket's peak, and ``CPU.read`` does the same for the links
out. A staged copy writes each byte once and reads it once, so the halves are what
staging can use of the whole; links between sockets stay on the CPU nodes themselves.
Where the PCIe links cannot outrun the memory (DGX-1: two PCIe3 x16 switches, 32 GB/s,
under 64) a memory link could never be the bottleneck, and the machine is left as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ccweave.topology.model import Link, NodeKind
from ccweave.units import GB_PER_S

MEMORY_KIND = "memory"

HOST_MEMORY_GBPS = {
    # peak GB/s of one socket's DRAM: channels x MT/s x 8 bytes, one DIMM per channel
    "intel-bdw": 76.8,  # Broadwell-EP (DGX-1's E5-2698 v4): 4 x DDR4-2400 (Intel ARK)
    "intel-skl": 128.0,  # Skylake-SP: 6 x DDR4-2666 (Cascade Lake's 2933: 140.8)
    "intel-srp": 307.2,  # Sapphire Rapids (Xeon 8480C/8480+): 8 x DDR5-4800 (Intel ARK)
    "intel-erp": 358.4,  # Emerald Rapids: 8 x DDR5-5600 (Intel ARK)
    "amd": 204.8,  # EPYC Rome/Milan (DGX A100's 7742): 8 x DDR4-3200 (AMD; Genoa has more)
}
"""Per CPU family (keys of :data:`ccweave.topology.link_table.CPU_LINK_GBPS`), the peak
bandwidth of one socket's memory. Families without a figure (POWER, Arm, unknown) keep
no memory link: their host paths are limited by their PCIe links only."""

SOURCE = ("host memory: half a socket's DRAM peak each way ({figures}; channels x MT/s x "
          "8 bytes, ccweave's link table), as a staged copy writes each byte once and "
          "reads it once")


def write_node(cpu: str) -> str:
    """The node every link into ``cpu``'s memory from its PCIe side passes."""
    return f"{cpu}.write"


def read_node(cpu: str) -> str:
    """The node every link out of ``cpu``'s memory to its PCIe side passes."""
    return f"{cpu}.read"


def through_memory(links: Sequence[Link], fabric: Mapping[str, NodeKind],
                   families: Mapping[str, str]) -> tuple[list[Link], dict[str, NodeKind],
                                                         str | None]:
    """``links`` and ``fabric`` with each CPU node of ``families`` (CPU node -> family)
    behind its memory links where they can bind (see the module docstring), and the
    provenance line for the ``memory`` links (None when none was added)."""

    def is_cpu(node: object) -> bool:
        return isinstance(node, str) and fabric.get(node) is NodeKind.CPU

    def pcie_side(cpu: str) -> float:
        """What the CPU's links to non-CPU nodes move together, the busier way."""
        into = sum(lk.bandwidth for lk in links if lk.dst == cpu and not is_cpu(lk.src))
        out = sum(lk.bandwidth for lk in links if lk.src == cpu and not is_cpu(lk.dst))
        return max(into, out)

    gbps = {cpu: HOST_MEMORY_GBPS[family] for cpu, family in families.items()
            if family in HOST_MEMORY_GBPS and is_cpu(cpu)
            and pcie_side(cpu) > HOST_MEMORY_GBPS[family] / 2 * GB_PER_S}
    if not gbps:
        return list(links), dict(fabric), None

    out: list[Link] = []
    for link in links:
        src, dst = link.src, link.dst
        if dst in gbps and not is_cpu(src):
            dst = write_node(dst)  # type: ignore[arg-type]
        if src in gbps and not is_cpu(dst):
            src = read_node(src)  # type: ignore[arg-type]
        out.append(Link(src, dst, link.bandwidth, link.alpha, link.kind))
    nodes = dict(fabric)
    for cpu, peak in gbps.items():
        nodes[write_node(cpu)] = NodeKind.PCIE
        nodes[read_node(cpu)] = NodeKind.PCIE
        out.append(Link(write_node(cpu), cpu, peak / 2 * GB_PER_S, 0.0, MEMORY_KIND))
        out.append(Link(cpu, read_node(cpu), peak / 2 * GB_PER_S, 0.0, MEMORY_KIND))
    figures = ", ".join(sorted({f"{families[cpu]} {peak:g} GB/s per socket"
                                for cpu, peak in gbps.items()}))
    return out, nodes, SOURCE.format(figures=figures)
