"""Compiling schedules into per-rank programs: every transfer becomes matching ops, local
deps order every access to a slot, fusion keeps the data flow, and issuing each program in
order cannot deadlock even with synchronous (rendezvous) sends."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.runtime.batch import classic_schedules
from ccweave.runtime.inplace import in_place
from ccweave.runtime.layout import layout_for_bytes, layout_for_numel
from ccweave.runtime.program import OpKind, Program, Slot, compile_all, compile_program
from ccweave.schedule import Op, Schedule, ScheduleBuilder, Transfer
from ccweave.topology.io import load

MACHINES = ["switch:4", "switch:8", "dgx1", "ring:8", "cedar:2"]


def cases():
    for machine in MACHINES:
        for strategy, schedule in classic_schedules(load(machine)):
            kind = schedule.collective.kind.value
            yield pytest.param(schedule, id=f"{machine}-{strategy}-{kind}")


CASES = list(cases())


def _chunks(slot: Slot | None) -> set[tuple[Buffer, int]]:
    if slot is None:
        return set()
    return {(slot.buffer, slot.index + k) for k in range(slot.count)}


def _reaches(program: Program) -> list[set[int]]:
    """For each op, every op it (transitively) depends on."""
    before: list[set[int]] = []
    for op in program.ops:
        seen: set[int] = set()
        for dep in op.deps:
            seen |= before[dep] | {dep}
        before.append(seen)
    return before


def run_synchronously(programs: tuple[Program, ...]) -> list[int]:
    """Each rank executes its ops strictly in order; a send and its receive complete only
    together, when both are at the head of their programs (no buffering at all).
    Returns how far each rank got."""
    heads = [0] * len(programs)
    moved = True
    while moved:
        moved = False
        for rank, program in enumerate(programs):
            while heads[rank] < len(program.ops):
                op = program.ops[heads[rank]]
                if op.kind is OpKind.LOCAL:
                    heads[rank] += 1
                    moved = True
                    continue
                peer = programs[op.peer]
                other = peer.ops[heads[op.peer]] if heads[op.peer] < len(peer.ops) else None
                if other is None or other.transfer != op.transfer or other.peer != rank:
                    break
                heads[rank] += 1
                heads[op.peer] += 1
                moved = True
    return heads


@pytest.mark.parametrize("schedule", CASES)
def test_every_transfer_is_one_send_and_one_recv_or_one_local_op(schedule: Schedule):
    programs = compile_all(schedule, fuse=False)
    seen: dict[int, list[tuple[int, OpKind, int]]] = {}
    for program in programs:
        for op in program.ops:
            seen.setdefault(op.transfer, []).append((program.rank, op.kind, op.peer))
    for index, t in enumerate(schedule.transfers):
        if t.is_local:
            assert seen[index] == [(t.src, OpKind.LOCAL, t.src)]
        else:
            assert sorted(seen[index]) == sorted([(t.src, OpKind.SEND, t.dst),
                                                  (t.dst, OpKind.RECV, t.src)])


@pytest.mark.parametrize("schedule", CASES)
def test_local_deps_order_every_conflicting_access(schedule: Schedule):
    for program in compile_all(schedule):
        reach = _reaches(program)
        for j, later in enumerate(program.ops):
            writes = _chunks(later.dst)
            reads = _chunks(later.src) | (writes if later.reduce else set())
            for i in range(j):
                earlier = program.ops[i]
                e_writes = _chunks(earlier.dst)
                e_reads = _chunks(earlier.src) | (e_writes if earlier.reduce else set())
                conflict = (writes & (e_reads | e_writes)) or (reads & e_writes)
                if conflict:
                    assert i in reach[j], (program.rank, i, j)


@pytest.mark.parametrize("schedule", CASES)
def test_programs_cannot_deadlock_even_with_rendezvous_sends(schedule: Schedule):
    programs = compile_all(schedule)
    assert run_synchronously(programs) == [len(p.ops) for p in programs]
    try:
        variant = in_place(schedule)
    except NotApplicableError:
        return
    programs = compile_all(variant)
    assert run_synchronously(programs) == [len(p.ops) for p in programs]


def test_ring_allreduce_folds_each_local_copy_into_the_receive_that_adds_to_it():
    schedule = classic_schedules(load("switch:4"), [Kind.ALLREDUCE])[0][1]
    plain, fused = compile_all(schedule, fuse=False)[0], compile_all(schedule)[0]
    locals_ = sum(op.kind is OpKind.LOCAL for op in plain.ops)
    assert locals_ > 0
    assert sum(op.kind is OpKind.LOCAL for op in fused.ops) == 0
    folded = [op for op in fused.ops if op.kind is OpKind.RECV and op.src is not None]
    assert len(folded) == locals_
    assert all(op.reduce and op.src.buffer is Buffer.INPUT and op.dst.buffer is Buffer.OUTPUT
               for op in folded)


def test_a_copy_is_not_folded_past_a_write_of_its_source():
    coll = Collective(Kind.ALLREDUCE, 2)
    b = ScheduleBuilder(coll)
    b.copy(0, 0, (Buffer.INPUT, 0), (Buffer.OUTPUT, 0))
    b.copy(1, 0, (Buffer.INPUT, 1), (Buffer.INPUT, 0))  # overwrites the copy's source
    b.reduce(1, 0, (Buffer.INPUT, 0), (Buffer.OUTPUT, 0))
    program = compile_program(b.build("t"), 0)
    assert [op.kind for op in program.ops] == [OpKind.LOCAL, OpKind.RECV, OpKind.RECV]
    assert program.ops[2].src is None and program.ops[2].deps == (0,)


def test_hand_built_hazards_become_local_deps():
    coll = Collective(Kind.ALLGATHER, 2)
    transfers = (
        Transfer(0, 1, Buffer.INPUT, 0, Buffer.OUTPUT, 0),          # 0: rank 1 writes out[0]
        Transfer(1, 1, Buffer.OUTPUT, 0, Buffer.SCRATCH, 0, deps=(0,)),  # 1: reads out[0]
        Transfer(0, 1, Buffer.INPUT, 0, Buffer.OUTPUT, 0, deps=(1,)),    # 2: rewrites out[0]
        Transfer(1, 0, Buffer.SCRATCH, 0, Buffer.OUTPUT, 1, deps=(1,)),  # 3: reads scratch
    )
    program = compile_all(Schedule(coll, transfers, scratch_chunks=1))[1]
    kinds = [(op.kind, op.transfer) for op in program.ops]
    assert kinds == [(OpKind.RECV, 0), (OpKind.LOCAL, 1), (OpKind.RECV, 2), (OpKind.SEND, 3)]
    assert program.ops[1].deps == (0,)          # read after write
    assert program.ops[2].deps == (0, 1)        # write after write, write after read
    assert program.ops[3].deps == (1,)          # read after write (scratch)
    assert program.peers == (0,)


def test_in_place_slots_are_aliased_at_compile_time():
    schedule = in_place(classic_schedules(load("switch:4"), [Kind.ALLGATHER])[0][1])
    for program in compile_all(schedule):
        for op in program.ops:
            for slot in (op.src, op.dst):
                assert slot is None or slot.buffer is Buffer.OUTPUT


def test_compile_refuses_cycles_and_bad_ranks():
    coll = Collective(Kind.ALLGATHER, 2)
    looped = Schedule(coll, (Transfer(0, 1, Buffer.INPUT, 0, Buffer.OUTPUT, 0, deps=(1,)),
                             Transfer(1, 0, Buffer.INPUT, 0, Buffer.OUTPUT, 1, deps=(0,))))
    with pytest.raises(InputError, match="cycle"):
        compile_all(looped)
    stray = Schedule(coll, (Transfer(0, 5, Buffer.INPUT, 0, Buffer.OUTPUT, 0),))
    with pytest.raises(InputError, match="outside"):
        compile_all(stray)
    with pytest.raises(InputError, match="not a rank"):
        compile_program(replace(stray, transfers=()), 3)


def test_in_place_variant_drops_self_copies_and_refuses_alltoall():
    schedule = classic_schedules(load("switch:4"), [Kind.ALLGATHER])[0][1]
    variant = in_place(schedule)
    assert variant.in_place and len(variant.transfers) < len(schedule.transfers)
    assert in_place(variant) is variant
    alltoall = classic_schedules(load("switch:4"), [Kind.ALLTOALL])[0][1]
    with pytest.raises(NotApplicableError, match="cannot run in place"):
        in_place(alltoall)


def test_layouts_round_like_nccl_tests():
    coll = Collective(Kind.ALLGATHER, 4, chunks_per_rank=2)
    layout = layout_for_bytes(coll, 1000, 4)  # 250 floats -> 248 in 8 chunks of 31
    assert (layout.chunk, layout.size_elements, layout.input, layout.output) == (31, 248, 62, 248)
    assert layout.count == 62  # nccl-tests prints per-rank counts for allgather
    assert layout_for_bytes(Collective(Kind.ALLREDUCE, 4), 1024, 4).count == 256
    with pytest.raises(InputError, match="too small"):
        layout_for_bytes(coll, 16, 4)
    with pytest.raises(InputError, match="multiple of 8"):
        layout_for_numel(coll, 10)
    assert layout_for_numel(coll, 16, "output").chunk == 2


def test_reduce_ops_parse_torch_names():
    torch = pytest.importorskip("torch")
    from ccweave.runtime.reduce_ops import RedOp

    assert RedOp.parse(torch.distributed.ReduceOp.PRODUCT) is RedOp.PROD
    assert RedOp.parse("max") is RedOp.MAX
    with pytest.raises(InputError, match="not supported"):
        RedOp.parse("bxor")
    out = torch.zeros(3)
    RedOp.MIN.combiner()(out, torch.tensor([1.0, 5, -2]), torch.tensor([3.0, 4, 0]))
    assert out.tolist() == [1.0, 4.0, -2.0]


def test_copy_only_schedules_have_no_reducing_ops():
    for _, schedule in classic_schedules(load("switch:4"), [Kind.ALLGATHER, Kind.BROADCAST]):
        assert not any(op.reduce for p in compile_all(schedule) for op in p.ops)
        assert all(t.op is Op.COPY for t in schedule.transfers)
