"""The verifier proves hand-built schedules and names what is wrong with broken ones."""

from __future__ import annotations

import functools
import itertools
import time
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import VerificationError
from ccweave.schedule import Op, Schedule, ScheduleBuilder, Transfer
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.verify import (
    MAX_PROBLEMS,
    ProblemKind,
    check,
    format_contributions,
    verify,
)

IN, OUT, SCR = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH
RACES = {ProblemKind.RACE_READ, ProblemKind.RACE_WRITE}


# ------------------------------------------------------ hand-built schedules


@functools.cache
def ring_allgather(n: int, c: int, in_place: bool = False) -> Schedule:
    """Block b travels b -> b+1 -> ... one chunk per transfer."""
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, n, c), in_place)
    if not in_place:
        for r in range(n):
            b.copy(r, r, (IN, 0), (OUT, r * c), count=c)
    for step in range(n - 1):
        for r in range(n):
            block = (r - step) % n
            for i in range(c):
                b.copy(r, (r + 1) % n, (OUT, block * c + i), (OUT, block * c + i))
    return b.build("ring")


@functools.cache
def ring_reducescatter(n: int, c: int) -> Schedule:
    """Accumulate in scratch around the ring; block r completes at rank r."""
    b = ScheduleBuilder(Collective(Kind.REDUCESCATTER, n, c))
    for r in range(n):
        b.copy(r, r, (IN, 0), (SCR, 0), count=n * c)
    for step in range(n - 1):
        for r in range(n):
            block = (r - step - 1) % n
            b.reduce(r, (r + 1) % n, (SCR, block * c), (SCR, block * c), count=c)
    for r in range(n):
        b.copy(r, r, (SCR, r * c), (OUT, 0), count=c)
    return b.build("ring")


@functools.cache
def ring_allreduce(n: int, c: int, in_place: bool = False) -> Schedule:
    """Reduce-scatter then allgather, both in the output buffer."""
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, n, c), in_place)
    if not in_place:
        for r in range(n):
            b.copy(r, r, (IN, 0), (OUT, 0), count=n * c)
    for step in range(n - 1):
        for r in range(n):
            block = (r - step - 1) % n
            b.reduce(r, (r + 1) % n, (OUT, block * c), (OUT, block * c), count=c)
    for step in range(n - 1):
        for r in range(n):
            block = (r - step) % n
            for i in range(c):
                b.copy(r, (r + 1) % n, (OUT, block * c + i), (OUT, block * c + i))
    return b.build("ring")


@functools.cache
def direct_alltoall(n: int, c: int, in_place: bool = False) -> Schedule:
    b = ScheduleBuilder(Collective(Kind.ALLTOALL, n, c), in_place)
    for r in range(n):
        for j in range(n):
            b.copy(r, j, (IN, j * c), (OUT, r * c), count=c)
    return b.build("direct")


@functools.cache
def chain_broadcast(n: int, c: int, root: int = 0) -> Schedule:
    """Pipelined chain root -> root+1 -> ..., one chunk at a time."""
    b = ScheduleBuilder(Collective(Kind.BROADCAST, n, c, root))
    order = [(root + k) % n for k in range(n)]
    b.copy(root, root, (IN, 0), (OUT, 0), count=n * c)
    for i in range(n * c):
        for a, z in itertools.pairwise(order):
            b.copy(a, z, (OUT, i), (OUT, i))
    return b.build("chain")


@functools.cache
def chain_reduce(n: int, c: int, root: int = 0) -> Schedule:
    """Partial sums flow along the chain towards the root through scratch."""
    b = ScheduleBuilder(Collective(Kind.REDUCE, n, c, root))
    order = [(root + k) % n for k in range(n)]
    b.copy(root, root, (IN, 0), (OUT, 0), count=n * c)
    for r in order[1:]:
        b.copy(r, r, (IN, 0), (SCR, 0), count=n * c)
    for k in range(n - 1, 0, -1):
        dst = (OUT, 0) if order[k - 1] == root else (SCR, 0)
        b.reduce(order[k], order[k - 1], (SCR, 0), dst, count=n * c)
    return b.build("chain")


BUILDERS = {
    "ring_allgather": lambda n, c, root: ring_allgather(n, c),
    "ring_reducescatter": lambda n, c, root: ring_reducescatter(n, c),
    "ring_allreduce": lambda n, c, root: ring_allreduce(n, c),
    "direct_alltoall": lambda n, c, root: direct_alltoall(n, c),
    "chain_broadcast": lambda n, c, root: chain_broadcast(n, c, root),
    "chain_reduce": lambda n, c, root: chain_reduce(n, c, root),
}
WITH_REDUCTIONS = ("ring_reducescatter", "ring_allreduce", "chain_reduce")
WITH_DEPS = tuple(name for name in BUILDERS if name != "direct_alltoall")


@st.composite
def schedules(draw, names: tuple[str, ...] = tuple(BUILDERS)) -> Schedule:
    n = draw(st.integers(2, 8))
    name = draw(st.sampled_from(names))
    return BUILDERS[name](n, draw(st.integers(1, 3)), draw(st.integers(0, n - 1)))


def two_rank_allgather(*extra: Transfer, last: Transfer | None = None) -> Schedule:
    """Allgather on 2 ranks: local copies (0, 1), exchange (2, 3), then ``extra``."""
    swap = Transfer(1, 0, OUT, 1, OUT, 1, deps=(1,)) if last is None else last
    transfers = (Transfer(0, 0, IN, 0, OUT, 0), Transfer(1, 1, IN, 0, OUT, 1),
                 Transfer(0, 1, OUT, 0, OUT, 0, deps=(0,)), swap, *extra)
    return Schedule(Collective(Kind.ALLGATHER, 2), transfers, scratch_chunks=1)


def edit(schedule: Schedule, index: int, **changes: object) -> Schedule:
    transfers = list(schedule.transfers)
    transfers[index] = replace(transfers[index], **changes)
    return replace(schedule, transfers=tuple(transfers))


def first(schedule: Schedule, topology: Topology | None = None):
    result = check(schedule, topology)
    assert not result.ok
    return result.problems[0]


# ------------------------------------------------------------ correct ones


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize(("n", "c"), [(2, 1), (3, 2), (5, 1), (8, 3)])
def test_hand_built_schedules_verify(name, n, c):
    schedule = BUILDERS[name](n, c, n - 1)
    result = verify(schedule)
    assert result.ok and result.problems == ()
    assert result.transfers == len(schedule.transfers)
    assert result.outputs == len(schedule.collective.postcondition)
    assert result.reductions == sum(t.op is Op.REDUCE for t in schedule.transfers)
    assert "verified" in result.summary()


@pytest.mark.parametrize("builder", [ring_allreduce, ring_allgather])
@pytest.mark.parametrize(("n", "c"), [(2, 1), (4, 2), (7, 1)])
def test_in_place_schedules_verify(builder, n, c):
    schedule = builder(n, c, in_place=True)
    assert schedule.in_place
    assert verify(schedule).ok


def test_in_place_alltoall_without_staging_overwrites_its_own_input():
    result = check(direct_alltoall(4, 1, in_place=True))
    assert not result.ok
    assert {p.kind for p in result.problems} == {ProblemKind.WRONG_OUTPUT}


def test_out_of_order_transfer_list_verifies_through_topological_order():
    schedule = ring_allgather(4, 2)
    count = len(schedule.transfers)
    flipped = tuple(replace(t, deps=tuple(count - 1 - d for d in t.deps))
                    for t in reversed(schedule.transfers))
    assert verify(replace(schedule, transfers=flipped)).ok


def test_topology_with_routes_verifies():
    links = tuple(Link(r, "nvswitch", 100e9) for r in range(4)) + \
        tuple(Link("nvswitch", r, 100e9) for r in range(4))
    machine = Topology("box", 4, links, {"nvswitch": NodeKind.SWITCH})
    assert verify(ring_allreduce(4, 1), machine).ok


# ------------------------------------------------------- each kind of problem


def test_out_of_range_names_transfer_and_buffer():
    problem = first(edit(ring_allgather(3, 1), 4, dst_index=3))
    assert problem.kind is ProblemKind.OUT_OF_RANGE
    assert (problem.transfer, problem.rank, problem.buffer, problem.index) == (4, 2, OUT, 3)
    assert problem.message == ("transfer 4 (1 -> 2, copy) writes output slots 3..3 of rank 2, "
                               "but the output buffer has 3 chunk(s)")


def test_scratch_out_of_range_says_to_raise_scratch_chunks():
    problem = first(replace(ring_reducescatter(3, 1), scratch_chunks=2))
    assert problem.kind is ProblemKind.OUT_OF_RANGE
    assert "raise scratch_chunks" in problem.message and problem.transfer == 0


def test_bad_rank():
    problem = first(edit(ring_allgather(3, 1), 5, src=3))
    assert problem.kind is ProblemKind.BAD_RANK and problem.transfer == 5
    assert "source rank 3 is not a rank" in problem.message


def test_bad_count():
    problem = first(edit(ring_allgather(3, 1), 2, count=0))
    assert problem.kind is ProblemKind.BAD_COUNT and problem.transfer == 2
    assert "transfer 2 (2 -> 2, copy) moves 0 chunks" in problem.message


def test_dangling_dep():
    problem = first(edit(ring_allgather(3, 1), 4, deps=(1, 99)))
    assert problem.kind is ProblemKind.DANGLING_DEP and problem.transfer == 4
    assert "depends on transfer 99, which does not exist" in problem.message


def test_cycle_names_the_transfers_on_it():
    schedule = two_rank_allgather(last=Transfer(1, 0, OUT, 1, OUT, 1, deps=(1, 2)))
    schedule = edit(schedule, 2, deps=(0, 3))
    problem = first(schedule)
    assert problem.kind is ProblemKind.CYCLE and problem.transfer in (2, 3)
    assert ("2 -> 3 -> 2" in problem.message) or ("3 -> 2 -> 3" in problem.message)


def test_self_dependency_is_a_cycle():
    problem = first(edit(ring_allgather(3, 1), 4, deps=(1, 4)))
    assert problem.kind is ProblemKind.CYCLE and "4 -> 4" in problem.message


def test_undefined_read():
    schedule = two_rank_allgather(last=Transfer(1, 0, SCR, 0, OUT, 1))
    problem = first(schedule)
    assert problem.kind is ProblemKind.UNDEFINED_READ
    assert (problem.transfer, problem.rank, problem.buffer, problem.index) == (3, 1, SCR, 0)
    assert problem.message == ("transfer 3 (1 -> 0, copy) reads scratch slot 0 of rank 1, "
                               "which holds no data yet")


def test_non_root_input_is_undefined():
    relay_root_input = edit(chain_broadcast(3, 1, root=0), 1, src_buffer=IN)
    assert verify(relay_root_input).ok  # the root has an input
    problem = first(edit(chain_broadcast(3, 1, root=0), 2, src_buffer=IN))
    assert problem.kind is ProblemKind.UNDEFINED_READ and problem.rank == 1


def test_race_read_after_write():
    schedule = ring_allgather(3, 1)
    forward = 6  # step 1: rank 0 forwards block 2, written by transfer 5 (2 -> 0)
    assert schedule.transfers[forward].deps == (5,)
    problem = first(edit(schedule, forward, deps=()))
    assert problem.kind is ProblemKind.RACE_READ
    assert (problem.transfer, problem.rank, problem.buffer, problem.index) == (6, 0, OUT, 2)
    assert problem.message == ("transfer 6 (0 -> 1, copy) reads output slot 2 of rank 0, but "
                               "its writer transfer 5 (2 -> 0, copy) is not ordered before it "
                               "by deps; add that dep")


def test_race_write_after_read():
    rewrite = Transfer(1, 1, IN, 0, OUT, 1, deps=(1,))  # rewrites what transfer 3 reads
    problem = first(two_rank_allgather(rewrite))
    assert problem.kind is ProblemKind.RACE_READ and problem.transfer == 4
    assert problem.message == ("transfer 4 (1 -> 1, copy) writes output slot 1 of rank 1, but "
                               "transfer 3 (1 -> 0, copy) reads it and is not ordered before "
                               "it by deps (write after read); add that dep")


def test_race_write_write():
    writes = (Transfer(0, 1, IN, 0, SCR, 0), Transfer(1, 1, IN, 0, SCR, 0))
    problem = first(two_rank_allgather(*writes))
    assert problem.kind is ProblemKind.RACE_WRITE and problem.transfer == 5
    assert problem.message == ("transfer 5 (1 -> 1, copy) writes scratch slot 0 of rank 1, but "
                               "transfer 4 (0 -> 1, copy) also writes it and is not ordered "
                               "before it by deps; add that dep")


def _reduce_to_root(*transfers: Transfer) -> Schedule:
    return Schedule(Collective(Kind.REDUCE, 2, 1, root=0), transfers)


def test_duplicate_contribution():
    schedule = _reduce_to_root(Transfer(0, 0, IN, 0, OUT, 0, count=2),
                               Transfer(1, 0, IN, 0, OUT, 0, 2, Op.REDUCE, deps=(0,)),
                               Transfer(1, 0, IN, 1, OUT, 1, 1, Op.REDUCE, deps=(1,)))
    problem = first(schedule)
    assert problem.kind is ProblemKind.DUPLICATE_CONTRIBUTION
    assert (problem.transfer, problem.rank, problem.buffer, problem.index) == (2, 0, OUT, 1)
    assert problem.message == ("transfer 2 (1 -> 0, reduce) reduces into output slot 1 of "
                               "rank 0, which already holds contributions {(1, 1)}; they would "
                               "be counted twice")


def test_reducing_a_different_chunk_index_is_named():
    schedule = _reduce_to_root(Transfer(0, 0, IN, 0, OUT, 0, count=2),
                               Transfer(1, 0, IN, 1, OUT, 0, 1, Op.REDUCE, deps=(0,)))
    problem = first(schedule)
    assert problem.kind is ProblemKind.MIXED_CHUNKS
    assert (problem.transfer, problem.rank, problem.index) == (1, 0, 0)
    assert "adding input chunk 1 to input chunk 0" in problem.message


def test_reduce_into_undefined():
    schedule = _reduce_to_root(Transfer(1, 0, IN, 0, OUT, 0, 2, Op.REDUCE))
    problem = first(schedule)
    assert problem.kind is ProblemKind.REDUCE_INTO_UNDEFINED and problem.transfer == 0
    assert problem.message.startswith("transfer 0 (1 -> 0, reduce) reduces into output slot 0 "
                                      "of rank 0, which holds no data yet")


def test_wrong_output_names_slot_contributions_and_last_writer():
    problem = first(two_rank_allgather(last=Transfer(1, 0, OUT, 0, OUT, 1, deps=(2,))))
    assert problem.kind is ProblemKind.WRONG_OUTPUT
    assert (problem.transfer, problem.rank, problem.buffer, problem.index) == (3, 0, OUT, 1)
    assert problem.message == ("output slot 1 of rank 0 holds contributions {(0, 0)} but "
                               "allgather needs {(1, 0)} (missing {(1, 0)}; extra {(0, 0)}); "
                               "last written by transfer 3 (1 -> 0, copy)")


def test_wrong_output_of_a_reduction_names_the_missing_contribution():
    schedule = ring_allreduce(4, 1)
    rs_last = 4 + 2 * 4  # step 2 of the reduce-scatter: rank 0 completes block 1 at rank 1
    problem = first(edit(schedule, rs_last, op=Op.COPY))
    assert problem.kind is ProblemKind.WRONG_OUTPUT
    assert "allreduce needs {(0, 1), (1, 1), (2, 1), (3, 1)} (missing {(1, 1)})" \
        in problem.message


def test_missing_output():
    schedule = two_rank_allgather(last=Transfer(1, 0, OUT, 1, SCR, 0, deps=(1,)))
    problem = first(schedule)
    assert problem.kind is ProblemKind.MISSING_OUTPUT
    assert (problem.transfer, problem.rank, problem.index) == (None, 0, 1)
    assert problem.message == ("output slot 1 of rank 0 was never written, but allgather "
                               "needs {(1, 0)}")


@pytest.mark.parametrize("channel", [-5, 64, 10**6])
def test_a_channel_nccl_lacks_is_malformed(channel):
    schedule = two_rank_allgather()
    bad = replace(schedule.transfers[2], channel=channel)
    schedule = replace(schedule, transfers=(*schedule.transfers[:2], bad,
                                            *schedule.transfers[3:]))
    problem = first(schedule)
    assert problem.kind is ProblemKind.BAD_CHANNEL and problem.transfer == 2
    assert f"on channel {channel}; channels are 0..63" in problem.message
    assert check(schedule).malformed


def test_cli_checks_pinned_routes_on_the_machine_the_schedule_names(tmp_path, capsys):
    """A ``via`` naming an unknown node was proven without --topology: the routes are
    checked on the schedule's own machine (its metadata), or said to be unchecked."""
    import json

    from ccweave.cli import main
    from ccweave.schedule import save
    from ccweave.synth import synthesize
    from ccweave.topology import zoo

    schedule = synthesize(zoo.get("switch:4"), "allgather", "direct")
    bad = replace(schedule.transfers[-1], via=("nosuch",))
    path = tmp_path / "s.json"
    save(replace(schedule, transfers=(*schedule.transfers[:-1], bad)), path)
    assert main(["verify", str(path)]) == 1
    assert "'nosuch' is not a fabric node of 'switch:4'" in capsys.readouterr().out
    data = json.loads(path.read_text())
    del data["metadata"]["topology"]
    path.write_text(json.dumps(data))
    assert main(["verify", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 pinned route(s) NOT checked (it names no machine); give --topology" in out
    assert main(["verify", str(path), "--topology", "switch:4"]) == 1


def test_no_route_only_with_a_topology():
    one_way = Topology("one-way", 2, (Link(0, 1, 50e9),))
    schedule = two_rank_allgather()
    assert verify(schedule).ok
    problem = first(schedule, one_way)
    assert problem.kind is ProblemKind.NO_ROUTE and problem.transfer == 3
    assert "no route from rank 1 to rank 0" in problem.message


def test_missing_route_does_not_stop_the_proof():
    one_way = Topology("one-way", 2, (Link(0, 1, 50e9),))
    schedule = two_rank_allgather(last=Transfer(1, 0, OUT, 1, SCR, 0, deps=(1,)))
    kinds = [p.kind for p in check(schedule, one_way).problems]
    assert kinds == [ProblemKind.NO_ROUTE, ProblemKind.MISSING_OUTPUT]


def test_bad_rank_with_a_topology_is_reported_once():
    machine = Topology("pair", 2, (Link(0, 1, 50e9), Link(1, 0, 50e9)))
    problem = first(edit(two_rank_allgather(), 3, src=5), machine)
    assert problem.kind is ProblemKind.BAD_RANK and problem.transfer == 3


def test_numpy_integers_are_integers():
    np = pytest.importorskip("numpy")
    schedule = ring_reducescatter(3, 2)
    as_numpy = tuple(replace(t, src=np.int64(t.src), dst=np.int32(t.dst),
                             dst_index=np.int64(t.dst_index),
                             deps=tuple(np.int64(d) for d in t.deps))
                     for t in schedule.transfers)
    assert verify(replace(schedule, transfers=as_numpy)).ok


def test_topology_with_other_rank_count():
    machine = Topology("pair", 2, (Link(0, 1, 50e9), Link(1, 0, 50e9)))
    problem = first(ring_allgather(3, 1), machine)
    assert problem.kind is ProblemKind.BAD_RANK
    assert "for 3 ranks but topology 'pair' has 2" in problem.message


def test_verify_raises_with_the_first_problem():
    schedule = two_rank_allgather(last=Transfer(1, 0, OUT, 1, SCR, 0, deps=(1,)))
    with pytest.raises(VerificationError, match=r"^output slot 1 of rank 0 was never written"):
        verify(schedule)


def test_problems_stop_at_the_limit():
    schedule = ring_allreduce(8, 1)
    racy = replace(schedule, transfers=tuple(replace(t, deps=()) for t in schedule.transfers))
    result = check(racy)
    assert len(result.problems) == MAX_PROBLEMS and result.truncated
    assert "+ problem(s)" in result.summary()
    with pytest.raises(VerificationError, match=r"and 19\+ more problem"):
        verify(racy)


def test_long_contribution_sets_are_abbreviated():
    coll = Collective(Kind.ALLREDUCE, 256)
    text = format_contributions(coll.postcondition[(0, 3)], coll.index_bits)
    assert text == "{(0, 3), (1, 3), (2, 3), (3, 3), (4, 3), (5, 3), ... 256 in all}"


# ------------------------------------------------------------------ mutants


def delete(schedule: Schedule, gone: int) -> Schedule:
    """Drop transfer ``gone``: later dep indices shift down, deps on it disappear."""
    kept = tuple(replace(t, deps=tuple(d - (d > gone) for d in t.deps if d != gone))
                 for i, t in enumerate(schedule.transfers) if i != gone)
    return replace(schedule, transfers=kept)


def slots(t: Transfer) -> tuple[set, set]:
    """(source slots, destination slots) of ``t``."""
    return ({(t.src, t.src_buffer, t.src_index + k) for k in range(t.count)},
            {(t.dst, t.dst_buffer, t.dst_index + k) for k in range(t.count)})


def ancestor(transfers, earlier: int, later: int) -> bool:
    stack, seen = [later], set()
    while stack:
        for dep in transfers[stack.pop()].deps:
            if dep == earlier:
                return True
            if dep not in seen:
                seen.add(dep)
                stack.append(dep)
    return False


@functools.cache
def race_mutants(schedule: Schedule) -> list[tuple[int, tuple[int, ...], bool]]:
    """(transfer, deps without one, whether the dropped dep wrote the transfer's source)
    for every dep that touches a slot the transfer touches, one of them writing, and is no
    longer ordered before it once dropped. (A reduction's destination counts as written.)"""
    transfers, found = schedule.transfers, []
    for index, t in enumerate(transfers):
        reads, writes = slots(t)
        for dep in t.deps:
            dep_reads, dep_writes = slots(transfers[dep])
            carries = bool(dep_writes & reads)
            if not (carries or dep_writes & writes or dep_reads & writes):
                continue
            deps = tuple(d for d in t.deps if d != dep)
            mutant = [*transfers[:index], replace(t, deps=deps)]
            if not ancestor(mutant, dep, index):
                found.append((index, deps, carries))
    return found


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_deleting_any_transfer_breaks_the_schedule(data):
    schedule = data.draw(schedules())
    gone = data.draw(st.integers(0, len(schedule.transfers) - 1))
    assert not check(delete(schedule, gone)).ok


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_duplicating_any_reduction_breaks_the_schedule(data):
    schedule = data.draw(schedules(WITH_REDUCTIONS))
    reductions = [i for i, t in enumerate(schedule.transfers) if t.op is Op.REDUCE]
    index = data.draw(st.sampled_from(reductions))
    again = replace(schedule.transfers[index], deps=(index,))
    result = check(replace(schedule, transfers=(*schedule.transfers, again)))
    assert not result.ok
    assert {p.kind for p in result.problems} & {ProblemKind.DUPLICATE_CONTRIBUTION, *RACES}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_dropping_a_conflicting_dep_is_a_race(data):
    schedule = data.draw(schedules(WITH_DEPS))
    index, deps, carries = data.draw(st.sampled_from(race_mutants(schedule)))
    problem = first(edit(schedule, index, deps=deps))
    assert problem.kind in RACES and problem.transfer == index
    if carries:
        assert problem.kind is ProblemKind.RACE_READ


def test_every_ring_allreduce_dep_carrying_data_is_needed():
    mutants = [m for m in race_mutants(ring_allreduce(5, 2)) if m[2]]
    assert len(mutants) >= 5 * 4 * 2
    for index, deps, _ in mutants:
        assert first(edit(ring_allreduce(5, 2), index, deps=deps)).kind is ProblemKind.RACE_READ


# --------------------------------------------------------------------- speed


def test_ring_allreduce_on_64_ranks_verifies():
    schedule = ring_allreduce(64, 2)
    result = verify(schedule)
    assert result.transfers == len(schedule.transfers) > 12_000
    assert result.outputs == 64 * 128


@pytest.mark.slow
def test_ring_allreduce_on_256_ranks_verifies_in_seconds():
    schedule = ring_allreduce(256, 1)
    assert len(schedule.transfers) > 130_000
    start = time.perf_counter()
    result = verify(schedule)
    elapsed = time.perf_counter() - start
    assert result.outputs == 256 * 256
    assert elapsed < 15, f"verifying took {elapsed:.1f} s"
