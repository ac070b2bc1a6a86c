"""MSCCL XML as typed records: ``algo`` > ``gpu`` > ``tb`` > ``step``, attributes parsed.

:func:`parse_algo` reads an element tree and reports every missing or ill-typed
attribute by element and name; the records it returns hold exactly what the file says
(the checker judges it). Unknown elements are skipped, as the runtime parsers do.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from ccweave.export.problems import XmlProblem, where

_INT = re.compile(r"-?\d{1,18}")


@dataclass(frozen=True)
class StepXml:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int


@dataclass(frozen=True)
class TbXml:
    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[StepXml, ...]


@dataclass(frozen=True)
class GpuXml:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: tuple[TbXml, ...]


@dataclass(frozen=True)
class AlgoXml:
    """The ``algo`` element; optional attributes are ``None`` when absent. ``collective``,
    ``root`` and ``peer`` are ccweave's (custom collectives, rooted collectives)."""

    name: str
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: int
    gpus: tuple[GpuXml, ...]
    outofplace: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    collective: str | None = None
    root: int | None = None
    peer: int | None = None


class _Reader:
    """Reads attributes, collecting a problem for each missing or malformed one."""

    def __init__(self) -> None:
        self.problems: list[XmlProblem] = []

    def text(self, elem: ET.Element, name: str, place: str, required: bool = True) -> str | None:
        value = elem.get(name)
        if value is None and required:
            self.problems.append(XmlProblem(place, "is missing", name))
        return value

    def int(self, elem: ET.Element, name: str, place: str, required: bool = True) -> int | None:
        value = self.text(elem, name, place, required)
        if value is None:
            return None
        if not _INT.fullmatch(value.strip()):
            self.problems.append(XmlProblem(place, f"is {value!r}, not an integer", name))
            return None
        return int(value)


def parse_algo(root: ET.Element) -> tuple[AlgoXml | None, list[XmlProblem]]:
    """The records of ``root`` (an ``algo`` element), or ``None`` with the problems that
    keep it from being read."""
    if root.tag != "algo":
        return None, [XmlProblem("document", f"the root element is <{root.tag}>, expected "
                                 "<algo> (an MSCCL algorithm)")]
    r = _Reader()
    place = "algo"
    fields = {name: r.text(root, name, place) for name in ("name", "proto", "coll")}
    numbers = {name: r.int(root, name, place)
               for name in ("nchannels", "nchunksperloop", "ngpus", "inplace")}
    optional = {key: r.int(root, name, place, required=False)
                for key, name in (("outofplace", "outofplace"), ("min_bytes", "minBytes"),
                                  ("max_bytes", "maxBytes"), ("root", "root"),
                                  ("peer", "peer"))}
    gpus = []
    for elem in root.findall("gpu"):
        gpu = _gpu(r, elem)
        if gpu is not None:
            gpus.append(gpu)
    if r.problems:
        return None, r.problems
    algo = AlgoXml(gpus=tuple(gpus), collective=root.get("collective"), **fields, **numbers,
                   **optional)
    return algo, []


def _gpu(r: _Reader, elem: ET.Element) -> GpuXml | None:
    gid = r.int(elem, "id", "gpu ?")
    place = where(gid) if gid is not None else f"gpu element {elem.get('id')!r}"
    sizes = [r.int(elem, name, place) for name in ("i_chunks", "o_chunks", "s_chunks")]
    tbs = [tb for tb in (_tb(r, child, gid) for child in elem.findall("tb")) if tb is not None]
    if gid is None or None in sizes:
        return None
    return GpuXml(gid, *sizes, tuple(tbs))  # type: ignore[arg-type]


def _tb(r: _Reader, elem: ET.Element, gid: int | None) -> TbXml | None:
    tid = r.int(elem, "id", where(gid) + " tb ?")
    place = where(gid, tid)
    peers = [r.int(elem, name, place) for name in ("send", "recv", "chan")]
    steps = []
    for position, child in enumerate(elem.findall("step")):
        step = _step(r, child, gid, tid, position)
        if step is not None:
            steps.append(step)
    if tid is None or None in peers:
        return None
    return TbXml(tid, *peers, tuple(steps))  # type: ignore[arg-type]


def _step(r: _Reader, elem: ET.Element, gid: int | None, tid: int | None,
          position: int) -> StepXml | None:
    place = where(gid, tid, position)
    values = {}
    for name in ("s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep"):
        values[name] = r.int(elem, name, place)
    for name in ("type", "srcbuf", "dstbuf"):
        values[name] = r.text(elem, name, place)
    if None in values.values():
        return None
    return StepXml(**values)  # type: ignore[arg-type]
