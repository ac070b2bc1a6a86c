"""direct and pairwise: verified on the zoo and on random machines, refused where a pair
has no route, and timed against each other on a switch."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.collectives import Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.simulate import simulate
from ccweave.synth.direct import _pairs, build_direct, build_pairwise
from ccweave.topology import zoo
from ccweave.topology.model import Topology
from ccweave.verify import verify
from tests.strategies import topologies

MACHINES = ["dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "mist", "cedar", "ndv2:2",
            "switch:5", "fully-connected:6", "switch:2"]


def roots(topology: Topology) -> list[int]:
    return sorted({0, topology.num_ranks // 2, topology.num_ranks - 1})


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("kind", Kind.collectives())
def test_direct_verifies_on_the_zoo(machine: str, kind: Kind) -> None:
    topology = zoo.get(machine)
    for chunks, root in itertools.product((1, 3), roots(topology) if kind.is_rooted else [0]):
        schedule = build_direct(topology, kind, root=root, chunks=chunks)
        verify(schedule, topology)
        assert schedule.name == f"direct(chunks={chunks})"


def sent(kind: Kind, n: int, c: int) -> int:
    """Chunks a direct schedule moves between ranks: each block once, straight there."""
    per_pair = {Kind.BROADCAST: n * c, Kind.REDUCE: n * c, Kind.GATHER: c, Kind.SCATTER: c}
    if kind in per_pair:
        return (n - 1) * per_pair[kind]
    return (2 if kind is Kind.ALLREDUCE else 1) * n * (n - 1) * c


@pytest.mark.parametrize("kind", Kind.collectives())
def test_direct_moves_each_block_once(kind: Kind) -> None:
    topology = zoo.get("dgx2:2")
    schedule = build_direct(topology, kind, root=17, chunks=2)
    verify(schedule, topology)
    assert schedule.stats()["chunks_sent"] == sent(kind, 32, 2)
    assert schedule.stats()["max_chunks_per_pair"] <= (64 if kind.is_rooted else 4)


@pytest.mark.parametrize("machine", ["dgx1", "switch:7", "mist", "ndv2:2"])
def test_pairwise_verifies(machine: str) -> None:
    topology = zoo.get(machine)
    for chunks in (1, 2):
        schedule = build_pairwise(topology, Kind.ALLTOALL, chunks=chunks)
        verify(schedule, topology)
        assert schedule.name == f"pairwise(chunks={chunks})"


def test_direct_every_root() -> None:
    topology = zoo.get("dgx1")
    for root in topology.ranks:
        for kind in (Kind.BROADCAST, Kind.REDUCE, Kind.GATHER, Kind.SCATTER):
            verify(build_direct(topology, kind, root=root, chunks=2), topology)


def test_pairwise_rounds_follow_each_other() -> None:
    """A rank's round k+1 send waits for its own round-k send and receive."""
    n = 6
    schedule = build_pairwise(zoo.get(f"switch:{n}"), Kind.ALLTOALL)
    remote = [i for i, t in enumerate(schedule.transfers) if not t.is_local]
    send = {(t.src, (t.dst - t.src) % n): i for i in remote
            for t in [schedule.transfers[i]]}
    for r in range(n):
        assert schedule.transfers[send[(r, 1)]].deps == ()
        for k in range(1, n - 1):
            deps = set(schedule.transfers[send[(r, k + 1)]].deps)
            assert {send[(r, k)], send[((r - k) % n, k)]} <= deps


@pytest.mark.parametrize("kind", [Kind.ALLGATHER, Kind.ALLREDUCE, Kind.ALLTOALL])
def test_direct_refuses_a_ring(kind: Kind) -> None:
    with pytest.raises(NotApplicableError, match="rank 0 to rank 2"):
        build_direct(zoo.get("ring:8"), kind)


def test_rooted_direct_needs_only_the_root_pairs() -> None:
    ring = zoo.get("ring:3")  # every pair is a neighbour
    verify(build_direct(ring, Kind.BROADCAST, root=1), ring)
    with pytest.raises(NotApplicableError, match="rank 0 to rank 2"):
        build_direct(zoo.get("ring:5"), Kind.SCATTER, root=0)
    with pytest.raises(NotApplicableError, match="rank 2 to rank 0"):
        build_direct(zoo.get("ring:5"), Kind.GATHER, root=0)


def test_pairwise_refuses_a_ring_and_other_collectives() -> None:
    with pytest.raises(NotApplicableError):
        build_pairwise(zoo.get("ring:4"), Kind.ALLTOALL)
    with pytest.raises(NotApplicableError, match="alltoall"):
        build_pairwise(zoo.get("switch:4"), Kind.ALLGATHER)


def test_unknown_options_are_input_errors() -> None:
    with pytest.raises(InputError, match="no option 'channels'"):
        build_direct(zoo.get("switch:4"), Kind.ALLGATHER, channels=2)
    with pytest.raises(InputError, match="chunks"):
        build_pairwise(zoo.get("switch:4"), Kind.ALLTOALL, chunks=0)


def test_front_door_builds_direct() -> None:
    pytest.importorskip("ccweave.synth.ring")
    pytest.importorskip("ccweave.synth.hierarchical")
    from ccweave.synth import strategies, synthesize

    assert strategies()["direct"].collectives == frozenset(Kind)
    assert strategies()["pairwise"].collectives == {Kind.ALLTOALL}
    topology = zoo.get("switch:4")
    schedule = synthesize(topology, "reducescatter", "direct", chunks=2)
    verify(schedule, topology)
    schedule = synthesize(topology, "alltoall", "pairwise")
    verify(schedule, topology)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 9), kind=st.sampled_from(Kind.collectives()), chunks=st.integers(1, 3),
       root=st.integers(0, 8), shape=st.sampled_from(["switch", "fully-connected"]))
def test_direct_on_any_size(n: int, kind: Kind, chunks: int, root: int, shape: str) -> None:
    topology = zoo.get(f"{shape}:{n}")
    verify(build_direct(topology, kind, root=root % n, chunks=chunks), topology)
    if kind is Kind.ALLTOALL:
        verify(build_pairwise(topology, kind, chunks=chunks), topology)


@settings(max_examples=40, deadline=None)
@given(topology=topologies(), kind=st.sampled_from(Kind.collectives()), chunks=st.integers(1, 2),
       root=st.integers(0, 7))
def test_direct_on_random_machines(topology: Topology, kind: Kind, chunks: int,
                                   root: int) -> None:
    root %= topology.num_ranks
    routed = all(topology.has_route(a, b) for a, b in _pairs(kind, topology.num_ranks, root))
    try:
        schedule = build_direct(topology, kind, root=root, chunks=chunks)
    except NotApplicableError:
        assert not routed
        return
    assert routed
    verify(schedule, topology)


def test_direct_sendrecv_is_one_transfer_over_the_route() -> None:
    topology = zoo.get("mist")
    schedule = build_direct(topology, Kind.SENDRECV, root=0, peer=2, chunks=2)
    verify(schedule, topology)
    assert [(t.src, t.dst, t.count) for t in schedule.transfers] == [(0, 2, 8)]
    with pytest.raises(NotApplicableError):
        build_direct(zoo.get("ring:4"), Kind.SENDRECV, root=0, peer=2)


def test_pairwise_matches_direct_on_a_switch() -> None:
    """Both saturate every rank's switch port, so at a large size they take the same time."""
    topology = zoo.get("switch:16")
    size = 256 * 2**20
    direct = simulate(build_direct(topology, Kind.ALLTOALL), topology, size).time_s
    pairwise = simulate(build_pairwise(topology, Kind.ALLTOALL), topology, size).time_s
    assert pairwise == pytest.approx(direct, rel=0.03)


def test_direct_broadcast_is_bound_by_the_root_port() -> None:
    topology = zoo.get("switch:8")
    size = 64 * 2**20
    time = simulate(build_direct(topology, Kind.BROADCAST), topology, size).time_s
    port = topology.out_bandwidth(0)
    assert time == pytest.approx(7 * size / port, rel=0.05)
