"""A Plan: which schedule to use for which message size (NCCL's tuner, MSCCL's
``minBytes``/``maxBytes``).

Entries cover ``[min_bytes, max_bytes)`` ranges without gaps from 0 to infinity
(``max_bytes=None`` for the last one); ``schedule_for(size)`` picks one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ccweave import outfile
from ccweave import schedule as schedule_io
from ccweave.collectives import Collective
from ccweave.errors import InputError
from ccweave.jsonfile import finite, read_json
from ccweave.schedule import Schedule
from ccweave.units import shown

FORMAT = "ccweave.plan"
VERSION = 1


@dataclass(frozen=True)
class PlanEntry:
    """Use ``schedule`` for sizes in ``[min_bytes, max_bytes)`` (``None``: no upper end)."""

    min_bytes: int
    max_bytes: int | None
    schedule: Schedule


@dataclass(frozen=True)
class Plan:
    """Size ranges, in increasing order, each with the schedule to use."""

    entries: tuple[PlanEntry, ...]
    name: str = ""

    def __post_init__(self) -> None:
        if not self.entries:
            raise InputError("a plan needs at least one entry")
        first = self.entries[0].schedule.collective
        expected_min = 0
        for number, entry in enumerate(self.entries):
            coll = entry.schedule.collective
            if (coll.kind, coll.num_ranks, coll.root) != (first.kind, first.num_ranks,
                                                          first.root):
                raise InputError(f"plan entry {number}: {coll.describe()} differs from entry "
                                 f"0's {first.describe()}; a plan serves one collective")
            if entry.min_bytes != expected_min:
                raise InputError(f"plan entry {number}: starts at {entry.min_bytes} bytes, "
                                 f"expected {expected_min} (ranges must be contiguous)")
            last = number == len(self.entries) - 1
            if (entry.max_bytes is None) != last:
                raise InputError(f"plan entry {number}: only the last entry may be open-ended")
            if entry.max_bytes is not None and entry.max_bytes <= entry.min_bytes:
                raise InputError(f"plan entry {number}: max_bytes must exceed min_bytes")
            expected_min = entry.max_bytes or 0

    @property
    def collective(self) -> Collective:
        return self.entries[0].schedule.collective

    def schedule_for(self, size_bytes: int) -> Schedule:
        for entry in self.entries:
            if entry.max_bytes is None or size_bytes < entry.max_bytes:
                return entry.schedule
        raise AssertionError("unreachable: the last entry is open-ended")

    @classmethod
    def single(cls, schedule: Schedule) -> Plan:
        """A plan that uses one schedule for every size."""
        return cls((PlanEntry(0, None, schedule),), schedule.name)

    @classmethod
    def from_sizes(cls, schedules: Mapping[int, Schedule], name: str = "") -> Plan:
        """The plan that uses ``schedules[s]`` at each size ``s``: ranges change at the
        geometric midpoint between neighbouring sizes whose schedules differ (the same
        transfers under two names count as the same), the first starts at 0 and the last
        is open-ended."""
        if not schedules:
            raise InputError("a plan needs at least one size")
        sizes = sorted(schedules)
        starts: list[tuple[int, Schedule]] = []
        for number, size in enumerate(sizes):
            schedule = schedules[size]
            if starts and _same(starts[-1][1], schedule):
                continue
            start = 0 if number == 0 else math.isqrt(sizes[number - 1] * size)
            starts.append((start, schedule))
        ends = [start for start, _ in starts[1:]] + [None]
        return cls(tuple(PlanEntry(start, end, schedule)
                         for (start, schedule), end in zip(starts, ends)), name)

    def sizes(self) -> list[tuple[int, int | None, str]]:
        """``(min_bytes, max_bytes, schedule name)`` per entry, for reports."""
        return [(e.min_bytes, e.max_bytes, e.schedule.name) for e in self.entries]


def _same(a: Schedule, b: Schedule) -> bool:
    return a is b or (a.collective == b.collective and a.scratch_chunks == b.scratch_chunks
                      and a.in_place == b.in_place and a.transfers == b.transfers)


def to_dict(plan: Plan) -> dict[str, object]:
    return {"format": FORMAT, "version": VERSION, "name": plan.name,
            "entries": [{"min_bytes": e.min_bytes, "max_bytes": e.max_bytes,
                         "schedule": schedule_io.to_dict(e.schedule)} for e in plan.entries]}


def from_dict(data: object, source: str = "plan") -> Plan:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{source}: not a ccweave plan (expected \"format\": \"{FORMAT}\"); "
                         "make one with `ccweave synth ... --strategy auto`")
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise InputError(f"{source}: field 'entries' must be a list")
    parsed = []
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict) or "schedule" not in entry:
            raise InputError(f"{source}: entries[{number}] needs min_bytes, max_bytes, schedule")
        low, high = entry.get("min_bytes", 0), entry.get("max_bytes")
        for name, value in (("min_bytes", low), ("max_bytes", high)):
            if (isinstance(value, bool) or not isinstance(value, int) or value < 0) and not (
                    name == "max_bytes" and value is None):
                raise InputError(f"{source}: entries[{number}].{name} must be a whole number "
                                 f"of bytes >= 0, got {shown(value)}")
        parsed.append(PlanEntry(low, high, schedule_io.from_dict(
            entry["schedule"], f"{source}: entries[{number}]")))
    try:
        return Plan(tuple(parsed), str(data.get("name", "")))
    except InputError as error:
        raise InputError(f"{source}: {error}") from None


def save(plan: Plan, path: str | Path) -> None:
    """Write ``plan`` as JSON, atomically (a failed write keeps the old file)."""
    outfile.write_text(path, json.dumps(finite(to_dict(plan)), separators=(",", ":"),
                                        allow_nan=False) + "\n")


def load(path: str | Path) -> Plan:
    """A plan file, or a single schedule file (used for every size)."""
    data = read_json(path, "make one with `ccweave synth ... --strategy auto`")
    return from_data(data, str(path))


def from_data(data: object, source: str) -> Plan:
    """:func:`load` on a parsed file: a plan, or one schedule (used for every size)."""
    if isinstance(data, dict) and data.get("format") == schedule_io.FORMAT:
        return Plan.single(schedule_io.from_dict(data, source))
    return from_dict(data, source)
