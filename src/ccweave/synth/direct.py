"""One-shot strategies: every rank talks to every peer it needs directly.

``direct`` sends every block straight to where it ends (MSCCL's "allpairs" for
allreduce: a direct reduce-scatter, then a direct allgather; for ``sendrecv`` the one
direct route, the baseline multipath transfers are measured against); ``pairwise`` is MPI's
alltoall in ``N-1`` rounds, round ``k`` exchanging with ranks ``r+k`` and ``r-k``.
Both need a route between every pair they use, so they suit switches and fully
connected meshes.
"""

from __future__ import annotations

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.schedule import Schedule, ScheduleBuilder
from ccweave.synth.layout import (
    chunks_for,
    reject_options,
    require_kind,
    require_routes,
    schedule_name,
)
from ccweave.synth.registry import register
from ccweave.topology.model import Topology

IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH

DIRECT_KINDS = frozenset(Kind)
PAIRWISE_KINDS = frozenset({Kind.ALLTOALL})


def _peers(rank: int, n: int) -> list[int]:
    """The other ranks, starting after ``rank`` (staggered so no rank is everyone's first)."""
    return [(rank + k) % n for k in range(1, n)]


def _pairs(kind: Kind, n: int, root: int, peer: int = 0) -> list[tuple[int, int]]:
    """The (src, dst) pairs a direct schedule of ``kind`` sends over."""
    if kind is Kind.SENDRECV:
        return [(root, peer)]
    if kind in (Kind.BROADCAST, Kind.SCATTER):
        return [(root, p) for p in _peers(root, n)]
    if kind in (Kind.REDUCE, Kind.GATHER):
        return [(p, root) for p in _peers(root, n)]
    return [(r, p) for r in range(n) for p in _peers(r, n)]


# --------------------------------------------------------------- building blocks

def _gather_to(b: ScheduleBuilder, rank: int, src_of, dst_index: int, count: int) -> None:
    """Every rank ``r`` copies ``count`` chunks from ``src_of(r)`` into ``rank``'s output at
    ``dst_index + r*count`` (allgather and gather)."""
    n = b.collective.num_ranks
    for r in [rank, *_peers(rank, n)]:
        b.copy(r, rank, src_of(r), (OUT, dst_index + r * count), count)


def _reduce_into(b: ScheduleBuilder, rank: int, src_index: int, dst: tuple[Buffer, int],
                 count: int) -> None:
    """Sum every rank's input ``[src_index, +count)`` into ``rank``'s ``dst``: each peer's
    block lands in its own scratch slot, then ``rank`` adds them up locally."""
    n = b.collective.num_ranks
    b.copy(rank, rank, (IN, src_index), dst, count)
    received = []
    for slot, peer in enumerate(_peers(rank, n)):
        b.copy(peer, rank, (IN, src_index), (SCRATCH, slot * count), count)
        received.append(slot)
    for slot in received:
        b.reduce(rank, rank, (SCRATCH, slot * count), dst, count)


def _direct(b: ScheduleBuilder) -> None:
    coll = b.collective
    n, c, total, root = coll.num_ranks, coll.chunks_per_rank, coll.total_chunks, coll.root
    kind = coll.kind
    if kind is Kind.ALLTOALL:
        for r in range(n):
            for p in [r, *_peers(r, n)]:
                b.copy(r, p, (IN, p * c), (OUT, r * c), c)
    elif kind is Kind.ALLGATHER:
        for r in range(n):
            _gather_to(b, r, lambda _: (IN, 0), 0, c)
    elif kind is Kind.GATHER:
        _gather_to(b, root, lambda _: (IN, 0), 0, c)
    elif kind is Kind.SCATTER:
        for p in [root, *_peers(root, n)]:
            b.copy(root, p, (IN, p * c), (OUT, 0), c)
    elif kind is Kind.BROADCAST:
        for p in [root, *_peers(root, n)]:
            b.copy(root, p, (IN, 0), (OUT, 0), total)
    elif kind is Kind.SENDRECV:
        b.copy(root, coll.peer, (IN, 0), (OUT, 0), total)
    elif kind is Kind.REDUCE:
        _reduce_into(b, root, 0, (OUT, 0), total)
    elif kind is Kind.REDUCESCATTER:
        for r in range(n):
            _reduce_into(b, r, r * c, (OUT, 0), c)
    else:  # ALLREDUCE: direct reduce-scatter into the own block, then direct allgather
        for r in range(n):
            _reduce_into(b, r, r * c, (OUT, r * c), c)
        for r in range(n):
            for p in _peers(r, n):
                b.copy(r, p, (OUT, r * c), (OUT, r * c), c)


@register("direct", DIRECT_KINDS,
          "one shot: every block goes straight to its destination (allreduce: direct "
          "reduce-scatter then direct allgather, MSCCL's allpairs); needs all pairs routed")
def build_direct(topology: Topology, kind: Kind, *, root: int = 0, chunks: int | None = None,
                 **options: object) -> Schedule:
    """Direct schedule of ``kind``: one transfer per (rank, peer) pair and block.

    ``sendrecv`` takes option ``peer`` (default ``root + 1``). Raises
    ``NotApplicableError`` when a pair it needs has no route.
    """
    require_kind(kind, DIRECT_KINDS, "direct")
    peer = options.pop("peer", (root + 1) % topology.num_ranks)
    reject_options(options, "direct")
    c = chunks_for(chunks)
    coll = Collective(kind, topology.num_ranks, c, root, peer)  # type: ignore[arg-type]
    require_routes(topology, _pairs(kind, coll.num_ranks, coll.root, coll.peer), "direct")
    b = ScheduleBuilder(coll)
    _direct(b)
    return b.build(schedule_name("direct", chunks=c), topology=topology.name)


@register("pairwise", PAIRWISE_KINDS,
          "MPI's pairwise alltoall: N-1 rounds, round k sends to r+k and receives from r-k")
def build_pairwise(topology: Topology, kind: Kind, *, root: int = 0, chunks: int | None = None,
                   **options: object) -> Schedule:
    """Pairwise-exchange alltoall; a rank starts round ``k+1`` once its round-``k`` send
    and receive are done (explicit dependencies, as MPI's blocking sendrecv orders them).
    """
    require_kind(kind, PAIRWISE_KINDS, "pairwise")
    reject_options(options, "pairwise")
    c = chunks_for(chunks)
    n = topology.num_ranks
    coll = Collective(kind, n, c, root)
    require_routes(topology, _pairs(kind, n, 0), "pairwise")
    b = ScheduleBuilder(coll)
    for r in range(n):
        b.copy(r, r, (IN, r * c), (OUT, r * c), c)
    sent: list[int] = []  # sent[r]: rank r's send of the previous round
    for k in range(1, n):
        after = [(sent[r], sent[(r - k + 1) % n]) if sent else () for r in range(n)]
        sent = [b.copy(r, (r + k) % n, (IN, ((r + k) % n) * c), (OUT, r * c), c,
                       after=after[r]) for r in range(n)]
    return b.build(schedule_name("pairwise", chunks=c), topology=topology.name)
