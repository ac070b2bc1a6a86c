"""The executor on in-process ranks (threads over shared mailboxes): every classic
schedule, out of place and in place, several dtypes and reductions, checked element by
element; faults become RuntimeFault naming the peer, the stalled transfers, or the world
size that does not fit."""

from __future__ import annotations

import itertools
import time

import pytest

torch = pytest.importorskip("torch")

from ccweave.collectives import Kind  # noqa: E402
from ccweave.errors import InputError, RuntimeFault  # noqa: E402
from ccweave.runtime import reference  # noqa: E402
from ccweave.runtime.batch import classic_schedules  # noqa: E402
from ccweave.runtime.executor import Executor  # noqa: E402
from ccweave.runtime.layout import layout_for_bytes  # noqa: E402
from ccweave.runtime.measure import Options, measure, measure_call  # noqa: E402
from ccweave.runtime.reduce_ops import RedOp  # noqa: E402
from ccweave.runtime.transport.local import LocalFabric, run_threads  # noqa: E402
from ccweave.runtime.transport.shm import ShmTransport  # noqa: E402
from ccweave.topology.io import load  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16", "int32", "int64"]
OPS = ["sum", "max", "min", "prod"]


def cases(machine: str):
    combos = itertools.cycle(itertools.product(DTYPES, OPS))
    for strategy, schedule in classic_schedules(load(machine)):
        dtype, op = next(combos)
        name = f"{machine}-{strategy}-{schedule.collective.kind.value}-{dtype}-{op}"
        yield pytest.param(schedule, dtype, op, id=name)


@pytest.mark.parametrize("schedule,dtype,op",
                         [*cases("switch:4"), *cases("switch:8"), *cases("cedar:2")])
def test_every_classic_schedule_is_correct_in_and_out_of_place(schedule, dtype, op):
    options = Options(dtype=torch.__dict__[dtype], op=RedOp(op), iters=1, warmup=0)
    rows = run_threads(schedule.num_ranks,
                       lambda transport: measure(schedule, transport, [1536, 40960], options))
    for row in rows[0]:
        assert row.out_of_place.wrong == 0, row
        if schedule.collective.kind is Kind.ALLTOALL:
            assert "cannot run in place" in row.in_place.skipped
        else:
            assert row.in_place.wrong == 0, row


def shm_cases():
    combos = itertools.cycle(itertools.product(DTYPES, OPS))
    for strategy, schedule in classic_schedules(load("switch:4")):
        dtype, op = next(combos)
        yield pytest.param(schedule, dtype, op,
                           id=f"{strategy}-{schedule.collective.kind.value}-{dtype}-{op}")


@pytest.mark.parametrize("schedule,dtype,op", list(shm_cases()))
def test_every_classic_schedule_through_shared_memory_and_in_pieces(schedule, dtype, op):
    options = Options(dtype=torch.__dict__[dtype], op=RedOp(op), iters=2, warmup=0,
                      segment_bytes=512)

    def work(transport):
        shared = ShmTransport(transport, set(range(4)) - {transport.rank}, min_bytes=256)
        rows = measure(schedule, shared, [1536, 40960], options)
        shared.close()
        return rows, shared.generation

    results = run_threads(4, work)
    assert any(generation for _, generation in results)  # the outbox carried data
    for row in results[0][0]:
        assert row.out_of_place.wrong == 0, row
        assert row.in_place.wrong in (0, None), row


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_ring_allreduce_every_dtype_and_reduction(dtype, op):
    schedule = classic_schedules(load("switch:4"), [Kind.ALLREDUCE])[0][1]
    options = Options(dtype=torch.__dict__[dtype], op=RedOp(op), iters=1, warmup=0)
    rows = run_threads(4, lambda transport: measure(schedule, transport, [4096], options))
    assert rows[0][0].out_of_place.wrong == 0 and rows[0][0].in_place.wrong == 0


@pytest.mark.parametrize("most, expected", [(20, range(3, 6)), (2, range(2, 3))])
def test_a_time_target_sets_the_runs_per_repetition(most, expected):
    """A call of 20 ms, 0.1 s a repetition: about 5 runs each (at most ``most``); the
    check, the warmup and the one timed probe run before them."""
    schedule = classic_schedules(load("switch:4"), [Kind.ALLREDUCE])[0][1]
    layout = layout_for_bytes(schedule.collective, 4096, 4)
    options = Options(iters=most, warmup=1, check=False, reps=2, target_s=0.1)

    def work(transport):
        calls = []

        def call(data, out):
            calls.append(time.sleep(0.02))
        measure_call(call, schedule.collective, layout, transport, options)
        return len(calls) - 3

    runs = run_threads(4, work)
    assert len(set(runs)) == 1  # every rank runs as many
    assert runs[0] % 2 == 0 and runs[0] // 2 in expected


def test_the_check_catches_a_wrong_element():
    schedule = classic_schedules(load("switch:4"), [Kind.ALLGATHER])[0][1]
    coll = schedule.collective
    layout = layout_for_bytes(coll, 4096, 4)

    def work(transport):
        data, out = reference.make_buffers(coll, transport.rank, layout, torch.float32,
                                           RedOp.SUM, False)
        Executor(schedule, transport).run(data, out)
        if transport.rank == 2:
            out[17] += 1
        return reference.count_wrong(coll, transport.rank, layout, out, RedOp.SUM, False)

    assert run_threads(4, work) == [0, 0, 1, 0]


def test_world_size_that_does_not_fit_is_refused_before_any_message():
    schedule = classic_schedules(load("switch:4"), [Kind.ALLREDUCE])[0][1]
    transport = LocalFabric(3).transports()[0]
    with pytest.raises(RuntimeFault, match=r"world size 3 != the schedule's 4 ranks"):
        Executor(schedule, transport)
    assert not transport.fabric.mail


def test_a_dead_peer_is_named():
    schedule = classic_schedules(load("switch:4"), [Kind.ALLREDUCE])[0][1]
    fabric = LocalFabric(4)
    transport = fabric.transports()[1]
    fabric.fail(0)
    data = torch.ones(64)
    with pytest.raises(RuntimeFault, match=r"rank 1: peer rank 0 .*from rank 0"):
        Executor(schedule, transport, timeout=5).run(data, torch.empty(64))


def test_a_silent_peer_times_out_naming_the_transfers_waited_on():
    schedule = classic_schedules(load("switch:4"), [Kind.ALLREDUCE])[0][1]
    transport = LocalFabric(4).transports()[2]
    with pytest.raises(RuntimeFault, match=r"rank 2: no transfer finished in 0.2 s; waiting "
                                           r"on \d+ transfer\(s\) with rank\(s\) 1 "):
        Executor(schedule, transport, timeout=0.2).run(torch.ones(64), torch.empty(64))


def test_executor_checks_tensor_shapes():
    schedule = classic_schedules(load("switch:4"), [Kind.ALLGATHER])[0][1]
    executor = Executor(schedule, LocalFabric(4).transports()[0])
    with pytest.raises(InputError, match="multiple of 4"):
        executor.run(torch.ones(1), torch.empty(6))
    with pytest.raises(InputError, match="output = 4/1 x input"):
        executor.run(torch.ones(4), torch.empty(4))
    with pytest.raises(InputError, match="contiguous"):
        executor.run(torch.ones(2), torch.empty(8, 2)[:, 0])


def test_runs_reuse_bound_views_and_temporaries():
    schedule = classic_schedules(load("switch:4"), [Kind.ALLREDUCE])[0][1]

    def work(transport):
        executor = Executor(schedule, transport)
        data, out = torch.full((400,), float(transport.rank)), torch.empty(400)
        for _ in range(3):
            executor.run(data, out)
        (views,) = [bound[0] for bound in executor._bindings.values()]
        other, spare = torch.full((400,), float(transport.rank)), torch.empty(400)
        executor.run(other, spare)  # a second buffer binds beside the first
        executor.run(data, out)
        assert len(executor._bindings) == 2
        assert any(bound[0] is views for bound in executor._bindings.values())
        executor.release()
        assert not executor._bindings
        return out[0].item()

    assert run_threads(4, work) == [6.0] * 4


def other_strategies():
    from ccweave.synth.registry import strategies, synthesize

    for strategy in strategies().values():
        if strategy.classic or strategy.slow:
            continue
        for kind in sorted(strategy.collectives):
            yield pytest.param(lambda s=strategy.name, k=kind: synthesize(load("cedar"), k, s),
                               id=f"{strategy.name}-{kind.value}")


@pytest.mark.parametrize("build", list(other_strategies()))
def test_the_executor_runs_newer_strategies_too(build):
    from ccweave.errors import NotApplicableError
    from ccweave.verify import verify

    try:
        schedule = build()
    except NotApplicableError as error:
        pytest.skip(str(error))
    verify(schedule)
    size = schedule.collective.total_chunks * 4 * 64
    rows = run_threads(schedule.num_ranks,
                       lambda transport: measure(schedule, transport, [size],
                                                 Options(iters=1, warmup=0)))
    assert rows[0][0].out_of_place.wrong == 0
    assert rows[0][0].in_place.wrong in (0, None)


def test_a_schedule_that_sums_into_its_input_leaves_the_callers_input_alone():
    """reverse(allgather) reduces into input slots (TACCL's reduce-scatter); the caller's
    tensor must come back unchanged and the output right."""
    from ccweave.synth import synthesize
    from ccweave.transforms import reverse

    topo = load("switch:4")
    schedule = reverse(synthesize(topo, "allgather", "ring", chunks=1))
    assert any(t.dst_buffer.value == "input" for t in schedule.transfers)
    chunk = 3

    def work(transport):
        rank = transport.rank
        data = torch.arange(4 * chunk, dtype=torch.float32) + 100 * rank
        kept = data.clone()
        out = torch.zeros(chunk)
        Executor(schedule, transport).run(data, out)
        return torch.equal(data, kept), out

    results = run_threads(4, work)
    for rank, (unchanged, out) in enumerate(results):
        assert unchanged
        expect = sum(torch.arange(4 * chunk, dtype=torch.float32)[rank * chunk:(rank + 1) * chunk]
                     + 100 * r for r in range(4))
        assert torch.equal(out, expect)
