"""The MSCCL runtime parsers' rules and limits, checked on an XML algorithm.

``check_xml(tree)`` lists every problem by element and attribute: what the runtime's
parser (microsoft/msccl ``topo.cc``, the Azure executor's ``msccl_parser.cc``) would
refuse, what would hang it (a wait on a step that never signals, unmatched messages, a
cycle), and what ccweave cannot read. ``runtime`` adds the spellings and attributes one
runtime needs (Azure: minBytes, maxBytes, outofplace).
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass

from ccweave.collectives import Collective, Kind
from ccweave.errors import InputError
from ccweave.export import msccl_spec as spec
from ccweave.export.problems import Severity, XmlProblem, where
from ccweave.export.xml_graph import AlgoGraph, build_graph
from ccweave.export.xml_model import AlgoXml, GpuXml, StepXml, TbXml, parse_algo
from ccweave.schedule import MAX_CHANNELS

RUNTIME = Severity.RUNTIME


@dataclass(frozen=True)
class Analysis:
    """An algorithm as far as it could be read: its records, collective and step graph
    (``None`` where a MALFORMED problem stopped the reading), and every problem found."""

    algo: AlgoXml | None
    collective: Collective | None
    graph: AlgoGraph | None
    problems: tuple[XmlProblem, ...]

    @property
    def malformed(self) -> list[XmlProblem]:
        return [p for p in self.problems if p.severity is Severity.MALFORMED]


def check_xml(tree: ET.ElementTree | ET.Element,
              runtime: spec.Runtime | str | None = None) -> list[XmlProblem]:
    """Every problem of an MSCCL XML algorithm, MALFORMED ones first.

    Parameters
    ----------
    tree: the parsed file (``ET.parse(path)``) or its ``algo`` element.
    runtime: also apply one runtime's spellings and required attributes
        (``"msccl"`` or ``"azure"``); ``None`` checks what both share.
    """
    root = tree.getroot() if isinstance(tree, ET.ElementTree) else tree
    problems = analyze(root, runtime).problems
    return sorted(problems, key=lambda p: p.severity is not Severity.MALFORMED)


def analyze(root: ET.Element, runtime: spec.Runtime | str | None = None) -> Analysis:
    """Parse, check and order an ``algo`` element (what the importer builds from)."""
    runtime = None if runtime is None else spec.Runtime.parse(runtime)
    algo, problems = parse_algo(root)
    if algo is None:
        return Analysis(None, None, None, tuple(problems))
    collective = _collective(algo, runtime, problems)
    _algo_rules(algo, runtime, problems)
    if collective is not None:
        for gpu in algo.gpus:
            _gpu_rules(algo, collective, gpu, runtime, problems)
    if any(p.severity is Severity.MALFORMED for p in problems):
        return Analysis(algo, collective, None, tuple(problems))
    graph, more = build_graph(algo)
    problems.extend(more)
    return Analysis(algo, collective, graph, tuple(problems))


# ------------------------------------------------------------------ algo


def _collective(algo: AlgoXml, runtime: spec.Runtime | None,
                problems: list[XmlProblem]) -> Collective | None:
    """The collective ``coll`` (or ccweave's ``collective`` for custom) names."""
    name = algo.collective if algo.coll == spec.CUSTOM else algo.coll
    if name is None:
        problems.append(XmlProblem("algo", "coll=\"custom\" needs ccweave's attribute "
                                   "'collective' naming what it computes; a custom "
                                   "collective cannot be verified without it", "collective"))
        return None
    try:
        kind = Kind.parse(name)
    except InputError:
        known = sorted({*spec.COLL_NAMES[spec.Runtime.MSCCL].values(),
                        *spec.COLL_NAMES[spec.Runtime.AZURE].values()})
        problems.append(XmlProblem("algo", f"is {name!r}, not a collective ccweave knows "
                                   f"({', '.join(known)}, or custom with 'collective')",
                                   "collective" if algo.coll == spec.CUSTOM else "coll"))
        return None
    if runtime is not None:
        expected = spec.COLL_NAMES[runtime].get(kind, spec.CUSTOM)
        if algo.coll != expected:
            problems.append(XmlProblem("algo", f"is {algo.coll!r}; the {runtime.value} runtime "
                                       f"spells {kind.value} {expected!r}", "coll", RUNTIME))
    if algo.nchunksperloop > spec.MAX_CHUNKS:
        problems.append(XmlProblem("algo", f"is {algo.nchunksperloop}; MSCCL addresses "
                                   f"{spec.MAX_CHUNKS} chunks per buffer (int16 offsets)",
                                   "nchunksperloop"))
        return None
    if algo.ngpus < 1 or algo.nchunksperloop < 1 or algo.nchunksperloop % algo.ngpus:
        problems.append(XmlProblem("algo", f"nchunksperloop={algo.nchunksperloop} must be a "
                                   f"positive multiple of ngpus={algo.ngpus} (the largest "
                                   "buffer holds ngpus x chunks per rank)", "nchunksperloop"))
        return None
    try:
        return Collective(kind, algo.ngpus, algo.nchunksperloop // algo.ngpus,
                          algo.root or 0, algo.peer or 0)
    except InputError as error:
        problems.append(XmlProblem("algo", str(error), "root"))
        return None


def _algo_rules(algo: AlgoXml, runtime: spec.Runtime | None,
                problems: list[XmlProblem]) -> None:
    if algo.proto not in spec.PROTOCOLS:
        problems.append(XmlProblem("algo", f"is {algo.proto!r}; use one of "
                                   f"{', '.join(spec.PROTOCOLS)}", "proto", RUNTIME))
    for attr, value in (("inplace", algo.inplace), ("outofplace", algo.outofplace)):
        if value not in (None, 0, 1):
            problems.append(XmlProblem("algo", f"is {value}; use 0 or 1", attr))
    if not 1 <= algo.nchannels <= spec.MAX_CHANNELS:
        problems.append(XmlProblem("algo", f"is {algo.nchannels}; NCCL has 1..."
                                   f"{spec.MAX_CHANNELS} channels", "nchannels", RUNTIME))
    if runtime is spec.Runtime.AZURE:
        for attr, value in (("minBytes", algo.min_bytes), ("maxBytes", algo.max_bytes),
                            ("outofplace", algo.outofplace)):
            if value is None:
                problems.append(XmlProblem("algo", "is missing; the Azure executor requires "
                                           "it", attr, RUNTIME))
    low, high = algo.min_bytes, algo.max_bytes
    for attr, value in (("minBytes", low), ("maxBytes", high)):
        if value is not None and value < 0:
            problems.append(XmlProblem("algo", f"is {value}; a size in bytes is >= 0 (the "
                                       "runtime compares it with each call's size)", attr))
    if low is not None and high is not None and high and low > high:
        problems.append(XmlProblem("algo", f"is {low}, above maxBytes={high}: the algorithm "
                                   "serves no size; give minBytes <= maxBytes (maxBytes 0 on "
                                   "Azure, or leave it out: no upper end)", "minBytes"))
    ids = Counter(gpu.id for gpu in algo.gpus)
    for gid, count in ids.items():
        if count > 1:
            problems.append(XmlProblem(where(gid), f"appears {count} times", "id"))
        if not 0 <= gid < algo.ngpus:
            problems.append(XmlProblem(where(gid), f"is not a gpu of ngpus={algo.ngpus}", "id"))
    if len(ids) < algo.ngpus:
        missing = list(itertools.islice((g for g in range(algo.ngpus) if g not in ids), 5))
        problems.append(XmlProblem("algo", f"is {algo.ngpus} but gpu(s) {missing} have no "
                                   "<gpu> element", "ngpus"))


# ------------------------------------------------------------------ gpu and tb


def _gpu_rules(algo: AlgoXml, coll: Collective, gpu: GpuXml, runtime: spec.Runtime | None,
               problems: list[XmlProblem]) -> None:
    place = where(gpu.id)
    custom = algo.coll == spec.CUSTOM
    for attr, declared, needed, mult in (
            ("i_chunks", gpu.i_chunks, coll.input_chunks, 0),
            ("o_chunks", gpu.o_chunks, coll.output_chunks, 1)):
        allowed = {0, needed} | ({algo.nchunksperloop} if custom else set())
        if declared not in allowed:
            problems.append(XmlProblem(place, f"is {declared}, but {coll.describe()} has "
                                       f"{needed} chunk(s) there (0 when unused)", attr))
        elif declared and not custom and runtime is not spec.Runtime.AZURE:
            factor = spec.input_multiplier(coll.kind, coll.num_ranks)[mult]
            if declared * factor != algo.nchunksperloop:
                problems.append(XmlProblem(place, f"is {declared}, which microsoft/msccl "
                                           f"requires to be nchunksperloop/{factor}", attr,
                                           RUNTIME))
    if not 0 <= gpu.s_chunks <= spec.MAX_CHUNKS:
        problems.append(XmlProblem(place, f"is {gpu.s_chunks}; scratch holds 0.."
                                   f"{spec.MAX_CHUNKS} chunks (MSCCL's offsets are int16)",
                                   "s_chunks"))
    sizes = {"i": gpu.i_chunks, "o": gpu.o_chunks, "s": gpu.s_chunks}
    _tb_table(algo, gpu, problems)
    tb_ids = {tb.id: tb for tb in gpu.tbs}
    nodes = 1 + algo.ngpus + len(gpu.tbs)
    for tb in gpu.tbs:
        nodes += len(tb.steps)
        _tb_rules(algo, gpu, tb, tb_ids, sizes, problems)
    if nodes > spec.MAX_NODES:
        problems.append(XmlProblem(place, f"its part of the file has {nodes} elements; the "
                                   f"runtime's XML parser holds {spec.MAX_NODES}: use fewer "
                                   "chunks or steps", None, RUNTIME))


def _tb_table(algo: AlgoXml, gpu: GpuXml, problems: list[XmlProblem]) -> None:
    """Threadblock ids 0..n-1 once each; one threadblock per peer and channel each way;
    the runtime's per-channel and per-gpu threadblock limits."""
    place = where(gpu.id)
    counts = Counter(tb.id for tb in gpu.tbs)
    for tid, count in counts.items():
        if count > 1:
            problems.append(XmlProblem(where(gpu.id, tid), f"appears {count} times", "id"))
    gaps = sorted(set(range(len(counts))) - set(counts))
    if gaps or any(tid < 0 for tid in counts):
        problems.append(XmlProblem(place, f"threadblock ids must be 0..{len(counts) - 1} (the "
                                   f"runtime refuses gaps); missing {gaps[:5]}", "id", RUNTIME))
    if len(gpu.tbs) > spec.MAX_THREADBLOCKS:
        problems.append(XmlProblem(place, f"has {len(gpu.tbs)} threadblocks; MSCCL runs at "
                                   f"most {spec.MAX_THREADBLOCKS} per gpu: use fewer peers "
                                   "per rank or fewer channels", None, RUNTIME))
    for role in ("send", "recv"):
        ends = Counter((getattr(tb, role), tb.chan) for tb in gpu.tbs if getattr(tb, role) >= 0)
        for (peer, chan), count in ends.items():
            if count > 1:
                problems.append(XmlProblem(place, f"{count} threadblocks {role} gpu {peer} on "
                                           f"channel {chan}; a connection (peer, channel) "
                                           "belongs to one threadblock", role))
        per_channel = Counter(chan for _, chan in ends)
        for chan, count in per_channel.items():
            if count > spec.MAX_TBS_PER_CHANNEL:
                problems.append(XmlProblem(
                    place, f"{count} threadblocks have a {role} peer on channel {chan}; MSCCL "
                    f"allows {spec.MAX_TBS_PER_CHANNEL} per channel: spread peers over more "
                    "channels", role, RUNTIME))


def _tb_rules(algo: AlgoXml, gpu: GpuXml, tb: TbXml, tb_ids: dict[int, TbXml],
              sizes: dict[str, int], problems: list[XmlProblem]) -> None:
    place = where(gpu.id, tb.id)
    for attr, peer in (("send", tb.send), ("recv", tb.recv)):
        if peer < -1 or peer >= algo.ngpus or peer == gpu.id:
            problems.append(XmlProblem(place, f"is {peer}; a peer is another gpu "
                                       f"(0..{algo.ngpus - 1}) or -1 for none", attr))
    if not 0 <= tb.chan < MAX_CHANNELS:
        problems.append(XmlProblem(place, f"is {tb.chan}; NCCL has channels 0.."
                                   f"{MAX_CHANNELS - 1} (MAXCHANNELS): put the threadblock on "
                                   "one of them", "chan"))
    elif not tb.chan < max(algo.nchannels, 1):
        problems.append(XmlProblem(place, f"is {tb.chan}; channels are 0..{algo.nchannels - 1} "
                                   "(raise nchannels)", "chan", RUNTIME))
    if len(tb.steps) > spec.MAX_STEPS:
        problems.append(XmlProblem(place, f"has {len(tb.steps)} steps; MSCCL runs at most "
                                   f"{spec.MAX_STEPS} per threadblock (nops included): use "
                                   "fewer chunks or more channels", None, RUNTIME))
    for i, st in enumerate(tb.steps):
        _step_rules(gpu, tb, i, st, tb_ids, sizes, problems)
    _nop_rules(gpu, tb, problems)


def _step_rules(gpu: GpuXml, tb: TbXml, i: int, st: StepXml, tb_ids: dict[int, TbXml],
                sizes: dict[str, int], problems: list[XmlProblem]) -> None:
    place = where(gpu.id, tb.id, i)
    if st.s != i:
        problems.append(XmlProblem(place, f"is {st.s}, but this is step {i} of its threadblock "
                                   "(dependencies name steps by position)", "s"))
    kind = spec.STEP_TYPES.get(st.type)
    if kind is None:
        problems.append(XmlProblem(place, f"is {st.type!r}; step types are "
                                   f"{', '.join(spec.STEP_TYPES)}", "type"))
        return
    for attr, code in (("srcbuf", st.srcbuf), ("dstbuf", st.dstbuf)):
        if code not in spec.CODE_BUFFER:
            problems.append(XmlProblem(place, f"is {code!r}; buffers are i, o, s", attr))
    if st.hasdep not in (0, 1):
        problems.append(XmlProblem(place, f"is {st.hasdep}; use 0 or 1", "hasdep"))
    _dependency_rule(gpu, tb, i, st, tb_ids, problems)
    if kind.is_nop:
        return
    if st.cnt < 1:
        problems.append(XmlProblem(place, f"is {st.cnt}; a step moves at least one chunk",
                                   "cnt"))
        return
    if st.cnt >= spec.MAX_COUNT:
        problems.append(XmlProblem(place, f"is {st.cnt}; MSCCL needs cnt < {spec.MAX_COUNT}: "
                                   "split the step into several, or use fewer, larger chunks "
                                   "(a smaller nchunksperloop)", "cnt", RUNTIME))
    if kind.sends and tb.send < 0:
        problems.append(XmlProblem(place, f"type {st.type!r} sends, but its threadblock has "
                                   "send=\"-1\"", "type"))
    if kind.receives and tb.recv < 0:
        problems.append(XmlProblem(place, f"type {st.type!r} receives, but its threadblock has "
                                   "recv=\"-1\"", "type"))
    for used, attr, code, offset in ((kind.reads_src, "srcoff", st.srcbuf, st.srcoff),
                                     (kind.writes_dst, "dstoff", st.dstbuf, st.dstoff)):
        size = sizes.get(code)
        if used and size is not None and not (offset >= 0 and offset + st.cnt <= size):
            problems.append(XmlProblem(place, f"is {offset}: chunks {offset}.."
                                       f"{offset + st.cnt - 1} of buffer {code!r}, which has "
                                       f"{size} ({code}_chunks of gpu {gpu.id})", attr))


def _dependency_rule(gpu: GpuXml, tb: TbXml, i: int, st: StepXml, tb_ids: dict[int, TbXml],
                     problems: list[XmlProblem]) -> None:
    if st.depid < 0:
        return
    place = where(gpu.id, tb.id, i)
    target = tb_ids.get(st.depid)
    if target is None:
        problems.append(XmlProblem(place, f"is {st.depid}, but gpu {gpu.id} has no threadblock "
                                   f"{st.depid} (a dangling dependency)", "depid"))
    elif not 0 <= st.deps < len(target.steps):
        problems.append(XmlProblem(place, f"is {st.deps}, but tb {st.depid} has steps "
                                   f"0..{len(target.steps) - 1} (a dangling dependency)",
                                   "deps"))
    elif st.depid == tb.id and st.deps >= i:
        problems.append(XmlProblem(place, f"waits on step {st.deps} of its own threadblock, "
                                   "which runs after it (a cycle)", "deps"))
    elif st.depid > spec.MAX_DEPID:
        problems.append(XmlProblem(place, f"is {st.depid}; the runtime keeps depid in 8 bits, "
                                   f"so a step can wait on threadblocks 0..{spec.MAX_DEPID}: "
                                   "give the threadblocks it waits on lower ids", "depid",
                                   RUNTIME))


def _nop_rules(gpu: GpuXml, tb: TbXml, problems: list[XmlProblem]) -> None:
    """Nops lend their dependency to the next real step, which must have its own (the
    runtime refuses the file otherwise); consecutive reductions into one slot are fused
    by the runtime, which needs them to move the same count."""
    steps = tb.steps
    after: list[int | None] = [None] * len(steps)  # the first non-nop after each step
    for i in range(len(steps) - 2, -1, -1):
        after[i] = i + 1 if steps[i + 1].type != "nop" else after[i + 1]
    for i, st in enumerate(steps):
        kind = spec.STEP_TYPES.get(st.type)
        if kind is None:
            continue
        if kind.is_nop and st.depid >= 0:
            following = after[i]
            if following is None:
                problems.append(XmlProblem(where(gpu.id, tb.id, i), "a nop at the end of its "
                                           "threadblock: its dependency delays nothing; drop "
                                           "it", "type", RUNTIME))
            elif steps[following].depid < 0:
                problems.append(XmlProblem(where(gpu.id, tb.id, following),
                                           "follows nops with dependencies but has none "
                                           "itself; the runtime refuses that: give it the "
                                           "last nop's dependency", "depid", RUNTIME))
        if kind.code == "re" and i and steps[i - 1].type == "re" and st.depid < 0 \
                and steps[i - 1].hasdep == 0 and st.cnt != steps[i - 1].cnt \
                and (st.dstbuf, st.dstoff, st.srcbuf) == (steps[i - 1].dstbuf,
                                                          steps[i - 1].dstoff,
                                                          steps[i - 1].srcbuf):
            problems.append(XmlProblem(where(gpu.id, tb.id, i), "the runtime fuses this "
                                       "reduction with the one before (same destination), "
                                       "which moves a different cnt; set hasdep=\"1\" on the "
                                       "one before to keep them apart", "cnt", RUNTIME))
