"""Recursive strategies (MPI's classics) for a power-of-two number of ranks.

At step ``s`` rank ``r`` exchanges with ``r XOR d`` (``d`` a power of two):

* ``recursive-doubling``: allgather with ``d = 1, 2, 4, ...``, each step doubling the
  blocks a rank holds; allreduce by exchanging the whole buffer and adding it.
* ``recursive-halving``: reduce-scatter with ``d = N/2, N/4, ..., 1``, each step
  halving the range a rank sums.
* ``rabenseifner``: allreduce as recursive-halving reduce-scatter then
  recursive-doubling allgather (bandwidth-optimal, ``2 log2 N`` steps).

Every contribution is added exactly once: what a partner sends lands in scratch (or
in a slot nothing else holds yet) and is then added locally.
"""

from __future__ import annotations

from collections.abc import Callable

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.schedule import Schedule, ScheduleBuilder
from ccweave.synth.layout import (
    chunks_for,
    reject_options,
    require_kind,
    require_power_of_two,
    require_routes,
    schedule_name,
)
from ccweave.synth.registry import register
from ccweave.topology.model import Topology

IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH
Slot = tuple[Buffer, int]

DOUBLING_KINDS = frozenset({Kind.ALLGATHER, Kind.ALLREDUCE})
HALVING_KINDS = frozenset({Kind.REDUCESCATTER})
RABENSEIFNER_KINDS = frozenset({Kind.ALLREDUCE})


def distances(n: int) -> list[int]:
    """``1, 2, 4, ..., n/2``: the partner distances of recursive doubling."""
    return [1 << s for s in range(n.bit_length() - 1)]


def _prepare(topology: Topology, kind: Kind, chunks: int | None, options: dict[str, object],
             strategy: str, kinds: frozenset[Kind]) -> ScheduleBuilder:
    """Check what every recursive strategy needs and start the schedule."""
    require_kind(kind, kinds, strategy)
    reject_options(options, strategy)
    require_power_of_two(topology, strategy)
    n = topology.num_ranks
    require_routes(topology, [(r, r ^ d) for d in distances(n) for r in range(n)], strategy)
    return ScheduleBuilder(Collective(kind, n, chunks_for(chunks)))


def _block(r: int, d: int) -> int:
    """First block of the aligned group of ``d`` blocks that holds block ``r``."""
    return r & ~(d - 1)


def doubling_allgather(b: ScheduleBuilder) -> None:
    """Each rank's block ``r`` sits at output ``r*c``; step ``d`` sends the ``d`` blocks
    a rank holds to ``r XOR d`` at the same offsets."""
    n, c = b.collective.num_ranks, b.collective.chunks_per_rank
    for d in distances(n):
        for r in range(n):
            lo = _block(r, d) * c
            b.copy(r, r ^ d, (OUT, lo), (OUT, lo), d * c)


def halving_reducescatter(b: ScheduleBuilder, final: Callable[[int], Slot]) -> None:
    """Leave the sum of every rank's block ``r`` at rank ``r``'s ``final(r)``.

    Scratch holds a partial-sum area ``A`` and a receive area ``R`` (``N*c`` chunks
    each, at absolute offsets). At distance ``d`` a rank keeps the ``d`` blocks of its
    own half, receives its partner's partial sum of them and adds it to its own.
    """
    n, c = b.collective.num_ranks, b.collective.chunks_per_rank
    total = n * c
    acc, recv = 0, total  # scratch offsets of A and R
    steps = list(reversed(distances(n)))
    if not steps:
        b.copy(0, 0, (IN, 0), final(0), c)
    for step, d in enumerate(steps):
        first, last = step == 0, d == 1
        for r in range(n):
            lo = _block(r, d) * c
            src = (IN, lo) if first else (SCRATCH, acc + lo)
            dst = final(r) if last else (SCRATCH, (acc if first else recv) + lo)
            b.copy(r ^ d, r, src, dst, d * c)
        for r in range(n):
            lo = _block(r, d) * c
            mine = (IN, lo) if first else (SCRATCH, acc + lo)
            if last:
                b.reduce(r, r, mine, final(r), c)
            elif first:
                b.reduce(r, r, mine, (SCRATCH, acc + lo), d * c)
            else:
                b.reduce(r, r, (SCRATCH, recv + lo), mine, d * c)


def doubling_allreduce(b: ScheduleBuilder) -> None:
    """Step ``d``: send the whole partial sum to ``r XOR d``'s scratch; add what came."""
    n, total = b.collective.num_ranks, b.collective.total_chunks
    for r in range(n):
        b.copy(r, r, (IN, 0), (OUT, 0), total)
    for d in distances(n):
        for r in range(n):
            b.copy(r, r ^ d, (OUT, 0), (SCRATCH, 0), total)
        for r in range(n):
            b.reduce(r, r, (SCRATCH, 0), (OUT, 0), total)


@register("recursive-doubling", DOUBLING_KINDS,
          "MPI's recursive doubling: exchange with rank XOR 1, 2, 4, ... (allgather; "
          "allreduce by exchange-and-add); power-of-two ranks")
def build_recursive_doubling(topology: Topology, kind: Kind, *, root: int = 0,
                             chunks: int | None = None, **options: object) -> Schedule:
    """Recursive-doubling allgather or allreduce in ``log2 N`` steps.

    Raises ``NotApplicableError`` for a rank count that is not a power of two, or a
    partner pair without a route.
    """
    b = _prepare(topology, kind, chunks, options, "recursive-doubling", DOUBLING_KINDS)
    coll = b.collective
    if coll.kind is Kind.ALLGATHER:
        for r in range(coll.num_ranks):
            b.copy(r, r, (IN, 0), (OUT, r * coll.chunks_per_rank), coll.chunks_per_rank)
        doubling_allgather(b)
    else:
        doubling_allreduce(b)
    return b.build(schedule_name("recursive-doubling", chunks=coll.chunks_per_rank),
                   topology=topology.name)


@register("recursive-halving", HALVING_KINDS,
          "MPI's recursive halving reduce-scatter: exchange half the range with rank "
          "XOR N/2, N/4, ..., 1; power-of-two ranks")
def build_recursive_halving(topology: Topology, kind: Kind, *, root: int = 0,
                            chunks: int | None = None, **options: object) -> Schedule:
    """Recursive-halving reduce-scatter in ``log2 N`` steps.

    Raises ``NotApplicableError`` as :func:`build_recursive_doubling`.
    """
    b = _prepare(topology, kind, chunks, options, "recursive-halving", HALVING_KINDS)
    halving_reducescatter(b, lambda r: (OUT, 0))
    return b.build(schedule_name("recursive-halving", chunks=b.collective.chunks_per_rank),
                   topology=topology.name)


@register("rabenseifner", RABENSEIFNER_KINDS,
          "Rabenseifner's allreduce: recursive-halving reduce-scatter then "
          "recursive-doubling allgather; power-of-two ranks")
def build_rabenseifner(topology: Topology, kind: Kind, *, root: int = 0,
                       chunks: int | None = None, **options: object) -> Schedule:
    """Rabenseifner allreduce: each rank sums block ``r`` into output ``r*c``, then the
    blocks are allgathered in place. Raises ``NotApplicableError`` as the others."""
    b = _prepare(topology, kind, chunks, options, "rabenseifner", RABENSEIFNER_KINDS)
    c = b.collective.chunks_per_rank
    halving_reducescatter(b, lambda r: (OUT, r * c))
    doubling_allgather(b)
    return b.build(schedule_name("rabenseifner", chunks=c), topology=topology.name)
