"""The schedule IR: every strategy emits one, everything downstream reads one.

A :class:`Schedule` is a collective plus a DAG of :class:`Transfer`\\ s between buffer
slots, in chunk units (size-agnostic, like MSCCL's ``nchunksperloop``). A transfer
with ``src == dst`` is a local copy or reduction. ``deps`` are indices of transfers
that must finish before this one starts: the only ordering there is.
"""

from __future__ import annotations

import enum
import heapq
import json
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ccweave import limits
from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError
from ccweave.jsonfile import finite
from ccweave.units import shown


class Op(str, enum.Enum):
    """What a transfer does at its destination slot."""

    COPY = "copy"
    REDUCE = "reduce"


_COPY, _REDUCE = Op.COPY, Op.REDUCE  # reading a member off an enum class costs ~0.1 us


@dataclass(frozen=True, slots=True)
class Transfer:
    """Move ``count`` consecutive chunks from one rank's slot to another's.

    ``op=REDUCE`` adds the data into the destination instead of overwriting it.
    ``via`` pins the route: the fabric nodes it passes in order (``()``: the direct link);
    ``None`` takes the pair's cheapest route. Multipath strategies use it to send over a
    host path beside the direct link between the same two ranks.
    """

    src: int
    dst: int
    src_buffer: Buffer
    src_index: int
    dst_buffer: Buffer
    dst_index: int
    count: int = 1
    op: Op = Op.COPY
    deps: tuple[int, ...] = ()
    channel: int = 0
    via: tuple[str, ...] | None = None

    @property
    def is_local(self) -> bool:
        return self.src == self.dst


@dataclass(frozen=True, eq=False)
class Schedule:
    """A collective algorithm: buffers per rank and the transfers between them.

    Parameters
    ----------
    collective: what the schedule implements.
    transfers: the DAG; ``deps`` index into this tuple.
    scratch_chunks: size of every rank's scratch buffer, in chunks.
    in_place: inputs alias outputs (:meth:`Collective.in_place_alias`).
    name: the strategy and its options, e.g. ``ring(channels=2)``.
    metadata: free-form facts for people (topology, options, solver gap).
    """

    collective: Collective
    transfers: tuple[Transfer, ...]
    scratch_chunks: int = 0
    in_place: bool = False
    name: str = ""
    metadata: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        scratch = self.scratch_chunks
        if isinstance(scratch, bool) or not isinstance(scratch, int) or scratch < 0:
            raise InputError(f"schedule {self.name!r}: scratch_chunks must be an integer "
                             f">= 0, got {scratch!r}")
        coll = self.collective
        if scratch:  # the collective checked its input and output already
            limits.check(f"schedule {self.name or '(unnamed)'!r} with {scratch} scratch "
                         "chunk(s) per rank", coll.num_ranks * (coll.input_chunks
                                                                + coll.output_chunks + scratch),
                         limits.MAX_SLOTS,
                         "buffer slots (ranks x (input + output + scratch) chunks)",
                         "use less scratch")

    @property
    def num_ranks(self) -> int:
        return self.collective.num_ranks

    def buffer_chunks(self, buffer: Buffer) -> int:
        if buffer == Buffer.SCRATCH:
            return self.scratch_chunks
        return self.collective.buffer_chunks(buffer)

    @property
    def num_channels(self) -> int:
        return 1 + max((t.channel for t in self.transfers), default=0)

    def with_name(self, name: str, **metadata: object) -> Schedule:
        return replace(self, name=name, metadata={**self.metadata, **metadata})

    # ------------------------------------------------------------ analysis

    def depth(self) -> int:
        """Transfers on the longest dependency chain ("steps")."""
        transfers = self.transfers
        level = array("q", bytes(8 * len(transfers)))
        for index, transfer in enumerate(transfers):  # index order, as builders make it
            deps = transfer.deps
            if deps and (max(deps) >= index or min(deps) < 0):
                return _depth(transfers, topological_order(transfers))
            level[index] = 1 + max(map(level.__getitem__, deps)) if deps else 1
        return max(level, default=0)

    def stats(self) -> dict[str, object]:
        """Counts people ask about first: transfers, steps, chunks moved, channels."""
        remote = reductions = 0
        pairs: dict[tuple[int, int], int] = {}
        for t in self.transfers:  # one pass, no lists: schedules reach millions of transfers
            reductions += t.op is _REDUCE
            if t.src != t.dst:
                remote += 1
                pairs[(t.src, t.dst)] = pairs.get((t.src, t.dst), 0) + t.count
        return {
            "name": self.name,
            "collective": self.collective.kind.value,
            "ranks": self.num_ranks,
            "chunks_per_rank": self.collective.chunks_per_rank,
            "transfers": len(self.transfers),
            "remote_transfers": remote,
            "local_transfers": len(self.transfers) - remote,
            "reductions": reductions,
            "steps": self.depth(),
            "channels": self.num_channels,
            "chunks_sent": sum(pairs.values()),
            "rank_pairs": len(pairs),
            "max_chunks_per_pair": max(pairs.values(), default=0),
            "scratch_chunks": self.scratch_chunks,
        }


def _depth(transfers: Sequence[Transfer], order: Iterable[int]) -> int:
    """Longest dependency chain, visiting transfers in a topological ``order``."""
    level = [0] * len(transfers)
    for index in order:
        level[index] = 1 + max((level[d] for d in transfers[index].deps), default=0)
    return max(level, default=0)


def topological_order(transfers: Sequence[Transfer]) -> list[int]:
    """Indices in an order where every transfer comes after its deps: the smallest ready
    index first (Kahn's algorithm with a heap), so a schedule already in dependency order,
    as builders emit them, keeps its own order.

    Raises ``InputError`` naming a transfer that waits on a dependency cycle, or a
    dangling dep.
    """
    count = len(transfers)
    waiting = [0] * count
    children: list[list[int]] = [[] for _ in range(count)]
    in_order = True
    for index, transfer in enumerate(transfers):
        for dep in transfer.deps:
            if not 0 <= dep < count:
                raise InputError(f"transfer {index} depends on transfer {dep}, which does not "
                                 f"exist (the schedule has {count})")
            children[dep].append(index)
            in_order = in_order and dep < index
        waiting[index] = len(transfer.deps)
    if in_order:
        return list(range(count))
    ready = [i for i in range(count) if waiting[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for child in children[index]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, child)
    if len(order) != count:
        stuck = next(i for i in range(count) if waiting[i] > 0)
        raise InputError(f"the dependencies form a cycle: transfer {stuck} can never start "
                         "(it waits, directly or not, on a cycle of transfers)")
    return order


class ScheduleBuilder:
    """Accumulates transfers and derives their dependencies from the data they touch.

    ``add`` makes a transfer depend on the last writer of every slot it reads or writes
    and on every reader of a slot it overwrites, so strategies state only what moves
    where; the verifier checks the result independently.

    Builders make millions of transfers at scale, so the bookkeeping is compact: per
    ``(rank, buffer)`` a list of last writers and a list of readers since (``None``, one
    index, or a list of them), indexed by slot and sliced for multi-chunk transfers.
    """

    def __init__(self, collective: Collective, in_place: bool = False) -> None:
        self.collective = collective
        self.in_place = in_place
        self.transfers: list[Transfer] = []
        self.scratch_chunks = 0
        self._tables: dict[int, tuple[list, list]] = {}
        """``rank * 3 + buffer code`` -> (last writer per slot, readers per slot)."""
        self._ints: list[int] = []
        """One int object per slot index, shared by every transfer that names it."""

    def add(self, src: int, dst: int, src_buffer: Buffer, src_index: int,
            dst_buffer: Buffer, dst_index: int, count: int = 1, op: Op = Op.COPY,
            channel: int = 0, after: Iterable[int] = (),
            via: tuple[str, ...] | None = None) -> int:
        """Append a transfer and return its index; ``after`` adds explicit deps."""
        index = len(self.transfers)
        if src_index < 0 or dst_index < 0:
            raise InputError(f"transfer {index} ({src} -> {dst}): slot indices must be >= 0, "
                             f"got {src_index} and {dst_index}")
        slots = count if count > 0 else 0
        reads, read_at = self._table(src, src_buffer, src_index, slots)
        writes, write_at = self._table(dst, dst_buffer, dst_index, slots)
        if slots == 1:
            deps = _one_slot(reads, read_at, writes, write_at, after, index)
        else:
            deps = _deps(reads, read_at, writes, write_at, slots, after, index)
            _read(reads[1], read_at, slots, index)
            _written(writes, write_at, slots, index)
        ints = self._ints
        top = src_index if src_index > dst_index else dst_index
        if top >= len(ints):
            ints.extend(range(len(ints), top + 1))
        self.transfers.append(_transfer(src, dst, src_buffer, ints[src_index], dst_buffer,
                                        ints[dst_index], count, op, deps, channel,
                                        None if via is None else tuple(via)))
        if dst_buffer is _SCRATCH and dst_index + count > self.scratch_chunks:
            self.scratch_chunks = dst_index + count
        if src_buffer is _SCRATCH and src_index + count > self.scratch_chunks:
            self.scratch_chunks = src_index + count
        return index

    def _table(self, rank: int, buffer: Buffer, index: int,
               count: int) -> tuple[tuple[list, list], int]:
        """The (writers, readers) lists holding ``count`` slots from ``index`` (grown to
        hold them), and the first slot's place in them."""
        if self.in_place:  # an alias shifts a whole buffer, so runs of slots stay runs
            buffer, index = self.collective.in_place_alias(rank, buffer, index)
        code = (0 if buffer is _INPUT else 1 if buffer is _OUTPUT
                else 2 if buffer is _SCRATCH else _code(buffer))
        table = self._tables.get(rank * 3 + code)
        if table is None:
            size = 0 if code == 2 else self.collective.buffer_chunks(_BUFFERS[code])
            table = self._tables[rank * 3 + code] = ([None] * size, [None] * size)
        short = index + count - len(table[0])
        if short > 0:
            table[0].extend([None] * short)
            table[1].extend([None] * short)
        return table, index

    def copy(self, src: int, dst: int, src_slot: tuple[Buffer, int],
             dst_slot: tuple[Buffer, int], count: int = 1, channel: int = 0,
             after: Iterable[int] = ()) -> int:
        return self.add(src, dst, *src_slot, *dst_slot, count=count, op=_COPY,
                        channel=channel, after=after)

    def reduce(self, src: int, dst: int, src_slot: tuple[Buffer, int],
               dst_slot: tuple[Buffer, int], count: int = 1, channel: int = 0,
               after: Iterable[int] = ()) -> int:
        return self.add(src, dst, *src_slot, *dst_slot, count=count, op=_REDUCE,
                        channel=channel, after=after)

    def last_writer(self, rank: int, buffer: Buffer, index: int) -> int | None:
        if self.in_place:
            buffer, index = self.collective.in_place_alias(rank, buffer, index)
        writers = self._tables.get(rank * 3 + _code(buffer), ((),))[0]
        return writers[index] if 0 <= index < len(writers) else None

    def build(self, name: str, **metadata: object) -> Schedule:
        return Schedule(self.collective, tuple(self.transfers), self.scratch_chunks,
                        self.in_place, name, dict(metadata))


_BUFFERS = _INPUT, _OUTPUT, _SCRATCH = (Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH)


def _code(buffer: Buffer) -> int:
    """0, 1, 2 for input, output, scratch (also when spelled as a plain string)."""
    return _BUFFERS.index(Buffer(buffer))


def _one_slot(reads: tuple[list, list], read_at: int, writes: tuple[list, list],
              write_at: int, after: Iterable[int], index: int) -> tuple[int, ...]:
    """:func:`_deps`, :func:`_read` and :func:`_written` for a one-slot transfer, in one
    call: most transfers move one chunk."""
    deps = set(after)
    deps.add(reads[0][read_at])
    writers, readers = writes
    deps.add(writers[write_at])
    waiting = readers[write_at]
    if waiting is not None:
        if waiting.__class__ is list:
            deps.update(waiting)
        else:
            deps.add(waiting)
    deps.discard(None)
    deps.discard(index)
    waiting = reads[1][read_at]
    if waiting is None:
        reads[1][read_at] = index
    elif waiting.__class__ is list:
        waiting.append(index)
    else:
        reads[1][read_at] = [waiting, index]
    writers[write_at] = index
    readers[write_at] = None
    return tuple(sorted(deps)) if deps else ()


def _deps(reads: tuple[list, list], read_at: int, writes: tuple[list, list], write_at: int,
          count: int, after: Iterable[int], index: int) -> tuple[int, ...]:
    """Sorted deps: ``after``, the last writers of the slots read or written, and the
    readers of the slots written since their last write."""
    deps = set(after)
    deps.update(reads[0][read_at:read_at + count])
    deps.update(writes[0][write_at:write_at + count])
    for waiting in writes[1][write_at:write_at + count]:
        if waiting is not None:
            if waiting.__class__ is list:
                deps.update(waiting)
            else:
                deps.add(waiting)
    deps.discard(None)
    deps.discard(index)
    return tuple(sorted(deps)) if deps else ()


def _read(readers: list, at: int, count: int, index: int) -> None:
    """Record ``index`` as a reader of ``count`` slots from ``at``."""
    if count > 1 and readers[at:at + count].count(None) == count:  # none read yet
        readers[at:at + count] = [index] * count
        return
    for slot in range(at, at + count):
        waiting = readers[slot]
        if waiting is None:
            readers[slot] = index
        elif waiting.__class__ is list:
            waiting.append(index)
        else:
            readers[slot] = [waiting, index]


def _written(table: tuple[list, list], at: int, count: int, index: int) -> None:
    """``index`` is the last writer of ``count`` slots from ``at``, read by none yet."""
    table[0][at:at + count] = [index] * count
    table[1][at:at + count] = [None] * count


class _NewTransfer:
    """Makes a :class:`Transfer` 4x faster than its frozen ``__init__`` (which sets each
    field through ``object.__setattr__``): same slots, plain stores, then the object
    becomes a Transfer. Builders make millions of them."""

    __slots__ = Transfer.__slots__

    def __init__(self, src: int, dst: int, src_buffer: Buffer, src_index: int,
                 dst_buffer: Buffer, dst_index: int, count: int, op: Op,
                 deps: tuple[int, ...], channel: int, via: tuple[str, ...] | None) -> None:
        self.src = src
        self.dst = dst
        self.src_buffer = src_buffer
        self.src_index = src_index
        self.dst_buffer = dst_buffer
        self.dst_index = dst_index
        self.count = count
        self.op = op
        self.deps = deps
        self.channel = channel
        self.via = via
        self.__class__ = Transfer  # type: ignore[assignment]


_transfer: Callable[..., Transfer] = _NewTransfer  # type: ignore[assignment]


# ------------------------------------------------------------------ JSON

FORMAT = "ccweave.schedule"
VERSION = 1
MAX_CHANNELS = 64
"""Channels a schedule file may use (0..63): NCCL's MAXCHANNELS. The strategies use at
most 32; MSCCL's runtime takes 32 (its XML export checks that)."""
_BUFFER_CODE = {Buffer.INPUT: "i", Buffer.OUTPUT: "o", Buffer.SCRATCH: "s"}
_CODE_BUFFER = {code: buffer for buffer, code in _BUFFER_CODE.items()}
_OP_CODE = {Op.COPY: "c", Op.REDUCE: "r"}
_CODE_OP = {code: op for op, code in _OP_CODE.items()}


def to_dict(schedule: Schedule) -> dict[str, object]:
    """A JSON-ready dict; transfers as compact rows
    ``[src, dst, src_buffer, src_index, dst_buffer, dst_index, count, op, deps, channel]``,
    with an 11th element, the route's fabric nodes, where a transfer pins its route."""
    coll = schedule.collective
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": schedule.name,
        "collective": {"kind": coll.kind.value, "ranks": coll.num_ranks,
                       "chunks_per_rank": coll.chunks_per_rank, "root": coll.root,
                       **({"peer": coll.peer} if coll.kind is Kind.SENDRECV else {})},
        "in_place": schedule.in_place,
        "scratch_chunks": schedule.scratch_chunks,
        "metadata": dict(schedule.metadata),
        "transfer_fields": list(TRANSFER_FIELDS),
        "transfers": [_row(t) for t in schedule.transfers],
    }


def _row(t: Transfer) -> list[object]:
    row = [t.src, t.dst, _BUFFER_CODE[t.src_buffer], t.src_index, _BUFFER_CODE[t.dst_buffer],
           t.dst_index, t.count, _OP_CODE[t.op], list(t.deps), t.channel]
    if t.via is not None:
        row.append(list(t.via))
    return row


def from_dict(data: object, source: str = "schedule") -> Schedule:
    """Rebuild a Schedule from :func:`to_dict`'s form; errors name ``source`` and the field.

    Rows follow ``transfer_fields`` when the file gives it (any order of the eleven
    names); without it, :func:`to_dict`'s order.
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{source}: not a ccweave schedule (expected \"format\": "
                         f"\"{FORMAT}\"); make one with `ccweave synth`")
    if data.get("version") != VERSION:
        raise InputError(f"{source}: schedule version {shown(data.get('version'))} is not "
                         f"supported (this ccweave reads version {VERSION})")
    try:
        coll = data["collective"]
        kind = Kind.parse(coll["kind"])
        ranks = _int(coll["ranks"])
        root, peer = _int(coll.get("root", 0)), _int(coll.get("peer", 0))
        _check_root(kind, ranks, root, peer)
        collective = Collective(kind, ranks, _int(coll.get("chunks_per_rank", 1)), root, peer)
        rows = data["transfers"]
        if not isinstance(rows, list):
            raise TypeError("transfers must be a list")
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as error:
        if isinstance(error, InputError):
            raise type(error)(f"{source}: field 'collective': {error}") from None
        raise InputError(f"{source}: field 'collective' or 'transfers' is malformed "
                         f"({shown(error, 80)}); regenerate the file with `ccweave synth`"
                         ) from None
    order, via_at = _field_order(data.get("transfer_fields"), source)
    transfers = []
    for number, row in enumerate(rows):
        try:
            values = row if order is None else _canonical(row, order, via_at)
            src, dst, sbuf, sidx, dbuf, didx, count, op, deps, channel, *via = values
            if len(via) > 1 or (via and not (isinstance(via[0], list) and all(
                    isinstance(n, str) for n in via[0]))):
                raise ValueError("via must be a list of fabric node names")
            transfers.append(Transfer(_int(src), _int(dst), _CODE_BUFFER[sbuf], _int(sidx),
                                      _CODE_BUFFER[dbuf], _int(didx), _int(count), _CODE_OP[op],
                                      tuple(_int(d) for d in deps), _int(channel),
                                      tuple(via[0]) if via else None))
            _check_row(transfers[-1], f"{source}: transfers[{number}]")
        except InputError:
            raise
        except (KeyError, TypeError, ValueError, IndexError):
            fields = ", ".join(TRANSFER_FIELDS[:10]) if order is None else ", ".join(
                data["transfer_fields"])
            raise InputError(f"{source}: transfers[{number}] = {shown(row, 80)} is malformed; "
                             f"each row is [{fields}] (buffers i|o|s, op c|r, deps a list)"
                             + ("" if order is not None else " and optionally [via nodes]")
                             ) from None
    scratch = data.get("scratch_chunks", 0)
    if isinstance(scratch, bool) or not isinstance(scratch, int) or scratch < 0:
        raise InputError(f"{source}: scratch_chunks must be an integer >= 0, "
                         f"got {shown(scratch)}")
    metadata = data.get("metadata", {})
    try:
        return Schedule(collective, tuple(transfers), scratch, bool(data.get("in_place", False)),
                        str(data.get("name", "")), metadata if isinstance(metadata, dict) else {})
    except InputError as error:
        raise type(error)(f"{source}: {error}") from None


def _check_root(kind: Kind, ranks: int, root: int, peer: int) -> None:
    """A root and peer that are ranks, given only where the collective has them (the file
    says ``root: 99``: silently reading it as 0 hid a broken file)."""
    if kind.is_rooted and not 0 <= root < ranks:
        raise InputError(f"root {root} is not a rank (0..{ranks - 1}); give the rank that "
                         f"{'sends' if kind is Kind.SENDRECV else 'is the root'}")
    if not kind.is_rooted and root != 0:
        raise InputError(f"{kind.value} has no root, but root is {root}; leave 'root' out "
                         "(or 0)")
    if kind is not Kind.SENDRECV and peer != 0:
        raise InputError(f"{kind.value} has no peer, but peer is {peer}; leave 'peer' out "
                         "(only sendrecv has one)")


def _check_row(t: Transfer, where: str) -> None:
    """What a transfer row must hold beyond its types: a channel NCCL has (0 ..
    :data:`MAX_CHANNELS` - 1) and a route of distinct fabric node names."""
    if not 0 <= t.channel < MAX_CHANNELS:
        raise InputError(f"{where}: channel {t.channel} is not a channel; channels are "
                         f"0..{MAX_CHANNELS - 1} (NCCL's MAXCHANNELS)")
    if t.via is not None:
        if not all(t.via):
            raise InputError(f"{where}: via {shown(list(t.via), 80)} names an empty node; "
                             "name the fabric nodes the route passes, in order")
        if len(set(t.via)) != len(t.via):
            raise InputError(f"{where}: via {shown(list(t.via), 80)} passes a node twice; a "
                             "route visits each fabric node once")
        if t.src == t.dst:
            raise InputError(f"{where}: a local transfer (src == dst == {t.src}) has no route; "
                             "drop its via")


TRANSFER_FIELDS = ("src", "dst", "src_buffer", "src_index", "dst_buffer", "dst_index",
                   "count", "op", "deps", "channel", "via")
"""The names of a transfer row's elements, in :func:`to_dict`'s order."""


def _field_order(header: object, source: str) -> tuple[list[int] | None, int | None]:
    """Where each of :data:`TRANSFER_FIELDS` sits in a row under ``header`` (the file's
    ``transfer_fields``), and where ``via`` sits; ``(None, None)`` for the usual order."""
    if header is None or header in (list(TRANSFER_FIELDS), list(TRANSFER_FIELDS[:10])):
        return None, None
    known = set(TRANSFER_FIELDS)
    if not isinstance(header, list) or not all(isinstance(f, str) for f in header):
        raise InputError(f"{source}: field 'transfer_fields' must be a list of field names "
                         f"({', '.join(TRANSFER_FIELDS)}), got {shown(header)}")
    unknown = [f for f in header if f not in known]
    missing = [f for f in TRANSFER_FIELDS[:10] if f not in header]
    if unknown or missing or len(set(header)) != len(header):
        what = (f"unknown field {shown(unknown[0])}" if unknown else
                f"no {missing[0]!r}" if missing else "a field named twice")
        raise InputError(f"{source}: field 'transfer_fields' has {what}; it names each of "
                         f"{', '.join(TRANSFER_FIELDS)} once (via may be left out)")
    return ([header.index(f) for f in TRANSFER_FIELDS[:10]],
            header.index("via") if "via" in header else None)


def _canonical(row: object, order: list[int], via_at: int | None) -> list[object]:
    """A row under a reordered header, in :data:`TRANSFER_FIELDS` order; ``via`` may be
    null or, when it is the header's last field, left out."""
    if not isinstance(row, list):
        raise TypeError("a row is a list")
    width = len(order) + (via_at is not None)
    if len(row) != width and not (via_at == width - 1 and len(row) == width - 1):
        raise ValueError(f"a row has {width} elements")
    values = [row[i] for i in order]
    if via_at is not None and via_at < len(row) and row[via_at] is not None:
        values.append(row[via_at])
    return values


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def save(schedule: Schedule, path: str | Path) -> None:
    """Write ``schedule`` as JSON, atomically (a failed write keeps the old file), the
    transfers streamed in batches: at 25 million transfers the whole document as Python
    lists and one string would take about 7 GB more."""
    from ccweave import outfile

    outfile.write_with(path, lambda temp: _write(schedule, temp))


_ROWS_PER_WRITE = 65536


def _write(schedule: Schedule, path: Path) -> None:
    """:func:`to_dict`'s JSON (``transfers`` is its last key), written row batch by batch."""
    head = json.dumps(finite({**to_dict(replace(schedule, transfers=())), "transfers": []}),
                      separators=(",", ":"), allow_nan=False)
    assert head.endswith('"transfers":[]}')
    transfers = schedule.transfers
    with open(path, "w") as out:
        out.write(head[:-2])
        for start in range(0, len(transfers), _ROWS_PER_WRITE):
            batch = [_row(t) for t in transfers[start:start + _ROWS_PER_WRITE]]
            out.write(("," if start else "") + json.dumps(batch, separators=(",", ":"))[1:-1])
        out.write("]}\n")


def load(path: str | Path) -> Schedule:
    """Read a schedule JSON file; a missing or corrupted file is an ``InputError``."""
    from ccweave.jsonfile import read_json

    return from_dict(read_json(path, "make one with `ccweave synth`"), str(path))
