"""The schedule IR: builder-derived deps, stats, lossless JSON, clear errors."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError
from ccweave.schedule import (
    Op,
    ScheduleBuilder,
    Transfer,
    from_dict,
    load,
    save,
    to_dict,
    topological_order,
)

I, O, S = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


def ring_allgather(n: int):
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, n))
    for r in range(n):
        b.copy(r, r, (I, 0), (O, r))
    for step in range(n - 1):
        for r in range(n):
            chunk = (r - step) % n
            b.copy(r, (r + 1) % n, (O, chunk), (O, chunk))
    return b.build("ring")


def test_builder_derives_read_after_write_deps():
    sched = ring_allgather(4)
    first_hop = sched.transfers[4]  # rank 0 forwards its own chunk
    assert first_hop.deps == (0,)
    second_hop = sched.transfers[8]  # rank 0 forwards the chunk it received from rank 3
    assert sched.transfers[second_hop.deps[0]].dst == 0


def test_builder_orders_write_after_read():
    b = ScheduleBuilder(Collective(Kind.BROADCAST, 2))
    b.copy(0, 1, (I, 0), (S, 0))
    read = b.copy(1, 1, (S, 0), (O, 0))
    overwrite = b.copy(0, 1, (I, 1), (S, 0))
    assert read in b.transfers[overwrite].deps
    assert b.scratch_chunks == 1


def test_stats_and_depth():
    sched = ring_allgather(4)
    stats = sched.stats()
    assert stats["transfers"] == 16 and stats["local_transfers"] == 4
    assert stats["steps"] == 4
    assert stats["chunks_sent"] == 12


def test_json_round_trip_is_lossless(tmp_path):
    sched = ring_allgather(5)
    path = tmp_path / "s.json"
    save(sched, path)
    back = load(path)
    assert back.transfers == sched.transfers
    assert back.collective == sched.collective and back.name == "ring"
    assert to_dict(back) == to_dict(sched)


def test_reduce_op_and_channel_survive_json():
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 2))
    b.reduce(0, 1, (I, 0), (I, 0), channel=3)
    back = from_dict(json.loads(json.dumps(to_dict(b.build("x")))))
    assert back.transfers[0].op is Op.REDUCE and back.transfers[0].channel == 3


def test_cycle_is_named():
    sched = ring_allgather(3)
    t = list(sched.transfers)
    assert t[3].deps == (0,)
    t[0] = replace(t[0], deps=(3,))
    with pytest.raises(InputError, match="cycle"):
        topological_order(t)


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "not valid JSON"),
    ('{"format": "other"}', "not a ccweave schedule"),
    ('{"format": "ccweave.schedule", "version": 9}', "version 9"),
    ('{"format": "ccweave.schedule", "version": 1, "collective": {"kind": "allsum", '
     '"ranks": 2}, "transfers": []}', "unknown collective"),
    ('{"format": "ccweave.schedule", "version": 1, "collective": {"kind": "allgather", '
     '"ranks": 2}, "transfers": [[0, 1, "x", 0, "o", 0, 1, "c", [], 0]]}', r"transfers\[0\]"),
])
def test_corrupted_files_are_refused(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load(path)


def _ring_file(tmp_path, **edits):
    """A ring allgather's file with ``collective`` fields or transfer 4's row (its first
    send) changed."""
    data = to_dict(ring_allgather(4))
    data["collective"].update(edits.pop("collective", {}))
    for index, value in edits.pop("row4", {}).items():
        row = data["transfers"][4]
        row.extend([None] * (index + 1 - len(row)))
        row[index] = value
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("edits", "message"), [
    ({"row4": {9: -5}}, r"transfers\[4\]: channel -5 is not a channel; channels are 0..63"),
    ({"row4": {9: 10**6}}, "channel 1000000 is not a channel"),
    ({"row4": {9: 64}}, "channel 64 is not a channel"),
    ({"collective": {"root": 99}}, "allgather has no root, but root is 99"),
    ({"collective": {"kind": "broadcast", "root": 99}}, r"root 99 is not a rank \(0..3\)"),
    ({"collective": {"kind": "broadcast", "root": -1}}, r"root -1 is not a rank"),
    ({"collective": {"peer": 2}}, "allgather has no peer"),
    ({"collective": {"ranks": 4.5}}, "expected an integer"),
    ({"row4": {10: [""]}}, "names an empty node"),
    ({"row4": {10: ["nic0", "sw", "nic0"]}}, "passes a node twice"),
])
def test_fields_that_name_nothing_are_refused(tmp_path, edits, message):
    """channel -5 or 1e6, root 99 were read (the root silently as 0): each is refused
    with the transfer or field, the value and the range."""
    with pytest.raises(InputError, match=message):
        load(_ring_file(tmp_path, **edits))


def test_a_route_on_a_local_transfer_is_refused(tmp_path):
    data = to_dict(ring_allgather(4))
    local = next(i for i, row in enumerate(data["transfers"]) if row[0] == row[1])
    data["transfers"][local].append(["sw"])
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=rf"transfers\[{local}\]: a local transfer"):
        load(path)


def test_pinned_routes_survive_json():
    b = ScheduleBuilder(Collective(Kind.SENDRECV, 4, 1, root=0, peer=1))
    b.add(0, 1, I, 0, O, 0, 2)
    b.add(0, 1, I, 2, O, 2, 2, via=("cpu0",))
    back = from_dict(json.loads(json.dumps(to_dict(b.build("x")))))
    assert [t.via for t in back.transfers] == [None, ("cpu0",)]


# ------------------------------------------------- builder vs the rule spelled per slot


class _Reference:
    """The builder's dependency rule spelled out per slot with dicts: the last writer of
    every slot read or written, and the readers since of every slot overwritten."""

    def __init__(self, collective: Collective, in_place: bool) -> None:
        self.collective, self.in_place = collective, in_place
        self.writer: dict[tuple, int] = {}
        self.readers: dict[tuple, list[int]] = {}
        self.deps: list[tuple[int, ...]] = []
        self.scratch = 0

    def key(self, rank: int, buffer: Buffer, index: int) -> tuple:
        if self.in_place:
            buffer, index = self.collective.in_place_alias(rank, buffer, index)
        return rank, buffer, index

    def add(self, src, dst, sbuf, sidx, dbuf, didx, count, after) -> None:
        index = len(self.deps)
        reads = [self.key(src, sbuf, sidx + k) for k in range(count)]
        writes = [self.key(dst, dbuf, didx + k) for k in range(count)]
        deps = set(after) | {self.writer[k] for k in reads + writes if k in self.writer}
        for key in writes:
            deps.update(self.readers.get(key, []))
        deps.discard(index)
        self.deps.append(tuple(sorted(deps)))
        for key in reads:
            self.readers.setdefault(key, []).append(index)
        for key in writes:
            self.writer[key], self.readers[key] = index, []
        for buffer, at in ((sbuf, sidx), (dbuf, didx)):
            if buffer is S:
                self.scratch = max(self.scratch, at + count)


@st.composite
def _operations(draw):
    kind = draw(st.sampled_from([Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE,
                                 Kind.ALLTOALL, Kind.BROADCAST, Kind.GATHER]))
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    collective = Collective(kind, n, c)
    size = n * c + 2  # a little past the buffers, as a wrong schedule may go
    ops = []
    for number in range(draw(st.integers(1, 40))):
        sbuf, dbuf = draw(st.sampled_from([I, O, S])), draw(st.sampled_from([I, O, S]))
        count = draw(st.integers(0, 4))
        after = draw(st.lists(st.integers(0, number), max_size=2)) if number else []
        ops.append((draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1)), sbuf,
                    draw(st.integers(0, size)), dbuf, draw(st.integers(0, size)), count,
                    after))
    return collective, draw(st.booleans()), ops


@settings(max_examples=300, deadline=None)
@given(_operations())
def test_builder_deps_match_the_per_slot_rule(case):
    collective, in_place, ops = case
    builder, reference = ScheduleBuilder(collective, in_place), _Reference(collective, in_place)
    for op in ops:
        builder.add(*op[:7], after=op[7])
        reference.add(*op)
    assert [t.deps for t in builder.transfers] == reference.deps
    assert builder.scratch_chunks == reference.scratch
    for (rank, buffer, index), writer in reference.writer.items():  # aliasing is idempotent
        assert builder.last_writer(rank, buffer, index) == writer


def test_builder_transfers_are_plain_transfers():
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, 2))
    made = b.transfers[b.add(0, 1, I, 0, O, 0, 2, Op.REDUCE, 3, (), ("sw",))]
    assert type(made) is Transfer
    assert made == Transfer(0, 1, I, 0, O, 0, 2, Op.REDUCE, (), 3, ("sw",))
    assert hash(made) == hash(Transfer(0, 1, I, 0, O, 0, 2, Op.REDUCE, (), 3, ("sw",)))
    with pytest.raises(FrozenInstanceError):
        made.src = 1  # type: ignore[misc]


def test_builder_refuses_negative_slots():
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, 2))
    with pytest.raises(InputError, match="slot indices must be >= 0"):
        b.add(0, 1, I, -1, O, 0)
    assert b.last_writer(0, O, -1) is None and b.last_writer(0, O, 10**9) is None


def test_depth_does_not_need_index_order():
    sched = ring_allgather(5)
    last = len(sched.transfers) - 1
    backwards = [replace(t, deps=tuple(last - d for d in t.deps))
                 for t in reversed(sched.transfers)]
    assert replace(sched, transfers=tuple(backwards)).depth() == sched.depth() == 5
    looped = list(sched.transfers)
    looped[0] = replace(looped[0], deps=(5,))  # transfer 5 waits for 0 (rank 0's chunk)
    with pytest.raises(InputError, match="cycle"):
        replace(sched, transfers=tuple(looped)).depth()


def test_topological_order_keeps_index_order_where_it_can():
    sched = ring_allgather(4)
    assert topological_order(sched.transfers) == list(range(len(sched.transfers)))
    shuffled = list(reversed(sched.transfers))
    n = len(shuffled)
    remapped = [replace(t, deps=tuple(n - 1 - d for d in t.deps)) for t in shuffled]
    order = topological_order(remapped)
    position = {index: k for k, index in enumerate(order)}
    assert all(position[d] < position[i] for i, t in enumerate(remapped) for d in t.deps)
    ready_first = [i for i, t in enumerate(remapped) if not t.deps]
    assert order[0] == min(ready_first)


def test_a_non_finite_figure_in_metadata_is_written_as_null_and_reads_back(tmp_path):
    """A TACCL routing's MILP gap at its time limit is infinite: the file must still be
    one ccweave's readers (which refuse NaN and infinities) read back."""
    from ccweave import plan as plan_io
    from ccweave.plan import Plan

    schedule = ring_allgather(3).with_name("ring", gap=float("inf"),
                                           routings=[{"gap": float("nan"), "ok": 1.0}])
    path = tmp_path / "s.json"
    save(schedule, path)
    back = load(path)
    assert back.metadata["gap"] is None and back.metadata["routings"][0] == \
        {"gap": None, "ok": 1.0}
    plan_io.save(Plan.single(schedule), tmp_path / "p.json")
    assert plan_io.load(tmp_path / "p.json").entries[0].schedule.metadata["gap"] is None
