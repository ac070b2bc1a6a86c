"""Symbolic proof that a schedule implements its collective.

The transfers run on contribution sets (packed ints, see :mod:`ccweave.collectives`) in a
dependency order; besides the postcondition, every access must be ordered by the deps
alone, so a schedule that is right only under one lucky interleaving is a race, and the
verifier names it (like msccl-tools' ``Check()``, plus races and double counting).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral

from ccweave.collectives import Buffer
from ccweave.errors import InputError, TopologyError, VerificationError
from ccweave.schedule import MAX_CHANNELS, Op, Schedule, Transfer, topological_order
from ccweave.topology.model import Topology

MAX_PROBLEMS = 20
"""``check`` stops after this many problems: the first few say what is wrong."""

_PRECISE_SLOTS = 2**20
"""Up to this many buffer slots the transfers are always run (problems name each slot);
above, a schedule that cannot write enough output slots is refused before the run."""

_INITIAL = -1
"""Writer of a slot that holds (or lacks) its initial value: ordered before everything."""


class ProblemKind(str, enum.Enum):
    """What is wrong with a schedule."""

    OUT_OF_RANGE = "out_of_range"
    BAD_RANK = "bad_rank"
    BAD_COUNT = "bad_count"
    BAD_CHANNEL = "bad_channel"
    DANGLING_DEP = "dangling_dep"
    CYCLE = "cycle"
    UNDEFINED_READ = "undefined_read"
    RACE_READ = "race_read"
    RACE_WRITE = "race_write"
    DUPLICATE_CONTRIBUTION = "duplicate_contribution"
    MIXED_CHUNKS = "mixed_chunks"
    REDUCE_INTO_UNDEFINED = "reduce_into_undefined"
    WRONG_OUTPUT = "wrong_output"
    MISSING_OUTPUT = "missing_output"
    NO_ROUTE = "no_route"


_MALFORMED = frozenset({ProblemKind.OUT_OF_RANGE, ProblemKind.BAD_RANK, ProblemKind.BAD_COUNT,
                        ProblemKind.BAD_CHANNEL, ProblemKind.DANGLING_DEP, ProblemKind.CYCLE,
                        ProblemKind.NO_ROUTE})


@dataclass(frozen=True)
class Problem:
    """One thing wrong, with the transfer and the slot (as the transfer names it) involved."""

    kind: ProblemKind
    message: str
    transfer: int | None = None
    rank: int | None = None
    buffer: Buffer | None = None
    index: int | None = None


@dataclass(frozen=True)
class VerifyResult:
    """The verdict: ``ok`` and the first problems, with counts of what was checked.

    ``transfers``/``reductions`` count the schedule's; ``outputs`` the output slots shown
    to hold exactly their postcondition; ``truncated`` says checking stopped at
    :data:`MAX_PROBLEMS`.
    """

    ok: bool
    problems: tuple[Problem, ...] = ()
    transfers: int = 0
    reductions: int = 0
    outputs: int = 0
    truncated: bool = False

    @property
    def malformed(self) -> bool:
        """Whether a problem makes the schedule unrunnable (a rank, slot or dependency
        that does not exist, a cycle, a missing route), not just wrong: nothing can
        simulate, export or run it even unverified."""
        return any(p.kind in _MALFORMED for p in self.problems)

    def summary(self) -> str:
        """One line for people."""
        if self.ok:
            return (f"verified: {self.transfers} transfers ({self.reductions} reductions), "
                    f"{self.outputs} output slots hold their postcondition, no races")
        more = "+" if self.truncated else ""
        return f"{len(self.problems)}{more} problem(s); first: {self.problems[0].message}"


def check(schedule: Schedule, topology: Topology | None = None) -> VerifyResult:
    """Prove that ``schedule`` implements its collective, or list what is wrong.

    Parameters
    ----------
    schedule: the schedule to prove.
    topology: when given, its rank count must match and every remote transfer needs a
        route (:meth:`Topology.has_route`).

    Returns
    -------
    A :class:`VerifyResult`; ``ok`` is true when no problem was found.
    """
    report = _Report()
    outputs = 0
    try:
        _check_transfers(schedule, report)
        malformed = bool(report.problems)  # cannot run those; a missing route can run
        if topology is not None:
            _check_topology(schedule, topology, report)
        if not malformed:
            malformed = not _can_cover(schedule, report)
        order = None if malformed else _order(schedule.transfers, report)
        if order is not None:
            run = _Run(schedule, order, report)
            run.execute()
            outputs = run.check_outputs()
    except _Full:
        pass
    return VerifyResult(not report.problems, tuple(report.problems), len(schedule.transfers),
                        sum(t.op == Op.REDUCE for t in schedule.transfers), outputs,
                        report.truncated)


def verify(schedule: Schedule, topology: Topology | None = None) -> VerifyResult:
    """Like :func:`check`, but raise ``VerificationError`` unless ok.

    The error's message is the first problem's (the CLI prints it as one line).
    """
    result = check(schedule, topology)
    if not result.ok:
        more = len(result.problems) - 1
        suffix = f" (and {more}{'+' if result.truncated else ''} more problem(s))" if more else ""
        raise VerificationError(result.problems[0].message + suffix)
    return result


# ----------------------------------------------------------------- reporting


class _Full(Exception):
    """Raised internally once :data:`MAX_PROBLEMS` problems are recorded."""


class _Report:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.truncated = False

    def add(self, kind: ProblemKind, message: str, transfer: int | None = None,
            rank: int | None = None, buffer: Buffer | None = None,
            index: int | None = None) -> None:
        if len(self.problems) >= MAX_PROBLEMS:
            self.truncated = True
            raise _Full
        self.problems.append(Problem(kind, message, transfer, rank, buffer, index))


def _name(index: int, transfers: Sequence[Transfer]) -> str:
    """``transfer 17 (1 -> 2, reduce)``, or ``the initial input`` for the initial writer."""
    if index == _INITIAL:
        return "the initial input"
    t = transfers[index]
    return f"transfer {index} ({t.src} -> {t.dst}, {getattr(t.op, 'value', t.op)})"


def _slot(rank: int, buffer: Buffer, index: int) -> str:
    return f"{Buffer(buffer).value} slot {index} of rank {rank}"


def format_contributions(value: int, index_bits: int, limit: int = 6) -> str:
    """A packed contribution set as ``{(rank, input index), ...}``, abbreviated past
    ``limit``."""
    index = value & ((1 << index_bits) - 1)
    ranks = value >> index_bits
    pairs = []
    rest = ranks
    while rest and len(pairs) < limit:
        low = rest & -rest
        pairs.append(f"({low.bit_length() - 1}, {index})")
        rest ^= low
    total = ranks.bit_count()
    tail = f", ... {total} in all" if total > len(pairs) else ""
    return "{" + ", ".join(pairs) + tail + "}"


# ------------------------------------------------------------- static checks


def _check_transfers(schedule: Schedule, report: _Report) -> None:
    """Ranks, counts, buffer ranges and dependency indices of every transfer."""
    sizes = {buffer: schedule.buffer_chunks(buffer) for buffer in Buffer}
    for index, t in enumerate(schedule.transfers):
        if not _well_formed(t, schedule.num_ranks, sizes, len(schedule.transfers)):
            _explain_transfer(schedule, index, t, report)


def _well_formed(t: Transfer, n: int, sizes: dict[Buffer, int], total: int) -> bool:
    """The fast test; whatever fails it is explained by :func:`_explain_transfer`."""
    try:
        return (0 <= t.src < n and 0 <= t.dst < n and t.count >= 1
                and t.src_index >= 0 and t.src_index + t.count <= sizes[t.src_buffer]
                and t.dst_index >= 0 and t.dst_index + t.count <= sizes[t.dst_buffer]
                and (not t.deps or (min(t.deps) >= 0 and max(t.deps) < total))
                and type(t.channel) is int and 0 <= t.channel < MAX_CHANNELS
                and type(t.src) is type(t.dst) is type(t.count) is int
                and type(t.src_index) is type(t.dst_index) is int
                and all(type(dep) is int for dep in t.deps))
    except (TypeError, KeyError):
        return False


def _integer(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _explain_transfer(schedule: Schedule, index: int, t: Transfer, report: _Report) -> None:
    """Report what is malformed in transfer ``index``."""
    transfers = schedule.transfers
    _check_ranks(schedule, index, t, report)
    if not _integer(t.count) or t.count < 1:
        report.add(ProblemKind.BAD_COUNT, f"{_name(index, transfers)} moves {t.count!r} "
                   "chunks; count must be an integer >= 1", index, t.dst)
    else:
        _check_range(schedule, index, t, "reads", t.src, t.src_buffer, t.src_index, report)
        _check_range(schedule, index, t, "writes", t.dst, t.dst_buffer, t.dst_index, report)
    if not (_integer(t.channel) and 0 <= t.channel < MAX_CHANNELS):
        report.add(ProblemKind.BAD_CHANNEL, f"{_name(index, transfers)} is on channel "
                   f"{t.channel!r}; channels are 0..{MAX_CHANNELS - 1} (NCCL's MAXCHANNELS)",
                   index, t.dst)
    for dep in t.deps:
        if not (_integer(dep) and 0 <= dep < len(transfers)):
            report.add(ProblemKind.DANGLING_DEP,
                       f"{_name(index, transfers)} depends on transfer {dep!r}, which does "
                       f"not exist (the schedule has {len(transfers)} transfers)",
                       index, t.dst)


def _check_ranks(schedule: Schedule, index: int, t: Transfer, report: _Report) -> None:
    n = schedule.num_ranks
    for role, rank in (("source", t.src), ("destination", t.dst)):
        if not (_integer(rank) and 0 <= rank < n):
            report.add(ProblemKind.BAD_RANK,
                       f"transfer {index}: {role} rank {rank!r} is not a rank of the "
                       f"{schedule.collective.describe()} (0..{n - 1})", index, rank)


def _check_range(schedule: Schedule, index: int, t: Transfer, verb: str, rank: int,
                 buffer: Buffer, start: int, report: _Report) -> None:
    try:
        buffer = Buffer(buffer)
    except ValueError:
        report.add(ProblemKind.OUT_OF_RANGE, f"{_name(index, schedule.transfers)} {verb} "
                   f"unknown buffer {buffer!r}; use input, output or scratch", index, rank)
        return
    size = schedule.buffer_chunks(buffer)
    if _integer(start) and start >= 0 and start + t.count <= size:
        return
    fix = "; raise scratch_chunks" if buffer is Buffer.SCRATCH else ""
    report.add(ProblemKind.OUT_OF_RANGE,
               f"{_name(index, schedule.transfers)} {verb} {buffer.value} slots "
               f"{start}..{start + t.count - 1} of rank {rank}, but the {buffer.value} buffer "
               f"has {size} chunk(s){fix}", index, rank, buffer, start)


def _can_cover(schedule: Schedule, report: _Report) -> bool:
    """Whether the transfers write enough slots to fill the outputs at all: a cheap bound
    checked before a slot table for every rank is made (a small file that declares a
    large collective is refused at once, not after allocating for all its slots)."""
    coll = schedule.collective
    slots = coll.num_ranks * (coll.input_chunks + coll.output_chunks + schedule.scratch_chunks)
    if slots <= _PRECISE_SLOTS:  # small enough: the run names each slot that is missed
        return True
    ranks = range(coll.num_ranks)
    need = sum(coll.output_chunks for rank in ranks if coll.has_output(rank))
    if schedule.in_place:  # an output slot aliasing an input may hold its value already
        need -= sum(coll.input_chunks for rank in ranks if coll.has_input(rank))
    written = sum(t.count for t in schedule.transfers if t.dst_buffer != Buffer.SCRATCH)
    if written >= need:
        return True
    report.add(ProblemKind.MISSING_OUTPUT,
               f"the transfers write at most {written:,} output slot(s), but the "
               f"{coll.describe()} needs at least {need:,} written; most outputs are never "
               "written")
    return False


def _check_topology(schedule: Schedule, topology: Topology, report: _Report) -> None:
    """The rank counts agree and every remote transfer has a route that avoids other ranks."""
    if topology.num_ranks != schedule.num_ranks:
        report.add(ProblemKind.BAD_RANK,
                   f"the schedule is for {schedule.num_ranks} ranks but topology "
                   f"{topology.name!r} has {topology.num_ranks}; synthesize it for this topology")
        return
    routed: dict[tuple[int, int], bool] = {}
    pinned: set[tuple[int, int, tuple[str, ...]]] = set()
    for index, t in enumerate(schedule.transfers):
        pair = (t.src, t.dst)
        if t.src == t.dst or not all(map(topology.is_rank, pair)):
            continue
        if t.via is not None:
            if (*pair, t.via) not in pinned:
                pinned.add((*pair, t.via))
                try:
                    topology.route_via(t.src, t.dst, t.via)
                except TopologyError as error:
                    report.add(ProblemKind.NO_ROUTE,
                               f"{_name(index, schedule.transfers)}: {error}", index, t.dst)
            continue
        if pair in routed:
            continue
        routed[pair] = topology.has_route(*pair)
        if not routed[pair]:
            report.add(ProblemKind.NO_ROUTE,
                       f"{_name(index, schedule.transfers)}: topology {topology.name!r} has no "
                       f"route from rank {t.src} to rank {t.dst} that avoids other ranks; relay "
                       "through a rank with explicit transfers", index, t.dst)


def _order(transfers: Sequence[Transfer], report: _Report) -> list[int] | None:
    """Execution order: index order when it is already topological (as ScheduleBuilder
    emits), so problems come in the order the strategy wrote them; else Kahn's order."""
    if all(not t.deps or max(t.deps) < index for index, t in enumerate(transfers)):
        return list(range(len(transfers)))
    try:
        return topological_order(transfers)
    except InputError:
        cycle = _find_cycle(transfers)
        path = " -> ".join(str(i) for i in [*cycle, cycle[0]])
        report.add(ProblemKind.CYCLE,
                   f"the dependencies form a cycle: transfers {path} each wait on the one "
                   "before, so none of them can start; drop one of those deps",
                   cycle[0], transfers[cycle[0]].dst)
        return None


def _find_cycle(transfers: Sequence[Transfer]) -> list[int]:
    """Transfer indices on one dependency cycle, each depending on the one before."""
    import networkx as nx

    graph = nx.DiGraph((dep, index) for index, t in enumerate(transfers) for dep in t.deps)
    return [edge[0] for edge in nx.find_cycle(graph)]


# --------------------------------------------------------------- execution


class _Slots:
    """Flat storage ids for (rank, buffer, index), through the in-place alias if any."""

    def __init__(self, schedule: Schedule) -> None:
        coll = schedule.collective
        self.sizes = {b: schedule.buffer_chunks(b) for b in Buffer}
        self.base = {b: sum(self.sizes[o] for o in list(Buffer)[:i])
                     for i, b in enumerate(Buffer)}
        self.stride = sum(self.sizes.values())
        self.size = self.stride * schedule.num_ranks
        self.table: dict[tuple[int, Buffer], list[int]] = {}
        for rank in range(schedule.num_ranks):
            for buffer in Buffer:
                if schedule.in_place:
                    ids = [self._flat(rank, *coll.in_place_alias(rank, buffer, i))
                           for i in range(self.sizes[buffer])]
                else:
                    start = self._flat(rank, buffer, 0)
                    ids = list(range(start, start + self.sizes[buffer]))
                self.table[(rank, buffer)] = ids

    def _flat(self, rank: int, buffer: Buffer, index: int) -> int:
        return rank * self.stride + self.base[buffer] + index


class _Run:
    """Executes transfers on contribution masks and checks every access's ordering."""

    def __init__(self, schedule: Schedule, order: list[int], report: _Report) -> None:
        self.schedule = schedule
        self.transfers = schedule.transfers
        self.coll = schedule.collective
        self.order = order
        self.report = report
        self.position = [0] * len(order)
        for position, index in enumerate(order):
            self.position[index] = position
        self.slots = _Slots(schedule)
        self.value = [0] * self.slots.size
        self.writer = [_INITIAL] * self.slots.size
        self.readers: dict[int, list[int]] = {}
        """Slot -> transfers that read it since its last write (only slots that have some:
        an empty list per slot would cost ~1 GB at 1024 ranks)."""
        for (rank, i), mask in self.coll.precondition.items():
            self.value[self.slots.table[(rank, Buffer.INPUT)][i]] = mask
        self._seen_for = -1
        self._seen_floor = 0
        self._seen: set[int] = set()

    # ordering ------------------------------------------------------------

    def ordered(self, earlier: int, later: int) -> bool:
        """Whether transfer ``earlier`` happens before ``later`` through deps (transitively)."""
        if earlier == _INITIAL or earlier in self.transfers[later].deps:
            return True
        floor = self.position[earlier]
        if self._seen_for != later or self._seen_floor > floor:
            self._seen = self._ancestors(later, floor)
            self._seen_for, self._seen_floor = later, floor
        return earlier in self._seen

    def _ancestors(self, later: int, floor: int) -> set[int]:
        """Ancestors of ``later`` at order position >= ``floor`` (earlier ones cannot
        descend from a transfer at ``floor``, so the search stops there)."""
        seen: set[int] = set()
        stack = [later]
        position, transfers = self.position, self.transfers
        while stack:
            for dep in transfers[stack.pop()].deps:
                if dep not in seen and position[dep] >= floor:
                    seen.add(dep)
                    stack.append(dep)
        return seen

    # execution -----------------------------------------------------------

    def execute(self) -> None:
        for index in self.order:
            self._step(index)

    def _step(self, index: int) -> None:
        """Run one transfer: read every source, check the ordering of every access, then
        write (all reads come first, as memmove does). Problems go to the slow paths."""
        t = self.transfers[index]
        table, value, writer, readers = self.slots.table, self.value, self.writer, self.readers
        deps = t.deps
        sources = table[(t.src, t.src_buffer)][t.src_index:t.src_index + t.count]
        targets = table[(t.dst, t.dst_buffer)][t.dst_index:t.dst_index + t.count]
        values = [value[slot] for slot in sources]
        for k, slot in enumerate(sources):
            last = writer[slot]
            if not values[k] or (last >= 0 and last not in deps
                                 and not self.ordered(last, index)):
                self._bad_read(index, t, k, slot)
        for k, slot in enumerate(targets):
            last = writer[slot]
            if slot in readers or (last >= 0 and last != index and last not in deps):
                self._check_write(index, t, k, slot)
        for slot in sources:
            readers.setdefault(slot, []).append(index)
        if t.op == Op.REDUCE:
            for k, slot in enumerate(targets):
                self._reduce(index, t, k, slot, values[k])
        else:
            for slot, mask in zip(targets, values):
                value[slot] = mask
        for slot in targets:
            writer[slot] = index
            readers.pop(slot, None)

    def _bad_read(self, index: int, t: Transfer, k: int, slot: int) -> None:
        writer = self.writer[slot]
        if not self.value[slot]:
            why = "" if writer == _INITIAL else \
                f" ({_name(writer, self.transfers)} wrote undefined data there)"
            self._problem(ProblemKind.UNDEFINED_READ, index, t, k, False,
                          "which holds no data yet" + why)
        else:
            self._problem(ProblemKind.RACE_READ, index, t, k, False,
                          f"but its writer {_name(writer, self.transfers)} is not ordered "
                          "before it by deps; add that dep")

    def _check_write(self, index: int, t: Transfer, k: int, slot: int) -> None:
        """The write must come after the slot's last writer and every read since."""
        writer = self.writer[slot]
        if writer not in (_INITIAL, index) and not self.ordered(writer, index):
            self._problem(ProblemKind.RACE_WRITE, index, t, k, True,
                          f"but {_name(writer, self.transfers)} also writes it and is not "
                          "ordered before it by deps; add that dep")
        for reader in self.readers.get(slot, ()):
            if reader != index and not self.ordered(reader, index):
                self._problem(ProblemKind.RACE_READ, index, t, k, True,
                              f"but {_name(reader, self.transfers)} reads it and is not "
                              "ordered before it by deps (write after read); add that dep")
                break

    def _reduce(self, index: int, t: Transfer, k: int, slot: int, mask: int) -> None:
        """Add ``mask`` into the slot: it must hold data, and none of ``mask`` yet."""
        old = self.value[slot]
        bits = self.coll.index_bits
        low = (1 << bits) - 1
        if mask and not old:
            self._problem(ProblemKind.REDUCE_INTO_UNDEFINED, index, t, k, True,
                          "which holds no data yet; copy into it first")
        elif mask and (old ^ mask) & low:
            self._problem(ProblemKind.MIXED_CHUNKS, index, t, k, True,
                          f"adding input chunk {mask & low} to input chunk {old & low}; a "
                          "reduction sums one chunk index across ranks")
            return
        elif (old & mask) >> bits:
            twice = format_contributions(old & mask, bits)
            self._problem(ProblemKind.DUPLICATE_CONTRIBUTION, index, t, k, True,
                          f"which already holds contributions {twice}; they would be "
                          "counted twice")
        self.value[slot] = old | mask

    def _problem(self, kind: ProblemKind, index: int, t: Transfer, k: int, write: bool,
                 detail: str) -> None:
        rank, buffer, start = ((t.dst, t.dst_buffer, t.dst_index) if write
                               else (t.src, t.src_buffer, t.src_index))
        verb = ("reduces into" if t.op == Op.REDUCE else "writes") if write else "reads"
        self.report.add(kind, f"{_name(index, self.transfers)} {verb} "
                        f"{_slot(rank, buffer, start + k)}, {detail}",
                        index, rank, Buffer(buffer), start + k)

    # postcondition -------------------------------------------------------

    def check_outputs(self) -> int:
        """Check that every output slot holds exactly what the collective needs; return how
        many do."""
        proven = 0
        for (rank, j), need in self.coll.postcondition.items():
            slot = self.slots.table[(rank, Buffer.OUTPUT)][j]
            if self.value[slot] == need:
                proven += 1
            else:
                self._bad_output(rank, j, slot, need)
        return proven

    def _bad_output(self, rank: int, j: int, slot: int, need: int) -> None:
        got, writer = self.value[slot], self.writer[slot]
        chunks = self.coll.index_bits
        where = f"output slot {j} of rank {rank}"
        needs = f"{self.coll.kind.value} needs {format_contributions(need, chunks)}"
        culprit = None if writer == _INITIAL else writer
        if not got:
            last = "was never written" if culprit is None else \
                f"holds no data (last written by {_name(writer, self.transfers)})"
            self.report.add(ProblemKind.MISSING_OUTPUT, f"{where} {last}, but {needs}",
                            culprit, rank, Buffer.OUTPUT, j)
            return
        diff = _difference(need, got, chunks)
        self.report.add(ProblemKind.WRONG_OUTPUT,
                        f"{where} holds contributions {format_contributions(got, chunks)} but "
                        f"{needs} ({diff}); last written by {_name(writer, self.transfers)}",
                        culprit, rank, Buffer.OUTPUT, j)


def _difference(need: int, got: int, index_bits: int) -> str:
    """What a slot lacks and has too many of, as people read it."""
    low = (1 << index_bits) - 1
    if (need ^ got) & low:
        return f"input chunk {got & low} instead of {need & low}"
    parts = []
    for label, ranks in (("missing", (need & ~got) >> index_bits),
                         ("extra", (got & ~need) >> index_bits)):
        if ranks:
            value = (ranks << index_bits) | (need & low)
            parts.append(f"{label} {format_contributions(value, index_bits)}")
    return "; ".join(parts)
