"""Collectives as chunk-level pre- and postconditions.

Every collective's *size buffer* (the one nccl-tests' ``size`` column measures: the
output of allgather/gather, the input of reduce-scatter/scatter/alltoall, the buffer
of allreduce/broadcast/reduce) holds ``num_ranks * chunks_per_rank`` chunks, so one
chunk is ``size / (num_ranks * chunks_per_rank)`` bytes for every collective.

Input chunk ``i`` of rank ``r`` is a *contribution*; an output slot's postcondition is
the set of contributions it must hold (one for data movement, one per rank for
reductions). Every slot of every collective needs contributions of a single input index,
so a set is packed into one int: ``(ranks_mask << index_bits) | index``. Sets of one
index unite with ``|``; a contribution reduced twice shows as ``(a & b) >> index_bits``;
values stay N + log2(chunks) bits wide even for reductions on many ranks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cached_property

from ccweave import limits
from ccweave.errors import InputError


class Kind(str, enum.Enum):
    """The eight collectives, spelled as NCCL/MSCCL spell them."""

    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    ALLREDUCE = "allreduce"
    ALLTOALL = "alltoall"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    GATHER = "gather"
    SCATTER = "scatter"
    SENDRECV = "sendrecv"
    """Point-to-point: ``root`` sends its buffer to ``peer`` (multipath transfers)."""

    @classmethod
    def parse(cls, text: str | Kind) -> Kind:
        if isinstance(text, Kind):
            return text
        key = str(text).lower().replace("-", "").replace("_", "")
        for kind in cls:
            if kind.value == key:
                return kind
        raise InputError(f"unknown collective {text!r}; choose one of "
                         + ", ".join(k.value for k in cls))

    @property
    def is_reduction(self) -> bool:
        return self in (Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.REDUCE)

    @property
    def is_rooted(self) -> bool:
        return self in (Kind.BROADCAST, Kind.REDUCE, Kind.GATHER, Kind.SCATTER, Kind.SENDRECV)

    @classmethod
    def collectives(cls) -> tuple[Kind, ...]:
        """The eight collectives (everything but point-to-point ``sendrecv``)."""
        return tuple(kind for kind in cls if kind is not Kind.SENDRECV)


class Buffer(str, enum.Enum):
    """A rank's buffers, in chunk units."""

    INPUT = "input"
    OUTPUT = "output"
    SCRATCH = "scratch"


# chunks of the input / output buffer, in units of chunks_per_rank ("c") or N*c ("full")
_SHAPES = {  # kind: (input is full, output is full)
    Kind.ALLGATHER: (False, True),
    Kind.REDUCESCATTER: (True, False),
    Kind.ALLREDUCE: (True, True),
    Kind.ALLTOALL: (True, True),
    Kind.BROADCAST: (True, True),
    Kind.REDUCE: (True, True),
    Kind.GATHER: (False, True),
    Kind.SCATTER: (True, False),
    Kind.SENDRECV: (True, True),
}


@dataclass(frozen=True)
class Collective:
    """One collective on ``num_ranks`` ranks, each buffer cut into chunks.

    Parameters
    ----------
    kind: which collective.
    num_ranks: ranks taking part, ``0..num_ranks-1``.
    chunks_per_rank: the size buffer holds ``num_ranks * chunks_per_rank`` chunks.
    root: the root of broadcast, reduce, gather and scatter; the sender of sendrecv.
    peer: the receiver of sendrecv (ignored otherwise).
    """

    kind: Kind
    num_ranks: int
    chunks_per_rank: int = 1
    root: int = 0
    peer: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind.parse(self.kind))
        if not isinstance(self.num_ranks, int) or self.num_ranks < 1:
            raise InputError(f"collective: num_ranks must be a positive integer, "
                             f"got {self.num_ranks!r}")
        if not isinstance(self.chunks_per_rank, int) or self.chunks_per_rank < 1:
            raise InputError(f"collective: chunks_per_rank must be a positive integer, "
                             f"got {self.chunks_per_rank!r}")
        limits.check_collective(
            f"{self.kind.value} on {self.num_ranks} ranks with {self.chunks_per_rank} "
            "chunk(s) per rank", self.num_ranks, self.chunks_per_rank,
            self.input_chunks + self.output_chunks)
        if not self.kind.is_rooted:
            object.__setattr__(self, "root", 0)
        elif not 0 <= self.root < self.num_ranks:
            raise InputError(f"collective {self.kind.value}: root {self.root} is not a rank "
                             f"(0..{self.num_ranks - 1})")
        if self.kind is not Kind.SENDRECV:
            object.__setattr__(self, "peer", 0)
        elif not 0 <= self.peer < self.num_ranks or self.peer == self.root:
            raise InputError(f"sendrecv: peer {self.peer} must be a rank (0..{self.num_ranks - 1}) "
                             f"other than the sender {self.root}")

    # ------------------------------------------------------------- buffers

    @property
    def total_chunks(self) -> int:
        """Chunks in the size buffer (``num_ranks * chunks_per_rank``)."""
        return self.num_ranks * self.chunks_per_rank

    @property
    def input_chunks(self) -> int:
        return self.total_chunks if _SHAPES[self.kind][0] else self.chunks_per_rank

    @property
    def output_chunks(self) -> int:
        return self.total_chunks if _SHAPES[self.kind][1] else self.chunks_per_rank

    def buffer_chunks(self, buffer: Buffer) -> int:
        return self.input_chunks if buffer == Buffer.INPUT else self.output_chunks

    def chunk_bytes(self, size_bytes: float) -> float:
        """Bytes in one chunk when the size buffer holds ``size_bytes``."""
        return size_bytes / self.total_chunks

    @property
    def busbw_factor(self) -> float:
        """nccl-tests' busbw/algbw: allreduce 2(n-1)/n; AG, RS, A2A (n-1)/n; rooted 1."""
        n = self.num_ranks
        if self.kind is Kind.ALLREDUCE:
            return 2 * (n - 1) / n
        if self.kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL):
            return (n - 1) / n
        return 1.0

    # ----------------------------------------------------- pre/postcondition

    @cached_property
    def index_bits(self) -> int:
        """Low bits of a packed contribution set that hold the input index."""
        return max(1, (self.input_chunks - 1).bit_length())

    def pack(self, ranks_mask: int, index: int) -> int:
        """The set {(r, index) for r in ranks_mask} as one int."""
        return (ranks_mask << self.index_bits) | index

    def unpack(self, value: int) -> tuple[int, int]:
        """(ranks mask, input index) of a packed contribution set."""
        return value >> self.index_bits, value & ((1 << self.index_bits) - 1)

    def contribution(self, rank: int, index: int) -> int:
        """The packed one-element set {input chunk ``index`` of ``rank``}; unique per chunk."""
        return self.pack(1 << rank, index)

    def has_input(self, rank: int) -> bool:
        return self.kind not in (Kind.BROADCAST, Kind.SCATTER, Kind.SENDRECV) or rank == self.root

    def has_output(self, rank: int) -> bool:
        if self.kind is Kind.SENDRECV:
            return rank == self.peer
        return self.kind not in (Kind.REDUCE, Kind.GATHER) or rank == self.root

    @cached_property
    def precondition(self) -> dict[tuple[int, int], int]:
        """(rank, input index) -> packed contribution, for every defined input chunk."""
        return {(rank, i): self.contribution(rank, i)
                for rank in range(self.num_ranks) if self.has_input(rank)
                for i in range(self.input_chunks)}

    @cached_property
    def postcondition(self) -> dict[tuple[int, int], int]:
        """(rank, output index) -> the packed contributions that slot must hold."""
        n, c, kind, pack = self.num_ranks, self.chunks_per_rank, self.kind, self.pack
        every = (1 << n) - 1
        post: dict[tuple[int, int], int] = {}
        for rank in range(n):
            if not self.has_output(rank):
                continue
            for j in range(self.output_chunks):
                if kind in (Kind.ALLGATHER, Kind.GATHER):
                    value = pack(1 << (j // c), j % c)
                elif kind is Kind.REDUCESCATTER:
                    value = pack(every, rank * c + j)
                elif kind in (Kind.ALLREDUCE, Kind.REDUCE):
                    value = pack(every, j)
                elif kind is Kind.ALLTOALL:
                    value = pack(1 << (j // c), rank * c + j % c)
                elif kind in (Kind.BROADCAST, Kind.SENDRECV):
                    value = pack(1 << self.root, j)
                else:  # SCATTER
                    value = pack(1 << self.root, rank * c + j)
                post[(rank, j)] = value
        return post

    def in_place_alias(self, rank: int, buffer: Buffer, index: int) -> tuple[Buffer, int]:
        """Where an input/output slot lives when the collective runs in place (MSCCL's
        layout: a rank's input is its own slice of the output, or the output itself)."""
        c = self.chunks_per_rank
        if buffer is Buffer.SCRATCH:
            return buffer, index
        if self.kind in (Kind.ALLGATHER, Kind.GATHER):
            return (Buffer.OUTPUT, rank * c + index) if buffer is Buffer.INPUT else (buffer, index)
        if self.kind in (Kind.REDUCESCATTER, Kind.SCATTER):
            return (Buffer.INPUT, rank * c + index) if buffer is Buffer.OUTPUT else (buffer, index)
        return Buffer.OUTPUT, index

    def describe(self) -> str:
        root = f", root {self.root}" if self.kind.is_rooted else ""
        if self.kind is Kind.SENDRECV:
            root = f", {self.root} -> {self.peer}"
        return (f"{self.kind.value} on {self.num_ranks} ranks, "
                f"{self.chunks_per_rank} chunk(s) per rank{root}")
