"""NCCL Inspector's output read as calls: per collective call (JSON) or per size bucket
(Prometheus), its size, time, bus bandwidth and, where recorded, what NCCL ran.

The Inspector is NCCL's profiler plugin ``plugins/profiler/inspector`` (NVIDIA/nccl
5067397c, format of ``inspector_json.cc`` and ``inspector_prom.cc``, documented in its
README):

- JSON (the default): one object per call and communicator, ``header`` (``n_ranks``,
  ``nnodes``, ``id``) and ``coll_perf`` (``coll``, ``coll_msg_size_bytes``,
  ``coll_exec_time_us``, ``coll_busbw_gbs``; verbose files add ``kernel_events``, one per
  channel). It does not record the algorithm or protocol.
- Prometheus (``NCCL_INSPECTOR_PROM_DUMP=1``): ``nccl_bus_bandwidth_gbs{...}`` (geometric
  mean) and ``nccl_collective_exec_time_microseconds{...}`` (mean) per communicator,
  collective, ``message_size`` bucket and ``algo_proto`` (``Ring_LL``): what ran.

``coll_msg_size_bytes`` is one rank's part for allgather and reduce-scatter
(``inspectorComputeOpBw`` multiplies it by the ranks); :class:`Call` holds nccl-tests'
size, the whole buffer.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ccweave.collectives import Kind
from ccweave.errors import InputError
from ccweave.nccl import constants as C

COLLECTIVES = {"AllReduce": Kind.ALLREDUCE, "AllGather": Kind.ALLGATHER,
               "ReduceScatter": Kind.REDUCESCATTER, "Broadcast": Kind.BROADCAST,
               "Reduce": Kind.REDUCE}
"""``ncclFuncToString``'s names of the collectives NCCL's tuning model chooses for."""
PER_RANK = (Kind.ALLGATHER, Kind.REDUCESCATTER)
_ALGORITHMS = {name.replace("_", ""): name for name in C.ALGORITHMS}
"""NCCL's ``ncclAlgoStr`` (Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT),
lowercased, to ccweave's spelling."""
_UNITS = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}
_BUCKET = re.compile(r"^(\d+)-(\d+)(B|KB|MB|GB|TB)$")
_PROM_LINE = re.compile(r"^(nccl_bus_bandwidth_gbs|nccl_collective_exec_time_microseconds)"
                        r"\{(.*)\}\s+(\S+)\s*$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
MAX_FILE_BYTES = 4 * 2**30
"""Larger files are refused before reading (a run of millions of calls: give a part)."""


@dataclass(frozen=True)
class Call:
    """One call (JSON) or one bucket of calls (Prometheus), in nccl-tests' terms."""

    collective: Kind
    size_bytes: int
    """The whole buffer, as nccl-tests prints it."""
    time_s: float
    busbw_GBps: float
    ranks: int
    nodes: int
    communicator: str
    source: str
    algorithm: str | None = None
    """NCCL's algorithm as :data:`ccweave.nccl.constants.ALGORITHMS` spells it; ``None``
    where the record does not say (JSON)."""
    protocol: str | None = None
    channels: int | None = None
    """Channels that ran kernels (verbose JSON's ``kernel_events``)."""
    bucket: str | None = None
    """Prometheus' ``message_size`` label (one rank's size for allgather, reduce-scatter)."""


@dataclass(frozen=True)
class Reading:
    """The calls found, and what was left out with why (point-to-point, other
    collectives)."""

    calls: tuple[Call, ...]
    skipped: tuple[str, ...]


def read(paths: Iterable[str | Path]) -> Reading:
    """Every call in Inspector files or directories (each file in a directory, sorted);
    ``InputError`` names the file, the place and the field that cannot be read."""
    calls: list[Call] = []
    skipped: dict[str, int] = {}
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file())
            if not found:
                raise InputError(f"{path}: an empty directory; give NCCL Inspector's output "
                                 "(NCCL_INSPECTOR_DUMP_DIR)")
            files.extend(found)
        else:
            files.append(path)
    for path in files:
        text = _text(path)
        if _PROM_LINE.search(text.lstrip().split("\n", 1)[0]) or text.lstrip().startswith("#"):
            calls.extend(_prometheus(text, str(path), skipped))
        else:
            calls.extend(_json(text, str(path), skipped))
    if not calls:
        left = "; ".join(f"{n} {what}" for what, n in skipped.items())
        raise InputError(f"{', '.join(map(str, files))}: no collective calls NCCL's model "
                         "covers (AllReduce, AllGather, ReduceScatter, Broadcast, Reduce)"
                         + (f"; left out: {left}" if left else "")
                         + "; give NCCL Inspector's output (NCCL_INSPECTOR_ENABLE=1)")
    return Reading(tuple(calls), tuple(f"{n} {what}" for what, n in skipped.items()))


def _text(path: Path) -> str:
    from ccweave.infile import read_text

    return read_text(path, "give NCCL Inspector's JSON or Prometheus output; of a larger "
                     "file, the calls of one phase, e.g. with head -n", limit=MAX_FILE_BYTES)


# ---------------------------------------------------------------- JSON


def _json(text: str, source: str, skipped: dict[str, int]) -> list[Call]:
    """Objects one after another (the plugin writes one per line; the README shows them
    indented): each is a call."""
    from ccweave.jsonfile import MAX_DEPTH, nesting_depth

    depth = nesting_depth(text)  # before any parsing: json recurses once per level
    if depth > MAX_DEPTH:
        raise InputError(f"{source}: arrays or objects nested {depth:,} deep (a record nests "
                         f"3; at most {MAX_DEPTH}); give NCCL Inspector's output")
    decoder = json.JSONDecoder(parse_constant=_no_constant)
    calls, at, line = [], 0, 1
    while True:
        start = _skip_space(text, at)
        line += text.count("\n", at, start)
        if start >= len(text):
            return calls
        place = f"{source}:{line}"
        try:
            record, at = decoder.raw_decode(text, start)
        except json.JSONDecodeError as error:
            raise InputError(f"{place}: not NCCL Inspector output: {error.msg} (give the "
                             "JSON or Prometheus files NCCL_INSPECTOR_DUMP_DIR holds)") from None
        except ValueError as error:
            raise InputError(f"{place}: {error}") from None
        line += text.count("\n", start, at)
        call = _record(record, place, skipped)
        if call is not None:
            calls.append(call)


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON has")


def _record(record: object, place: str, skipped: dict[str, int]) -> Call | None:
    if not isinstance(record, dict):
        raise InputError(f"{place}: expected an object with header and coll_perf, got "
                         f"{type(record).__name__}")
    if "p2p_perf" in record:
        _count(skipped, "point-to-point records")
        return None
    header = _field(record, "header", dict, place)
    perf = _field(record, "coll_perf", dict, place)
    name = _field(perf, "coll", str, place, "coll_perf.")
    kind = COLLECTIVES.get(name)
    if kind is None:
        _count(skipped, f"{name} calls")
        return None
    ranks = _integer(header, "n_ranks", place, "header.", least=1)
    nodes = _integer(header, "nnodes", place, "header.", least=1)
    size = _integer(perf, "coll_msg_size_bytes", place, "coll_perf.", least=0)
    time_us = _number(perf, "coll_exec_time_us", place, "coll_perf.")
    if size == 0 or time_us <= 0:
        _count(skipped, "calls of 0 bytes or 0 us")
        return None
    whole = size * ranks if kind in PER_RANK else size
    busbw = _busbw(perf.get("coll_busbw_gbs"), kind, whole, time_us * 1e-6, ranks)
    events = perf.get("kernel_events")
    if events is None:
        trace = perf.get("event_trace_sn")
        events = trace.get("kernel_events") if isinstance(trace, dict) else None
    channels = len(events) if isinstance(events, list) and events else None
    return Call(kind, whole, time_us * 1e-6, busbw, ranks, nodes,
                str(header.get("comm_name") or header.get("id") or "?"), place,
                channels=channels)


def _busbw(value: object, kind: Kind, size: int, time_s: float, ranks: int) -> float:
    """The record's bus bandwidth, or nccl-tests' where it wrote "nan"."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return size / time_s / 1e9 * busbw_factor(kind, ranks)


def busbw_factor(kind: Kind, ranks: int) -> float:
    """nccl-tests' busbw / algbw, as the Inspector's ``inspectorComputeOpBw`` takes it (for
    any count of ranks a record may claim)."""
    if kind is Kind.ALLREDUCE:
        return 2 * (ranks - 1) / ranks
    if kind in PER_RANK:
        return (ranks - 1) / ranks
    return 1.0


def _field(data: dict, key: str, kind: type, place: str, prefix: str = ""):
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        what = {dict: "an object", str: "a string"}.get(kind, kind.__name__)
        raise InputError(f"{place}: {prefix}{key} is {_shown(value)}, expected {what} (NCCL "
                         "Inspector's JSON record)")
    return value


def _integer(data: dict, key: str, place: str, prefix: str, least: int) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InputError(f"{place}: {prefix}{key} is {_shown(value)}, expected an integer >= "
                         f"{least}")
    return value


def _number(data: dict, key: str, place: str, prefix: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not \
            math.isfinite(value) or value < 0:
        raise InputError(f"{place}: {prefix}{key} is {_shown(value)}, expected a number >= 0")
    return float(value)


def _shown(value: object) -> str:
    return "missing" if value is None else repr(value)[:40]


def _count(skipped: dict[str, int], what: str) -> None:
    skipped[what] = skipped.get(what, 0) + 1


# ---------------------------------------------------------------- Prometheus


def _prometheus(text: str, source: str, skipped: dict[str, int]) -> list[Call]:
    """Bus bandwidth and time lines paired by their labels; a bucket's size is the one its
    mean time and bandwidth imply, kept inside the bucket."""
    found: dict[tuple, dict[str, object]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _PROM_LINE.match(line)
        if match is None:
            if line.startswith("nccl_p2p_"):
                _count(skipped, "point-to-point buckets")
                continue
            raise InputError(f"{source}:{number}: not an NCCL Inspector metric line (expected "
                             "nccl_bus_bandwidth_gbs{...} or "
                             "nccl_collective_exec_time_microseconds{...} and a value)")
        metric, labels, value = match.groups()
        try:
            figure = float(value)
        except ValueError:
            raise InputError(f"{source}:{number}: the value {value!r} is not a number") from None
        if not math.isfinite(figure) or figure < 0:
            raise InputError(f"{source}:{number}: the value {value} is not a figure >= 0")
        names = dict(_LABEL.findall(labels))
        key = tuple(sorted(names.items()))
        entry = found.setdefault(key, {"labels": names, "place": f"{source}:{number}"})
        entry[metric] = figure
    calls = []
    for entry in found.values():
        call = _bucket(entry, skipped)
        if call is not None:
            calls.append(call)
    return calls


def _bucket(entry: dict, skipped: dict[str, int]) -> Call | None:
    labels, place = entry["labels"], entry["place"]
    name = labels.get("collective", "")
    kind = COLLECTIVES.get(name)
    if kind is None:
        _count(skipped, f"{name or 'unnamed'} buckets")
        return None
    for metric in ("nccl_bus_bandwidth_gbs", "nccl_collective_exec_time_microseconds"):
        if metric not in entry:
            raise InputError(f"{place}: {metric} is missing for these labels (the Inspector "
                             "writes both lines per bucket)")
    ranks = _label_int(labels, "nranks", place)
    nodes = _label_int(labels, "n_nodes", place)
    bucket = labels.get("message_size", "")
    match = _BUCKET.match(bucket)
    if match is None:
        raise InputError(f"{place}: message_size={bucket!r} is not a bucket like 4-5GB")
    unit = _UNITS[match.group(3)]
    scale = ranks if kind in PER_RANK else 1
    low, high = int(match.group(1)) * unit * scale, int(match.group(2)) * unit * scale
    time_s = float(entry["nccl_collective_exec_time_microseconds"]) * 1e-6
    busbw = float(entry["nccl_bus_bandwidth_gbs"])
    if time_s <= 0:
        _count(skipped, "buckets of 0 us")
        return None
    factor = busbw_factor(kind, ranks)
    implied = busbw / factor * 1e9 * time_s if factor else 0.0
    size = int(implied) if low <= implied < high else (low + high) // 2
    algorithm, protocol = _algo_proto(labels.get("algo_proto", ""))
    return Call(kind, max(size, 1), time_s, busbw, ranks, nodes,
                labels.get("comm_name", "?"), place, algorithm, protocol, bucket=bucket)


def _label_int(labels: dict[str, str], key: str, place: str) -> int:
    value = labels.get(key, "")
    if not value.isdigit() or int(value) < 1:
        raise InputError(f"{place}: label {key}={value!r}, expected a count >= 1")
    return int(value)


def _algo_proto(text: str) -> tuple[str | None, str | None]:
    """``Ring_LL`` -> ("ring", "ll"); unknown parts as ``None``."""
    algo, _, proto = text.rpartition("_")
    algorithm = _ALGORITHMS.get(algo.lower().replace("_", ""))
    protocol = proto.lower() if proto.lower() in C.PROTOCOLS else None
    return algorithm, protocol
