"""What ccweave made on this host, so that ``ccweave testbed down`` removes exactly that.

Two proofs, each enough: a **marker**, the alias ``ccweave-testbed:tag=T:pid=P:start=S``
that every testbed sets on each of its namespaces' loopback device and on each device it
makes in the root namespace (``ip link show`` prints it); and a **record**, the file
``testbed-T.json`` in the state folder, written before the first namespace is made and
listing every name the testbed will use. A namespace or link that starts with ``ccw``
but carries neither (another tool's ``ccwork``, a bridge someone called ``ccwbr0``) is
left alone, and ``down`` says so.

The marker also names the process that made the testbed (pid and start time, so a
reused pid is not mistaken for it): a bare ``down`` leaves a testbed alone while its
maker still runs (another user's ``testbed run``), and removes the leftovers of makers
that are gone (killed, or ``testbed up``, which leaves its testbed standing on purpose).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ccweave import outfile
from ccweave.errors import InputError

STATE_ENV = "CCWEAVE_TESTBED_DIR"
DEFAULT_STATE_DIR = "/run/ccweave-testbed"
MARK = "ccweave-testbed"
_MARKER = re.compile(rf"^{MARK}:tag=(\w+):pid=(\d+):start=(\d+)$")
_RECORD = re.compile(r"^testbed-(\w+)\.json$")
_TAG = re.compile(r"[0-9a-z]{1,32}", re.ASCII)
_NAME = re.compile(r"[0-9A-Za-z_.-]{1,15}", re.ASCII)
"""A namespace or device name ccweave makes (Linux allows 15 characters for a device)."""
MAX_RECORD_BYTES = 1 << 24
"""A record lists a testbed's names: 16 MiB holds the largest testbed many times over."""


def _rate(value: object) -> float | None:
    """A record's ``max_rate``: ``None``, or a positive finite number of Mbit/s."""
    if value is None:
        return None
    try:
        rate = float(value) if isinstance(value, (int, float)) and \
            not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer of 400 digits
        rate = math.inf
    if not 0 < rate < math.inf:
        raise ValueError(f"max_rate {str(value)[:20]}: not a rate in Mbit/s")
    return rate


def _whole(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


@dataclass(frozen=True)
class Maker:
    """The process that made a testbed: its pid and its start time (clock ticks after
    boot, ``/proc/PID/stat``), which tell it apart from a later process with its pid."""

    pid: int
    start: int

    @classmethod
    def this_process(cls) -> Maker:
        return cls(os.getpid(), process_start(os.getpid()) or 0)

    def alive(self) -> bool:
        started = process_start(self.pid)
        return started is not None and started == self.start


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), ``None`` if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def marker(tag: str, maker: Maker) -> str:
    """The alias every namespace's ``lo`` and every root-namespace device of testbed
    ``tag`` carries."""
    return f"{MARK}:tag={tag}:pid={maker.pid}:start={maker.start}"


def read_marker(alias: str | None) -> tuple[str, Maker] | None:
    """``(tag, maker)`` from a device's alias, ``None`` if it is not ccweave's marker."""
    found = _MARKER.match(alias or "")
    if not found:
        return None
    return found.group(1), Maker(int(found.group(2)), int(found.group(3)))


@dataclass(frozen=True)
class Record:
    """One testbed as its maker wrote it down: what it made, who made it, and (for a
    testbed left standing by ``testbed up``) what ``testbed run TOPO`` needs to use it."""

    tag: str
    maker: Maker
    namespaces: tuple[str, ...]
    links: tuple[str, ...] = ()
    standing: bool = False
    spec: str = ""
    subnet: int = 0
    control_subnet: int | None = None
    max_rate: float | None = None
    info: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Record:
        """The record in ``text``; ``ValueError`` says what is wrong. Only what ccweave
        writes passes: a record is trusted to name what ``down`` removes, so a name that is
        not its own testbed's (``ccw<tag>...``) makes it unreadable, not obeyed."""
        from ccweave.errors import InputError
        from ccweave.jsonfile import parse

        try:
            data = parse(text, "the record", "ccweave writes its records itself")
        except InputError as error:
            raise ValueError(str(error)) from None
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        tag, maker = data.get("tag"), data.get("maker")
        if not isinstance(tag, str) or not _TAG.fullmatch(tag):
            raise ValueError(f"tag {tag!r}: not a testbed's tag")
        if not isinstance(maker, dict) or not all(
                _whole(maker.get(key), 0, 2**63) for key in ("pid", "start")):
            raise ValueError("maker: not a pid and a start time")
        names = {key: data.get(key, []) for key in ("namespaces", "links")}
        for key, value in names.items():
            if not isinstance(value, list) or not all(
                    isinstance(name, str) and name.startswith(f"ccw{tag}") and
                    _NAME.fullmatch(name) for name in value):
                raise ValueError(f"{key}: not a list of testbed {tag}'s names (ccw{tag}...)")
        subnet, control = data.get("subnet", 0), data.get("control_subnet")
        if not _whole(subnet, 0, 255) or not (control is None or _whole(control, 0, 255)):
            raise ValueError("subnet: not an octet of 10.x.0.0/16")
        rate = _rate(data.get("max_rate"))
        standing, spec, info = (data.get("standing", False), data.get("spec", ""),
                                data.get("info") or {})
        if not isinstance(standing, bool) or not isinstance(spec, str) or \
                not isinstance(info, dict):
            raise ValueError("standing, spec or info: not a bool, a string and an object")
        return cls(tag=tag, maker=Maker(maker["pid"], maker["start"]),
                   namespaces=tuple(names["namespaces"]), links=tuple(names["links"]),
                   standing=standing, spec=spec, subnet=subnet, control_subnet=control,
                   max_rate=rate, info=info)


@dataclass(frozen=True)
class BadRecord:
    """A record file that cannot be read, and why."""

    path: Path
    reason: str


def state_dir() -> Path:
    """Where records live: ``$CCWEAVE_TESTBED_DIR``, else ``/run/ccweave-testbed``."""
    return Path(os.environ.get(STATE_ENV) or DEFAULT_STATE_DIR)


def check_state_dir() -> Path:
    """The state folder, made if missing; refused (before anything is built) when it is
    not a folder this process can write in."""
    folder = state_dir()
    how = (f"{STATE_ENV}={folder}" if os.environ.get(STATE_ENV)
           else f"the testbed state folder {folder}")
    fix = (f"point {STATE_ENV} at a folder ccweave may write in, or unset it (default "
           f"{DEFAULT_STATE_DIR})")
    try:
        if folder.exists() and not folder.is_dir():
            raise InputError(f"{how} is not a folder; {fix}")
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise InputError(f"{how} cannot be written ({error.strerror or error}); {fix}") \
            from None
    return folder


def record_path(tag: str) -> Path:
    return state_dir() / f"testbed-{tag}.json"


def write_record(record: Record) -> None:
    outfile.write_text(record_path(record.tag), record.to_json())


def drop_record(tag: str) -> None:
    record_path(tag).unlink(missing_ok=True)


def read_records() -> tuple[list[Record], list[BadRecord]]:
    """Every record in the state folder, and the files among them that cannot be read
    (a record cut short by a full disk, edited by hand): those are reported, not trusted."""
    folder = state_dir()
    try:
        paths = sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError:  # a name too long, a loop of links: no records there to read
        return [], []
    good, bad = [], []
    for path in paths:
        if not _RECORD.match(path.name):
            continue
        try:
            record = Record.from_json(_record_text(path))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            bad.append(BadRecord(path, f"{type(error).__name__}: {error}"[:200]))
            continue
        if _RECORD.match(path.name).group(1) != record.tag:
            bad.append(BadRecord(path, f"names testbed {record.tag}, not its file's"))
            continue
        good.append(record)
    return good, bad


def _record_text(path: Path) -> str:
    """A record file's text. A record is a small regular file ccweave wrote: anything else
    there (a FIFO, which would block a reader for ever; a link to /dev/zero; a folder) is
    refused without reading it."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError("a symbolic link, not a file ccweave wrote") from None
        raise
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > MAX_RECORD_BYTES:
            raise ValueError(f"{info.st_size:,} bytes, over {MAX_RECORD_BYTES:,}")
        with os.fdopen(os.dup(handle), "rb") as stream:
            return stream.read(MAX_RECORD_BYTES + 1).decode("utf-8")
    finally:
        os.close(handle)


def standing_record(spec: str) -> tuple[Record | None, list[BadRecord]]:
    """The testbed ``testbed up SPEC`` left standing (matched by the file's name, as
    ``up`` was given it), and the unreadable records beside."""
    key = spec_key(spec)
    good, bad = read_records()
    for record in good:
        if record.standing and spec_key(record.spec) == key:
            return record, bad
    return None, bad


def spec_key(spec: str) -> str:
    """What identifies a topology given to ``testbed up``: its file name (or zoo name)."""
    return Path(spec).name


# ------------------------------------------------------------------ what the host has

def namespace_markers(spaces: list[str]) -> dict[str, tuple[str, Maker] | None]:
    """Each namespace's marker (from its ``lo`` alias), ``None`` for one without."""
    found: dict[str, tuple[str, Maker] | None] = {}
    for name in spaces:
        shown = subprocess.run(["ip", "-n", name, "-j", "link", "show", "lo"],
                               capture_output=True, text=True)
        try:
            alias = json.loads(shown.stdout or "[]")[0].get("ifalias")
        except (json.JSONDecodeError, IndexError, AttributeError):
            alias = None
        found[name] = read_marker(alias)
    return found


def host_names(prefix: str) -> tuple[list[str], dict[str, str | None]]:
    """Namespaces whose name starts with ``prefix``, and root-namespace devices that do,
    with each device's alias."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    spaces = [line.split()[0] for line in listed.splitlines()
              if line.strip().startswith(prefix)]
    shown = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True)
    try:
        devices = {item["ifname"]: item.get("ifalias") for item in
                   json.loads(shown.stdout or "[]")
                   if str(item.get("ifname", "")).startswith(prefix)}
    except (json.JSONDecodeError, KeyError, TypeError):
        devices = {}
    return spaces, devices
