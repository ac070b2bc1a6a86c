"""Plans: the fastest schedule per size range, saved and loaded."""

from __future__ import annotations

import pytest

from ccweave import plan as plan_io
from ccweave.collectives import Kind
from ccweave.compare import compare
from ccweave.errors import InputError
from ccweave.plan import Plan, PlanEntry
from ccweave.select import best_plan
from ccweave.simulate import simulate
from ccweave.synth import synthesize
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


def test_a_sized_strategy_is_synthesized_for_each_size_in_compare_and_plans():
    # taccl takes the size as an input: on ring:4 it merges sends at 1 MB and not at
    # 1 GB; each size must be judged with its own schedule
    topo, sizes = zoo.get("ring:4"), [2**20, 2**30]
    result = compare(topo, Kind.ALLGATHER, sizes, ["taccl"])
    made = {size: synthesize(topo, "allgather", "taccl", size=size) for size in sizes}
    assert made[sizes[0]].transfers != made[sizes[1]].transfers
    for row in result.results:
        used = result.schedule(row)
        assert used.name == made[row.size_bytes].name
        assert used.transfers == made[row.size_bytes].transfers
        assert row.time_s == pytest.approx(simulate(used, topo, row.size_bytes).time_s)
    plan = best_plan(topo, Kind.ALLGATHER, sizes, strategies=["taccl"])
    assert [plan.schedule_for(size).transfers for size in sizes] == \
        [made[s].transfers for s in sizes]


def test_a_strategy_that_is_not_sized_is_built_once_for_every_size():
    result = compare(zoo.get("ring:4"), Kind.ALLGATHER, [2**10, 2**20, 2**30], ["ring"])
    assert len({id(result.schedule(row)) for row in result.results}) == 1


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
