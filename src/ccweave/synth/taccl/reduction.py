"""Reduce-scatter from an allgather: TACCL's reversal, with the timing kept.

:func:`~ccweave.transforms.reverse` turns an allgather into a reduce-scatter on the
reversed topology and keeps the data dependencies. Two things a fast reduce-scatter
also needs are not data, so they are rebuilt here:

- the order on each connection, reversed in time (what the allgather delivered last
  is reduced and sent first);
- fan-in without waiting: where several ranks reduce into one slot, each transfer
  fused with its reduction must wait for the previous one; instead each lands in its
  own scratch slot and a local reduction (device-memory speed) adds it in.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from ccweave.collectives import Buffer
from ccweave.schedule import Op, Schedule, ScheduleBuilder, topological_order
from ccweave.topology.model import Topology

_SWAP = {Buffer.INPUT: Buffer.OUTPUT, Buffer.OUTPUT: Buffer.INPUT,
         Buffer.SCRATCH: Buffer.SCRATCH}


def reduce_scatter_from(allgather: Schedule, topology: Topology, size: float) -> Schedule:
    """The reduce-scatter for ``topology`` from an ``allgather`` built for its reverse."""
    return unfuse_fan_in(reverse_in_time(allgather, topology, size))


def reverse_in_time(allgather: Schedule, topology: Topology, size: float) -> Schedule:
    """Reduce-scatter as the reverse of ``allgather`` (on the reversed ``topology``), with
    the order on every connection reversed in time as well.

    :func:`~ccweave.transforms.reverse` keeps the data dependencies; the order in which
    a connection carries its chunks is not data, so it is rebuilt here: each reversed
    transfer waits for the one before it between the same two ranks, and "before" is
    "finished later in the allgather" (simulated at ``size``), so the chunks the
    allgather delivered last are reduced and sent first.
    """
    from ccweave import transforms
    from ccweave.simulate import simulate


    finish = simulate(allgather, topology.reversed(), size).finish
    finished_at: dict[tuple[int, Buffer, int], float] = {}
    for index, t in enumerate(allgather.transfers):
        if not t.is_local:
            for m in range(t.count):
                finished_at[(t.dst, t.dst_buffer, t.dst_index + m)] = float(finish[index])
    dual = transforms.reverse(allgather)
    position = {index: n for n, index in enumerate(topological_order(dual.transfers))}

    def key(index: int) -> tuple[float, int]:
        t = dual.transfers[index]
        done = finished_at.get((t.src, _SWAP[t.src_buffer], t.src_index), 0.0)
        return -done, position[index]

    previous: dict[int, int] = {}
    chains: dict[tuple[int, int], list[int]] = {}
    for index, t in enumerate(dual.transfers):
        if not t.is_local:
            chains.setdefault((t.src, t.dst), []).append(index)
    for members in chains.values():
        members.sort(key=key)
        for before, after in itertools.pairwise(members):
            previous[after] = before
    transfers = tuple(replace(t, deps=tuple(sorted({*t.deps, previous[i]})))
                      if i in previous else t for i, t in enumerate(dual.transfers))
    return replace(dual, transfers=transfers)


def unfuse_fan_in(schedule: Schedule) -> Schedule:
    """Remote reductions into a slot that several ranks reduce into become a copy into
    fresh scratch and a local reduction, so the transfers need not wait for each other.

    A transfer keeps its explicit order on its connection (the dep on the previous
    transfer between the same ranks); data dependencies are derived again.
    """
    fan_in: dict[tuple[int, Buffer, int], int] = {}
    for t in schedule.transfers:
        if t.op is Op.REDUCE and not t.is_local:
            for m in range(t.count):
                key = (t.dst, t.dst_buffer, t.dst_index + m)
                fan_in[key] = fan_in.get(key, 0) + 1
    builder = ScheduleBuilder(schedule.collective, schedule.in_place)
    builder.scratch_chunks = schedule.scratch_chunks
    scratch = [schedule.scratch_chunks] * schedule.num_ranks
    new: dict[int, int] = {}
    transfers = schedule.transfers
    for index in topological_order(transfers):
        t = transfers[index]
        order = [new[d] for d in t.deps if not transfers[d].is_local
                 and (transfers[d].src, transfers[d].dst) == (t.src, t.dst)]
        shared = t.op is Op.REDUCE and not t.is_local and any(
            fan_in[(t.dst, t.dst_buffer, t.dst_index + m)] > 1 for m in range(t.count))
        if not shared:
            new[index] = builder.add(t.src, t.dst, t.src_buffer, t.src_index, t.dst_buffer,
                                     t.dst_index, t.count, t.op, t.channel, after=order,
                                     via=t.via)
            continue
        landing = scratch[t.dst]
        scratch[t.dst] += t.count
        new[index] = builder.add(t.src, t.dst, t.src_buffer, t.src_index, Buffer.SCRATCH,
                                 landing, t.count, Op.COPY, t.channel, after=order, via=t.via)
        builder.add(t.dst, t.dst, Buffer.SCRATCH, landing, t.dst_buffer, t.dst_index, t.count,
                    Op.REDUCE, t.channel)
    return builder.build(schedule.name, **schedule.metadata)
