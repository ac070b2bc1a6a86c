"""hierarchical: verified on multi-node machines (zoo and random), refused where there is
no hierarchy, and faster than flat rings where the network is the bottleneck."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ccweave.bounds import lower_bound
from ccweave.collectives import Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.simulate import simulate
from ccweave.synth.hierarchical import KINDS, build_hierarchical
from ccweave.synth.registry import synthesize
from ccweave.topology import zoo
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.verify import verify
from tests.strategies import topologies

MACHINES = ["ndv2:2", "dgx2:2", "dgx-a100:2", "dgx-h100:3", "mist:2", "cedar:3", "dgx1:2"]


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_hierarchical_verifies(machine: str, kind: Kind) -> None:
    topology = zoo.get(machine)
    for chunks in (None, 1, 3):
        schedule = build_hierarchical(topology, kind, chunks=chunks)
        verify(schedule, topology)
        assert schedule.name.startswith("hierarchical(channels=")
        assert schedule.metadata["nodes"] == len(topology.groups["node"])


def test_channels_option() -> None:
    topology = zoo.get("ndv2:2")
    schedule = synthesize(topology, "allreduce", "hierarchical", channels=2, chunks=4)
    verify(schedule, topology)
    assert schedule.name == "hierarchical(channels=2, chunks=4)"
    assert len(schedule.metadata["intra_rings"]) == 2
    with pytest.raises(InputError, match="channels"):
        build_hierarchical(topology, Kind.ALLREDUCE, channels=-1)


@pytest.mark.parametrize("machine", ["dgx1", "ring:8", "switch:4"])
def test_one_node_is_refused(machine: str) -> None:
    with pytest.raises(NotApplicableError, match="several nodes"):
        build_hierarchical(zoo.get(machine), Kind.ALLREDUCE)


def test_unequal_nodes_are_refused() -> None:
    links = [Link(a, b, 1e9) for a in range(5) for b in range(5) if a != b]
    topology = Topology("uneven", 5, tuple(links), groups={"node": ((0, 1, 2), (3, 4))})
    with pytest.raises(NotApplicableError, match="one size"):
        build_hierarchical(topology, Kind.ALLREDUCE)


def test_rooted_collectives_are_refused() -> None:
    with pytest.raises(NotApplicableError, match="does not build broadcast"):
        synthesize(zoo.get("ndv2:2"), "broadcast", "hierarchical")
    with pytest.raises(NotApplicableError, match="does not build alltoall"):
        build_hierarchical(zoo.get("ndv2:2"), Kind.ALLTOALL)


@st.composite
def multi_node(draw) -> Topology:
    """A random machine cut into equal nodes, each node's ranks joined by a switch (so a
    ring exists inside every node), plus the random links between them."""
    base = draw(topologies(min_ranks=2, max_ranks=6, switches=False))
    n = base.num_ranks
    size = draw(st.sampled_from([g for g in (1, 2, 3) if n % g == 0 and n // g > 1]))
    order = draw(st.permutations(list(range(n))))
    nodes = tuple(tuple(order[i:i + size]) for i in range(0, n, size))
    links, fabric = list(base.links), {}
    for number, node in enumerate(nodes):
        if len(node) > 1:
            fabric[f"sw{number}"] = NodeKind.SWITCH
            for rank in node:
                links += [Link(rank, f"sw{number}", 50e9), Link(f"sw{number}", rank, 50e9)]
    return Topology(f"random-nodes{n}", n, tuple(links), fabric, {"node": nodes})


@settings(max_examples=40, deadline=None)
@given(topology=multi_node(), kind=st.sampled_from(sorted(KINDS)),
       chunks=st.one_of(st.none(), st.integers(1, 3)))
def test_hierarchical_verifies_on_random_machines(topology, kind, chunks) -> None:
    try:
        schedule = build_hierarchical(topology, kind, chunks=chunks)
    except NotApplicableError as error:  # no ring across some column: said so
        assert "Hamiltonian" in str(error)
        assume(False)
    verify(schedule, topology)


@pytest.mark.parametrize("machine", ["ndv2:2", "dgx2:2"])
def test_hierarchical_allreduce_beats_flat_rings(machine: str) -> None:
    topology = zoo.get(machine)
    size = 2**30
    two_level = simulate(build_hierarchical(topology, Kind.ALLREDUCE), topology, size).time_s
    flat = simulate(synthesize(topology, "allreduce", "ring", chunks=1, channels=1), topology,
                    size).time_s
    assert two_level < 0.7 * flat
    assert two_level < 1.35 * lower_bound(topology, Kind.ALLREDUCE, size).time_s
