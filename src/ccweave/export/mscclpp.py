"""MSCCL++ execution plans in both directions: the front door.

``to_plan(schedule, topology)`` writes the JSON plan MSCCL++'s executor loads
(:mod:`.mscclpp_write`), ``export_plan(plan, topology, directory)`` one plan per size
range; ``read(path)`` turns any plan back into a Schedule (:mod:`.mscclpp_read`) and
:func:`judge` proves it, or says what it computes instead. docs/mscclpp.md has the
mapping and its limits.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ccweave import outfile
from ccweave.collectives import Collective, Kind
from ccweave.errors import InputError
from ccweave.export.mscclpp_model import PlanDoc, parse, to_dict
from ccweave.export.mscclpp_read import to_schedule
from ccweave.export.mscclpp_write import ExportOptions, lower, notes
from ccweave.plan import Plan
from ccweave.schedule import Schedule
from ccweave.topology.model import Topology
from ccweave.verify import ProblemKind, VerifyResult, check

__all__ = ["ExportOptions", "Verdict", "annotate", "export_plan", "from_data", "is_plan",
           "judge", "notes", "plan_files", "read", "to_plan", "write"]


def to_plan(schedule: Schedule, topology: Topology,
            options: ExportOptions | None = None) -> dict[str, object]:
    """The execution plan (a JSON-ready dict) that runs ``schedule`` on ``topology``'s
    ranks: memory channels where two GPUs reach each other without a CPU or NIC between
    them, port channels elsewhere. Raises ``InputError`` where MSCCL++ cannot run it."""
    return to_dict(lower(schedule, topology, options or ExportOptions()))


def write(schedule: Schedule, topology: Topology, path: str | Path,
          options: ExportOptions | None = None) -> Path:
    """Write :func:`to_plan` to ``path`` atomically; returns the path."""
    path = Path(path)
    outfile.write_text(path, json.dumps(to_plan(schedule, topology, options), indent=1) + "\n")
    return path


def plan_files(plan: Plan, directory: str | Path) -> list[Path]:
    """The files :func:`export_plan` writes: ``<name>_<k>.json`` per size range."""
    stem = _slug(plan.name or plan.collective.kind.value)
    return [Path(directory) / f"{stem}_{k}.json" for k in range(len(plan.entries))]


def export_plan(plan: Plan, topology: Topology, directory: str | Path,
                options: ExportOptions | None = None) -> list[Path]:
    """One plan per size range of ``plan``, each with its ``min_message_size`` and
    ``max_message_size`` (inclusive, as MSCCL++ selects them); returns the files."""
    options = options or ExportOptions()
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"{directory}: cannot make the directory: "
                         f"{error.strerror or error}") from None
    paths = plan_files(plan, directory)
    stem = _slug(plan.name or plan.collective.kind.value)
    for k, (entry, path) in enumerate(zip(plan.entries, paths)):
        ranged = replace(options, min_bytes=entry.min_bytes, max_bytes=entry.max_bytes,
                         name=options.name or f"{stem}_{k}")
        write(entry.schedule, topology, path, ranged)
    return paths


def is_plan(data: object) -> bool:
    """Whether parsed JSON looks like an MSCCL++ execution plan (has ``gpus``)."""
    return isinstance(data, dict) and "gpus" in data and "format" not in data


def from_data(data: object, source: str = "plan") -> Schedule:
    """The Schedule a parsed plan runs (``InputError`` names what the executor would do
    that no schedule can say, or what its loader refuses)."""
    doc: PlanDoc = parse(data, source)
    return to_schedule(doc, source).schedule


def read(path: str | Path) -> Schedule:
    """The Schedule of the plan file at ``path``."""
    from ccweave.jsonfile import read_json

    return from_data(read_json(path, "give an MSCCL++ execution plan (JSON)"), str(path))


# ---------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Verdict:
    """A plan's proof: ``ok``, or the first problem in the plan's own words, and where it
    computes another collective, which one."""

    ok: bool
    message: str
    computes: Collective | None = None
    result: VerifyResult | None = None


_OUTPUT_PROBLEMS = {ProblemKind.WRONG_OUTPUT, ProblemKind.MISSING_OUTPUT}


def judge(schedule: Schedule) -> Verdict:
    """Prove ``schedule`` (an imported plan) implements the collective it names; if its
    outputs are wrong but nothing races, find what it does compute among the collectives
    with its buffers' shape (a reduce to one root, a broadcast, ...)."""
    result = check(schedule)
    coll = schedule.collective
    if result.ok:
        return Verdict(True, f"proven: {coll.describe()}", result=result)
    message = annotate(result.problems[0].message, schedule)
    if all(p.kind in _OUTPUT_PROBLEMS for p in result.problems):
        for other in _alternatives(coll):
            if check(replace(schedule, collective=other)).ok:
                return Verdict(False, f"not a {coll.kind.value}: it computes "
                               f"{other.describe()} ({message})", other, result)
    return Verdict(False, message, result=result)


def _alternatives(coll: Collective) -> list[Collective]:
    """Collectives on the same ranks whose input and output buffers have the same chunk
    counts as ``coll``'s."""
    found = []
    n, shape = coll.num_ranks, (coll.input_chunks, coll.output_chunks)
    for kind in Kind.collectives():
        if kind is coll.kind:
            continue
        for per_rank in {shape[0], shape[1], shape[0] // n, shape[1] // n} - {0}:
            roots = range(n) if kind.is_rooted else (0,)
            for root in roots:
                try:
                    other = Collective(kind, n, per_rank, root)
                except InputError:
                    continue
                if (other.input_chunks, other.output_chunks) == shape:
                    found.append(other)
    return found


_TRANSFER = re.compile(r"transfer (\d+) \((\d+) -> (\d+), (\w+)\)")
_SLOT = re.compile(r"(input|output|scratch) slot (\d+) of rank (\d+)")


def annotate(message: str, schedule: Schedule) -> str:
    """A verifier message about an imported plan in the plan's terms: each transfer named
    with the operation it comes from, and slots as plan chunks (and their parts)."""
    origins = schedule.metadata.get("transfer_origins")
    unit = schedule.metadata.get("unit", 1)
    if not isinstance(origins, list) or not isinstance(unit, int) or unit < 1:
        return message

    def transfer(match: re.Match) -> str:
        index = int(match.group(1))
        origin = origins[index] if index < len(origins) else "?"
        return f"{match.group(0)[:-1]}: {origin})"

    base = schedule.metadata.get("packet_base")

    def slot(match: re.Match) -> str:
        buffer, index, rank = match.group(1), int(match.group(2)), match.group(3)
        if buffer == "scratch" and isinstance(base, int) and index >= base:
            buffer, index = "scratch packet", index - base
        if unit == 1:
            return f"{buffer} chunk {index} of rank {rank}"
        return f"{buffer} chunk {index // unit} (part {index % unit + 1} of {unit}) of rank {rank}"

    return _SLOT.sub(slot, _TRANSFER.sub(transfer, message))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "plan"

