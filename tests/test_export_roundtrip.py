"""Every strategy's schedule exports to MSCCL XML that passes the runtime checker, and
imports back to a schedule the verifier proves (export -> import keeps the semantics)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError, NotApplicableError, SolverError
from ccweave.export import Runtime, check_xml, from_xml, lex_check, to_xml
from ccweave.export.msccl_spec import MAX_STEPS
from ccweave.schedule import ScheduleBuilder
from ccweave.simulate import simulate
from ccweave.synth import strategies, synthesize
from ccweave.topology import zoo
from ccweave.verify import check

MACHINES = ["switch:8", "switch:16", "dgx1", "dgx2"]
FAST = sorted(name for name, s in strategies().items() if not s.slow)
SLOW = sorted(name for name, s in strategies().items() if s.slow)


def _round_trip(topo, name: str, runtime: Runtime = Runtime.MSCCL, instances: int = 1,
                chunks: int | None = None) -> int:
    """Export every collective ``name`` builds on ``topo``; return how many round-tripped."""
    done = 0
    for kind in sorted(strategies()[name].collectives, key=lambda k: k.value):
        try:
            sched = synthesize(topo, kind, name, chunks=chunks)
        except (NotApplicableError, SolverError):  # nothing to export
            continue
        if runtime is Runtime.AZURE and kind.value == "sendrecv":
            with pytest.raises(InputError, match="Azure MSCCL executor has no sendrecv"):
                to_xml(sched, runtime=runtime)
            continue
        text = to_xml(sched, runtime=runtime, instances=instances)
        assert check_xml(ET.fromstring(text), runtime) == [], f"{sched.name} {kind.value}"
        assert lex_check(text) == []
        back = from_xml(text)
        result = check(back, topo)
        assert result.ok, f"{sched.name} {kind.value}: {result.problems[0].message}"
        assert back.collective.kind is kind
        assert back.collective.chunks_per_rank == sched.collective.chunks_per_rank * instances
        done += 1
    return done


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("name", FAST)
def test_every_strategy_round_trips(machine, name):
    _round_trip(zoo.get(machine), name)


@pytest.mark.slow
@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("name", SLOW)
def test_slow_strategies_round_trip(machine, name):
    _round_trip(zoo.get(machine), name)


def test_hierarchical_round_trips_on_two_nodes():
    """(hierarchical needs several nodes: it does not apply to the machines above)"""
    assert _round_trip(zoo.get("ndv2:2"), "hierarchical", chunks=2) == 3


def _long_allgather(chunks: int):
    """2-rank allgather whose ``chunks`` copies per rank and peer are independent."""
    builder = ScheduleBuilder(Collective(Kind.ALLGATHER, 2, chunks))
    for rank in range(2):
        for i in range(chunks):
            for dst in (rank, 1 - rank):
                builder.copy(rank, dst, (Buffer.INPUT, i), (Buffer.OUTPUT, rank * chunks + i))
    sched = builder.build("long")
    assert check(sched).ok
    return sched


def test_more_steps_than_a_threadblock_runs_spread_over_lanes():
    """266 independent sends to one peer were one threadblock of 266 steps (refused: MSCCL
    runs 256); they go on lanes of their own, each threadblock within MSCCL's limits."""
    text = to_xml(_long_allgather(MAX_STEPS + 10))
    root = ET.fromstring(text)
    assert check_xml(root) == []
    longest = max(len(tb.findall("step")) for gpu in root.findall("gpu")
                  for tb in gpu.findall("tb"))
    assert longest <= MAX_STEPS
    assert check(from_xml(text)).ok


@pytest.mark.slow
def test_too_many_steps_is_refused_with_the_limit_and_a_fix():
    """Past what lanes can hold (the parser's 4096 elements a gpu), the export refuses,
    naming the limit and the fix."""
    chunks = 1400
    with pytest.raises(InputError, match=f"has {chunks} steps; MSCCL runs at most "
                                         f"{MAX_STEPS} per threadblock.*fewer chunks"):
        to_xml(_long_allgather(chunks))


@pytest.mark.parametrize("runtime", list(Runtime))
@pytest.mark.parametrize("name", FAST)
def test_instances_and_both_runtimes_round_trip(runtime, name):
    _round_trip(zoo.get("switch:8"), name, runtime, instances=2)


def test_ring_exports_as_msccl_rings_do():
    """s, then rrs (reduce-scatter), rrcs, rcs (allgather), r: one threadblock per ring,
    like msccl-tools' allreduce_a100_ring; and the XML runs as fast as the schedule."""
    topo = zoo.get("switch:8")
    sched = synthesize(topo, "allreduce", "ring")
    root = ET.fromstring(to_xml(sched))
    ring = next(tb for tb in root.find("gpu").findall("tb") if tb.get("send") != "-1")
    types = [step.get("type") for step in ring.findall("step")]
    assert types == ["s"] + ["rrs"] * 6 + ["rrcs"] + ["rcs"] * 6 + ["r"]
    size = 64 * 2**20
    assert simulate(from_xml(ET.tostring(root, encoding="unicode")), topo, size).time_s == \
        pytest.approx(simulate(sched, topo, size).time_s, rel=1e-9)


@pytest.mark.parametrize("name", FAST)
def test_the_xml_runs_about_as_fast_as_the_schedule(name):
    """Threadblocks run their steps in order and a connection is FIFO, which the schedule
    need not be (double binary trees, pipelined allreduces overlap stages there); pinned
    routes (``via``) have no MSCCL form, so compare with the schedule without them."""
    topo = zoo.get("dgx1")
    for kind in strategies()[name].collectives:
        try:
            sched = synthesize(topo, kind, name)
        except (NotApplicableError, SolverError):
            continue
        unpinned = replace(sched, transfers=tuple(replace(t, via=None) for t in sched.transfers))
        size = 64 * 2**20
        ratio = simulate(from_xml(to_xml(sched)), topo, size).time_s / \
            simulate(unpinned, topo, size).time_s
        assert ratio < 1.3, (sched.name, kind, ratio)


@pytest.mark.parametrize(("machine", "name", "kind"),
                         [("dgx-a100", "flat-pipelined", "allreduce"),
                          ("dgx1", "flow", "alltoall"),
                          ("dgx-h100", "flat-pipelined", "allreduce")])
def test_transfers_a_connection_runs_at_once_keep_their_overlap(machine, name, kind):
    """A connection's transfers that the schedule runs side by side go on channels of
    their own (one threadblock at each end runs its steps one after another): the XML
    reads back within 2% of the schedule (1.14-1.25x when they shared one)."""
    topo = zoo.get(machine)
    sched = synthesize(topo, kind, name)
    back = from_xml(to_xml(sched))
    assert check(back, topo).ok
    for size in (2**20, 256 * 2**20):
        ratio = simulate(back, topo, size).time_s / simulate(sched, topo, size).time_s
        assert ratio == pytest.approx(1, abs=0.02), (size, ratio)


@pytest.mark.parametrize(("machine", "name"), [("ndv2:2", "ring"),
                                               ("ndv2:2", "hierarchical")])
def test_the_machine_tells_which_transfers_run_at_once(machine, name):
    """Across two nodes the slow link carries a ring's reduce-scatter and allgather
    chunks at once, which an estimate without the machine puts one after another (one
    channel: 1.20x at 1 MB; hierarchical's exchange between the nodes 1.14x); timed on
    the machine, they get channels of their own and read back within 2%."""
    topo = zoo.get(machine)
    sched = synthesize(topo, "allreduce", name)
    ratios = {}
    for given in (None, topo):
        back = from_xml(to_xml(sched, topology=given))
        assert check(back, topo).ok
        ratios[given is not None] = [simulate(back, topo, size).time_s /
                                     simulate(sched, topo, size).time_s
                                     for size in (2**20, 256 * 2**20)]
    assert max(abs(r - 1) for r in ratios[False]) > 0.02
    assert max(abs(r - 1) for r in ratios[True]) <= 0.02, ratios


def test_a_chunk_forwarded_to_two_peers_is_not_held_up_by_a_fused_step():
    """dgx1's trees allgather forwards a received chunk to two peers: fused with the
    first send, the receive made the second wait for that send too (1.12x at 1 MB, 1.14x
    at 256 MB, against the schedule without its routes); left apart it reads back within
    2%."""
    topo = zoo.get("dgx1")
    sched = synthesize(topo, "allgather", "trees")
    unpinned = replace(sched, transfers=tuple(replace(t, via=None) for t in sched.transfers))
    back = from_xml(to_xml(sched, topology=topo))
    assert check(back, topo).ok
    for size in (2**20, 256 * 2**20):
        ratio = simulate(back, topo, size).time_s / simulate(unpinned, topo, size).time_s
        assert abs(ratio - 1) <= 0.02, (size, ratio)
