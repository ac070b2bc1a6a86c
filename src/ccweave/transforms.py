"""Schedule -> Schedule passes that keep the IR closed (each output can be proven again).

- :func:`refine` splits every chunk into ``k`` so transfers pipeline piece by piece;
- :func:`instances` is refine with each piece on its own channels (MSCCL's instances);
- :func:`reverse` turns a data-movement schedule into its dual on the reversed topology
  (allgather -> reduce-scatter, broadcast -> reduce, gather <-> scatter, alltoall);
- :func:`concat` runs two phases back to back (reduce-scatter then allgather ->
  allreduce; reduce then broadcast -> allreduce).

Each pass replays transfers through :class:`ScheduleBuilder`, so data dependencies are
derived from the slots touched; explicit (non-data) deps are carried over as well.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError
from ccweave.schedule import Op, Schedule, ScheduleBuilder, Transfer, topological_order

Slot = tuple[Buffer, int]


def refine(schedule: Schedule, k: int, channel_stride: int = 0) -> Schedule:
    """Split every chunk into ``k`` pieces; transfer ``t`` becomes ``k`` transfers, piece
    ``j`` moving the ``j``-th ``1/k`` of its range, so a chain of transfers pipelines.

    On one channel the pieces of a transfer go one after another (a connection is FIFO),
    so piece 0 can move on to the next hop while piece 1 crosses this one.
    ``channel_stride > 0`` instead puts piece ``j`` on channel
    ``channel + j * channel_stride``, where pieces run side by side.
    """
    if not isinstance(k, int) or k < 1:
        raise InputError(f"refine: k must be a positive integer, got {k!r}")
    if k == 1:
        return schedule
    coll = schedule.collective
    refined = Collective(coll.kind, coll.num_ranks, coll.chunks_per_rank * k, coll.root,
                         coll.peer)
    builder = ScheduleBuilder(refined, schedule.in_place)
    pieces: dict[int, list[int]] = {}
    for index in topological_order(schedule.transfers):
        t = schedule.transfers[index]
        mine: list[int] = []
        for j in range(k):
            after = [pieces[d][j] for d in t.deps]
            if mine and not channel_stride:
                after.append(mine[-1])
            mine.append(builder.add(t.src, t.dst, t.src_buffer, t.src_index * k + j * t.count,
                                    t.dst_buffer, t.dst_index * k + j * t.count, t.count,
                                    t.op, t.channel + j * channel_stride, after=after,
                                    via=t.via))
        pieces[index] = mine
    builder.scratch_chunks = max(builder.scratch_chunks, schedule.scratch_chunks * k)
    return builder.build(f"{schedule.name}+refine({k})" if not channel_stride
                         else f"{schedule.name}+instances({k})", **schedule.metadata)


def instances(schedule: Schedule, k: int) -> Schedule:
    """MSCCL-style instances: ``k`` copies of the schedule on disjoint channels, each
    carrying ``1/k`` of every chunk."""
    return refine(schedule, k, channel_stride=schedule.num_channels)


_DUAL = {Kind.ALLGATHER: Kind.REDUCESCATTER, Kind.BROADCAST: Kind.REDUCE,
         Kind.GATHER: Kind.SCATTER, Kind.SCATTER: Kind.GATHER, Kind.ALLTOALL: Kind.ALLTOALL}
_SWAP = {Buffer.INPUT: Buffer.OUTPUT, Buffer.OUTPUT: Buffer.INPUT,
         Buffer.SCRATCH: Buffer.SCRATCH}


def reverse(schedule: Schedule) -> Schedule:
    """The dual schedule, to run on the reversed topology: every transfer turned around,
    the order reversed, inputs and outputs swapped, and fan-out turned into fan-in.

    Where the original sent one slot to several places, the dual sums what comes back
    into that slot: the first arrival is a copy (or a reduction if the slot holds its
    own data), the rest are reductions, one after another. So an allgather becomes a
    reduce-scatter and a broadcast a reduce.
    """
    coll = schedule.collective
    if coll.kind not in _DUAL:
        raise InputError(f"reverse: {coll.kind.value} schedules have no data-movement dual; "
                         f"reversible: {', '.join(k.value for k in _DUAL)}")
    if schedule.in_place:
        raise InputError("reverse: in-place schedules are not supported; synthesize out of "
                         "place")
    dual = Collective(_DUAL[coll.kind], coll.num_ranks, coll.chunks_per_rank, coll.root)
    builder = ScheduleBuilder(dual)
    live = {(rank, Buffer.INPUT, i) for rank, i in dual.precondition}
    for index in reversed(topological_order(schedule.transfers)):
        t = schedule.transfers[index]
        src_buffer, dst_buffer = _SWAP[t.dst_buffer], _SWAP[t.src_buffer]
        targets = [(t.src, dst_buffer, t.src_index + m) for m in range(t.count)]
        sources = [(t.dst, src_buffer, t.dst_index + m) for m in range(t.count)]
        holding = [slot in live for slot in targets]
        if all(holding) or not any(holding):
            _reverse_one(builder, t, src_buffer, dst_buffer, t.src_index, t.dst_index,
                         t.count, all(holding))
        else:  # mixed: split per chunk
            for m, held in enumerate(holding):
                _reverse_one(builder, t, src_buffer, dst_buffer, t.src_index + m,
                             t.dst_index + m, 1, held)
        live.difference_update(sources)
        live.update(targets)
    return builder.build(f"reverse({schedule.name})", **schedule.metadata)


def _reverse_one(builder: ScheduleBuilder, t: Transfer, src_buffer: Buffer,
                 dst_buffer: Buffer, dst_index: int, src_index: int, count: int,
                 reduce: bool) -> None:
    via = None if t.via is None else tuple(reversed(t.via))
    builder.add(t.dst, t.src, src_buffer, src_index, dst_buffer, dst_index, count,
                Op.REDUCE if reduce else Op.COPY, t.channel, via=via)


def concat(first: Schedule, second: Schedule) -> Schedule:
    """Run ``first`` then ``second`` as one schedule: reduce-scatter + allgather, or
    reduce + broadcast (same root), make an allreduce.

    The second phase reads what the first wrote where it lies (each rank's segment of
    the allreduce buffer, or the root's buffer); scratch areas are kept apart.
    """
    a, b = first.collective, second.collective
    pairs = {(Kind.REDUCESCATTER, Kind.ALLGATHER), (Kind.REDUCE, Kind.BROADCAST)}
    if (a.kind, b.kind) not in pairs:
        raise InputError(f"concat: cannot join {a.kind.value} and {b.kind.value}; joinable: "
                         "reducescatter + allgather, reduce + broadcast")
    if (a.num_ranks, a.chunks_per_rank, a.root) != (b.num_ranks, b.chunks_per_rank, b.root):
        raise InputError(f"concat: the phases differ ({a.describe()} vs {b.describe()}); "
                         "synthesize both with the same ranks, chunks and root")
    if first.in_place or second.in_place:
        raise InputError("concat: in-place phases are not supported")
    allreduce = Collective(Kind.ALLREDUCE, a.num_ranks, a.chunks_per_rank)
    c = a.chunks_per_rank
    if a.kind is Kind.REDUCESCATTER:
        def first_map(rank: int, buffer: Buffer, index: int) -> Slot:
            return (Buffer.OUTPUT, rank * c + index) if buffer is Buffer.OUTPUT \
                else (buffer, index)

        def second_map(rank: int, buffer: Buffer, index: int) -> Slot:
            if buffer is Buffer.INPUT:
                return Buffer.OUTPUT, rank * c + index
            return (buffer, index + first.scratch_chunks) if buffer is Buffer.SCRATCH \
                else (buffer, index)
    else:
        def first_map(rank: int, buffer: Buffer, index: int) -> Slot:
            return buffer, index

        def second_map(rank: int, buffer: Buffer, index: int) -> Slot:
            if buffer is Buffer.INPUT:
                return Buffer.OUTPUT, index
            return (buffer, index + first.scratch_chunks) if buffer is Buffer.SCRATCH \
                else (buffer, index)
    builder = ScheduleBuilder(allreduce)
    _replay(builder, first, first_map)
    _replay(builder, second, second_map)
    return builder.build(f"{first.name}+{second.name}",
                         **{**first.metadata, **second.metadata})


def _replay(builder: ScheduleBuilder, schedule: Schedule,
            mapping: Callable[[int, Buffer, int], Slot]) -> None:
    """Append ``schedule``'s transfers with slots moved by ``mapping``; a transfer whose
    source and destination become the same slot is dropped (nothing to move)."""
    new: dict[int, Sequence[int]] = {}
    for index in topological_order(schedule.transfers):
        t = schedule.transfers[index]
        after = [n for d in t.deps for n in new[d]]
        src = mapping(t.src, t.src_buffer, t.src_index)
        dst = mapping(t.dst, t.dst_buffer, t.dst_index)
        if t.src == t.dst and src == dst and t.op is Op.COPY:
            new[index] = after  # a no-op: whoever waited on it waits on its deps
            continue
        new[index] = [builder.add(t.src, t.dst, *src, *dst, t.count, t.op, t.channel,
                                  after=after, via=t.via)]
