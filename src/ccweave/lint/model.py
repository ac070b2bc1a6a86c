"""What ``ccweave lint`` checks and says: the runtimes, the job's calls, the rules and the
findings.

A *rule* is one condition in a runtime's own code under which it runs the loaded
algorithm; a *finding* is a rule the file (or the job's calls, or its environment) breaks,
so the runtime silently runs its own algorithm instead (or, where said, fails or computes
something else). A finding is one line: the rule, the value that breaks it, the fix.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from ccweave.errors import InputError


class Runtime(str, enum.Enum):
    """Which runtime loads the file; each has its own selection code."""

    RCCL = "rccl"
    """ROCm/rccl with MSCCL built in (``MSCCL_ALGO_DIR``), ``src/misc/msccl/``."""
    MSCCL = "msccl"
    """microsoft/msccl, the NCCL 2.12 fork (``MSCCL_XML_FILES`` / ``MSCCL_CONFIG``)."""
    AZURE = "azure"
    """The Azure/msccl executor on NCCL (Azure/msccl-executor-nccl, ``MSCCL_ALGO_DIR``)."""
    MSCCLPP = "mscclpp"
    """MSCCL++'s NCCL shim (``libmscclpp_nccl.so``) running execution plans."""

    @classmethod
    def parse(cls, text: str | Runtime) -> Runtime:
        try:
            return cls(text)
        except ValueError:
            raise InputError(f"--runtime {text!r}: choose one of "
                             + ", ".join(r.value for r in cls)) from None


DTYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
               "float16": 2, "float32": 4, "float64": 8, "bfloat16": 2, "float8e4m3": 1,
               "float8e5m2": 1}
"""``ncclDataType_t``'s types and their sizes (``ncclTypeSize``)."""
OPS = ("sum", "prod", "max", "min", "avg", "premulsum")
"""``ncclRedOp_t`` in NCCL's order: ``op >= ncclAvg`` is avg and premulsum."""


@dataclass(frozen=True)
class Call:
    """The calls a job makes with the algorithm, as far as the user says.

    ``sizes`` are nccl-tests' sizes (the whole buffer: allgather's output, reduce-scatter's
    input); ``inplace`` ``None`` checks in-place and out-of-place calls both; ``ranks``
    ``None`` takes the file's own; ``env`` ``None`` leaves the environment rules out.
    """

    ranks: int | None = None
    sizes: tuple[int, ...] = ()
    dtype: str = "float32"
    op: str = "sum"
    inplace: bool | None = None
    ranks_per_process: int = 1
    env: Mapping[str, str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise InputError(f"--dtype {self.dtype!r}: choose one of {', '.join(DTYPE_BYTES)}")
        if self.op not in OPS:
            raise InputError(f"--op {self.op!r}: choose one of {', '.join(OPS)}")
        if self.ranks is not None and self.ranks < 1:
            raise InputError(f"--ranks {self.ranks}: give the communicator's size, 1 or more")
        if self.ranks_per_process < 1:
            raise InputError(f"--ranks-per-process {self.ranks_per_process}: give 1 or more "
                             "(GPUs one process drives)")
        if any(size <= 0 for size in self.sizes):
            raise InputError("--sizes: give positive sizes, e.g. 1MB,64MB")
        element = DTYPE_BYTES[self.dtype]
        odd = [size for size in self.sizes if size % element]
        if odd:
            raise InputError(f"--sizes: {odd[0]} B is not a whole number of {self.dtype} "
                             f"elements ({element} B each); give sizes in whole elements")

    @property
    def element_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def kinds(self) -> tuple[bool, ...]:
        """The call kinds checked: (True,) in place, (False,) out of place, or both."""
        return (True, False) if self.inplace is None else (self.inplace,)


@dataclass(frozen=True)
class Rule:
    """One condition of a runtime's selection code, and where it is."""

    id: str
    runtime: Runtime
    source: str
    """``repository path function``, as read (docs/lint.md has the commits)."""
    requires: str
    """What the runtime needs, in a line."""


@dataclass(frozen=True)
class Finding:
    """A rule broken: what and its value, and the fix. ``note``: the runtime falls back
    unless something lint cannot see holds (the machine's model, the RCCL release)."""

    rule: str
    message: str
    fix: str
    note: bool = False

    def line(self) -> str:
        return f"{'note' if self.note else 'finding'} {self.rule}: {self.message}; fix: {self.fix}"


@dataclass(frozen=True)
class Report:
    """Every finding on one file for one runtime, in rule order."""

    source: str
    runtime: Runtime
    collective: str
    ranks: int
    findings: tuple[Finding, ...]

    @property
    def problems(self) -> tuple[Finding, ...]:
        """The findings that are certain (not notes)."""
        return tuple(f for f in self.findings if not f.note)

    @property
    def ok(self) -> bool:
        return not self.problems


def sizes_text(sizes: list[int], limit: int = 3) -> str:
    """A few sizes in bytes for a one-line message, with how many more."""
    from ccweave.units import format_size

    shown = ", ".join(format_size(size) for size in sizes[:limit])
    more = len(sizes) - limit
    return shown + (f" and {more} more" if more > 0 else "")


def env_int(env: Mapping[str, str], name: str) -> int | None:
    """An integer environment variable as NCCL's ``ncclLoadParam`` reads it (``strtoll``
    base 0); ``None`` when unset or empty."""
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        return int(text, 0)
    except ValueError:
        digits = ""
        for ch in text.lstrip("+-"):
            if not ch.isdigit():
                break
            digits += ch
        value = int(digits) if digits else 0
        return -value if text.startswith("-") else value
