"""Transforms keep the IR closed: every output is proven again by the verifier."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.schedule import Op, ScheduleBuilder
from ccweave.simulate import simulate
from ccweave.synth.direct import build_direct
from ccweave.synth.recursive import build_recursive_doubling
from ccweave.synth.trees import build_binomial
from ccweave.topology import zoo
from ccweave.transforms import concat, instances, refine, reverse
from ccweave.verify import verify


@pytest.mark.parametrize("kind", Kind.collectives())
@pytest.mark.parametrize("k", [2, 3])
def test_refine_verifies_for_every_collective(kind, k):
    topo = zoo.get("switch:5")
    sched = build_direct(topo, kind, root=2, chunks=2)
    fine = refine(sched, k)
    verify(fine, topo)
    assert fine.collective.chunks_per_rank == 2 * k
    assert len(fine.transfers) == k * len(sched.transfers)


def test_refine_pipelines_a_relay_chain():
    """Broadcast down a chain, the whole buffer per hop: refined pieces overlap hops, so
    the time drops from hops * M/bw towards M/bw."""
    topo = zoo.get("ring:6")
    builder = ScheduleBuilder(Collective(Kind.BROADCAST, 6))
    builder.copy(0, 0, (Buffer.INPUT, 0), (Buffer.OUTPUT, 0), 6)
    for rank in range(5):
        builder.copy(rank, rank + 1, (Buffer.OUTPUT, 0), (Buffer.OUTPUT, 0), 6)
    chain = builder.build("chain")
    size = 64 * 2**20
    coarse = simulate(chain, topo, size).time_s
    fine = refine(chain, 8)
    verify(fine, topo)
    assert simulate(fine, topo, size).time_s < 0.4 * coarse


def test_instances_put_pieces_on_new_channels():
    topo = zoo.get("switch:4")
    sched = build_direct(topo, Kind.ALLGATHER)
    doubled = instances(sched, 2)
    verify(doubled, topo)
    assert doubled.num_channels == 2 * sched.num_channels


@pytest.mark.parametrize(("kind", "dual"), [(Kind.ALLGATHER, Kind.REDUCESCATTER),
                                            (Kind.BROADCAST, Kind.REDUCE),
                                            (Kind.GATHER, Kind.SCATTER),
                                            (Kind.SCATTER, Kind.GATHER),
                                            (Kind.ALLTOALL, Kind.ALLTOALL)])
@pytest.mark.parametrize("machine", ["switch:5", "dgx1", "ndv2:2"])
def test_reverse_makes_the_dual_on_the_reversed_topology(kind, dual, machine):
    topo = zoo.get(machine)
    for strategy in ("ring", "direct", "binomial"):
        from ccweave.synth import synthesize

        try:
            sched = synthesize(topo, kind, strategy, root=1, chunks=2)
        except NotApplicableError:
            continue
        if any(t.op is Op.REDUCE for t in sched.transfers):
            continue
        back = reverse(sched)
        assert back.collective.kind is dual
        verify(back, topo.reversed())


def test_reverse_of_allgather_costs_the_same_on_a_symmetric_machine():
    topo = zoo.get("dgx1")
    from ccweave.synth import synthesize

    ag = synthesize(topo, "allgather", "ring")
    rs = reverse(ag)
    size = 2**28
    assert simulate(rs, topo.reversed(), size).time_s == pytest.approx(
        simulate(ag, topo, size).time_s, rel=0.05)


def test_reverse_refuses_reductions():
    with pytest.raises(InputError, match="no data-movement dual"):
        reverse(build_direct(zoo.get("switch:4"), Kind.REDUCESCATTER))
    with pytest.raises(InputError, match="no data-movement dual"):
        reverse(build_direct(zoo.get("switch:4"), Kind.ALLREDUCE))


@pytest.mark.parametrize("machine", ["switch:4", "hypercube:3", "dgx1"])
def test_concat_reducescatter_allgather_is_an_allreduce(machine):
    topo = zoo.get(machine)
    rs = reverse(build_recursive_doubling(topo, Kind.ALLGATHER, chunks=2))
    ag = build_recursive_doubling(topo, Kind.ALLGATHER, chunks=2)
    ar = concat(rs, ag)
    assert ar.collective.kind is Kind.ALLREDUCE
    verify(ar, topo)
    assert len(ar.transfers) < len(rs.transfers) + len(ag.transfers)  # local no-ops dropped


def test_concat_reduce_broadcast_is_an_allreduce():
    topo = zoo.get("switch:6")
    ar = concat(build_binomial(topo, Kind.REDUCE, root=3, chunks=2),
                build_binomial(topo, Kind.BROADCAST, root=3, chunks=2))
    verify(ar, topo)


def test_concat_refuses_mismatched_phases():
    topo = zoo.get("switch:4")
    with pytest.raises(InputError, match="cannot join"):
        concat(build_direct(topo, Kind.ALLGATHER), build_direct(topo, Kind.ALLGATHER))
    with pytest.raises(InputError, match="differ"):
        concat(build_direct(topo, Kind.REDUCESCATTER, chunks=1),
               build_direct(topo, Kind.ALLGATHER, chunks=2))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 7), kind=st.sampled_from(Kind.collectives()), chunks=st.integers(1, 2),
       k=st.integers(2, 3), root=st.integers(0, 6))
def test_refine_of_any_direct_schedule_verifies(n, kind, chunks, k, root):
    topo = zoo.get(f"switch:{n}")
    verify(refine(build_direct(topo, kind, root=root % n, chunks=chunks), k), topo)


def test_transforms_keep_pinned_routes():
    topo = zoo.get("mist")
    builder = ScheduleBuilder(Collective(Kind.BROADCAST, 4, 1, root=0))
    builder.copy(0, 0, (Buffer.INPUT, 0), (Buffer.OUTPUT, 0), 4)
    builder.add(0, 1, Buffer.INPUT, 0, Buffer.OUTPUT, 0, 2)
    builder.add(0, 1, Buffer.INPUT, 2, Buffer.OUTPUT, 2, 2, via=("cpu0",))
    for dst in (2, 3):
        builder.add(0, dst, Buffer.INPUT, 0, Buffer.OUTPUT, 0, 4, via=("cpu0", "cpu1"))
    sched = builder.build("pinned")
    verify(sched, topo)
    assert {t.via for t in refine(sched, 2).transfers} == {None, ("cpu0",), ("cpu0", "cpu1")}
    back = reverse(sched)
    verify(back, topo.reversed())
    assert ("cpu1", "cpu0") in {t.via for t in back.transfers}
