"""Host memory as links of its own in imported machines (ccweave.topology.host_memory)."""

from __future__ import annotations

import pytest

from ccweave.collectives import Collective, Kind
from ccweave.schedule import Buffer, ScheduleBuilder
from ccweave.simulate import simulate
from ccweave.topology import host_memory, nccl_xml
from ccweave.topology.model import Link, NodeKind
from ccweave.topology.nccl_xml import Options

GPU = ('<pci busid="ffff:ff:0{n}.0" class="0x060400" link_speed="32.0 GT/s PCIe" '
       'link_width="16"><pci busid="000{n}:00:00.0" class="0x030200" '
       'link_speed="32.0 GT/s PCIe" link_width="16"/></pci>')


def socket_of_four(model: int = 143) -> str:
    """A bare PCI tree: one Intel socket (modelid 143: Sapphire Rapids), four GPUs on x16
    Gen5 bridges, as Azure's ND H100 v5 file has them per socket."""
    gpus = "".join(GPU.format(n=n) for n in range(1, 5))
    return (f'<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" '
            f'familyid="6" modelid="{model}">{gpus}</cpu></system>')


def test_cpu_links_pass_half_the_socket_peak_each_way_and_socket_links_stay():
    links = [Link(0, "sw", 64e9), Link("sw", 0, 64e9), Link("sw", "cpu0", 256e9, 5e-7, "pcie"),
             Link("cpu0", "sw", 256e9, 5e-7, "pcie"), Link("cpu0", "cpu1", 32e9, 0, "upi"),
             Link("cpu1", "cpu0", 32e9, 0, "upi"), Link("sw", "cpu1", 256e9)]
    fabric = {"sw": NodeKind.PCIE, "cpu0": NodeKind.CPU, "cpu1": NodeKind.CPU}
    out, nodes, source = host_memory.through_memory(
        links, fabric, {"cpu0": "intel-srp", "cpu1": "power"})  # POWER: no figure
    pairs = {(lk.src, lk.dst): lk for lk in out}
    assert pairs["sw", "cpu0.write"].bandwidth == 256e9 and pairs["sw", "cpu0.write"].kind == "pcie"
    assert pairs["cpu0.read", "sw"].alpha == 5e-7
    assert pairs["cpu0.write", "cpu0"].bandwidth == 153.6e9 == pairs["cpu0", "cpu0.read"].bandwidth
    assert pairs["cpu0.write", "cpu0"].kind == "memory"
    assert ("cpu0", "cpu1") in pairs and ("cpu1", "cpu0") in pairs  # sockets join as before
    assert ("sw", "cpu1") in pairs and "cpu1.write" not in nodes
    assert nodes["cpu0.write"] is NodeKind.PCIE and nodes["cpu0"] is NodeKind.CPU
    assert "intel-srp 307.2 GB/s per socket" in source
    unchanged = host_memory.through_memory(links, fabric, {"cpu0": "arm", "cpu1": "other"})
    assert unchanged == (links, fabric, None)
    # PCIe that cannot outrun the memory (153.6 GB/s each way) leaves the machine as it was
    slow = [Link(lk.src, lk.dst, min(lk.bandwidth, 150e9), lk.alpha, lk.kind) for lk in links]
    assert host_memory.through_memory(slow, fabric, {"cpu0": "intel-srp"}) == \
        (slow, fabric, None)


def test_staged_copies_of_one_socket_share_its_memory():
    """Four GPUs staging through one Sapphire Rapids socket at once get its DRAM's 153.6
    GB/s each way between them (38.4 each), not their PCIe links' 64 GB/s each; one alone
    still gets its PCIe link. Without the memory links the four ran at 4 x 64 GB/s, more
    than the socket's eight DDR5-4800 channels move."""
    topo = nccl_xml.parse(socket_of_four(), source="tree.xml",
                          options=Options(gpu_fabric=("pcie-only",)))
    size = 2**30

    def ring_of_copies(pairs):
        builder = ScheduleBuilder(Collective(Kind.ALLGATHER, 4, 1))
        for src, dst in pairs:
            route = topo.route(src, dst)
            via = tuple(topo.links[k].dst for k in route[:-1])
            assert "cpu0" in via and topo.staged(via)
            builder.add(src, dst, Buffer.INPUT, 0, Buffer.OUTPUT, src, 1, via=via)
        return simulate(builder.build("copies"), topo, size)

    chunk = size / 4
    latency = 2 * (topo.cost.staging_latency + 2 * 0.5e-6)  # two stages, two PCIe hops each
    alone = ring_of_copies([(0, 1)])
    assert alone.time_s == pytest.approx(2 * chunk / 64e9 + latency, rel=1e-6)
    four = ring_of_copies([(0, 1), (1, 2), (2, 3), (3, 0)])
    assert four.time_s == pytest.approx(2 * chunk / 38.4e9 + latency, rel=1e-6)
    memory = [i for i, lk in enumerate(topo.links) if lk.kind == "memory"]
    assert four.link_bytes[memory].tolist() == [4 * chunk, 4 * chunk]


def test_a_cpu_without_a_memory_figure_keeps_its_pcie_host_path():
    topo = nccl_xml.parse(socket_of_four().replace('vendor="GenuineIntel"', 'vendor="x"'),
                          source="tree.xml", options=Options(gpu_fabric=("pcie-only",)))
    assert "memory" not in topo.provenance.links
    assert not [lk for lk in topo.links if lk.kind == "memory"]
    assert topo.link("pcie@ffff:ff:01.0", "cpu0").bandwidth == 64e9


def test_nccl_view_does_not_take_memory_links_for_nvlink():
    from ccweave.nccl import constants as C
    from ccweave.nccl.view import NodeView

    topo = nccl_xml.parse(socket_of_four(), source="tree.xml",
                          options=Options(gpu_fabric=("pcie-only",)))
    view = NodeView(topo, 90, "intel-srp")
    memory = [i for i, lk in enumerate(topo.links) if lk.kind == "memory"]
    assert memory and not any(view.is_nvlink(i) for i in memory)
    assert view.path_type(topo.route(0, 1)) == C.PATH_PHB  # through the CPU, once
