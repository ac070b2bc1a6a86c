"""Shared argument parsing for commands: topologies, collectives, sizes, schedule files,
and the checks every command that starts ranks (``run``, ``bench``) makes before any
starts: a flag's value is refused, never quietly replaced by another."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ccweave import outfile
from ccweave import schedule as schedule_io
from ccweave.collectives import Collective, Kind
from ccweave.errors import InputError
from ccweave.schedule import Schedule
from ccweave.topology import io as topology_io
from ccweave.topology.model import Topology
from ccweave.units import format_size, parse_sizes, shown

MAX_TIMEOUT_S = 7 * 24 * 3600.0
"""The longest ``--timeout``, a week: torch and the standard library hold waits in
integers and overflow on 1e300 (a traceback on every rank)."""
MAX_ITERS = 1_000_000
"""Timed or untimed runs per size: a million 1 KB allreduces take minutes already."""
MAX_REPS = 1000
"""``bench``'s rounds, every case once each."""
SYNTHESIS_ARGUMENTS: dict[str, str | None] = {
    "topology": "the TOPOLOGY argument", "kind": "the COLLECTIVE argument",
    "strategy": "--strategy", "root": "--root", "progress": None}
"""Arguments of synthesis that ``--option`` must not give (a clash was a TypeError
traceback): the flag that gives each, or ``None``."""

TOPO_HELP = "a zoo name (dgx1, ndv2:2, dgx-a100:4, ring:8, torus:4x4...) or a topology JSON file"


def topology(spec: str) -> Topology:
    return topology_io.load(spec)


def output(path: str, *inputs: str | None, flag: str = "-o") -> bool:
    """Refuse an output path that cannot be written or is one of ``inputs`` (before any
    work); whether writing it will replace a file."""
    outfile.check(path, inputs, flag)
    return outfile.replaces(path)


def kind(text: str) -> Kind:
    return Kind.parse(text)


def sizes(text: str) -> list[int]:
    return parse_sizes(text)


def measured_sizes(text: str, flag: str = "--sizes") -> list[int]:
    """Sizes to measure: each once (a range whose FACTOR is close to 1 rounds several
    steps to one byte count; a repeated size would be measured and reported twice). An
    error names ``flag``: bench takes two lists of sizes."""
    try:
        found = parse_sizes(text)
    except InputError as error:
        raise InputError(f"{flag}: {error}") from None
    seen: set[int] = set()
    for size in found:
        if size in seen:
            raise InputError(f"{flag} {shown(text)}: {format_size(size)} comes twice; give "
                             "each size once (a range: a larger FACTOR)")
        seen.add(size)
    return found


def timeout(value: float, flag: str = "--timeout") -> float:
    """Seconds: positive and finite, at most :data:`MAX_TIMEOUT_S`."""
    if not 0 < value <= MAX_TIMEOUT_S:
        raise InputError(f"{flag} {value}: give a positive number of seconds, at most "
                         f"{MAX_TIMEOUT_S:.0f} (a week)")
    return value


def count(value: int, flag: str, least: int, most: int = MAX_ITERS) -> int:
    """A whole number of runs or rounds in ``least..most``."""
    if not least <= value <= most:
        raise InputError(f"{flag} {value}: give a whole number from {least} to {most}")
    return value


def max_rate(value: float | None) -> float:
    """``--max-rate`` (Mbit/s, the fastest emulated link): the testbed's default when not
    given; 0, a negative rate, NaN or infinity refused (0 once meant the default)."""
    from ccweave.testbed.emulation import DEFAULT_MAX_RATE_MBIT

    if value is None:
        return DEFAULT_MAX_RATE_MBIT
    if not 0 < value < math.inf:
        raise InputError(f"--max-rate {value:g}: give the fastest emulated link's rate in "
                         f"Mbit/s, a positive number (default {DEFAULT_MAX_RATE_MBIT:g})")
    return value


def names(text: str, flag: str, example: str) -> list[str]:
    """A comma-separated list of names, each once; an empty name (``,,,``) is refused,
    not read as "the default"."""
    found = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not name for name in found):
        raise InputError(f"{flag} {shown(text)}: an empty name; write names between commas, "
                         f"e.g. {flag} {example} (leave {flag} out for the default)")
    twice = next((name for number, name in enumerate(found) if name in found[:number]), None)
    if twice is not None:
        raise InputError(f"{flag} {shown(text)}: {shown(twice)} comes twice; name each once")
    return found


def rank_buffer_bytes(collective: Collective, size: int, itemsize: int,
                      scratch_chunks: int = 0) -> int:
    """Bytes one rank allocates for ``collective`` at ``size``: its input, output and
    scratch, and about as much again (received data, the expected output)."""
    chunk = max(itemsize, size // collective.total_chunks)
    return 2 * chunk * (collective.input_chunks + collective.output_chunks + scratch_chunks)


def check_buffers(subject: str, backend: str, ranks_here: int, sizes: Iterable[int],
                  per_rank: Callable[[int], int]) -> None:
    """Refuse sizes whose buffers (``per_rank(size)`` bytes a rank) would not fit this
    host's memory (or the GPU's, for NCCL), before any rank starts or allocates."""
    from ccweave.runtime.launch import check_memory

    largest = max(sizes, key=per_rank)
    check_memory(subject, backend, ranks_here, per_rank(largest),
                 f"at {format_size(largest)}")


def channels_used(options: dict[str, object], schedules: Sequence[Schedule]) -> str | None:
    """One line when ``--option channels=N`` asked for more channels than a schedule got
    (ring and hierarchical take it as "at most": the ring search may find fewer), naming
    what runs instead; ``None`` when every schedule has what was asked."""
    asked = options.get("channels")
    if not isinstance(asked, int) or isinstance(asked, bool):
        return None
    short = {}
    for schedule in schedules:
        used = len({transfer.channel for transfer in schedule.transfers})
        if used < asked:
            short.setdefault(schedule.name or "the schedule", used)
    if not short:
        return None
    got = ", ".join(f"{name} with {used}" for name, used in short.items())
    return (f"--option channels={asked}: the search found fewer; running {got} "
            "channel(s)")


SCHEDULE_FIX = "make one with `ccweave synth`"


def read_input(path: str) -> tuple[str, bool]:
    """The text of a schedule, plan or algorithm file, read once (a pipe or /dev/stdin
    gives its text one time), and whether it is MSCCL XML (``.xml``, or text that starts
    with ``<``: a pipe has no suffix)."""
    from ccweave.infile import read_text

    text = read_text(path, SCHEDULE_FIX)
    return text, Path(path).suffix.lower() == ".xml" or text.lstrip().startswith("<")


def load_schedule(path: str) -> Schedule:
    """A schedule from ccweave JSON, MSCCL XML (``.xml``, or a file whose text starts with
    ``<``) or an MSCCL++ execution plan (JSON with ``gpus``)."""
    text, xml = read_input(path)
    return schedule_from_text(text, xml, path)


def schedule_from_text(text: str, xml: bool, path: str) -> Schedule:
    """:func:`load_schedule` on text :func:`read_input` read."""
    if xml:
        from ccweave.export import from_xml

        return from_xml(text, path)
    from ccweave.export import mscclpp
    from ccweave.jsonfile import parse

    data = parse(text, path, SCHEDULE_FIX)
    if mscclpp.is_plan(data):
        return mscclpp.from_data(data, path)
    if isinstance(data, dict) and data.get("format") == "ccweave.plan":
        raise InputError(f"{path}: a plan (a schedule per size range), not one schedule; "
                         "give one of its schedules, or `ccweave export` the plan")
    return schedule_io.from_dict(data, path)


def strategy_options(pairs: list[str] | None) -> dict[str, object]:
    """``--option key=value`` pairs as keyword arguments (ints and floats converted)."""
    options: dict[str, object] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--option {pair!r}: write KEY=VALUE, e.g. --option channels=2")
        options[key.replace("-", "_")] = _number(value)
    return options


def chunks_and_options(chunks: int | None, pairs: list[str] | None
                       ) -> tuple[int | None, dict[str, object]]:
    """``--chunks`` and the ``--option`` pairs of ``run`` and ``synth``: ``chunks=N`` among
    the options is ``--chunks N`` (``bench`` takes chunks as a strategy's option), and
    an option that has a flag of its own is refused naming the flag."""
    options = strategy_options(pairs)
    refuse_flag_options(options, SYNTHESIS_ARGUMENTS)
    if "chunks" in options:
        given = options.pop("chunks")
        if not isinstance(given, int) or given < 1:
            raise InputError(f"--option chunks={given}: write a whole number of chunks, "
                             "e.g. --option chunks=4")
        if chunks is not None and chunks != given:
            raise InputError(f"--chunks {chunks} and --option chunks={given} disagree; "
                             "give one")
        chunks = given
    return chunks, options


def refuse_flag_options(options: dict[str, object], flags: dict[str, str | None],
                        prefix: str = "--option ") -> None:
    """Refuse an option that is not a strategy's but has a flag of its own (or none)."""
    for key, flag in flags.items():
        if key in options:
            fix = f"use {flag}" if flag else "drop it"
            raise InputError(f"{prefix}{key}=...: not a strategy option; {fix}")


def _number(text: str) -> object:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)
