"""MSCCL XML in both directions: the front door of :mod:`ccweave.export`.

Export lowers a Schedule in small passes, as msccl-tools does: per-rank instructions
(:mod:`.lowering`), fusion into rcs/rrcs/rrs (:mod:`.fusion`), threadblocks and step
order (:mod:`.threadblocks`), cross-threadblock dependencies and nops
(:mod:`.dependencies`), XML (:mod:`.emit`); the result must pass :func:`check_xml`.
Import (:mod:`.xml_import`) turns any MSCCL XML back into a Schedule the verifier proves.
A Plan exports as one XML per size range plus the config that selects them.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from ccweave import outfile
from ccweave.collectives import Kind
from ccweave.errors import InputError, printable
from ccweave.export import msccl_spec as spec
from ccweave.export import passes
from ccweave.export.emit import emit_tree, serialize
from ccweave.export.problems import summary
from ccweave.export.xml_check import analyze, check_xml
from ccweave.export.xml_import import from_analysis, from_xml, read
from ccweave.export.xml_lexer import lex_check
from ccweave.plan import Plan
from ccweave.schedule import Schedule
from ccweave.topology.model import Topology
from ccweave.transforms import instances as replicate

__all__ = ["CONFIG_NAME", "as_run", "check_xml", "export_plan", "from_xml", "lex_check", "read",
           "to_xml", "write"]

DEFAULT_PROTO = "Simple"
OPEN_MAX_BYTES = 1 << 40
"""microsoft/msccl has no "no limit": an open range without scratch ends at 1 TiB."""
SCRATCH_MAX_BYTES = 1 << 30
"""microsoft/msccl allocates scratch for maxBytes up front: open ranges with scratch end at
1 GiB unless ``max_bytes`` says otherwise."""
CONFIG_NAME = "msccl_config.xml"


def to_xml(schedule: Schedule, *, proto: str = DEFAULT_PROTO, instances: int = 1,
           runtime: spec.Runtime | str = spec.Runtime.MSCCL, min_bytes: int = 0,
           max_bytes: int | None = None, name: str | None = None,
           topology: Topology | None = None) -> str:
    """MSCCL XML for ``schedule`` that the runtime's parser accepts.

    Parameters
    ----------
    schedule: any schedule (verify it first: the XML is as right as the schedule).
    proto: Simple, LL or LL128.
    instances: run ``instances`` copies side by side on their own channels, each on a
        slice of every chunk (MSCCL's instances; :func:`ccweave.transforms.instances`).
    runtime: ``msccl`` (microsoft/msccl, msccl-tools' spelling) or ``azure`` (the Azure
        MSCCL executor); they spell reduce-scatter and size limits differently.
    min_bytes, max_bytes: the sizes ``[min_bytes, max_bytes)`` it serves (``None``: no
        upper end), written as each runtime reads minBytes/maxBytes.
    name: the algo name (default: the schedule's).
    topology: the machine it runs on, if known: which of a connection's transfers the
        schedule runs at once (each then gets a channel of its own) is judged by
        simulating it there at both ends of its sizes (:func:`estimate_sizes`); without
        it, a transfer takes its count in time, latency and shared links aside.

    Raises ``InputError`` when the runtime cannot run it (limits, a collective the runtime
    lacks), naming the threadblock and the fix.
    """
    root, header = _tree(schedule, proto, instances, runtime, min_bytes, max_bytes, name,
                         topology)
    text = serialize(root)
    problems = [*lex_check(text), *check_xml(ET.fromstring(text), runtime)]
    if problems:
        raise InputError(f"cannot export {header['name']!r} for MSCCL: {summary(problems)}")
    return text


def as_run(schedule: Schedule, *, proto: str = DEFAULT_PROTO, instances: int = 1,
           runtime: spec.Runtime | str = spec.Runtime.MSCCL) -> Schedule:
    """The schedule the XML of :func:`to_xml` describes, as :func:`from_xml` reads it back
    (every threadblock running its steps one after another), without printing the text:
    what a strategy scores when its figure must be the figure of the export. Raises
    ``InputError`` when the runtime cannot run it."""
    root, header = _tree(schedule, proto, instances, runtime, 0, None, None)
    analysis = analyze(root, spec.Runtime.parse(runtime))
    problems = list(analysis.problems)
    if problems:
        raise InputError(f"cannot export {header['name']!r} for MSCCL: {summary(problems)}")
    return from_analysis(analysis, str(header["name"]), problems)


def _tree(schedule: Schedule, proto: str, instances: int, runtime: spec.Runtime | str,
          min_bytes: int, max_bytes: int | None, name: str | None,
          topology: Topology | None = None) -> tuple[ET.Element, dict[str, object]]:
    """The ``algo`` element of the export passes, and its header."""
    runtime = spec.Runtime.parse(runtime)
    if proto not in spec.PROTOCOLS:
        raise InputError(f"proto {proto!r}: choose one of {', '.join(spec.PROTOCOLS)}")
    if not isinstance(instances, int) or instances < 1:
        raise InputError(f"instances must be a positive integer, got {instances!r}")
    kind = schedule.collective.kind
    coll = spec.COLL_NAMES[runtime].get(kind)
    if coll is None and runtime is spec.Runtime.AZURE:
        raise InputError(f"the Azure MSCCL executor has no {kind.value} collective; export "
                         "with runtime msccl (coll=\"custom\")")
    lowered = passes.run(replicate(schedule, instances) if instances > 1 else schedule,
                         topology, estimate_sizes(min_bytes, max_bytes))
    sched, program, layout, steps = (lowered.schedule, lowered.program, lowered.layout,
                                     lowered.steps)
    header = _header(sched, proto, runtime, coll, min_bytes, max_bytes, name)
    return emit_tree(program, layout, steps, header, _chunks(sched, coll is None)), header


SMALLEST_BYTES = 1 << 10
LARGEST_BYTES = 1 << 30
"""The sizes an open range is judged at (those ``auto`` plans for by default)."""


def estimate_sizes(min_bytes: int, max_bytes: int | None) -> tuple[float, float]:
    """The sizes at which the export simulates a schedule to tell which transfers run at
    once: both ends of the range it serves (latency and bandwidth), an open end taken
    as 1 KiB or 1 GiB."""
    low = max(min_bytes, SMALLEST_BYTES)
    high = LARGEST_BYTES if max_bytes is None else max(low, max_bytes - 1)
    return float(low), float(high)


def export_notes(schedule: Schedule) -> list[str]:
    """What the XML cannot say about ``schedule``: transfers pinned to a route through
    fabric nodes (``via``: host staging, one of several NVSwitch planes) become plain
    sends, because MSCCL picks each send's path itself. The XML stays correct."""
    pinned = [t for t in schedule.transfers if t.via]
    if not pinned:
        return []
    nodes = sorted({node for t in pinned for node in t.via})
    return [f"{schedule.name or 'the schedule'}: {len(pinned)} transfer(s) pinned to routes "
            f"through {', '.join(nodes)} become plain sends (MSCCL picks each send's path); "
            "the algorithm stays correct, the striping over those routes is not kept"]


def write(schedule: Schedule, path: str | Path, **options: object) -> Path:
    """Write :func:`to_xml` to ``path`` (atomically: a failed write keeps the old file);
    returns the path."""
    path = Path(path)
    outfile.write_text(path, to_xml(schedule, **options))  # type: ignore[arg-type]
    return path


def export_plan(plan: Plan, directory: str | Path, *, proto: str = DEFAULT_PROTO,
                instances: int = 1, runtime: spec.Runtime | str = spec.Runtime.MSCCL,
                topology: Topology | None = None) -> list[Path]:
    """One XML per size range of ``plan`` in ``directory``, each with its minBytes and
    maxBytes; for microsoft/msccl also ``msccl_config.xml`` (``MSCCL_CONFIG``) that loads
    them by size. For the Azure executor the directory is ``MSCCL_ALGO_DIR`` (every file
    in it is read as an algorithm, so it holds nothing else). ``topology``: as for
    :func:`to_xml`, each range judged at its own ends. Returns the files written.
    """
    runtime = spec.Runtime.parse(runtime)
    if runtime is spec.Runtime.MSCCL and len(plan.entries) > spec.MAX_ALGOS:
        raise InputError(f"the plan has {len(plan.entries)} size ranges but microsoft/msccl "
                         f"loads at most {spec.MAX_ALGOS} algorithms; export for the Azure "
                         "executor (runtime azure) or merge ranges")
    directory = Path(directory)
    if runtime is spec.Runtime.MSCCL and _XML_UNSAFE.search(str(directory.resolve())):
        raise InputError(f"{printable(directory)}: its path holds a character XML cannot "
                         f"carry, and {CONFIG_NAME} names each algorithm by its full path; "
                         "export into a folder whose path has no control characters")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"{directory}: cannot make the directory: "
                         f"{error.strerror or error}") from None
    paths = plan_files(plan, directory, runtime)
    stem = _slug(plan.name or plan.collective.kind.value)
    for number, (entry, path) in enumerate(zip(plan.entries, paths)):
        outfile.write_text(path, to_xml(entry.schedule, proto=proto, instances=instances,
                                        runtime=runtime, min_bytes=entry.min_bytes,
                                        max_bytes=entry.max_bytes, name=f"{stem}_{number}",
                                        topology=topology))
    if runtime is spec.Runtime.MSCCL:
        outfile.write_text(paths[-1], _config(plan, paths[:-1], proto))
    return paths


_XML_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
"""Characters XML 1.0 has no way to hold, even as a reference."""


def plan_files(plan: Plan, directory: str | Path,
               runtime: spec.Runtime | str = spec.Runtime.MSCCL) -> list[Path]:
    """The files :func:`export_plan` writes into ``directory``, in order."""
    stem = _slug(plan.name or plan.collective.kind.value)
    paths = [Path(directory) / f"{stem}_{number}.xml" for number in range(len(plan.entries))]
    if spec.Runtime.parse(runtime) is spec.Runtime.MSCCL:
        paths.append(Path(directory) / CONFIG_NAME)
    return paths


def _config(plan: Plan, files: list[Path], proto: str) -> str:
    """microsoft/msccl's ``<msccl_algos>``: maxbytes is exclusive, -1 for no limit."""
    root = ET.Element("msccl_algos")
    for entry, path in zip(plan.entries, files):
        ET.SubElement(root, "load", {"path": str(path.resolve()),
                                     "minbytes": str(entry.min_bytes),
                                     "maxbytes": str(-1 if entry.max_bytes is None
                                                     else entry.max_bytes),
                                     "proto": proto})
    return serialize(root)


def _header(sched: Schedule, proto: str, runtime: spec.Runtime, coll: str | None,
            min_bytes: int, max_bytes: int | None, name: str | None) -> dict[str, object]:
    c = sched.collective
    if min_bytes < 0 or (max_bytes is not None and max_bytes <= min_bytes):
        raise InputError(f"size range [{min_bytes}, {max_bytes}) is empty or negative")
    if runtime is spec.Runtime.AZURE:  # inclusive upper end; 0: no limit
        high = 0 if max_bytes is None else max_bytes - 1
    else:  # exclusive upper end, and the scratch size
        high = max_bytes if max_bytes is not None else (
            SCRATCH_MAX_BYTES if sched.scratch_chunks else OPEN_MAX_BYTES)
    header: dict[str, object] = {
        "name": _attribute(name or sched.name or c.kind.value)[:200], "proto": proto,
        "nchunksperloop": c.total_chunks, "ngpus": c.num_ranks, "coll": coll or spec.CUSTOM,
        "inplace": int(sched.in_place), "outofplace": int(not sched.in_place),
        "minBytes": min_bytes, "maxBytes": high}
    if coll is None:
        header["collective"] = c.kind.value
    if c.kind.is_rooted:
        header["root"] = c.root
    if c.kind is Kind.SENDRECV:
        header["peer"] = c.peer
    return header


def _attribute(text: str) -> str:
    """``text`` as an attribute XML and the runtime's reader both take: control
    characters and unpaired surrogates become '?'."""
    text = re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", text)
    return text.encode("utf-8", "replace").decode("utf-8")


def _chunks(sched: Schedule, custom: bool) -> tuple[int, int, int]:
    """i_chunks, o_chunks, s_chunks; a custom collective declares full-size buffers, as
    microsoft/msccl checks them against nchunksperloop."""
    c = sched.collective
    if custom:
        return c.total_chunks, c.total_chunks, sched.scratch_chunks
    return c.input_chunks, c.output_chunks, sched.scratch_chunks


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "algo"
