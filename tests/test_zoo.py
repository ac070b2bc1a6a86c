"""The zoo reproduces the reference machines' figures."""

from __future__ import annotations

import pytest

from ccweave.errors import TopologyError
from ccweave.topology import io, zoo

SERVERS = ["dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-a100-4nic", "dgx-h100", "mist", "cedar"]


@pytest.mark.parametrize("name", [*SERVERS, "ndv2:2", "dgx2:2", "dgx-a100:4", "ring:8",
                                  "fully-connected:5", "switch:6", "mesh:3x4", "torus:4x4",
                                  "torus:2x3x4", "hypercube:3"])
def test_every_zoo_machine_loads_connected_with_a_source(name):
    topo = io.load(name)
    topo.check_connected()
    assert topo.source
    assert topo.name == name


def test_dgx1_nvlink_matrix_from_reference():
    topo = zoo.get("dgx1")
    for a in range(8):
        for b in range(8):
            link = topo.link(a, b)
            count = zoo.DGX1_NVLINKS[a][b]
            assert (link.bandwidth if link else 0) == pytest.approx(count * 25e9)
    nvlink_in = sum(lk.bandwidth for lk in topo.links if lk.dst == 0 and lk.kind == "nvlink")
    assert nvlink_in == pytest.approx(150e9)  # 6 NVLinks x 25 GB/s


def test_multi_node_joins_nics_through_one_switch():
    topo = zoo.get("ndv2:2")
    assert topo.num_ranks == 16
    assert topo.groups["node"] == (tuple(range(8)), tuple(range(8, 16)))
    route = [topo.links[i] for i in topo.route(0, 8)]
    assert "net" in [lk.dst for lk in route]
    assert min(lk.bandwidth for lk in route) == pytest.approx(12.5e9)


def test_dgx_a100_nics_are_one_per_gpu():
    topo = zoo.get("dgx-a100:2")
    nics = [name for name, kind in topo.fabric.items() if kind.value == "nic"]
    assert len(nics) == 16
    assert topo.in_bandwidth(0) == pytest.approx(300e9 + 32e9)


def test_dgx_a100_with_four_nics_shares_each_between_a_gpu_pair():
    """microsoft/msccl-tools#46: three DGX A100, each with 4 x 200 Gb/s NICs, on one
    switch. Each NIC sits on a PCIe4 switch with a GPU pair; the NVSwitch figures are the
    DGX A100's."""
    topo = zoo.get("dgx-a100-4nic:3")
    assert topo.num_ranks == 24
    nics = [name for name, kind in topo.fabric.items() if kind.value == "nic"]
    assert len(nics) == 12
    for pair in range(4):
        a, b = 2 * pair, 2 * pair + 1
        ways = [{topo.links[i].dst for i in topo.route(r, 8 + r)} for r in (a, b)]
        assert f"n0.nic{pair}" in ways[0] & ways[1]
        assert min(topo.links[i].bandwidth for i in topo.route(a, 8 + a)) == \
            pytest.approx(25e9)
    assert topo.in_bandwidth(0) == pytest.approx(300e9 + 32e9)
    assert zoo.get("dgx-a100:3").num_ranks == 24  # the 8-NIC machine keeps its name


def test_mist_has_no_direct_gpu_link_across_sockets():
    topo = zoo.get("mist")
    assert topo.link(0, 2) is None
    assert topo.link(0, 1).bandwidth == pytest.approx(75e9)
    assert topo.has_route(0, 2)  # through the CPUs


def test_generic_shapes_have_the_right_degree():
    assert all(len(zoo.get("torus:4x4x4").neighbors(r)) == 6 for r in range(64))
    assert all(len(zoo.get("hypercube:4").neighbors(r)) == 4 for r in range(16))
    mesh = zoo.get("mesh:3x3")
    assert sorted(len(mesh.neighbors(r)) for r in range(9)) == [2, 2, 2, 2, 3, 3, 3, 3, 4]


@pytest.mark.parametrize(("name", "message"), [
    ("dgx9", "unknown topology"), ("ring:x", "whole number"), ("mesh:4", "AxB"),
    ("dgx1:0", "at least 1"), ("ndv2:two", "must be an integer"), ("ring", "say the size"),
])
def test_bad_zoo_names_say_what_to_type(name, message):
    with pytest.raises(TopologyError, match=message):
        zoo.get(name)
