"""direct-multipath: direct allgather split over every one-hop route in the shares a
concurrent-flow LP balances; where a socket's GPUs share its memory link it meets the
delivery bound that the NVLink-only direct schedule misses."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccweave.bounds import lower_bound
from ccweave.errors import NotApplicableError
from ccweave.simulate import simulate
from ccweave.synth.registry import synthesize
from ccweave.topology import nccl_xml, zoo
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.topology.nccl_xml import Options
from ccweave.verify import verify
from tests.test_topology_files import AZURE, needs_azure

GB = 1e9
M = 2**30


def nvswitch_with_sockets(ranks: int, nvlink: float, pcie: float, memory: float) -> Topology:
    """``ranks`` GPUs on one switch, half below each socket: PCIe up into the socket's
    memory write link, down out of its read link (as host_memory models a socket)."""
    links: list[Link] = []
    fabric = {"sw": NodeKind.SWITCH}
    for r in range(ranks):
        links += [Link(r, "sw", nvlink * GB, 0.7e-6), Link("sw", r, nvlink * GB, 0.7e-6)]
    for socket in (0, 1):
        cpu = f"cpu{socket}"
        fabric |= {cpu: NodeKind.CPU, f"{cpu}.write": NodeKind.PCIE,
                   f"{cpu}.read": NodeKind.PCIE}
        links += [Link(f"{cpu}.write", cpu, memory * GB, 0.0, "memory"),
                  Link(cpu, f"{cpu}.read", memory * GB, 0.0, "memory")]
        for r in range(socket * ranks // 2, (socket + 1) * ranks // 2):
            links += [Link(r, f"{cpu}.write", pcie * GB, 0.5e-6, "pcie"),
                      Link(f"{cpu}.read", r, pcie * GB, 0.5e-6, "pcie")]
    links += [Link("cpu0", "cpu1", 32 * GB, 0.5e-6), Link("cpu1", "cpu0", 32 * GB, 0.5e-6)]
    return Topology(f"nvswitch{ranks}-sockets", ranks, tuple(links), fabric,
                    cost=zoo.GPU_SERVER_COST)


def test_host_paths_beside_the_switch_reach_the_delivery_bound():
    topology = nvswitch_with_sockets(8, nvlink=450, pcie=64, memory=153.6)
    bound = lower_bound(topology, "allgather", M)
    assert bound.method.startswith("delivery")
    schedule = synthesize(topology, "allgather", "direct-multipath", size=M)
    verify(schedule, topology)
    time_s = simulate(schedule, topology, M).time_s
    assert time_s <= 1.03 * bound.time_s
    direct = simulate(synthesize(topology, "allgather", "direct"), topology, M).time_s
    assert time_s < 0.95 * direct
    staged = [t for t in schedule.transfers if topology.staged(t.via)]
    assert staged and all(t.count == 1 for t in staged)  # chunk by chunk through memory


@needs_azure
def test_the_azure_import_at_1gb_is_within_1_03_of_its_bound():
    topology = nccl_xml.read(AZURE, options=Options(gpu_fabric=("h100-nvswitch",)))
    schedule = synthesize(topology, "allgather", "direct-multipath", size=M)
    verify(schedule, topology)
    bound = lower_bound(topology, "allgather", M)
    assert simulate(schedule, topology, M).time_s <= 1.03 * bound.time_s


def test_the_zoo_dgx_h100_at_1gb_is_within_1_03_of_its_bound():
    """The zoo's DGX H100 has the Azure node's host paths, so the same figure holds
    where the fixture is not at hand."""
    topology = zoo.get("dgx-h100")
    schedule = synthesize(topology, "allgather", "direct-multipath", size=M)
    verify(schedule, topology)
    assert simulate(schedule, topology, M).time_s <= 1.03 * lower_bound(
        topology, "allgather", M).time_s


@pytest.mark.parametrize("machine", ["dgx-a100", "switch:8", "dgx1"])
def test_not_applicable_where_no_route_beside_the_cheapest_helps(machine):
    with pytest.raises(NotApplicableError, match="direct"):
        synthesize(zoo.get(machine), "allgather", "direct-multipath")


def test_other_collectives_are_refused():
    topology = nvswitch_with_sockets(4, nvlink=100, pcie=32, memory=20)
    with pytest.raises(NotApplicableError, match="does not build allreduce"):
        synthesize(topology, "allreduce", "direct-multipath")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ranks=st.sampled_from([2, 4, 6]), nvlink=st.sampled_from([25.0, 100.0, 450.0]),
       pcie=st.sampled_from([16.0, 64.0]), memory=st.sampled_from([8.0, 50.0, 300.0]),
       chunks=st.sampled_from([None, 1, 7, 64]))
def test_every_schedule_verifies_and_never_beats_the_bound(ranks, nvlink, pcie, memory,
                                                             chunks):
    topology = nvswitch_with_sockets(ranks, nvlink, pcie, memory)
    try:
        schedule = synthesize(topology, "allgather", "direct-multipath", chunks=chunks)
    except NotApplicableError:
        return
    verify(schedule, topology)
    assert schedule.collective.chunks_per_rank == (chunks or 64)
    for size in (4096, M):
        bound = lower_bound(topology, "allgather", size)
        assert simulate(schedule, topology, size).time_s >= bound.time_s * (1 - 1e-9)
