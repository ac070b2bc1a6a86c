"""Chunk layout in elements: chunk ``k`` of a buffer is elements ``[k*e, (k+1)*e)``.

``e`` (elements per chunk) comes from the size buffer: ``size_bytes / itemsize`` elements
cut into ``num_ranks * chunks_per_rank`` chunks, rounded down as nccl-tests rounds its
count, so every size splits evenly.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccweave.collectives import Collective, Kind
from ccweave.errors import InputError


@dataclass(frozen=True)
class Layout:
    """Element counts of one collective at one size.

    ``chunk`` is elements per chunk; ``input``/``output`` the elements of each buffer.
    """

    collective: Collective
    chunk: int

    @property
    def input(self) -> int:
        return self.collective.input_chunks * self.chunk

    @property
    def output(self) -> int:
        return self.collective.output_chunks * self.chunk

    @property
    def size_elements(self) -> int:
        """Elements of the size buffer (what nccl-tests' ``size`` column measures)."""
        return self.collective.total_chunks * self.chunk

    @property
    def count(self) -> int:
        """nccl-tests' ``count`` column: elements per rank of the smaller buffer for the
        collectives that split one (allgather, reduce-scatter, alltoall, gather, scatter),
        else of the whole buffer."""
        if self.collective.kind in (Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE, Kind.SENDRECV):
            return self.size_elements
        return self.size_elements // self.collective.num_ranks

    def size_bytes(self, itemsize: int) -> int:
        return self.size_elements * itemsize


def layout_for_bytes(collective: Collective, size_bytes: int, itemsize: int) -> Layout:
    """The largest layout whose size buffer fits in ``size_bytes`` (nccl-tests rounding).

    Raises ``InputError`` when ``size_bytes`` holds fewer elements than chunks.
    """
    chunk = (size_bytes // itemsize) // collective.total_chunks
    if chunk < 1:
        raise InputError(f"size {size_bytes} bytes is too small for {collective.describe()}: "
                         f"it needs at least {collective.total_chunks * itemsize} bytes "
                         f"({collective.total_chunks} chunks of one element)")
    return Layout(collective, chunk)


def layout_for_numel(collective: Collective, numel: int, buffer: str = "size") -> Layout:
    """The layout whose ``buffer`` ('size', 'input' or 'output') holds exactly ``numel``."""
    chunks = {"size": collective.total_chunks, "input": collective.input_chunks,
              "output": collective.output_chunks}[buffer]
    if numel < chunks or numel % chunks:
        raise InputError(f"a {buffer} buffer of {numel} elements does not split into the "
                         f"{chunks} chunks of {collective.describe()}; use a multiple of "
                         f"{chunks} elements")
    return Layout(collective, numel // chunks)
