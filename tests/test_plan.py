"""Plans: the fastest schedule per size range, saved and loaded."""

from __future__ import annotations

import pytest

from ccweave import plan as plan_io
from ccweave.collectives import Kind
from ccweave.errors import InputError
from ccweave.plan import Plan, PlanEntry
from ccweave.simulate import simulate
from ccweave.synth import synthesize
from ccweave.synth.select import best_plan
from ccweave.topology import zoo
from ccweave.verify import verify


def test_best_plan_picks_the_simulated_winner_per_size(tmp_path):
    topo = zoo.get("dgx1")
    sizes = [2**12, 2**20, 2**30]
    plan = best_plan(topo, Kind.ALLREDUCE, sizes, strategies=["ring", "recursive-doubling",
                                                               "double-binary-tree"])
    for size in sizes:
        chosen = plan.schedule_for(size)
        verify(chosen, topo)
        best = min(simulate(synthesize(topo, "allreduce", s), topo, size).time_s
                   for s in ("ring", "recursive-doubling", "double-binary-tree"))
        assert simulate(chosen, topo, size).time_s == pytest.approx(best)
    path = tmp_path / "plan.json"
    plan_io.save(plan, path)
    back = plan_io.load(path)
    assert [e.schedule.transfers for e in back.entries] == \
        [e.schedule.transfers for e in plan.entries]
    assert [(e.min_bytes, e.max_bytes) for e in back.entries] == \
        [(e.min_bytes, e.max_bytes) for e in plan.entries]


def test_a_schedule_file_loads_as_a_one_entry_plan(tmp_path):
    from ccweave import schedule as schedule_io

    sched = synthesize(zoo.get("switch:4"), "allgather", "direct")
    path = tmp_path / "s.json"
    schedule_io.save(sched, path)
    plan = plan_io.load(path)
    assert plan.schedule_for(10**12).transfers == sched.transfers


def test_plans_must_cover_every_size_once():
    a = synthesize(zoo.get("switch:4"), "allgather", "direct")
    with pytest.raises(InputError, match="contiguous"):
        Plan((PlanEntry(0, 100, a), PlanEntry(200, None, a)))
    with pytest.raises(InputError, match="open-ended"):
        Plan((PlanEntry(0, 100, a),))
    other = synthesize(zoo.get("switch:4"), "alltoall", "direct")
    with pytest.raises(InputError, match="one collective"):
        Plan((PlanEntry(0, 100, a), PlanEntry(100, None, other)))
