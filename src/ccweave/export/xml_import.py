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

import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ccweave.collectives import Buffer
from ccweave.errors import InputError
from ccweave.export import msccl_spec as spec
from ccweave.export.problems import Severity, XmlProblem, summary
from ccweave.export.xml_check import Analysis, analyze
from ccweave.export.xml_graph import AlgoGraph, StepRef
from ccweave.export.xml_lexer import lex_check
from ccweave.schedule import Op, Schedule, Transfer, topological_order

Slot = tuple[Buffer, int]


def read(path: str | Path) -> Schedule:
    """The schedule an MSCCL XML file describes; ``InputError`` names what is wrong."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read it ({error})") from None
    return from_xml(text, str(path))


def from_xml(text: str, source: str = "<xml>") -> Schedule:
    """Like :func:`read`, from the file's text."""
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


class _Builder:
    """Walks the steps in a deadlock-free order; a message becomes a transfer at its
    send step, and its receive step waits for it."""

    def __init__(self, analysis: Analysis, graph: AlgoGraph) -> None:
        self.graph = graph
        self.coll = analysis.collective
        self.in_place = analysis.algo is not None and analysis.algo.inplace == 1
        self.rows: list[_Row] = []
        self.done: dict[StepRef, frozenset[int]] = {}
        self.incoming: dict[StepRef, int] = {}  # receiving step -> its transfer
        self.target = {send: recv for recv, send in graph.source.items()}

    def build(self) -> tuple[Transfer, ...]:
        for ref in self.graph.order:
            self._step(ref)
        self._receiver_conflicts()
        return tuple(row.freeze() for row in self.rows)

    def _add(self, row: _Row) -> int:
        self.rows.append(row)
        return len(self.rows) - 1

    def _step(self, ref: StepRef) -> None:
        g, t, _ = ref
        st = self.graph.step(ref)
        kind = spec.STEP_TYPES[st.type]
        chan = self.graph.tbs[(g, t)].chan
        start: set[int] = set()
        for before in self.graph.waits[ref]:
            start |= self.done[before]
        src, dst = _slot(st.srcbuf, st.srcoff), _slot(st.dstbuf, st.dstoff)
        done = set(start)
        if kind.is_local:
            op = Op.REDUCE if kind.reduces else Op.COPY
            done = {self._add(_Row(g, g, src, dst, st.cnt, op, set(start), chan, ref, ref))}
        if kind.receives:
            arrived = self.incoming[ref]
            if kind.code in ("rrc", "rrcs") and self._key(g, src) != self._key(g, dst):
                copy = self._add(_Row(g, g, src, dst, st.cnt, Op.COPY, set(start), chan, ref,
                                      ref))
                self.rows[arrived].deps.add(copy)
                done.add(copy)
            done.add(arrived)
        if kind.sends:
            receiver = self.target[ref]
            got = self.graph.step(receiver)
            got_kind = spec.STEP_TYPES[got.type]
            origin = dst if kind.writes_dst else src
            landing = _slot(got.srcbuf, got.srcoff) if got.type == "rrs" else \
                _slot(got.dstbuf, got.dstoff)
            op = Op.REDUCE if got_kind.reduces else Op.COPY
            sent = self._add(_Row(g, receiver[0], origin, landing, st.cnt, op, set(done), chan,
                                  ref, receiver))
            self.incoming[receiver] = sent
            done = {sent}
        self.done[ref] = frozenset(done)

    def _key(self, rank: int, slot: Slot) -> Slot:
        if self.in_place and self.coll is not None:
            return self.coll.in_place_alias(rank, *slot)
        return slot

    def _slots(self, rank: int, start: Slot, count: int) -> list[tuple[int, Slot]]:
        return [(rank, self._key(rank, (start[0], start[1] + k))) for k in range(count)]

    def _receiver_conflicts(self) -> None:
        """A message lands when its receive step runs: it waits for every access to the
        slots it lands in that the receive step comes after (the schedule IR writes when
        the transfer runs)."""
        position = {ref: i for i, ref in enumerate(self.graph.order)}
        ancestors: dict[StepRef, int] = {}
        for ref in self.graph.order:
            mask = 0
            preds = self.graph.waits[ref]
            if ref in self.graph.source:
                preds = (*preds, self.graph.source[ref])
            for p in preds:
                mask |= ancestors[p] | (1 << position[p])
            ancestors[ref] = mask
        accesses: dict[tuple[int, Slot], list[tuple[int, StepRef]]] = defaultdict(list)
        for index, row in enumerate(self.rows):
            for key in self._slots(row.src, row.source, row.count):
                accesses[key].append((index, row.read_at))
            for key in self._slots(row.dst, row.target, row.count):
                accesses[key].append((index, row.write_at))
        for index, row in enumerate(self.rows):
            if row.read_at == row.write_at:
                continue
            before = ancestors[row.write_at]
            for key in self._slots(row.dst, row.target, row.count):
                for other, at in accesses[key]:
                    if other != index and at != row.write_at and before >> position[at] & 1:
                        row.deps.add(other)


def _slot(code: str, offset: int) -> Slot:
    return spec.CODE_BUFFER[code], offset
