"""Measured NCCL times to fit NCCL's model to: nccl-tests output taken under NCCL_ALGO and
NCCL_PROTO sweeps, or the CSV NVIDIA's ``optimize_config.py`` reads.

nccl-tests (NVIDIA/nccl-tests ``src/common.cu``, ``src/util.cu``) prints one row per size,
``size count type redop root time algbw busbw #wrong`` (out-of-place, then in-place);
ccweave takes the out-of-place time. Which algorithm and protocol a run was forced to comes
from NCCL's own line under ``NCCL_DEBUG=INFO`` (``NCCL_ALGO set by environment to Ring``,
``src/graph/tuning.cc``) or from a line holding ``NCCL_ALGO=ring`` (``NCCL_PROTO``
likewise): each applies to the rows after it, so sweeps can be appended into one file. The
collective comes from nccl-tests' first or last line (``# Collective test starting:
all_reduce_perf``, ``... concluded: ...``), or else from the rows (``redop``, ``root``, and
``size`` against ``count`` x the type's size).

The CSV has the columns ``collective,size_bytes,algorithm,protocol,channels,nodes,ranks,
pipeOps,regBuff`` and ``latency_us`` (the time, as ``optimize_config.py`` minimises it).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from ccweave.errors import InputError
from ccweave.nccl import constants as C

TYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
              "half": 2, "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1,
              "fp8_e4m3": 1, "fp8_e5m2": 1}
"""Bytes per element of nccl-tests' type names."""

PROGRAMS = {"all_reduce": "allreduce", "all_gather": "allgather",
            "reduce_scatter": "reducescatter", "broadcast": "broadcast", "reduce": "reduce"}
"""nccl-tests binaries (``all_reduce_perf``, ``..._perf_mpi``) by collective."""

_ALGO_NAMES = {"tree": "tree", "ring": "ring", "collnetdirect": "collnet_direct",
               "collnetchain": "collnet_chain", "nvls": "nvls", "nvlstree": "nvls_tree",
               "pat": "pat"}
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")
_SET = re.compile(r"NCCL_(ALGO|PROTO)(?:\s+set by environment to\s+|=)\s*([^\s\"']+)")
_PROGRAM = re.compile(r"#\s*Collective test (starting|concluded):\s*(\S+)")
_RANK = re.compile(r"^#\s+Rank\s+\d+\s")

CSV_COLUMNS = ("collective", "size_bytes", "algorithm", "protocol")


@dataclass(frozen=True)
class Measurement:
    """One measured call: NCCL forced to ``algorithm``/``protocol`` took ``time_us``."""

    collective: str
    size_bytes: int
    algorithm: str
    protocol: str
    time_us: float
    ranks: int = -1
    nodes: int = -1
    where: str = ""
    """File and line, for messages."""


def read(path: str | Path) -> list[Measurement]:
    """Measurements from ``path``: the CSV (a ``collective,...`` header) or nccl-tests
    output."""
    from ccweave.infile import read_text

    text = read_text(path, "give nccl-tests output or optimize_config.py's CSV",
                     errors="replace", flag="--measured")
    first = next((line for line in text.splitlines() if line.strip()), "")
    if first.replace(" ", "").lower().startswith("collective,"):
        found = parse_csv(text, str(path))
    else:
        found = parse_nccl_tests(text, str(path))
    if not found:
        raise InputError(f"--measured {path}: no measurements; give nccl-tests output or "
                         "the CSV optimize_config.py reads (collective,size_bytes,...)")
    return found


def parse_csv(text: str, where: str) -> list[Measurement]:
    """Rows of the CSV ``optimize_config.py`` reads; the time is ``latency_us``."""
    reader = csv.DictReader(io.StringIO(text))
    columns = [c.strip() for c in reader.fieldnames or ()]
    missing = [c for c in (*CSV_COLUMNS, "latency_us") if c not in columns]
    if missing:
        raise InputError(f"{where}: no column {', '.join(missing)}; ccweave fits times, so "
                         "give latency_us (microseconds) beside collective,size_bytes,"
                         "algorithm,protocol")
    found = []
    for number, row in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
        at = f"{where}:{number}"
        found.append(Measurement(
            _collective(row["collective"], at), _count(row["size_bytes"], at, "size_bytes"),
            _algorithm(row["algorithm"], at), _protocol(row["protocol"], at),
            _time(row["latency_us"], at, "latency_us"),
            _shape(row.get("ranks", "-1"), at, "ranks"),
            _shape(row.get("nodes", "-1"), at, "nodes"), at))
    return found


def parse_nccl_tests(text: str, where: str) -> list[Measurement]:
    """Rows of nccl-tests output; see the module's description."""
    algo = proto = collective = None
    ranks = 0
    pending: list[tuple[int, int, str, str, int, float, str, str | None, str | None]] = []
    found: list[Measurement] = []

    def flush(collective: str | None) -> None:
        for size, count, dtype, redop, root, time, at, a, p in pending:
            name = collective or _infer(size, count, dtype, redop, root, ranks, at)
            if a is None or p is None:
                raise InputError(f"{at}: no NCCL_ALGO/NCCL_PROTO before this row; run "
                                 "nccl-tests with NCCL_DEBUG=INFO (NCCL prints 'NCCL_ALGO set "
                                 "by environment to ...') or add a line NCCL_ALGO=ring "
                                 "NCCL_PROTO=simple above the rows")
            found.append(Measurement(name, size, a, p, time, ranks or -1, -1, at))
        pending.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        at = f"{where}:{number}"
        for key, value in _SET.findall(line):
            if key == "ALGO":
                algo = _algorithm(value, at, forced=True)
            else:
                proto = _protocol(value, at, forced=True)
        if _RANK.match(line):
            ranks += 1
            continue
        program = _PROGRAM.search(line)
        if program:
            name = _program(program.group(2), at)
            if program.group(1) == "starting":
                flush(None)
                ranks = 0
                collective = name
            else:
                flush(name)
                collective = None
            continue
        row = _ROW.match(line)
        if row and not line.lstrip().startswith("#"):
            size, count, dtype, redop, root, time = row.groups()[:6]
            pending.append((_bytes(size, at), _count(count, at, "count"), dtype, redop,
                            _root(root, at), _time(time, at, "time"), at, algo, proto))
            if collective is not None:
                flush(collective)
    flush(None)
    return found


def _infer(size: int, count: int, dtype: str, redop: str, root: int, ranks: int,
           at: str) -> str:
    """The collective of a nccl-tests row without the program's name."""
    if root >= 0:
        return "broadcast" if redop == "none" else "reduce"
    if redop != "none" and dtype in TYPE_BYTES:
        if size == count * TYPE_BYTES[dtype]:
            return "allreduce"
        if ranks and size == count * TYPE_BYTES[dtype] * ranks:
            return "reducescatter"
    raise InputError(f"{at}: cannot tell which collective this row measured (allgather and "
                     "alltoall print alike); keep nccl-tests' line '# Collective test "
                     "starting: NAME_perf'")


def _program(name: str, at: str) -> str:
    base = Path(name).name
    for prefix, collective in PROGRAMS.items():
        if base.startswith(prefix + "_perf"):
            return collective
    raise InputError(f"{at}: {base} is not a collective NCCL's tuner chooses for; give "
                     + ", ".join(f"{p}_perf" for p in PROGRAMS))


def _collective(text: str, at: str) -> str:
    key = text.lower().replace("_", "").replace("-", "")
    if key not in C.FUNCTIONS:
        raise InputError(f"{at}: collective {text!r}; NCCL's tuner knows "
                         + ", ".join(C.FUNCTIONS))
    return key


def _algorithm(text: str, at: str, forced: bool = False) -> str:
    key = text.lower().replace("_", "")
    if forced and any(c in text for c in ",;:^"):
        raise InputError(f"{at}: NCCL_ALGO={text}: a sweep forces one algorithm per run; "
                         "give one name (ring, tree, nvls, nvlstree, pat)")
    if key not in _ALGO_NAMES:
        raise InputError(f"{at}: algorithm {text!r}; NCCL's are "
                         + ", ".join(C.ALGORITHMS))
    return _ALGO_NAMES[key]


def _protocol(text: str, at: str, forced: bool = False) -> str:
    key = text.lower()
    if forced and any(c in text for c in ",;:^"):
        raise InputError(f"{at}: NCCL_PROTO={text}: a sweep forces one protocol per run; "
                         "give one name (LL, LL128, Simple)")
    if key not in C.PROTOCOLS:
        raise InputError(f"{at}: protocol {text!r}; NCCL's are " + ", ".join(C.PROTOCOLS))
    return key


def _bytes(text: str, at: str) -> int:
    """A row's size: a whole number of bytes up to ccweave's largest message (a 30-digit
    size was taken as measured)."""
    from ccweave.limits import MAX_SIZE_BYTES

    value = _count(text, at, "size")
    if value > MAX_SIZE_BYTES:
        raise InputError(f"{at}: size {text}: over the largest message ccweave models "
                         f"({MAX_SIZE_BYTES:,} bytes); is the row cut or shifted?")
    return value


def _root(text: str, at: str) -> int:
    """A row's root: -1 (none), or a rank."""
    from ccweave.limits import MAX_RANKS

    value = int(text) if len(text) <= 12 else MAX_RANKS
    if not -1 <= value < MAX_RANKS:
        raise InputError(f"{at}: root {text[:20]}: give -1 (no root) or a rank")
    return value


def _count(text: str, at: str, column: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise InputError(f"{at}: {column} {text!r}: give a whole number of bytes >= 0")
    return value


def _time(text: str, at: str, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{at}: {column} {text!r}: give a time in microseconds above 0")
    return value


def _shape(text: str, at: str, column: str) -> int:
    try:
        value = int(text) if text else -1
    except ValueError:
        value = 0
    if value == 0 or value < -1:
        raise InputError(f"{at}: {column} {text!r}: give a whole number >= 1, or -1 for any")
    return value
