"""recursive-doubling, recursive-halving and rabenseifner: verified on power-of-two
machines, refused on other counts and unrouted partners, and as cheap as they claim."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.collectives import Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.simulate import simulate
from ccweave.synth.recursive import (
    build_rabenseifner,
    build_recursive_doubling,
    build_recursive_halving,
    distances,
)
from ccweave.topology import zoo
from ccweave.topology.model import Topology
from ccweave.verify import verify
from tests.strategies import topologies

BUILDS = {
    "recursive-doubling": (build_recursive_doubling, [Kind.ALLGATHER, Kind.ALLREDUCE]),
    "recursive-halving": (build_recursive_halving, [Kind.REDUCESCATTER]),
    "rabenseifner": (build_rabenseifner, [Kind.ALLREDUCE]),
}
CASES = [pytest.param(name, build, kind, id=f"{name}-{kind.value}")
         for name, (build, kinds) in BUILDS.items() for kind in kinds]
TRIPLES = [case.values for case in CASES]
MACHINES = ["dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "mist", "cedar", "ndv2:2",
            "dgx2:2", "switch:2", "switch:8", "fully-connected:4", "hypercube:1",
            "hypercube:3", "hypercube:5"]


def routed(topology: Topology) -> bool:
    n = topology.num_ranks
    return all(topology.has_route(r, r ^ d) for d in distances(n) for r in range(n))


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize(("name", "build", "kind"), CASES)
def test_recursive_verifies_on_power_of_two_machines(machine, name, build, kind) -> None:
    topology = zoo.get(machine)
    for chunks in (1, 3):
        schedule = build(topology, kind, chunks=chunks)
        verify(schedule, topology)
        assert schedule.name == f"{name}(chunks={chunks})"


@pytest.mark.parametrize(("name", "build", "kind"), CASES)
@pytest.mark.parametrize("machine", ["switch:6", "fully-connected:3", "switch:12"])
def test_recursive_needs_a_power_of_two(machine, name, build, kind) -> None:
    with pytest.raises(NotApplicableError, match="power-of-two"):
        build(zoo.get(machine), kind)


@pytest.mark.parametrize(("name", "build", "kind"), CASES)
def test_recursive_names_the_unrouted_pair(name, build, kind) -> None:
    with pytest.raises(NotApplicableError, match="rank 0 to rank 2"):
        build(zoo.get("ring:8"), kind)


def test_recursive_rejects_other_collectives_and_options() -> None:
    switch = zoo.get("switch:4")
    with pytest.raises(NotApplicableError, match="reducescatter"):
        build_recursive_doubling(switch, Kind.REDUCESCATTER)
    with pytest.raises(NotApplicableError):
        build_rabenseifner(switch, Kind.ALLGATHER)
    with pytest.raises(InputError, match="no option"):
        build_recursive_halving(switch, Kind.REDUCESCATTER, radix=4)


@pytest.mark.parametrize("n", [2, 4, 16])
def test_step_counts_and_volumes(n: int) -> None:
    """log2 N exchanges; halving and doubling move (N-1)/N of the buffer per rank,
    exchange-and-add allreduce the whole buffer every step."""
    topology = zoo.get(f"switch:{n}")
    steps, c = n.bit_length() - 1, 2
    total = n * c

    def per_rank(schedule) -> float:
        return schedule.stats()["chunks_sent"] / n

    ag = build_recursive_doubling(topology, Kind.ALLGATHER, chunks=c)
    rs = build_recursive_halving(topology, Kind.REDUCESCATTER, chunks=c)
    ar = build_recursive_doubling(topology, Kind.ALLREDUCE, chunks=c)
    rab = build_rabenseifner(topology, Kind.ALLREDUCE, chunks=c)
    assert per_rank(ag) == per_rank(rs) == total - c
    assert per_rank(rab) == 2 * (total - c)
    assert per_rank(ar) == steps * total
    for schedule in (ag, rs, ar):
        remote = [t for t in schedule.transfers if not t.is_local]
        assert len(remote) == steps * n


def test_rabenseifner_beats_recursive_doubling_at_large_sizes() -> None:
    topology = zoo.get("switch:16")
    size = 64 * 2**20

    def time(build) -> float:
        return simulate(build(topology, Kind.ALLREDUCE), topology, size).time_s

    assert time(build_rabenseifner) < time(build_recursive_doubling) / 1.5


def test_recursive_doubling_allgather_is_bandwidth_optimal_on_a_switch() -> None:
    topology = zoo.get("switch:8")
    size = 64 * 2**20
    time = simulate(build_recursive_doubling(topology, Kind.ALLGATHER), topology, size).time_s
    assert time == pytest.approx(7 / 8 * size / topology.out_bandwidth(0), rel=0.02)


@settings(max_examples=30, deadline=None)
@given(dim=st.integers(0, 4), case=st.sampled_from(TRIPLES), chunks=st.integers(1, 4),
       shape=st.sampled_from(["switch", "fully-connected", "hypercube"]))
def test_recursive_on_any_power_of_two(dim: int, case, chunks: int, shape: str) -> None:
    _, build, kind = case
    if shape == "hypercube":
        topology = zoo.get(f"hypercube:{max(dim, 1)}")
    else:
        topology = zoo.get(f"{shape}:{2 ** max(dim, 1)}")
    verify(build(topology, kind, chunks=chunks), topology)


@settings(max_examples=40, deadline=None)
@given(topology=topologies(), case=st.sampled_from(TRIPLES), chunks=st.integers(1, 2))
def test_recursive_on_random_machines(topology: Topology, case, chunks: int) -> None:
    _, build, kind = case
    n = topology.num_ranks
    applicable = n & (n - 1) == 0 and routed(topology)
    try:
        schedule = build(topology, kind, chunks=chunks)
    except NotApplicableError:
        assert not applicable
        return
    assert applicable
    verify(schedule, topology)


def test_front_door_builds_recursive() -> None:
    pytest.importorskip("ccweave.synth.ring")
    pytest.importorskip("ccweave.synth.hierarchical")
    from ccweave.synth import strategies, synthesize

    for name, (_, kinds) in BUILDS.items():
        assert strategies()[name].collectives == frozenset(kinds)
    topology = zoo.get("hypercube:3")
    verify(synthesize(topology, "allreduce", "rabenseifner", chunks=2), topology)
    verify(synthesize(topology, "reducescatter", "recursive-halving"), topology)
