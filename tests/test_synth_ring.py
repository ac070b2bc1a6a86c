"""Ring search and the ring strategy: rings are routed Hamiltonian cycles that fit the
links, every collective verifies on the zoo and on random machines, and the simulated
times reach the bounds where a ring can."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.bounds import lower_bound
from ccweave.collectives import Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.schedule import Schedule
from ccweave.simulate import simulate
from ccweave.synth.registry import synthesize
from ccweave.synth.ring import build_ring, default_chunks, split
from ccweave.synth.rings import Ring, find_rings, hamiltonian_path, merged_cycle
from ccweave.topology import zoo
from ccweave.topology.model import Link, Topology
from ccweave.verify import verify
from tests.strategies import topologies

GB = 1e9
KINDS = Kind.collectives()
ZOO = ["dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "mist", "cedar", "ndv2:2"]
SHAPES = ["ring:2", "ring:5", "ring:8", "switch:6", "mesh:4x4", "mesh:2x3", "torus:3x3",
          "hypercube:3", "fully-connected:5"]


# ------------------------------------------------------------------ helpers


def assert_rings_fit(topology: Topology, rings: list[Ring]) -> None:
    """Every ring is a routed Hamiltonian cycle, and the rings' shares fit every link."""
    load = Counter()
    for ring in rings:
        assert sorted(ring.order) == list(topology.ranks)
        assert ring.bandwidth > 0
        for a, b in ring.hops:
            assert topology.has_route(a, b), (a, b)
            for link in topology.route(a, b):
                load[link] += ring.bandwidth
    for link, used in load.items():
        assert used <= topology.links[link].bandwidth * (1 + 1e-9), topology.links[link]


def inter_node_hops(topology: Topology, ring: Ring) -> list[tuple[int, int]]:
    node = {rank: number for number, part in enumerate(topology.groups["node"])
            for rank in part}
    return [(a, b) for a, b in ring.hops if node[a] != node[b]]


def roots(topology: Topology) -> list[int]:
    return sorted({0, topology.num_ranks - 1})


def verified(topology: Topology, kind: Kind, **options) -> Schedule:
    schedule = build_ring(topology, kind, **options)
    verify(schedule, topology)
    return schedule


# ------------------------------------------------------------------ ring search


def test_ring8_is_clockwise_plus_counter_clockwise() -> None:
    topology = zoo.get("ring:8")
    rings = find_rings(topology)
    assert [ring.order for ring in rings] == [tuple(range(8)), tuple(range(7, -1, -1))]
    assert all(ring.bandwidth == topology.links[0].bandwidth for ring in rings)


def test_dgx1_rings_use_every_nvlink() -> None:
    topology = zoo.get("dgx1")
    rings = find_rings(topology)
    assert_rings_fit(topology, rings)
    assert [ring.bandwidth / GB for ring in rings] == [50, 50, 25, 25]
    for ring in rings:  # NVLink hops only: one link each, no PCIe detour
        assert all(topology.links[topology.route(a, b)[0]].kind == "nvlink"
                   and len(topology.route(a, b)) == 1 for a, b in ring.hops)


@pytest.mark.parametrize("machine, count", [
    ("mesh:4x4", 2), ("mesh:2x3", 2), ("torus:4x4", 4), ("hypercube:4", 4), ("switch:16", 1),
    ("cedar", 6), ("dgx-a100", 1), ("ring:2", 1)])
def test_ring_counts_on_shapes(machine: str, count: int) -> None:
    topology = zoo.get(machine)
    rings = find_rings(topology)
    assert len(rings) == count
    assert_rings_fit(topology, rings)


def test_hypercube_ring_is_a_gray_code() -> None:
    ring = find_rings(zoo.get("hypercube:5"), 1)[0]
    assert all(bin(a ^ b).count("1") == 1 for a, b in ring.hops)


@pytest.mark.parametrize("machine", ["mesh:3x3", "mesh:5x3"])
def test_odd_mesh_has_no_ring(machine: str) -> None:
    with pytest.raises(NotApplicableError, match="bipartite"):
        find_rings(zoo.get(machine))
    with pytest.raises(NotApplicableError, match="Hamiltonian"):
        synthesize(zoo.get(machine), "allgather", "ring")


def test_a_tree_has_no_ring() -> None:
    links = [Link(0, 1, 1e9), Link(1, 0, 1e9), Link(1, 2, 1e9), Link(2, 1, 1e9)]
    with pytest.raises(NotApplicableError, match=r"no Hamiltonian cycle|bipartite"):
        find_rings(Topology("path3", 3, tuple(links)))


def test_max_rings() -> None:
    assert len(find_rings(zoo.get("dgx1"), 3)) == 3
    assert len(find_rings(zoo.get("dgx1"), 1)) == 1


@pytest.mark.parametrize("machine", ["ndv2:2", "dgx2:2", "dgx-a100:2", "mist:2"])
def test_multi_node_rings_cross_each_node_once(machine: str) -> None:
    topology = zoo.get(machine)
    rings = find_rings(topology)
    assert_rings_fit(topology, rings)
    nodes = len(topology.groups["node"])
    for ring in rings:
        assert len(inter_node_hops(topology, ring)) == nodes


@pytest.mark.parametrize("machine, nics", [("dgx2:2", 8), ("dgx-a100:2", 8)])
def test_multi_node_rings_leave_through_different_nics(machine: str, nics: int) -> None:
    topology = zoo.get(machine)
    rings = find_rings(topology)
    assert len(rings) == nics
    for node in range(2):  # each ring leaves each node through its own NIC
        used = set()
        for ring in rings:
            a, b = next((a, b) for a, b in inter_node_hops(topology, ring)
                        if a in topology.groups["node"][node])
            nic = next(topology.links[i].dst for i in topology.route(a, b)
                       if "nic" in str(topology.links[i].dst))
            used.add(nic)
        assert len(used) == nics


@pytest.mark.slow
def test_ring_search_scales_to_1024_ranks() -> None:
    topology = zoo.get("dgx-a100:128")
    start = time.perf_counter()
    rings = find_rings(topology)
    assert time.perf_counter() - start < 20
    assert len(rings) == 8 and all(ring.bandwidth == 25 * GB for ring in rings)
    for ring in rings:
        assert sorted(ring.order) == list(range(1024))
        assert len(inter_node_hops(topology, ring)) == 128


def test_hamiltonian_helpers() -> None:
    square = {0: [1, 3], 1: [2, 0], 2: [3, 1], 3: [0, 2]}
    assert hamiltonian_path(range(4), square, start=0, end=3) == [0, 1, 2, 3]
    assert hamiltonian_path(range(4), square, start=0, end=2) is None
    cycle = merged_cycle(range(4), square)
    assert cycle is not None and sorted(cycle) == [0, 1, 2, 3]
    assert merged_cycle(range(3), {0: [1], 1: [0, 2], 2: [1]}) is None


@settings(max_examples=40, deadline=None)
@given(topology=topologies(max_ranks=7))
def test_random_rings_fit(topology: Topology) -> None:
    rings = find_rings(topology)  # the random machines all have a ring over the ranks
    assert_rings_fit(topology, rings)
    assert rings[0].bandwidth == max(ring.bandwidth for ring in rings)


# ------------------------------------------------------------------ splitting


def test_split_is_proportional() -> None:
    assert split(6, [50, 50, 25, 25]) == [range(0, 2), range(2, 4), range(4, 5), range(5, 6)]
    assert [len(s) for s in split(2, [50, 50, 25, 25])] == [1, 1, 0, 0]
    assert default_chunks([50, 50, 25, 25]) == 6
    assert default_chunks([10, 10]) == 2


# ------------------------------------------------------------------ ring strategy


@pytest.mark.parametrize("machine", ZOO + SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_ring_verifies(machine: str, kind: Kind) -> None:
    topology = zoo.get(machine)
    for root in roots(topology) if kind.is_rooted else [0]:
        for chunks in (None, 1):
            schedule = verified(topology, kind, root=root, chunks=chunks)
            assert schedule.name.startswith("ring(channels=")


@pytest.mark.parametrize("kind", KINDS)
def test_ring_verifies_on_dgx2x2(kind: Kind) -> None:
    topology = zoo.get("dgx2:2")
    schedule = verified(topology, kind, root=17, chunks=2, channels=2)
    assert schedule.num_channels == 2


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_ring_verifies_on_dgx2x2_with_every_ring(kind: Kind) -> None:
    schedule = verified(zoo.get("dgx2:2"), kind, root=5)
    assert schedule.num_channels == 8


@settings(max_examples=60, deadline=None)
@given(topology=topologies(max_ranks=6), kind=st.sampled_from(KINDS), data=st.data(),
       chunks=st.one_of(st.none(), st.integers(1, 3)),
       channels=st.one_of(st.none(), st.integers(1, 3)))
def test_ring_verifies_on_random_machines(topology, kind, data, chunks, channels) -> None:
    root = data.draw(st.integers(0, topology.num_ranks - 1))
    schedule = verified(topology, kind, root=root, chunks=chunks, channels=channels)
    assert schedule.num_channels <= (channels or 32)


def test_channels_and_metadata() -> None:
    topology = zoo.get("dgx1")
    schedule = synthesize(topology, "allgather", "ring")
    assert schedule.name == "ring(channels=4, chunks=6)"
    assert schedule.num_channels == 4
    assert schedule.metadata["chunks_per_ring"] == [2, 2, 1, 1]
    assert [len(order) for order in schedule.metadata["rings"]] == [8] * 4
    one = synthesize(topology, "allgather", "ring", channels=1)
    assert one.name == "ring(channels=1, chunks=1)" and one.num_channels == 1
    assert synthesize(topology, "broadcast", "ring").collective.chunks_per_rank == 24


@pytest.mark.parametrize("kind", KINDS)
def test_one_rank_is_a_local_copy(kind: Kind) -> None:
    topology = Topology("one", 1, ())
    schedule = verified(topology, kind, chunks=2)
    assert all(t.is_local for t in schedule.transfers)


def test_bad_options() -> None:
    topology = zoo.get("ring:4")
    with pytest.raises(InputError, match="channels"):
        build_ring(topology, Kind.ALLGATHER, channels=0)
    with pytest.raises(InputError, match="no option 'rings'"):
        build_ring(topology, Kind.ALLGATHER, rings=2)


def test_each_step_moves_one_block_per_hop() -> None:
    schedule = verified(zoo.get("ring:8"), Kind.ALLREDUCE, chunks=2)
    stats = schedule.stats()
    # reduce-scatter then allgather: 2 * 7 hops of each rank's block on each of 2 rings
    assert stats["chunks_sent"] == 2 * 7 * 8 * 2
    assert stats["max_chunks_per_pair"] == 2 * 7


# ------------------------------------------------------------------ simulation


def test_ring_allgather_reaches_the_cut_bound_on_ring8() -> None:
    topology = zoo.get("ring:8")
    schedule = verified(topology, Kind.ALLGATHER)
    size = 2**30
    time_s = simulate(schedule, topology, size).time_s
    assert time_s <= 1.01 * lower_bound(topology, Kind.ALLGATHER, size).time_s


def test_several_rings_beat_one_on_dgx1() -> None:
    topology = zoo.get("dgx1")
    size = 2**30
    many = verified(topology, Kind.ALLGATHER)
    one = verified(topology, Kind.ALLGATHER, channels=1)
    assert many.num_channels >= 2
    fast = simulate(many, topology, size).time_s
    assert fast < 0.5 * simulate(one, topology, size).time_s
    assert fast <= 1.15 * lower_bound(topology, Kind.ALLGATHER, size).time_s


@pytest.mark.parametrize("kind", [Kind.BROADCAST, Kind.REDUCE])
def test_pipelined_chains_beat_store_and_forward(kind: Kind) -> None:
    topology = zoo.get("ring:8")
    size = 2**30
    piped = simulate(verified(topology, kind, root=3), topology, size).time_s
    eight = simulate(verified(topology, kind, root=3, chunks=1, channels=1), topology,
                     size).time_s  # one ring, the buffer in 8 pieces
    assert piped < 0.4 * eight
    assert piped <= 1.25 * lower_bound(topology, kind, size, root=3).time_s
