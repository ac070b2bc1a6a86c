"""What the MSCCL runtimes accept: step types, collective names and limits.

Facts come from the two runtime parsers: microsoft/msccl (``src/graph/topo.cc``,
``src/include/msccl.h``; loaded with ``MSCCL_XML_FILES`` or ``MSCCL_CONFIG``) and the
Azure/msccl executor (``src/misc/msccl/msccl_parser.cc``; loaded from
``MSCCL_ALGO_DIR``). The exporter, the importer and the checker share them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ccweave.collectives import Buffer, Kind
from ccweave.errors import InputError

MAX_STEPS = 256
"""MSCCL_MAX_NUM_STEPS: steps of one threadblock, nops included."""
MAX_COUNT = 72
"""MSCCL_MAX_COUNT: a step's ``cnt`` must be below this."""
MAX_THREADBLOCKS = 216
"""MSCCL_MAX_NUM_THREAD_BLOCKS of microsoft/msccl (108 SMs x 2); the executor allows more."""
MAX_TBS_PER_CHANNEL = 32
"""MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL: threadblocks with a send (or a recv) peer."""
MAX_CHANNELS = 32
"""NCCL's MAXCHANNELS."""
MAX_NODES = 4096
"""The XML parser's node table: algo + gpus + one rank's tbs and steps must fit."""
MAX_ALGOS = 4
"""MSCCL_MAX_NUM_ALGOS of microsoft/msccl: algorithms one MSCCL_CONFIG may load."""
MAX_CHUNKS = 1 << 15
"""Offsets are int16 in both runtimes: a buffer has at most 32768 addressable chunks."""
MAX_DEPID = 127
"""``depid`` is stored in an int8: a step can wait on threadblocks 0..127 only."""
PROTOCOLS = ("Simple", "LL", "LL128")

BUFFER_CODE = {Buffer.INPUT: "i", Buffer.OUTPUT: "o", Buffer.SCRATCH: "s"}
CODE_BUFFER = {code: buffer for buffer, code in BUFFER_CODE.items()}


class Runtime(str, enum.Enum):
    """Which MSCCL runtime an XML file is for; they spell a few things differently."""

    MSCCL = "msccl"
    """microsoft/msccl and msccl-tools: ``reduce_scatter``; maxBytes exclusive, sizes scratch."""
    AZURE = "azure"
    """Azure/msccl executor: ``reducescatter``, gather, scatter; maxBytes inclusive, 0 = none."""

    @classmethod
    def parse(cls, text: str | Runtime) -> Runtime:
        try:
            return cls(text)
        except ValueError:
            raise InputError(f"unknown MSCCL runtime {text!r}; choose msccl or azure") from None


COLL_NAMES: dict[Runtime, dict[Kind, str]] = {
    Runtime.MSCCL: {Kind.ALLGATHER: "allgather", Kind.REDUCESCATTER: "reduce_scatter",
                    Kind.ALLREDUCE: "allreduce", Kind.ALLTOALL: "alltoall",
                    Kind.BROADCAST: "broadcast", Kind.REDUCE: "reduce"},
    Runtime.AZURE: {Kind.ALLGATHER: "allgather", Kind.REDUCESCATTER: "reducescatter",
                    Kind.ALLREDUCE: "allreduce", Kind.ALLTOALL: "alltoall",
                    Kind.BROADCAST: "broadcast", Kind.REDUCE: "reduce",
                    Kind.GATHER: "gather", Kind.SCATTER: "scatter"},
}
"""``coll`` per runtime; a collective without a name is written ``coll="custom"`` with
ccweave's ``collective`` attribute (microsoft/msccl runs custom collectives)."""
CUSTOM = "custom"


@dataclass(frozen=True)
class StepType:
    """One step type and the operands the runtime uses (src: local operand or source,
    dst: local destination)."""

    code: str
    sends: bool = False
    receives: bool = False
    reduces: bool = False
    reads_src: bool = False
    writes_dst: bool = False

    @property
    def is_nop(self) -> bool:
        return self.code == "nop"

    @property
    def is_local(self) -> bool:
        return self.code in ("cpy", "re")


STEP_TYPES = {t.code: t for t in (
    StepType("s", sends=True, reads_src=True),
    StepType("r", receives=True, writes_dst=True),
    StepType("rcs", sends=True, receives=True, writes_dst=True),
    StepType("rrs", sends=True, receives=True, reduces=True, reads_src=True),
    StepType("rrc", receives=True, reduces=True, reads_src=True, writes_dst=True),
    StepType("rrcs", sends=True, receives=True, reduces=True, reads_src=True, writes_dst=True),
    StepType("cpy", reads_src=True, writes_dst=True),
    StepType("re", reduces=True, reads_src=True, writes_dst=True),
    StepType("nop"),
)}
"""rcs forwards what it stored at dst; rrs forwards recv+src without storing it (the
msccl-tools meaning: the reduced value belongs in src, which is overwritten later);
rrc/rrcs store recv+src at dst; re adds src into dst."""


def input_multiplier(kind: Kind, num_ranks: int) -> tuple[int, int]:
    """microsoft/msccl's check: i_chunks * first == nchunksperloop, o_chunks * second ==
    nchunksperloop (when nonzero)."""
    if kind is Kind.ALLGATHER:
        return num_ranks, 1
    if kind is Kind.REDUCESCATTER:
        return 1, num_ranks
    return 1, 1
