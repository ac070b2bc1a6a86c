"""From the stages' answer to an ordinary ccweave :class:`~ccweave.schedule.Schedule`.

Each group of stage 3 becomes one transfer of ``count`` chunks. A transfer needs
consecutive slots at both ends: chunks headed for consecutive output slots land there
directly; otherwise they land in fresh scratch slots and a local copy puts each where
it belongs, and chunks that sit apart at the sender are first packed into scratch by
local copies (cheap next to a link: device memory). Transfers on one logical edge run
in stage 3's order (each waits for the one before, as on a FIFO connection); data
dependencies come from the slots, through :class:`~ccweave.schedule.ScheduleBuilder`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping

from ccweave.collectives import Buffer
from ccweave.schedule import Schedule, ScheduleBuilder
from ccweave.synth.taccl.contiguity import Contiguity
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.logical import LogicalTopology
from ccweave.synth.taccl.ordering import Ordering

Slot = tuple[Buffer, int]


def lower(demand: Demand, logical: LogicalTopology, ordering: Ordering,
          contiguity: Contiguity, name: str, metadata: Mapping[str, object]) -> Schedule:
    """The schedule that carries out ``contiguity``'s groups; see the module docstring."""
    coll = demand.collective
    builder = ScheduleBuilder(coll)
    c = coll.chunks_per_rank
    for rank in range(coll.num_ranks):  # each rank's own block, locally
        own = 0 if demand.multicast else rank * c
        builder.copy(rank, rank, (Buffer.INPUT, own), (Buffer.OUTPUT, rank * c), count=c)
    where: dict[tuple[int, int], Slot] = {}
    for chunk_id, chunk in enumerate(demand.chunks):
        where[(chunk_id, chunk.source)] = (Buffer.INPUT, chunk.input_index)
    scratch = [0] * coll.num_ranks
    last_on_edge: dict[int, int] = {}
    sends = ordering.sends
    for group in _in_order(ordering, contiguity):
        edge = logical.edges[sends[group[0]].edge]
        u, v = edge.src, edge.dst
        chunks = sorted((sends[i].chunk for i in group),
                        key=lambda ch: (demand.chunks[ch].output_index, ch))
        targets = [demand.chunks[ch].output_index if v in demand.chunks[ch].destinations
                   else None for ch in chunks]
        count = len(chunks)
        if all(t is not None for t in targets) and \
                targets == list(range(targets[0], targets[0] + count)):  # type: ignore[operator]
            dst: Slot = (Buffer.OUTPUT, targets[0])  # type: ignore[assignment]
            unpack = False
        elif count == 1 and targets[0] is None:
            dst, unpack = (Buffer.SCRATCH, scratch[v]), False
            scratch[v] += 1
        else:
            dst, unpack = (Buffer.SCRATCH, scratch[v]), True
            scratch[v] += count
        src = _gathered(builder, u, [where[(ch, u)] for ch in chunks], scratch)
        after = [last_on_edge[sends[group[0]].edge]] if sends[group[0]].edge in last_on_edge \
            else []
        last_on_edge[sends[group[0]].edge] = builder.copy(u, v, src, dst, count=count,
                                                          after=after)
        for j, (ch, target) in enumerate(zip(chunks, targets)):
            slot = (dst[0], dst[1] + j)
            where[(ch, v)] = slot
            if unpack and target is not None:
                builder.copy(v, v, slot, (Buffer.OUTPUT, target))
    return builder.build(name, **metadata)


def _gathered(builder: ScheduleBuilder, rank: int, slots: list[Slot],
              scratch: list[int]) -> Slot:
    """A run of consecutive slots holding ``slots``' chunks in order at ``rank``: the
    slots themselves when they are one, else a scratch run filled by local copies."""
    first = slots[0]
    if all(s == (first[0], first[1] + j) for j, s in enumerate(slots)):
        return first
    base = scratch[rank]
    scratch[rank] += len(slots)
    for j, slot in enumerate(slots):
        builder.copy(rank, rank, slot, (Buffer.SCRATCH, base + j))
    return Buffer.SCRATCH, base


def _in_order(ordering: Ordering, contiguity: Contiguity) -> list[tuple[int, ...]]:
    """Groups in start-time order, each after the groups that bring its chunks and the
    group before it on its edge (so equal times never invert a dependency)."""
    group_of = {}
    for g, group in enumerate(contiguity.groups):
        for i in group:
            group_of[i] = g
    needs: list[set[int]] = [set() for _ in contiguity.groups]
    for g, group in enumerate(contiguity.groups):
        for i in group:
            parent = ordering.sends[i].parent
            if parent >= 0 and group_of[parent] != g:
                needs[g].add(group_of[parent])
    for sequence in ordering.edge_order.values():
        for prev, nxt in itertools.pairwise(sequence):
            a, b = group_of[prev], group_of[nxt]
            if a != b:
                needs[b].add(a)
    waiting = [len(n) for n in needs]
    children: list[list[int]] = [[] for _ in contiguity.groups]
    for g, n in enumerate(needs):
        for h in n:
            children[h].append(g)
    heap = [(contiguity.start_s[g], g) for g in range(len(needs)) if not waiting[g]]
    heapq.heapify(heap)
    result = []
    while heap:
        _, g = heapq.heappop(heap)
        result.append(contiguity.groups[g])
        for h in children[g]:
            waiting[h] -= 1
            if not waiting[h]:
                heapq.heappush(heap, (contiguity.start_s[h], h))
    if len(result) != len(needs):
        raise AssertionError("taccl: stage 3 grouped sends into a cycle")  # a bug, not input
    return result
