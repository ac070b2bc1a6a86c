"""A buffer whose elements do not split into a schedule's chunks (a DDP gradient bucket)
runs as it is, in chunks one element apart: every transfer moves as many elements as it
lands, on every strategy; the executor sums such buffers right, in place and out of place;
without ``uneven`` it refuses them as before."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from ccweave.collectives import Buffer, Kind  # noqa: E402
from ccweave.errors import InputError, NotApplicableError  # noqa: E402
from ccweave.runtime import uneven  # noqa: E402
from ccweave.runtime.batch import classic_schedules  # noqa: E402
from ccweave.runtime.executor import Executor  # noqa: E402
from ccweave.runtime.inplace import in_place  # noqa: E402
from ccweave.runtime.reduce_ops import RedOp  # noqa: E402
from ccweave.runtime.transport.local import run_threads  # noqa: E402
from ccweave.topology.io import load  # noqa: E402

WHOLE = (Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE)
"""The collectives ccweave.torch runs on the caller's buffer as it is."""


@functools.cache
def schedules() -> list:
    from ccweave.synth.registry import synthesize

    found = [s for machine in ("switch:4", "cedar:2")
             for _, s in classic_schedules(load(machine), WHOLE)]
    for machine, strategy, options in (("mist", "trees", {"chunks": 2}),
                                       ("cedar:2", "trees", {}),
                                       ("cedar:2", "hierarchical-pipelined", {}),
                                       ("cedar:2", "flat-pipelined", {}),
                                       ("cedar:2", "multipath", {})):
        try:
            found.append(synthesize(load(machine), "allreduce", strategy, **options))
        except NotApplicableError:
            continue
    variants = []
    for schedule in found:
        try:
            variants.append(in_place(schedule))
        except NotApplicableError:
            continue
    return found + variants


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_every_transfer_moves_as_many_elements_as_it_lands(data):
    schedule = data.draw(st.sampled_from(schedules()), label="schedule")
    chunks = schedule.collective.total_chunks
    elements = data.draw(st.integers(chunks, 50 * chunks).filter(lambda e: e % chunks),
                         label="elements")
    classes = uneven.classes(schedule)
    assert classes is not None
    per_rank = [uneven.bounds(classes, rank, elements) for rank in range(schedule.num_ranks)]
    assert all(b is not None for b in per_rank), schedule.name
    sizes = {b - a for a, b in zip(per_rank[0].main, per_rank[0].main[1:])}
    assert per_rank[0].main[-1] == elements
    assert sizes == {elements // chunks, elements // chunks + 1}
    assert all(b.main == per_rank[0].main for b in per_rank)  # every rank cuts alike

    def length(rank: int, buffer: Buffer, index: int, count: int) -> int:
        cut = per_rank[rank]
        return cut.start(buffer, index + count) - cut.start(buffer, index)

    for t in schedule.transfers:
        assert (length(t.src, t.src_buffer, t.src_index, t.count)
                == length(t.dst, t.dst_buffer, t.dst_index, t.count)), (schedule.name, t)


def test_the_extra_elements_go_to_whole_classes_or_nowhere():
    linked = uneven.Classes(main=(0, 0, 1), scratch=((0, None),))
    assert uneven.bounds(linked, 0, 7) == uneven.Bounds((0, 2, 4, 7), (0, 2, 4))
    assert uneven.bounds(linked, 0, 8) == uneven.Bounds((0, 3, 6, 8), (0, 3, 5))
    assert uneven.bounds(uneven.Classes(main=(0, 0), scratch=((),)), 0, 3) is None
    assert uneven.bounds(uneven.Classes(main=(0, 1, 2), scratch=((),)), 0, 2) is None


@pytest.mark.parametrize("strategy, machine", [("ring", "switch:4"), ("trees", "mist"),
                                               ("rabenseifner", "switch:4")])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_the_executor_reduces_a_buffer_that_does_not_split(strategy, machine, op):
    from ccweave.synth.registry import synthesize

    schedule = synthesize(load(machine), "allreduce", strategy)
    variant = in_place(schedule)
    ranks = schedule.num_ranks
    elements = 7 * schedule.collective.total_chunks + 3

    def work(transport):
        rank = transport.rank
        data = (torch.arange(elements, dtype=torch.float64) % 13) * (rank + 1)
        mine, out = data.clone(), torch.empty(elements, dtype=torch.float64)
        executor = Executor(variant, transport, uneven=True)
        assert executor.runs_uneven(elements)
        executor.run(mine, None, op)
        Executor(schedule, transport, uneven=True).run(data, out, op)
        return mine, out

    base = torch.arange(elements, dtype=torch.float64) % 13
    want = base * (ranks * (ranks + 1) // 2) if op == "sum" else base * ranks
    for mine, out in run_threads(ranks, work):
        assert torch.equal(mine, want) and torch.equal(out, want)


def test_without_uneven_such_a_buffer_is_refused_naming_the_multiple():
    from ccweave.synth.registry import synthesize

    schedule = in_place(synthesize(load("switch:4"), "allreduce", "ring"))

    def work(transport):
        executor = Executor(schedule, transport)
        assert not executor.runs_uneven(10)
        with pytest.raises(InputError, match="multiple of 4"):
            executor.run(torch.ones(10), None, RedOp.SUM)

    run_threads(4, work)
