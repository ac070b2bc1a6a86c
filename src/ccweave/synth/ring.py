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

from array import array
from bisect import insort
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError
from ccweave.gc_pause import gc_paused
from ccweave.schedule import Op, Schedule, ScheduleBuilder
from ccweave.synth.layout import chunks_for, reject_options, require_kind, schedule_name
from ccweave.synth.registry import register
from ccweave.synth.rings import Ring, find_rings
from ccweave.topology.model import Topology

IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH
COPY, REDUCE = Op.COPY, Op.REDUCE  # reading a member off an enum class costs ~0.1 us

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

    Chunk ids are the strategy's: input indices for reductions (every rank has its own
    value of the same chunk), :func:`source_chunk` ids for data movement; at the start a
    rank holds its own input chunk ``i`` in input slot ``i``. A chain is queued as one
    item and unrolled hop by hop only as it is emitted, so the queue stays as small as
    the number of chains.
    """

    def __init__(self, collective: Collective) -> None:
        self.builder = ScheduleBuilder(collective)
        self._holders = _Holders(collective)
        self._queue: list[_Item] = []
        self._scratch: list[dict[object, int]] = [{} for _ in range(collective.num_ranks)]
        self._numbers: list[int] = []
        """Scratch indices as shared int objects (a rank may allocate millions)."""
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
        table = self._scratch[rank]
        at = table.get(key)
        if at is None:
            numbers = self._numbers
            if len(table) == len(numbers):
                numbers.append(len(numbers))
            at = table[key] = numbers[len(table)]
        return SCRATCH, at

    # -------------------------------------------------------------- queueing

    def copy_chain(self, chain: Sequence[int], chunks: Sequence[int], dst: Place,
                   channel: int, start: int = 0) -> None:
        """``chunks`` travel ``chain[0] -> chain[1] -> ...``, landing at ``dst(rank, x)``."""
        self._later(start, len(chain) - 1, self._copy, chain, chunks, dst, channel)

    def reduce_chain(self, chain: Sequence[int], chunks: Sequence[int], acc: Place,
                     channel: int, start: int = 0) -> None:
        """``chunks`` accumulate along ``chain``: each rank adds its own value into the
        running sum in ``acc(rank, x)``; the sum of every rank's ends at the last."""
        self._later(start, len(chain) - 1, self._reduce, chain, chunks, acc, channel)

    def hop(self, time: int, src: int, dst: int, chunks: Sequence[int], dst_place: Place,
            channel: int) -> None:
        """One copy hop at wavefront ``time`` (chains whose chunks drop off on the way)."""
        self._later(time, 1, self._copy, (src, dst), chunks, dst_place, channel)

    def settle(self, rank: int, chunks: Sequence[int], dst: Place, channel: int,
               start: int = 0) -> None:
        """Make ``rank`` hold ``chunks`` at ``dst`` (a local copy unless already there)."""
        self._later(start, 1, self._settle, (rank,), chunks, dst, channel)

    def _later(self, start: int, steps: int, action: _Action, chain: Sequence[int],
               chunks: Sequence[int], place: Place, channel: int) -> None:
        if steps > 0:
            self._queue.append((start, steps, action, chain, chunks, place, channel))

    def flush(self) -> None:
        """Emit everything queued, in wavefront order (a phase ends here): step ``k`` of
        an item queued to start at ``s`` goes at time ``s + k``; at one time, items go
        in the order they were queued."""
        queue, self._queue = self._queue, []
        with gc_paused():  # millions of new objects, no cycles among them
            for time, active in _wavefronts(queue):
                for item in active:
                    start, _, action, chain, chunks, place, channel = queue[item]
                    action(chain, time - start, chunks, place, channel)
        self._phase += 1

    def build(self, name: str, **metadata: object) -> Schedule:
        """Flush and build; the chains are spent (their bookkeeping goes first, so it never
        sits beside the finished schedule)."""
        self.flush()
        self._holders.table.clear()
        self._scratch.clear()
        self._last.clear()
        return self.builder.build(name, **metadata)

    # -------------------------------------------------------------- emitting

    def _copy(self, chain: Sequence[int], step: int, chunks: Sequence[int], place: Place,
              channel: int) -> None:
        src, dst = chain[step], chain[step + 1]
        targets = _placed(place, dst, chunks)
        self._emit(src, dst, self._holders.codes(src, chunks), targets, COPY, channel)
        self._holders.hold(dst, chunks, targets)

    def _reduce(self, chain: Sequence[int], step: int, chunks: Sequence[int], acc: Place,
                channel: int) -> None:
        src, dst = chain[step], chain[step + 1]
        sums = self._move(dst, chunks, acc, channel)
        self._emit(src, dst, self._holders.codes(src, chunks), sums, REDUCE, channel)

    def _settle(self, chain: Sequence[int], step: int, chunks: Sequence[int], place: Place,
                channel: int) -> None:
        self._move(chain[step], chunks, place, channel)

    def _move(self, rank: int, chunks: Sequence[int], place: Place,
              channel: int) -> list[int]:
        """Local copies so that ``rank`` holds ``chunks`` where ``place`` says; returns
        those places, encoded."""
        held = self._holders.codes(rank, chunks)
        wanted = _placed(place, rank, chunks)
        if held == wanted:
            return wanted
        if len(held) == 1:
            sources, targets, moved = held, wanted, chunks
        else:
            moving = [k for k, (have, want) in enumerate(zip(held, wanted)) if have != want]
            sources = [held[k] for k in moving]
            targets = [wanted[k] for k in moving]
            moved = [chunks[k] for k in moving]
        self._emit(rank, rank, sources, targets, COPY, channel)
        self._holders.hold(rank, moved, targets)
        return wanted

    def _emit(self, src: int, dst: int, sources: list[int], targets: list[int], op: Op,
              channel: int) -> None:
        """Transfers for encoded slot pairs, merged into runs of consecutive slots."""
        queue = (self._phase, src) if src == dst else (self._phase, src, dst, channel)
        last, add = self._last, self.builder.add
        for first, count in _ONE_RUN if len(sources) == 1 else _runs(sources, targets):
            s, t = sources[first], targets[first]
            after = last.get(queue)
            last[queue] = add(src, dst, _BUFFERS[s & 3], s >> 2, _BUFFERS[t & 3], t >> 2,
                              count, op, channel, () if after is None else (after,))


_Action = Callable[[Sequence[int], int, Sequence[int], Place, int], None]
_Item = tuple[int, int, _Action, Sequence[int], Sequence[int], Place, int]
"""(start time, steps, action, chain, chunks, place, channel): step ``k`` of a queued
chain, hop or settle runs ``action(chain, k, chunks, place, channel)`` at ``start + k``."""

_BUFFERS = (IN, OUT, SCRATCH)
_ONE_RUN = ((0, 1),)


def _placed(place: Place, rank: int, chunks: Sequence[int]) -> list[int]:
    """Where ``place`` puts ``rank``'s ``chunks``, each slot encoded as one int,
    ``index * 4 + buffer code`` (so slot ``k + 1`` of the same buffer is ``code + 4``)."""
    return [index << 2 | (0 if buffer is IN else 1 if buffer is OUT else 2)
            for buffer, index in map(place, repeat(rank), chunks)]


def _runs(sources: list[int], targets: list[int]) -> list[tuple[int, int]]:
    """``(first, count)`` of each run of pairs whose source and target slots both advance
    by one in the same buffers (what :func:`~ccweave.synth.layout.runs` merges)."""
    count = len(sources)
    if count and _advancing(sources) and _advancing(targets):
        return [(0, count)]
    found, first = [], 0
    for k in range(1, len(sources) + 1):
        if k == len(sources) or sources[k] != sources[k - 1] + 4 \
                or targets[k] != targets[k - 1] + 4:
            found.append((first, k - first))
            first = k
    return found


def _advancing(codes: list[int]) -> bool:
    """Whether encoded slots are consecutive slots of one buffer (compared in C)."""
    return codes == list(range(codes[0], codes[0] + 4 * len(codes), 4))


def _wavefronts(queue: list[_Item]) -> Iterator[tuple[int, list[int]]]:
    """``(time, items with a step then)`` in time order, the items in queue order."""
    order = sorted(range(len(queue)), key=lambda item: queue[item][0])
    active: list[int] = []
    at, time = 0, 0
    while at < len(order) or active:
        if not active:
            time = queue[order[at]][0]
        while at < len(order) and queue[order[at]][0] == time:
            insort(active, order[at])
            at += 1
        yield time, active
        active = [item for item in active
                  if time - queue[item][0] < queue[item][1] - 1]
        time += 1


class _Holders:
    """Where each rank holds each chunk: per rank an array of encoded slots
    (:func:`_placed`; ``-1``: not held), dense over the collective's chunk ids."""

    def __init__(self, collective: Collective) -> None:
        n, size = collective.num_ranks, collective.input_chunks
        own = array("q", range(0, 4 * size, 4))  # input slot i holds chunk i
        if collective.kind.is_reduction:
            self.base, span = 0, size
        else:  # source_chunk ids of the ranks with input
            sources = [rank for rank in range(n) if collective.has_input(rank)]
            self.base = source_chunk(collective, sources[0], 0)
            span = source_chunk(collective, sources[-1], size) - self.base
        self.table = [array("q", [-1]) * span for _ in range(n)]
        for rank in range(n):
            if collective.has_input(rank):
                at = 0 if collective.kind.is_reduction else \
                    source_chunk(collective, rank, 0) - self.base
                self.table[rank][at:at + size] = own

    def codes(self, rank: int, chunks: Sequence[int]) -> list[int]:
        """The encoded slots in which ``rank`` holds ``chunks``; ``KeyError`` for one it
        does not hold."""
        held, base = self.table[rank], self.base
        if len(chunks) > 2 and _consecutive(chunks):
            found = held[chunks[0] - base:chunks[-1] + 1 - base].tolist()
        else:
            found = [held[x - base] for x in chunks]
        if found and min(found) < 0:
            raise KeyError((rank, chunks[found.index(min(found))]))
        return found

    def hold(self, rank: int, chunks: Sequence[int], codes: list[int]) -> None:
        held, base = self.table[rank], self.base
        if len(chunks) > 2 and _consecutive(chunks):
            held[chunks[0] - base:chunks[-1] + 1 - base] = array("q", codes)
            return
        for x, code in zip(chunks, codes):
            held[x - base] = code


def _consecutive(chunks: Sequence[int]) -> bool:
    """Whether the chunks are ``x, x + 1, ...`` (then array slices move them in C)."""
    count = len(chunks)
    return chunks[-1] - chunks[0] == count - 1 and \
        list(chunks) == list(range(chunks[0], chunks[0] + count))


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
    ch = Chains(coll)
    BUILDERS[kind](ch, used)
    return ch.build(schedule_name("ring", channels=len(used), chunks=c),
                    topology=topology.name,
                    rings=[list(ring.order) for ring, _, _ in used],
                    ring_bandwidths=[ring.bandwidth for ring, _, _ in used],
                    chunks_per_ring=[len(span) for _, span, _ in used])
