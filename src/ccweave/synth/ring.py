"""The ring strategy: every collective as chains of hops around topology-aware rings.

:func:`~ccweave.synth.rings.find_rings` picks the rings (several = several channels);
the data is split between them in proportion to their bandwidth. Allgather passes each
block once round the ring, reduce-scatter accumulates it round the ring, allreduce is
reduce-scatter then allgather (NCCL's ring); broadcast and reduce pipeline every chunk
along the ring from / to the root; gather, scatter and alltoall relay chunks hop by hop
through scratch.

:class:`Chains` is the engine (hierarchical strategies use it too): a chain is a path of
ranks a set of chunks moves (copy) or accumulates (reduce) along; it tracks the slot in
which every rank holds every chunk, adds the local copies a reduction needs, and emits
hops in wavefront order (hop ``i`` of a chain started at step ``s`` at time ``s + i``).
Transfers on one channel's connection run in that order, one after another (NCCL's
FIFO slices), so pieces pipeline along a chain instead of sharing its links at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError
from ccweave.schedule import Op, Schedule, ScheduleBuilder
from ccweave.synth.layout import (
    chunks_for,
    reject_options,
    require_kind,
    runs,
    schedule_name,
)
from ccweave.synth.registry import register
from ccweave.synth.rings import Ring, find_rings
from ccweave.topology.model import Topology

IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH

Slot = tuple[Buffer, int]
Place = Callable[[int, int], Slot]
"""``(rank, chunk) -> slot``: where a rank keeps a chunk."""

PIPELINE = 4
"""Broadcast and reduce default to this many times the chunks the ring split needs, so
every ring pipelines several pieces per rank."""

SPLIT_TOLERANCE = 1.05
"""Default chunks: the fewest per rank whose split over the rings is within this factor
of the ideal proportional split's time."""


class Chains:
    """Chains of hops, emitted in wavefront order, over per-rank chunk holders.

    ``initial[(rank, chunk)]`` is the slot holding the rank's own data for ``chunk`` at
    the start. Chunk ids are the strategy's: input indices for reductions (every rank
    has its own value of the same chunk), :func:`source_chunk` ids for data movement.
    """

    def __init__(self, collective: Collective, initial: dict[tuple[int, int], Slot]) -> None:
        self.builder = ScheduleBuilder(collective)
        self.holder = dict(initial)
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._scratch: dict[tuple[int, object], int] = {}
        self._scratch_used: dict[int, int] = {}
        self._last: dict[tuple[int, ...], int] = {}
        """The last transfer of each queue: per phase, a channel's connection from one
        rank to another, and a rank's local copies. Transfers of a queue run one after
        another in emission order, as a channel's slices do in NCCL: so pieces pipeline
        instead of all sharing the link and all finishing late."""
        self._phase = 0

    @property
    def collective(self) -> Collective:
        return self.builder.collective

    def scratch(self, rank: int, key: object) -> Slot:
        """A scratch slot of ``rank`` for ``key``, allocated on first use."""
        if (rank, key) not in self._scratch:
            self._scratch[(rank, key)] = self._scratch_used.get(rank, 0)
            self._scratch_used[rank] = self._scratch[(rank, key)] + 1
        return SCRATCH, self._scratch[(rank, key)]

    # -------------------------------------------------------------- queueing

    def copy_chain(self, chain: Sequence[int], chunks: Sequence[int], dst: Place,
                   channel: int, start: int = 0) -> None:
        """``chunks`` travel ``chain[0] -> chain[1] -> ...``, landing at ``dst(rank, x)``."""
        for hop in range(len(chain) - 1):
            self._later(start + hop, self._copy, chain[hop], chain[hop + 1], chunks, dst,
                        channel)

    def reduce_chain(self, chain: Sequence[int], chunks: Sequence[int], acc: Place,
                     channel: int, start: int = 0) -> None:
        """``chunks`` accumulate along ``chain``: each rank adds its own value into the
        running sum in ``acc(rank, x)``; the sum of every rank's ends at the last."""
        for hop in range(len(chain) - 1):
            self._later(start + hop, self._reduce, chain[hop], chain[hop + 1], chunks, acc,
                        channel)

    def hop(self, time: int, src: int, dst: int, chunks: Sequence[int], dst_place: Place,
            channel: int) -> None:
        """One copy hop at wavefront ``time`` (chains whose chunks drop off on the way)."""
        self._later(time, self._copy, src, dst, chunks, dst_place, channel)

    def settle(self, rank: int, chunks: Sequence[int], dst: Place, channel: int,
               start: int = 0) -> None:
        """Make ``rank`` hold ``chunks`` at ``dst`` (a local copy unless already there)."""
        self._later(start, self._move, rank, chunks, dst, channel)

    def _later(self, time: int, action: Callable[..., None], *args: object) -> None:
        self._queue.append((time, len(self._queue), lambda: action(*args)))

    def flush(self) -> None:
        """Emit everything queued, in wavefront order (a phase ends here)."""
        queue, self._queue = sorted(self._queue, key=lambda item: item[:2]), []
        for *_, action in queue:
            action()
        self._phase += 1

    def build(self, name: str, **metadata: object) -> Schedule:
        self.flush()
        return self.builder.build(name, **metadata)

    # -------------------------------------------------------------- emitting

    def _copy(self, src: int, dst: int, chunks: Sequence[int], place: Place,
              channel: int) -> None:
        targets = [place(dst, x) for x in chunks]
        self._emit(src, dst, [self.holder[(src, x)] for x in chunks], targets, Op.COPY,
                   channel)
        self.holder.update(((dst, x), slot) for x, slot in zip(chunks, targets))

    def _reduce(self, src: int, dst: int, chunks: Sequence[int], acc: Place,
                channel: int) -> None:
        self._move(dst, chunks, acc, channel)
        self._emit(src, dst, [self.holder[(src, x)] for x in chunks],
                   [acc(dst, x) for x in chunks], Op.REDUCE, channel)

    def _move(self, rank: int, chunks: Sequence[int], place: Place, channel: int) -> None:
        moving = [x for x in chunks if self.holder[(rank, x)] != place(rank, x)]
        targets = [place(rank, x) for x in moving]
        self._emit(rank, rank, [self.holder[(rank, x)] for x in moving], targets, Op.COPY,
                   channel)
        self.holder.update(((rank, x), slot) for x, slot in zip(moving, targets))

    def _emit(self, src: int, dst: int, sources: list[Slot], targets: list[Slot], op: Op,
              channel: int) -> None:
        """Transfers for slot pairs, merged into runs of consecutive slots."""
        start = 0
        for end in range(1, len(sources) + 1):
            if end < len(sources) and sources[end][0] == sources[start][0] \
                    and targets[end][0] == targets[start][0]:
                continue
            pairs = [(s[1], t[1]) for s, t in zip(sources[start:end], targets[start:end])]
            for s, t, count in runs(pairs):
                queue = (self._phase, src) if src == dst else (self._phase, src, dst, channel)
                after = [self._last[queue]] if queue in self._last else []
                self._last[queue] = self.builder.add(src, dst, sources[start][0], s,
                                                     targets[start][0], t, count, op, channel,
                                                     after)
            start = end


# ------------------------------------------------------------------ splitting


def split(chunks: int, bandwidths: Sequence[float]) -> list[range]:
    """Cut ``range(chunks)`` into consecutive spans proportional to ``bandwidths``
    (largest remainders); with fewer chunks than rings the slowest get none."""
    total = sum(bandwidths)
    quotas = [chunks * bw / total for bw in bandwidths]
    counts = [int(q) for q in quotas]
    by_remainder = sorted(range(len(quotas)), key=lambda k: (counts[k] - quotas[k], k))
    for k in by_remainder[:chunks - sum(counts)]:
        counts[k] += 1
    spans, at = [], 0
    for count in counts:
        spans.append(range(at, at + count))
        at += count
    return spans


def split_time(chunks: int, bandwidths: Sequence[float]) -> float:
    """Time of the slowest ring per unit of data when ``chunks`` are split between them."""
    return max(len(span) / chunks / bw for span, bw in zip(split(chunks, bandwidths),
                                                            bandwidths))


def default_chunks(bandwidths: Sequence[float], limit: int = 64) -> int:
    """The fewest chunks per rank that split the data between the rings within
    :data:`SPLIT_TOLERANCE` of the ideal (``1 / sum(bandwidths)``)."""
    ideal = 1 / sum(bandwidths)
    best = min(range(1, limit + 1), key=lambda c: (split_time(c, bandwidths), c))
    for chunks in range(len(bandwidths), limit + 1):
        if split_time(chunks, bandwidths) <= SPLIT_TOLERANCE * ideal:
            return chunks
    return best


# ------------------------------------------------------------- collectives

Lane = tuple[Ring, range, int]
"""One channel: its ring, its span of per-rank chunk indices, its channel number."""


def channel_lanes(rings: Sequence[Ring], chunks: int, first_channel: int = 0) -> list[Lane]:
    """The rings that get chunks (:func:`split` by bandwidth), numbered as channels."""
    spans = split(chunks, [ring.bandwidth for ring in rings])
    used = [(ring, span) for ring, span in zip(rings, spans) if span]
    return [(ring, span, first_channel + k) for k, (ring, span) in enumerate(used)]


def _allgather(ch: Chains, lanes: list[Lane]) -> None:
    c = ch.collective.chunks_per_rank
    place = _output_at(0)
    for ring, span, channel in lanes:
        for d in ring.order:
            xs = [d * c + j for j in span]
            ch.copy_chain(ring.starting_at(d), xs, place, channel)
            ch.settle(d, xs, place, channel)  # after the first send, which reads the input


def _reduce_scatter(ch: Chains, lanes: list[Lane]) -> None:
    c = ch.collective.chunks_per_rank

    def acc(rank: int, x: int) -> Slot:
        own = rank * c <= x < (rank + 1) * c
        return (OUT, x - rank * c) if own else ch.scratch(rank, x)

    for ring, span, channel in lanes:
        for d in ring.order:
            xs = [d * c + j for j in span]
            ch.reduce_chain(ring.ending_at(d), xs, acc, channel)
            ch.settle(d, xs, acc, channel, start=len(ring))


def _allreduce(ch: Chains, lanes: list[Lane]) -> None:
    c = ch.collective.chunks_per_rank
    place = _output_at(0)
    for ring, span, channel in lanes:
        for d in ring.order:
            xs = [d * c + j for j in span]
            ch.reduce_chain(ring.ending_at(d), xs, place, channel)
            ch.settle(d, xs, place, channel, start=len(ring))
    ch.flush()
    for ring, span, channel in lanes:
        for d in ring.order:
            ch.copy_chain(ring.starting_at(d), [d * c + j for j in span], place, channel)


def _pieces(ch: Chains, span: range) -> range:
    """The chunks of the whole buffer a lane carries (broadcast, reduce)."""
    n = ch.collective.num_ranks
    return range(n * span.start, n * span.stop)


def _broadcast(ch: Chains, lanes: list[Lane]) -> None:
    coll = ch.collective
    base = source_chunk(coll, coll.root, 0)
    place = _output_at(base)
    for ring, span, channel in lanes:
        chain = ring.starting_at(coll.root)
        pieces = [base + i for i in _pieces(ch, span)]
        for step, x in enumerate(pieces):
            ch.copy_chain(chain, [x], place, channel, start=step)
        # after the root's sends, which read the input
        ch.settle(coll.root, pieces, place, channel, start=len(pieces))


def _reduce(ch: Chains, lanes: list[Lane]) -> None:
    root = ch.collective.root

    def acc(rank: int, x: int) -> Slot:
        return (OUT, x) if rank == root else ch.scratch(rank, x)

    for ring, span, channel in lanes:
        chain = ring.ending_at(root)
        for step, i in enumerate(_pieces(ch, span)):
            ch.reduce_chain(chain, [i], acc, channel, start=step)
            ch.settle(root, [i], acc, channel, start=step + len(ring))


def _gather(ch: Chains, lanes: list[Lane]) -> None:
    coll = ch.collective
    c, root = coll.chunks_per_rank, coll.root

    def place(rank: int, x: int) -> Slot:
        return (OUT, x) if rank == root else ch.scratch(rank, x)

    for ring, span, channel in lanes:
        order = ring.starting_at(root)
        for q in order:
            xs = [q * c + j for j in span]
            if q == root:
                ch.settle(root, xs, place, channel)
            else:
                ch.copy_chain((*order[order.index(q):], root), xs, place, channel)


def _scatter(ch: Chains, lanes: list[Lane]) -> None:
    coll = ch.collective
    n, c, root = coll.num_ranks, coll.chunks_per_rank, coll.root
    base = source_chunk(coll, root, 0)

    def place(rank: int, x: int) -> Slot:
        target = (x - base) // c
        return (OUT, (x - base) % c) if rank == target else ch.scratch(rank, x)

    for ring, span, channel in lanes:
        order = ring.starting_at(root)
        for hops in range(n - 1, -1, -1):  # the farthest first: it has the longest way
            q = order[hops]
            xs = [base + q * c + j for j in span]
            ch.copy_chain(order[:hops + 1], xs, place, channel, start=n - 1 - hops)
            if q == root:
                ch.settle(root, xs, place, channel)


def _alltoall(ch: Chains, lanes: list[Lane]) -> None:
    coll = ch.collective
    n, c = coll.num_ranks, coll.chunks_per_rank

    def place(rank: int, x: int) -> Slot:
        source, index = divmod(x, n * c)
        target = index // c
        return (OUT, source * c + index % c) if rank == target else ch.scratch(rank, x)

    for ring, span, channel in lanes:
        for s in ring.order:
            order = ring.starting_at(s)
            ch.settle(s, [source_chunk(coll, s, s * c + j) for j in span], place, channel)
            for hop in range(1, n):  # what is still on its way, nearest destination first
                xs = [source_chunk(coll, s, r * c + j) for r in order[hop:] for j in span]
                ch.hop(hop - 1, order[hop - 1], order[hop], xs, place, channel)


def _output_at(base: int) -> Place:
    """Chunk ``x`` lands at output index ``x - base`` on every rank."""
    return lambda rank, x: (OUT, x - base)


BUILDERS: dict[Kind, Callable[[Chains, list[Lane]], None]] = {
    Kind.ALLGATHER: _allgather,
    Kind.REDUCESCATTER: _reduce_scatter,
    Kind.ALLREDUCE: _allreduce,
    Kind.BROADCAST: _broadcast,
    Kind.REDUCE: _reduce,
    Kind.GATHER: _gather,
    Kind.SCATTER: _scatter,
    Kind.ALLTOALL: _alltoall,
}


def source_chunk(collective: Collective, rank: int, index: int) -> int:
    """A data-movement chunk's id: input chunk ``index`` of ``rank``, unique overall."""
    return rank * collective.input_chunks + index


def initial_holders(collective: Collective) -> dict[tuple[int, int], Slot]:
    """Where each rank's own data starts: keyed by input index for reductions, by
    :func:`source_chunk` for data movement (so relayed chunks never share a key)."""
    by_index = collective.kind.is_reduction
    return {(rank, i if by_index else source_chunk(collective, rank, i)): (IN, i)
            for rank, i in collective.precondition}


# ------------------------------------------------------------------ strategy


@register("ring", frozenset(Kind.collectives()),
          "topology-aware rings (NCCL's ring search), several rings as channels; "
          "allreduce is reduce-scatter then allgather round the ring")
def build_ring(topology: Topology, kind: Kind, *, root: int = 0, chunks: int | None = None,
               channels: int | None = None, **options: object) -> Schedule:
    """Ring schedule of ``kind``: the data split over the rings :func:`find_rings` finds.

    Parameters
    ----------
    topology, kind, root: the machine, the collective, the root of rooted collectives.
    chunks: chunks per rank; default: the fewest that split the data between the rings in
        proportion to their bandwidth (times :data:`PIPELINE` for broadcast and reduce).
    channels: use at most this many rings (default: all the search keeps).

    Raises ``NotApplicableError`` when the topology has no ring (no Hamiltonian cycle).
    """
    kind = Kind.parse(kind)
    require_kind(kind, BUILDERS, "ring")
    reject_options(options, "ring", ["channels"])
    if channels is not None and (isinstance(channels, bool) or not isinstance(channels, int)
                                 or channels < 1):
        raise InputError(f"ring: channels must be a positive integer, got {channels!r}")
    rings = find_rings(topology, channels)
    bandwidths = [ring.bandwidth for ring in rings]
    pipeline = PIPELINE if kind in (Kind.BROADCAST, Kind.REDUCE) else 1
    c = chunks_for(chunks, default_chunks(bandwidths) * pipeline)
    used = channel_lanes(rings, c)
    coll = Collective(kind, topology.num_ranks, c, root)
    ch = Chains(coll, initial_holders(coll))
    BUILDERS[kind](ch, used)
    return ch.build(schedule_name("ring", channels=len(used), chunks=c),
                    topology=topology.name,
                    rings=[list(ring.order) for ring, _, _ in used],
                    ring_bandwidths=[ring.bandwidth for ring, _, _ in used],
                    chunks_per_ring=[len(span) for _, span, _ in used])
