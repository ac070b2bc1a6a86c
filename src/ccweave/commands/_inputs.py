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


def _number(text: str) -> object:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)
