"""Shared argument parsing for commands: topologies, collectives, sizes, schedule files."""

from __future__ import annotations

from pathlib import Path

from ccweave import outfile
from ccweave import schedule as schedule_io
from ccweave.collectives import Kind
from ccweave.errors import InputError
from ccweave.schedule import Schedule
from ccweave.topology import io as topology_io
from ccweave.topology.model import Topology
from ccweave.units import parse_sizes

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


def load_schedule(path: str) -> Schedule:
    """A schedule from ccweave JSON, or from MSCCL XML (``.xml``)."""
    if Path(path).suffix.lower() == ".xml":
        try:
            from ccweave.export import msccl_xml
        except ImportError:
            raise InputError(f"{path}: reading MSCCL XML needs ccweave.export.msccl_xml, "
                             "which this installation lacks") from None
        return msccl_xml.read(path)
    return schedule_io.load(path)


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
    for key, flag in (("root", "--root"), ("progress", None)):
        if key in options:
            fix = f"use {flag}" if flag else "drop it"
            raise InputError(f"--option {key}=...: not a strategy option; {fix}")
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


def _number(text: str) -> object:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)
