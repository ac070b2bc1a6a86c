"""MSCCL XML -> Schedule: every message becomes a transfer the verifier can prove.

The runtime's meaning is kept: a receive pairs with the send at the same place of the
same connection (FIFO); a step starts after its threadblock's previous step and its
dependencies. A message moves while its send step runs (the data goes into the
receiver's buffer, a send does not wait for the receive step), so it becomes a transfer
that waits on what the send step waited on, and everything after the send step waits for
it. It lands when the receive step runs, so it also waits for the accesses of its landing
slots that come before that step. rrc/rrcs with src != dst import as a local copy
src -> dst then the reduction; rrs imports as reducing into its src slot, as
msccl-tools means it (the slot is overwritten later).
"""

from __future__ import annotations

import bisect
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ccweave.collectives import Buffer
from ccweave.errors import InputError, LimitError
from ccweave.export import msccl_spec as spec
from ccweave.export.problems import Severity, XmlProblem, summary
from ccweave.export.xml_check import Analysis, analyze
from ccweave.export.xml_graph import AlgoGraph, StepRef
from ccweave.export.xml_lexer import lex_check
from ccweave.gc_pause import gc_paused
from ccweave.schedule import Op, Schedule, Transfer, topological_order

Slot = tuple[Buffer, int]


def read(path: str | Path) -> Schedule:
    """The schedule an MSCCL XML file describes; ``InputError`` names what is wrong."""
    from ccweave.infile import read_text

    return from_xml(read_text(path, "give an MSCCL XML algorithm"), str(path))


def from_xml(text: str, source: str = "<xml>") -> Schedule:
    """Like :func:`read`, from the file's text."""
    with gc_paused():  # an element, records and rows per step: no cycles among them
        root = parse_document(text, source)
        analysis = analyze(root)
        return from_analysis(analysis, source, [*lex_check(text), *analysis.problems])


def parse_document(text: str, source: str) -> ET.Element:
    """The root element. Text after it (program output printed into the file) is let
    through: :func:`lex_check` reports it, as the runtime's reader would refuse it."""
    parser = ET.XMLPullParser(events=("start", "end"))
    root: ET.Element | None = None
    closed = False
    try:
        parser.feed(text)
        for event, elem in parser.read_events():
            if event == "start" and root is None:
                root = elem
            elif event == "end" and elem is root:
                closed = True
        parser.close()
    except ET.ParseError as error:
        if not closed:
            raise InputError(f"{source}: not well-formed XML ({error})") from None
    if root is None:
        raise InputError(f"{source}: empty document; expected an MSCCL <algo> element")
    return root


def from_analysis(analysis: Analysis, source: str,
                  problems: list[XmlProblem] | None = None) -> Schedule:
    """Build the schedule of a checked algorithm; MALFORMED problems are an InputError."""
    problems = list(analysis.problems) if problems is None else problems
    bad = [p for p in problems if p.severity is Severity.MALFORMED]
    if bad or analysis.graph is None or analysis.collective is None:
        raise InputError(f"{source}: {summary(bad or problems)}")
    transfers = _Builder(analysis, analysis.graph).build()
    try:
        topological_order(transfers)
    except InputError:
        raise InputError(f"{source}: relies on MSCCL buffering a send while its slot is "
                         "overwritten in a way a ccweave schedule cannot express (two "
                         "transfers each overwrite what the other still reads, as in a "
                         "swap through one slot); stage one side through scratch") from None
    algo = analysis.algo
    assert algo is not None
    warnings = [str(p) for p in problems if p.severity is Severity.RUNTIME]
    metadata: dict[str, object] = {"source": source, "format": "msccl-xml",
                                   "proto": algo.proto, "nchannels": algo.nchannels}
    if warnings:
        metadata["msccl_runtime_problems"] = warnings
    return Schedule(analysis.collective, transfers,
                    max((gpu.s_chunks for gpu in algo.gpus), default=0),
                    algo.inplace == 1, algo.name, metadata)


@dataclass
class _Row:
    """A transfer being built (deps grow until the end), with the steps that read its
    source and write its destination."""

    src: int
    dst: int
    source: Slot
    target: Slot
    count: int
    op: Op
    deps: set[int]
    channel: int
    read_at: StepRef
    write_at: StepRef

    def freeze(self) -> Transfer:
        return Transfer(self.src, self.dst, *self.source, *self.target, self.count, self.op,
                        tuple(sorted(self.deps)), self.channel)


_Done = dict[int, tuple[int, tuple[int, ...]]]
"""What a step leaves done, compactly: per threadblock (column) where transfers were
made, the latest step position there and the transfers made at it. A transfer waits on
everything before the step that made it, so the latest one per threadblock stands for
the earlier ones: a set never outgrows the threadblocks (a chain of receives would
otherwise gather every message before it)."""


class _Builder:
    """Walks the steps in a deadlock-free order; a message becomes a transfer at its
    send step, and its receive step waits for it."""

    def __init__(self, analysis: Analysis, graph: AlgoGraph) -> None:
        self.graph = graph
        self.coll = analysis.collective
        self.in_place = analysis.algo is not None and analysis.algo.inplace == 1
        self.rows: list[_Row] = []
        self.column = {key: number for number, key in enumerate(graph.tbs)}
        self.done: dict[StepRef, _Done] = {}
        self.incoming: dict[StepRef, int] = {}  # receiving step -> its transfer
        self.target = {send: recv for recv, send in graph.source.items()}
        self.preds = {ref: (*graph.waits[ref], graph.source[ref]) if ref in graph.source
                      else graph.waits[ref] for ref in graph.order}

    def build(self) -> tuple[Transfer, ...]:
        pending = self._successors()
        for ref in self.graph.order:
            self._step(ref)
            for before in self.preds[ref]:  # a step's done set serves its successors only
                pending[before] -= 1
                if not pending[before]:
                    del self.done[before]
        self._receiver_conflicts()
        return tuple(row.freeze() for row in self.rows)

    def _successors(self) -> dict[StepRef, int]:
        """Steps after each step (its waiters and, for a send, its receive)."""
        pending = dict.fromkeys(self.graph.order, 0)
        for before in self.preds.values():
            for p in before:
                pending[p] += 1
        return pending

    def _add(self, row: _Row) -> int:
        self.rows.append(row)
        return len(self.rows) - 1

    def _made(self, index: int) -> _Done:
        """The done set of one transfer, at the step that made it."""
        at = self.rows[index].read_at
        return {self.column[at[:2]]: (at[2], (index,))}

    def _step(self, ref: StepRef) -> None:
        g, t, _ = ref
        st = self.graph.step(ref)
        kind = spec.STEP_TYPES[st.type]
        chan = self.graph.tbs[(g, t)].chan
        start: _Done = {}
        for before in self.graph.waits[ref]:
            _merge(start, self.done[before])
        after = _indices(start)
        src, dst = _slot(st.srcbuf, st.srcoff), _slot(st.dstbuf, st.dstoff)
        done = dict(start)
        if kind.is_local:
            op = Op.REDUCE if kind.reduces else Op.COPY
            done = self._made(self._add(_Row(g, g, src, dst, st.cnt, op, set(after), chan, ref,
                                             ref)))
        if kind.receives:
            arrived = self.incoming[ref]
            if kind.code in ("rrc", "rrcs") and self._key(g, src) != self._key(g, dst):
                copy = self._add(_Row(g, g, src, dst, st.cnt, Op.COPY, set(after), chan, ref,
                                      ref))
                self.rows[arrived].deps.add(copy)
                _merge(done, self._made(copy))
            _merge(done, self._made(arrived))
        if kind.sends:
            receiver = self.target[ref]
            got = self.graph.step(receiver)
            got_kind = spec.STEP_TYPES[got.type]
            origin = dst if kind.writes_dst else src
            landing = _slot(got.srcbuf, got.srcoff) if got.type == "rrs" else \
                _slot(got.dstbuf, got.dstoff)
            op = Op.REDUCE if got_kind.reduces else Op.COPY
            sent = self._add(_Row(g, receiver[0], origin, landing, st.cnt, op, _indices(done),
                                  chan, ref, receiver))
            self.incoming[receiver] = sent
            done = self._made(sent)
        self.done[ref] = done

    def _key(self, rank: int, slot: Slot) -> Slot:
        if self.in_place and self.coll is not None:
            return self.coll.in_place_alias(rank, *slot)
        return slot

    def _slots(self, rank: int, start: Slot, count: int) -> list[tuple[int, Slot]]:
        return [(rank, self._key(rank, (start[0], start[1] + k))) for k in range(count)]

    def _receiver_conflicts(self) -> None:
        """A message lands when its receive step runs: it waits for the accesses to the
        slots it lands in by the steps that come before that step (the schedule IR writes
        when the transfer runs).

        Linear in the steps: the steps before a step are a prefix of each threadblock
        (a vector clock, kept only while a later step still needs it), and of the
        accesses to a slot in one threadblock the last before that prefix's end is
        enough: it already waits on the earlier ones."""
        graph, column, preds = self.graph, self.column, self.preds
        width = len(column)
        accesses = self._accesses(column)
        arriving = {row.write_at: index for index, row in enumerate(self.rows)
                    if row.read_at != row.write_at}
        pending = self._successors()  # successors not yet visited
        clocks: dict[StepRef, np.ndarray] = {}
        for ref in graph.order:
            if len(clocks) * width > _MAX_CLOCK_ENTRIES:
                raise LimitError(f"the steps' dependency graph is too wide to import: "
                                 f"{len(clocks):,} steps x {width:,} threadblocks of "
                                 f"bookkeeping at once, over the limit of "
                                 f"{_MAX_CLOCK_ENTRIES:,}")
            clock = np.full(width, -1, dtype=np.int64)
            for p in preds[ref]:
                np.maximum(clock, clocks[p], out=clock)
            if ref in arriving:
                self._wait_for_landing(arriving[ref], clock, column, accesses)
            clock[column[ref[:2]]] = ref[2]
            clocks[ref] = clock
            for p in preds[ref]:
                pending[p] -= 1
                if not pending[p]:
                    del clocks[p]

    def _accesses(self, column: dict[tuple[int, int], int]
                  ) -> dict[tuple[int, Slot], dict[int, tuple[list[int], list[list[int]]]]]:
        """Slot -> threadblock column -> (step positions, ascending; the rows that access
        the slot at each)."""
        found: dict[tuple[int, Slot], dict[int, dict[int, list[int]]]] = defaultdict(
            lambda: defaultdict(dict))
        for index, row in enumerate(self.rows):
            for rank, start, at in ((row.src, row.source, row.read_at),
                                    (row.dst, row.target, row.write_at)):
                for key in self._slots(rank, start, row.count):
                    found[key][column[at[:2]]].setdefault(at[2], []).append(index)
        table = {}
        for key, by_tb in found.items():
            table[key] = {tb: (sorted(at), [at[p] for p in sorted(at)])
                          for tb, at in by_tb.items()}
        return table

    def _wait_for_landing(self, index: int, clock: np.ndarray,
                          column: dict[tuple[int, int], int], accesses: dict) -> None:
        """Make message ``index`` wait for the last access to each of its landing slots
        in every threadblock, among the steps before its receive step (``clock``)."""
        row = self.rows[index]
        for key in self._slots(row.dst, row.target, row.count):
            for tb, (positions, rows) in accesses.get(key, {}).items():
                k = bisect.bisect_right(positions, int(clock[tb])) - 1
                while k >= 0:
                    others = [other for other in rows[k] if other != index]
                    if others:
                        row.deps.update(others)
                        break
                    k -= 1


_MAX_CLOCK_ENTRIES = 2**26
"""Vector-clock entries held at once while importing (int64: 512 MiB)."""


def _merge(into: _Done, other: _Done) -> None:
    """Add ``other`` to ``into``, keeping the latest step per threadblock."""
    for column, (position, made) in other.items():
        mine = into.get(column)
        if mine is None or position > mine[0]:
            into[column] = (position, made)
        elif position == mine[0] and made != mine[1]:
            into[column] = (position, tuple(sorted({*mine[1], *made})))


def _indices(done: _Done) -> set[int]:
    return {index for _, made in done.values() for index in made}


def _slot(code: str, offset: int) -> Slot:
    return spec.CODE_BUFFER[code], offset
