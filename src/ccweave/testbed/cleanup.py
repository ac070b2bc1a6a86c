"""``ccweave testbed down``: remove the testbeds ccweave can prove it made (a marker or a
record, :mod:`ccweave.testbed.records`) and say what it left alone and why."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ccweave.testbed.emulation import PREFIX
from ccweave.testbed.guard import delete
from ccweave.testbed.records import (
    BadRecord,
    Maker,
    Record,
    drop_record,
    host_names,
    namespace_markers,
    read_marker,
    read_records,
)


@dataclass(frozen=True)
class Removed:
    """One testbed taken down: its tag and the names deleted."""

    tag: str
    namespaces: tuple[str, ...]
    links: tuple[str, ...]


@dataclass(frozen=True)
class LeftAlone:
    """A name that looks like a testbed's but was not removed, and why."""

    name: str
    why: str


@dataclass(frozen=True)
class Clearance:
    """What :func:`clear_testbeds` did."""

    removed: tuple[Removed, ...]
    left_alone: tuple[LeftAlone, ...]
    bad_records: tuple[BadRecord, ...]

    @property
    def namespaces(self) -> int:
        return sum(len(bed.namespaces) for bed in self.removed)

    @property
    def links(self) -> int:
        return sum(len(bed.links) for bed in self.removed)


@dataclass
class _Found:
    """One tag's names on this host, by marker or record, and who made them."""

    namespaces: set[str]
    links: set[str]
    makers: set[Maker]
    record: Record | None = None


def survey() -> tuple[dict[str, _Found], list[str], list[BadRecord]]:
    """Testbeds on this host by tag, the ``ccw`` names no testbed claims, and the
    records that cannot be read."""
    spaces, devices = host_names(PREFIX)
    found: dict[str, _Found] = defaultdict(lambda: _Found(set(), set(), set()))
    for name, mark in namespace_markers(spaces).items():
        if mark is not None:
            found[mark[0]].namespaces.add(name)
            found[mark[0]].makers.add(mark[1])
    for name, alias in devices.items():
        mark = read_marker(alias)
        if mark is not None:
            found[mark[0]].links.add(name)
            found[mark[0]].makers.add(mark[1])
    records, bad = read_records()
    for record in records:
        entry = found[record.tag]
        entry.record = record
        entry.makers.add(record.maker)
        entry.namespaces |= set(record.namespaces) & set(spaces)
        entry.links |= set(record.links) & set(devices)
    claimed = {name for entry in found.values() for name in entry.namespaces | entry.links}
    strangers = [name for name in [*spaces, *devices] if name not in claimed]
    return dict(found), strangers, bad


def clear_testbeds(tag: str | None = None) -> Clearance:
    """Remove testbed ``tag`` (whoever made it), or, without a tag, every testbed whose
    maker is gone: leftovers of killed processes and testbeds ``testbed up`` left
    standing. A testbed whose maker still runs is left alone, and so is every ``ccw``
    name with neither marker nor record; the result says which and why. Without a tag,
    unreadable records are removed (markers still prove what their testbeds made) and
    listed in the result."""
    from ccweave.testbed.netns import signals_deferred

    found, strangers, bad = survey()
    left = [LeftAlone(name, "no ccweave marker or record: not made by ccweave")
            for name in strangers] if tag is None else []
    chosen: dict[str, _Found] = {}
    for name, entry in sorted(found.items()):
        if tag is not None and name != tag:
            continue
        alive = sorted((maker for maker in entry.makers if maker.alive()),
                       key=lambda maker: maker.pid)
        standing = entry.record is not None and entry.record.standing
        if tag is None and alive and not standing:
            why = (f"testbed {name} is in use: its maker, pid {alive[0].pid}, still runs "
                   f"(stop it, or `ccweave testbed down` once it has ended)")
            left += [LeftAlone(item, why) for item in sorted(entry.namespaces | entry.links)]
            continue
        chosen[name] = entry
    removed = []
    with signals_deferred():
        for name, entry in chosen.items():
            delete(entry.namespaces, entry.links)
            drop_record(name)
            removed.append(Removed(name, tuple(sorted(entry.namespaces)),
                                   tuple(sorted(entry.links))))
        dropped = []
        for record in bad if tag is None else ():
            if record.path.is_dir() and not record.path.is_symlink():
                left.append(LeftAlone(str(record.path), f"an unreadable record ({record.reason})"
                                      "; a folder ccweave did not make: remove it yourself"))
                continue
            try:
                record.path.unlink(missing_ok=True)
            except OSError as error:
                left.append(LeftAlone(str(record.path), f"an unreadable record ({record.reason})"
                                      f" that cannot be removed: {error.strerror or error}"))
                continue
            dropped.append(record)
    return Clearance(tuple(removed), tuple(left), tuple(dropped))

