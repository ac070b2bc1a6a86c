"""hierarchical-pipelined and flat-pipelined: verified on the zoo and on random machines,
refused where they do not apply, and faster than ring where the paper found them so."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ccweave.synth.pipelined  # noqa: F401  (registers the strategies)
from ccweave.collectives import Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.simulate import simulate
from ccweave.synth import strategies, synthesize
from ccweave.synth.pipelined import chain, flat, hierarchical
from ccweave.topology import zoo
from ccweave.verify import verify
from tests.strategies import topologies

MB = 2**20
NAMES = ["hierarchical-pipelined", "flat-pipelined"]


def built(machine, strategy, **options):
    topology = zoo.get(machine)
    schedule = synthesize(topology, Kind.ALLREDUCE, strategy, **options)
    verify(schedule, topology)
    return topology, schedule


def test_registered_for_allreduce_only():
    for name in NAMES:
        assert strategies()[name].collectives == {Kind.ALLREDUCE}
        assert not strategies()[name].classic
    with pytest.raises(NotApplicableError):
        synthesize(zoo.get("mist"), Kind.ALLGATHER, "flat-pipelined")


@pytest.mark.parametrize(("machine", "strategy"),
                         [("mist", "hierarchical-pipelined"), ("cedar", "flat-pipelined"),
                          ("mist", "flat-pipelined"), ("cedar", "hierarchical-pipelined"),
                          ("switch:5", "flat-pipelined")])
def test_automatic_choices_verify(machine, strategy):
    built(machine, strategy)


@pytest.mark.parametrize("machine", ["dgx1", "ndv2:2", "cedar"])
@pytest.mark.parametrize("intra", ["star", "chain"])
def test_hierarchical_verifies_at_a_fixed_shape(machine, intra):
    for level in ("socket", "node"):
        try:
            _, schedule = built(machine, "hierarchical-pipelined", level=level, intra=intra,
                                depth=4, multipath="socket", fallback=False)
        except NotApplicableError:
            assert level == "node" and machine != "ndv2:2"
            continue
        assert f"level={level}" in schedule.name


@pytest.mark.parametrize("machine", ["dgx1", "switch:4", "fully-connected:3"])
def test_flat_verifies_at_a_fixed_depth(machine):
    _, schedule = built(machine, "flat-pipelined", depth=3, multipath="all", fallback=False)
    assert "depth=3" in schedule.name


def test_the_papers_winners_beat_ring_and_trees():
    """Mist: hierarchical (paper 1.25x over NCCL); Cedar: flat (paper 1.06x; its host
    path is staged in host memory, so the margin is the paper's order, not more)."""
    for machine, strategy, margin in (("mist", "hierarchical-pipelined", 1.05),
                                      ("cedar", "flat-pipelined", 1.03)):
        topology, schedule = built(machine, strategy)
        mine = simulate(schedule, topology, 64 * MB).time_s
        for classic in ("ring", "double-binary-tree"):
            other = synthesize(topology, Kind.ALLREDUCE, classic)
            assert mine < simulate(other, topology, 64 * MB).time_s / margin


def test_stages_overlap():
    """Deeper pipelines overlap the three stages: 8 pieces beat 1 by far on Mist."""
    mist = zoo.get("mist")
    groups = mist.groups["socket"]
    one = simulate(hierarchical(mist, groups, 1), mist, 64 * MB).time_s
    eight = simulate(hierarchical(mist, groups, 8), mist, 64 * MB).time_s
    assert eight < 0.6 * one
    assert simulate(flat(mist, 4), mist, MB).time_s > 0


def test_chain_ends_at_the_leader_on_fast_links():
    dgx1 = zoo.get("dgx1")
    line = chain(dgx1, (0, 1, 2, 3))
    assert line[-1] == 0 and sorted(line) == [0, 1, 2, 3]
    assert min(dgx1.route_bandwidth(a, b) for a, b in pairwise(line)) >= 50e9


def test_not_applicable_and_bad_options():
    with pytest.raises(NotApplicableError, match="groups"):
        synthesize(zoo.get("switch:4"), Kind.ALLREDUCE, "hierarchical-pipelined")
    with pytest.raises(NotApplicableError, match="nodes"):
        synthesize(zoo.get("ndv2:2"), Kind.ALLREDUCE, "flat-pipelined")
    with pytest.raises(NotApplicableError, match="route"):
        synthesize(zoo.get("ring:5"), Kind.ALLREDUCE, "flat-pipelined")
    with pytest.raises(InputError, match="depth"):
        synthesize(zoo.get("mist"), Kind.ALLREDUCE, "flat-pipelined", depth=0)
    with pytest.raises(InputError, match="level"):
        synthesize(zoo.get("mist"), Kind.ALLREDUCE, "hierarchical-pipelined", level="rack")
    with pytest.raises(InputError, match="multipath"):
        synthesize(zoo.get("mist"), Kind.ALLREDUCE, "flat-pipelined", multipath="maybe")
    with pytest.raises(InputError, match="option"):
        synthesize(zoo.get("mist"), Kind.ALLREDUCE, "flat-pipelined", colour="red")
    with pytest.raises(InputError, match="fallback"):
        synthesize(zoo.get("mist"), Kind.ALLREDUCE, "flat-pipelined", fallback="maybe")


@pytest.mark.parametrize("machine", ["mist", "cedar", "dgx1"])
def test_tuned_at_each_size_never_slower_than_ring(machine):
    """Both are sized strategies: built for a size, they are the faster of their tuned
    pipeline and the ring there (the ring wins on dgx1, whose sockets have no switch)."""
    topology = zoo.get(machine)
    ring = synthesize(topology, Kind.ALLREDUCE, "ring")
    for strategy in NAMES:
        assert strategies()[strategy].sized
        for size in (2**10, MB, 2**30):
            try:
                schedule = synthesize(topology, Kind.ALLREDUCE, strategy, size=size)
            except NotApplicableError:
                break
            verify(schedule, topology)
            assert simulate(schedule, topology, size).time_s <= \
                simulate(ring, topology, size).time_s
            if schedule.name.startswith(f"{strategy}->ring"):
                assert "ring simulates faster" in schedule.metadata["fallback"]


def test_the_pipeline_is_kept_where_it_wins():
    schedule = synthesize(zoo.get("mist"), Kind.ALLREDUCE, "hierarchical-pipelined",
                          size=64 * MB)
    assert schedule.name.startswith("hierarchical-pipelined(")


@st.composite
def grouped(draw):
    """A random topology, sometimes with random socket groups."""
    topology = draw(topologies(max_ranks=6))
    if draw(st.booleans()) and topology.num_ranks > 2:
        cut = draw(st.integers(1, topology.num_ranks - 1))
        from dataclasses import replace

        ranks = tuple(range(topology.num_ranks))
        topology = replace(topology, groups={"socket": (ranks[:cut], ranks[cut:])})
    return topology


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=grouped(), strategy=st.sampled_from(NAMES), depth=st.sampled_from([1, 3]),
       multipath=st.sampled_from(["off", "auto"]))
def test_random_machines(topology, strategy, depth, multipath):
    try:
        schedule = synthesize(topology, Kind.ALLREDUCE, strategy, depth=depth,
                              multipath=multipath, size=MB, fallback=False)
    except NotApplicableError:
        return
    verify(schedule, topology)
