"""The schedule IR: builder-derived deps, stats, lossless JSON, clear errors."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError
from ccweave.schedule import (
    Op,
    ScheduleBuilder,
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


def test_pinned_routes_survive_json():
    b = ScheduleBuilder(Collective(Kind.SENDRECV, 4, 1, root=0, peer=1))
    b.add(0, 1, I, 0, O, 0, 2)
    b.add(0, 1, I, 2, O, 2, 2, via=("cpu0",))
    back = from_dict(json.loads(json.dumps(to_dict(b.build("x")))))
    assert [t.via for t in back.transfers] == [None, ("cpu0",)]
