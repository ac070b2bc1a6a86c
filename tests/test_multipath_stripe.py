"""The stripe transform: striped schedules still verify, take their routes, and are never
slower in simulation than the schedule they came from (at the size they were tuned for)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccweave.collectives import Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.multipath.stripe import finer, stripe, variants
from ccweave.simulate import simulate
from ccweave.synth import synthesize
from ccweave.topology import zoo
from ccweave.verify import verify
from tests.strategies import topologies

MB = 2**20


def time_of(schedule, topology, size):
    return simulate(schedule, topology, size).time_s


def test_direct_allreduce_on_dgx1_stripes_over_spare_nvlinks():
    """direct sends everything over each pair's cheapest route, PCIe for pairs without an
    NVLink; striping moves most of that onto relays through NVLink neighbours."""
    dgx1 = zoo.get("dgx1")
    schedule = synthesize(dgx1, Kind.ALLREDUCE, "direct")
    striped = stripe(schedule, dgx1, 64 * MB)
    verify(striped, dgx1)
    assert time_of(striped, dgx1, 64 * MB) < 0.5 * time_of(schedule, dgx1, 64 * MB)
    assert striped.metadata["striped_transfers"] > 0


def test_every_variant_verifies_and_the_fastest_wins():
    cedar = zoo.get("cedar")
    schedule = synthesize(cedar, Kind.ALLREDUCE, "double-binary-tree")
    found = variants(schedule, cedar, 64 * MB)
    assert found
    for variant in found:
        verify(variant, cedar)
    best = stripe(schedule, cedar, 64 * MB)
    assert time_of(best, cedar, 64 * MB) == min(time_of(v, cedar, 64 * MB) for v in found)


def test_saturated_links_are_left_alone():
    """Ring allreduce on Mist is bound by the X-Bus; the only other path (host memory)
    cannot help it, so the schedule comes back unchanged."""
    mist = zoo.get("mist")
    schedule = synthesize(mist, Kind.ALLREDUCE, "ring")
    assert stripe(schedule, mist, 64 * MB) is schedule


def test_pairs_limit_what_is_striped():
    dgx1 = zoo.get("dgx1")
    schedule = synthesize(dgx1, Kind.ALLREDUCE, "direct")
    socket = dgx1.group_index("socket")
    found = variants(schedule, dgx1, 64 * MB,
                     pairs=lambda a, b: socket[a][0] == socket[b][0])
    assert found
    fine = finer(schedule, 32)
    kept = {(t.src, t.dst, t.src_index, t.count) for t in fine.transfers
            if socket[t.src][0] != socket[t.dst][0]}
    for variant in found:
        verify(variant, dgx1)
        after = {(t.src, t.dst, t.src_index, t.count) for t in variant.transfers}
        assert kept <= after  # cross-socket transfers untouched


def test_finer_keeps_the_schedule():
    cedar = zoo.get("cedar")
    schedule = synthesize(cedar, Kind.ALLGATHER, "ring")
    fine = finer(schedule, 4)
    verify(fine, cedar)
    assert fine.collective.chunks_per_rank == 4 * schedule.collective.chunks_per_rank
    assert len(fine.transfers) == len(schedule.transfers)
    assert time_of(fine, cedar, 64 * MB) == pytest.approx(time_of(schedule, cedar, 64 * MB))
    with pytest.raises(InputError):
        finer(schedule, 0)
    with pytest.raises(InputError, match="path kind"):
        stripe(schedule, cedar, MB, kinds=("warp",))


STRATEGIES = ["ring", "direct", "double-binary-tree", "binomial"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=topologies(max_ranks=6), kind=st.sampled_from(Kind.collectives()),
       strategy=st.sampled_from(STRATEGIES), size=st.sampled_from([MB, 64 * MB]))
def test_striping_random_schedules(topology, kind, strategy, size):
    try:
        schedule = synthesize(topology, kind, strategy)
    except NotApplicableError:
        return
    striped = stripe(schedule, topology, size)
    verify(striped, topology)
    assert time_of(striped, topology, size) <= time_of(schedule, topology, size) * (1 + 1e-9)
