"""Chunks of unequal size, so a buffer whose elements do not split into a schedule's
chunks runs as it is: no padded copy of a DDP gradient bucket of any size.

``E`` elements in ``T`` chunks: every chunk holds ``E // T`` elements or one more. Each
transfer must move as many elements as it lands, so chunks that a transfer links (through
scratch slots too, on any rank) are one *class* and hold the same number; the chunks
that take the extra element are whole classes summing to ``E % T``. A schedule that keeps
each chunk in its own place has one chunk a class (every strategy but taccl and flow,
unchecked, on the zoo machines tried). Every rank computes the same sizes from the
schedule and ``E`` alone, as it computes the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from ccweave.collectives import Buffer
from ccweave.schedule import Schedule


@dataclass(frozen=True)
class Classes:
    """Which chunks must be equal in size, from the schedule alone (any ``E``).

    ``main[i]``: the class of chunk ``i`` of the input and output (the same chunk: they
    hold the same number of elements); ``scratch[r][j]``: the class of rank ``r``'s
    scratch chunk ``j``, ``None`` where no input or output chunk reaches it."""

    main: tuple[int, ...]
    scratch: tuple[tuple[int | None, ...], ...]


@dataclass(frozen=True)
class Bounds:
    """Where each chunk starts, in elements, on one rank: ``main[i]`` for chunk ``i`` of
    the input and output (``main[-1]`` is ``E``), ``scratch[j]`` for its scratch chunks."""

    main: tuple[int, ...]
    scratch: tuple[int, ...]

    def start(self, buffer: Buffer, index: int) -> int:
        return (self.scratch if buffer is Buffer.SCRATCH else self.main)[index]

    def elements(self, buffer: Buffer) -> int:
        """Elements of ``buffer`` on this rank."""
        return (self.scratch if buffer is Buffer.SCRATCH else self.main)[-1]


def classes(schedule: Schedule) -> Classes | None:
    """The chunk classes of ``schedule``; ``None`` where its input and output differ in
    chunks (an allgather's input is one segment of its output: sizes cannot be shared)."""
    coll = schedule.collective
    if coll.input_chunks != coll.output_chunks:
        return None
    parent: dict[tuple, tuple] = {}

    def find(node: tuple) -> tuple:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    def node(rank: int, buffer: Buffer, index: int) -> tuple:
        return (rank, index) if buffer is Buffer.SCRATCH else (-1, index)

    for t in schedule.transfers:
        for k in range(t.count):
            a = find(node(t.src, t.src_buffer, t.src_index + k))
            b = find(node(t.dst, t.dst_buffer, t.dst_index + k))
            if a != b:
                parent[max(a, b)] = min(a, b)  # a main chunk (rank -1) stays the root
    number: dict[tuple, int] = {}
    main = tuple(number.setdefault(find((-1, i)), len(number))
                 for i in range(coll.input_chunks))
    scratch = tuple(tuple(number.get(find((rank, j))) for j in range(schedule.scratch_chunks))
                    for rank in range(schedule.num_ranks))
    return Classes(main, scratch)


def bounds(found: Classes, rank: int, elements: int) -> Bounds | None:
    """Chunk starts for ``elements`` on ``rank``; ``None`` where no whole classes take the
    extra elements exactly, or there are fewer elements than chunks."""
    chunks = len(found.main)
    base, extra = divmod(elements, chunks)
    if base == 0:
        return None
    members: dict[int, int] = {}
    for klass in found.main:
        members[klass] = members.get(klass, 0) + 1
    larger = _subset(list(members.items()), extra)
    if larger is None:
        return None
    size = {klass: base + (klass in larger) for klass in members}
    main = tuple(accumulate((size[k] for k in found.main), initial=0))
    scratch = tuple(accumulate((base if k is None else size[k] for k in found.scratch[rank]),
                               initial=0))
    return Bounds(main, scratch)


def _subset(weights: list[tuple[int, int]], target: int) -> set[int] | None:
    """Keys whose weights sum to ``target`` (first keys first), or ``None``: a subset sum
    over at most a few hundred chunks."""
    reach: dict[int, tuple[int, ...]] = {0: ()}
    for key, weight in weights:
        if target in reach:
            break
        for total, keys in list(reach.items()):
            if total + weight <= target and total + weight not in reach:
                reach[total + weight] = (*keys, key)
    found = reach.get(target)
    return None if found is None else set(found)
