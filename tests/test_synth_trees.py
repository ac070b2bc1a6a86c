"""double-binary-tree and binomial: tree shapes, verified schedules on the zoo and random
machines, refusals where a tree edge has no route, and pipelining that pays off."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.collectives import Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.simulate import simulate
from ccweave.synth.direct import build_direct
from ccweave.synth.layout import topology_order
from ccweave.synth.trees import (
    TREE_KINDS,
    binomial_children,
    btree,
    build_binomial,
    build_double_binary_tree,
    double_binary_tree,
    subtree_size,
    tree_order,
)
from ccweave.topology import zoo
from ccweave.topology.model import Link, Topology
from ccweave.verify import verify
from tests.strategies import topologies

MACHINES = ["dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "mist", "cedar", "ndv2:2",
            "dgx2:2", "switch:5", "fully-connected:7", "switch:2"]
BINOMIAL_KINDS = [Kind.BROADCAST, Kind.REDUCE, Kind.GATHER, Kind.SCATTER]


def roots(topology: Topology) -> list[int]:
    return sorted({0, 1, topology.num_ranks // 2, topology.num_ranks - 1})


def leaves(tree) -> set[int]:
    return {rank for rank, kids in tree.children.items() if not kids}


# ---------------------------------------------------------------- tree shapes

def test_nccl_binary_tree_on_eight() -> None:
    tree = btree(list(range(8)))
    assert tree.root == 0
    assert tree.children[0] == (4,)
    assert tree.children[4] == (2, 6)
    assert tree.children[2] == (1, 3)
    assert leaves(tree) == {1, 3, 5, 7}


@pytest.mark.parametrize("n", range(1, 70))
def test_double_trees_are_binary_spanning_and_complementary(n: int) -> None:
    order = list(range(n))
    first, second = double_binary_tree(order)
    for tree in (first, second):
        assert sorted(tree.top_down()) == order
        assert all(len(kids) <= 2 for kids in tree.children.values())
    assert leaves(first).isdisjoint(leaves(second)) or n < 3
    for root in {0, n // 2, n - 1}:
        first, second = double_binary_tree(order, root)
        assert first.root == second.root == root
        assert len(first.children[root]) == len(second.children[root]) == min(1, n - 1)
        for tree in (first, second):
            assert sorted(tree.top_down()) == order
            assert all(len(kids) <= 2 for kids in tree.children.values())
        assert len(leaves(first) & leaves(second)) <= 1 or n < 3


@pytest.mark.parametrize("n", range(1, 40))
def test_binomial_tree_spans_with_contiguous_subtrees(n: int) -> None:
    seen = {0}
    for v in range(n):
        size = subtree_size(v, n)
        kids = binomial_children(v, n)
        assert sum(subtree_size(w, n) for w in kids) == size - 1
        assert all(v < w < v + size for w in kids)
        seen.update(kids)
    assert seen == set(range(n))


def test_topology_order_groups_nodes_then_sockets() -> None:
    links = tuple(Link(a, b, 1e9) for a in range(4) for b in range(4) if a != b)
    machine = Topology("interleaved", 4, links,
                       groups={"node": ((0, 2), (1, 3)), "socket": ((0,), (2,), (1,), (3,))})
    assert topology_order(machine) == [0, 2, 1, 3]
    assert topology_order(zoo.get("ndv2:2")) == list(range(16))


def test_trees_stay_inside_nodes() -> None:
    """In-order trees over the node-grouped order cross between nodes only a few times."""
    topology = zoo.get("dgx2:2")
    node = {rank: topology.group_of("node", rank) for rank in topology.ranks}
    for root in (None, 0, 21):
        for tree in double_binary_tree(topology_order(topology), root):
            assert sum(node[a] != node[b] for a, b in tree.edges()) <= 4


# ------------------------------------------------------------ double binary tree

@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("kind", sorted(TREE_KINDS))
def test_double_binary_tree_verifies_on_the_zoo(machine: str, kind: Kind) -> None:
    topology = zoo.get(machine)
    for chunks in (None, 1, 3):
        for root in roots(topology) if kind.is_rooted else [0]:
            schedule = build_double_binary_tree(topology, kind, root=root, chunks=chunks)
            verify(schedule, topology)
            c = schedule.collective.chunks_per_rank
            assert schedule.name == f"double-binary-tree(chunks={c})"
            assert schedule.num_channels == 2


def test_default_chunks_fill_each_tree() -> None:
    for n in (2, 5, 8, 16, 32):
        schedule = build_double_binary_tree(zoo.get(f"switch:{n}"), Kind.ALLREDUCE)
        assert schedule.collective.total_chunks >= 16


def test_tree_edges_are_fifo_pipelines() -> None:
    """Chunk k+1 crosses a tree edge after chunk k: the pipeline NCCL runs."""
    schedule = build_double_binary_tree(zoo.get("switch:8"), Kind.BROADCAST, chunks=4)
    last: dict[tuple[int, int, int], int] = {}
    for index, t in enumerate(schedule.transfers):
        if t.is_local:
            continue
        key = (t.channel, t.src, t.dst)
        if key in last:
            assert last[key] in t.deps
        last[key] = index


def test_trees_on_dgx1_ride_nvlink() -> None:
    """The searched order puts every allreduce tree edge on an NVLink (the plain order
    needs PCIe between GPUs 2 and 4), which more than doubles allreduce's speed; rooted
    trees (one child under the root in both) can do no better than one PCIe edge."""
    topology = zoo.get("dgx1")
    nvlink = {(lk.src, lk.dst) for lk in topology.links if lk.kind == "nvlink"}
    for root in (None, 0, 5):
        trees = double_binary_tree(tree_order(topology, root), root)
        slow = sum(len(set(tree.edges()) - nvlink) for tree in trees)
        assert slow == (0 if root is None else 1)
    plain = double_binary_tree(tree_order(topology, order="topology"))
    assert not all(set(tree.edges()) <= nvlink for tree in plain)
    size = 64 * 2**20

    def time(order: str) -> float:
        schedule = build_double_binary_tree(topology, Kind.ALLREDUCE, order=order)
        return simulate(schedule, topology, size).time_s

    assert time("auto") < time("topology") / 2


def test_order_option() -> None:
    topology = zoo.get("switch:4")
    schedule = build_double_binary_tree(topology, Kind.ALLREDUCE, chunks=2, order="rank")
    assert schedule.name == "double-binary-tree(chunks=2, order=rank)"
    with pytest.raises(InputError, match="order 'best'"):
        build_double_binary_tree(topology, Kind.ALLREDUCE, order="best")


@pytest.mark.parametrize("machine", ["ring:8", "hypercube:3", "mesh:3x3"])
def test_double_binary_tree_refuses_unrouted_edges(machine: str) -> None:
    with pytest.raises(NotApplicableError, match="no route"):
        build_double_binary_tree(zoo.get(machine), Kind.ALLREDUCE)


def test_double_binary_tree_rejects_what_it_does_not_build() -> None:
    with pytest.raises(NotApplicableError, match="allgather"):
        build_double_binary_tree(zoo.get("switch:4"), Kind.ALLGATHER)
    with pytest.raises(InputError, match="no option"):
        build_double_binary_tree(zoo.get("switch:4"), Kind.ALLREDUCE, pipeline=2)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 12), kind=st.sampled_from(sorted(TREE_KINDS)),
       chunks=st.integers(1, 4), root=st.integers(0, 11),
       shape=st.sampled_from(["switch", "fully-connected"]))
def test_double_binary_tree_on_any_size(n: int, kind: Kind, chunks: int, root: int,
                                        shape: str) -> None:
    topology = zoo.get(f"{shape}:{n}")
    verify(build_double_binary_tree(topology, kind, root=root % n, chunks=chunks), topology)


@settings(max_examples=30, deadline=None)
@given(topology=topologies(), kind=st.sampled_from(sorted(TREE_KINDS)),
       chunks=st.integers(1, 2), root=st.integers(0, 7))
def test_double_binary_tree_on_random_machines(topology: Topology, kind: Kind, chunks: int,
                                               root: int) -> None:
    root %= topology.num_ranks
    top = None if kind is Kind.ALLREDUCE else root
    trees = double_binary_tree(tree_order(topology, top), top)
    routed = all(topology.has_route(a, b) and topology.has_route(b, a)
                 for tree in trees for a, b in tree.edges())
    try:
        schedule = build_double_binary_tree(topology, kind, root=root, chunks=chunks)
    except NotApplicableError:
        assert not routed
        return
    verify(schedule, topology)


def test_double_binary_tree_broadcast_beats_direct_at_large_sizes() -> None:
    topology = zoo.get("switch:16")
    size = 256 * 2**20
    tree = simulate(build_double_binary_tree(topology, Kind.BROADCAST), topology, size).time_s
    flat = simulate(build_direct(topology, Kind.BROADCAST), topology, size).time_s
    assert tree < flat / 5
    # pipelined, it comes within 1.5x of one root port's time
    assert tree < 1.5 * size / topology.out_bandwidth(0)


def test_more_chunks_pipeline_better_at_large_sizes() -> None:
    topology = zoo.get("switch:16")
    size = 256 * 2**20

    def time(chunks: int) -> float:
        schedule = build_double_binary_tree(topology, Kind.ALLREDUCE, chunks=chunks)
        return simulate(schedule, topology, size).time_s

    assert time(4) < time(1)


# ------------------------------------------------------------------- binomial

@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("kind", BINOMIAL_KINDS)
def test_binomial_verifies_on_the_zoo(machine: str, kind: Kind) -> None:
    topology = zoo.get(machine)
    for chunks in (1, 3):
        for root in roots(topology):
            schedule = build_binomial(topology, kind, root=root, chunks=chunks)
            verify(schedule, topology)
            assert schedule.name == f"binomial(chunks={chunks})"


@pytest.mark.parametrize("machine", ["dgx1", "switch:5"])
def test_every_root(machine: str) -> None:
    topology = zoo.get(machine)
    for root in topology.ranks:
        for kind in BINOMIAL_KINDS:
            verify(build_binomial(topology, kind, root=root, chunks=2), topology)
        for kind in (Kind.BROADCAST, Kind.REDUCE):
            verify(build_double_binary_tree(topology, kind, root=root, chunks=2), topology)


@pytest.mark.parametrize("n", [2, 5, 8, 13])
def test_binomial_takes_log_steps(n: int) -> None:
    steps = (n - 1).bit_length()
    topology = zoo.get(f"switch:{n}")
    for kind in (Kind.GATHER, Kind.SCATTER, Kind.BROADCAST):
        schedule = build_binomial(topology, kind, root=n - 1)
        assert schedule.depth() <= steps + 2


def test_binomial_on_a_hypercube_follows_its_links() -> None:
    """Rooted at 0, MPI's binomial tree uses only hypercube edges; elsewhere it may not."""
    cube = zoo.get("hypercube:4")
    for kind in BINOMIAL_KINDS:
        verify(build_binomial(cube, kind, root=0), cube)
    with pytest.raises(NotApplicableError, match="no route"):
        build_binomial(cube, Kind.BROADCAST, root=1)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 17), kind=st.sampled_from(BINOMIAL_KINDS), chunks=st.integers(1, 3),
       root=st.integers(0, 16), shape=st.sampled_from(["switch", "fully-connected"]))
def test_binomial_on_any_size(n: int, kind: Kind, chunks: int, root: int, shape: str) -> None:
    topology = zoo.get(f"{shape}:{n}")
    verify(build_binomial(topology, kind, root=root % n, chunks=chunks), topology)


@settings(max_examples=30, deadline=None)
@given(topology=topologies(), kind=st.sampled_from(BINOMIAL_KINDS), root=st.integers(0, 7))
def test_binomial_on_random_machines(topology: Topology, kind: Kind, root: int) -> None:
    root %= topology.num_ranks
    try:
        schedule = build_binomial(topology, kind, root=root, chunks=2)
    except NotApplicableError as error:
        assert "no route" in str(error)
        return
    verify(schedule, topology)


def test_broadcast_crossovers() -> None:
    """Binomial beats pipelined trees on latency; trees win on bandwidth, both beat flat."""
    topology = zoo.get("switch:16")
    small, large = 4096, 256 * 2**20

    def time(build, size: int) -> float:
        return simulate(build(topology, Kind.BROADCAST), topology, size).time_s

    assert time(build_binomial, large) < time(build_direct, large)
    assert time(build_double_binary_tree, large) < time(build_binomial, large)
    assert time(build_binomial, small) < time(build_double_binary_tree, small)


def test_front_door_builds_trees() -> None:
    pytest.importorskip("ccweave.synth.ring")
    pytest.importorskip("ccweave.synth.hierarchical")
    from ccweave.synth import strategies, synthesize

    assert strategies()["double-binary-tree"].collectives == TREE_KINDS
    assert strategies()["binomial"].collectives == frozenset(BINOMIAL_KINDS)
    topology = zoo.get("dgx1")
    verify(synthesize(topology, "allreduce", "double-binary-tree", chunks=2), topology)
    verify(synthesize(topology, "scatter", "binomial", root=3), topology)
