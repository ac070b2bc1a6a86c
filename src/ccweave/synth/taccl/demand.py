"""What must move: the chunks of an allgather or alltoall, where each starts, where it
must arrive, the buffer slots at both ends, and their orbits under the sketch's symmetry.

allgather: chunk ``j = s*c + k`` starts in input ``k`` of rank ``s`` and must reach
output ``j`` of every rank (a multicast). alltoall: chunk ``(s, d, k)`` starts in input
``d*c + k`` of ``s`` and must reach output ``s*c + k`` of ``d`` (a unicast); its own
block each rank copies locally.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ccweave.collectives import Collective, Kind
from ccweave.errors import NotApplicableError

DIRECT_KINDS = (Kind.ALLGATHER, Kind.ALLTOALL)
"""Collectives the stages synthesize directly (the others are built from them)."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One commodity: ``source`` holds it in ``input_index``; each destination needs it
    in ``output_index``."""

    source: int
    destinations: tuple[int, ...]
    input_index: int
    output_index: int


@dataclass(frozen=True, eq=False)
class Demand:
    """Every chunk of one collective, and the symmetry orbits the solver works on."""

    collective: Collective
    symmetry: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if self.collective.kind not in DIRECT_KINDS:
            raise NotApplicableError(f"taccl synthesizes allgather and alltoall directly, not "
                                     f"{self.collective.kind.value}")

    @property
    def kind(self) -> Kind:
        return self.collective.kind

    @property
    def multicast(self) -> bool:
        return self.kind is Kind.ALLGATHER

    @cached_property
    def chunks(self) -> tuple[Chunk, ...]:
        n, c = self.collective.num_ranks, self.collective.chunks_per_rank
        if self.multicast:
            return tuple(Chunk(s, tuple(r for r in range(n) if r != s), k, s * c + k)
                         for s in range(n) for k in range(c))
        return tuple(Chunk(s, (d,), d * c + k, s * c + k)
                     for s in range(n) for d in range(n) if d != s for k in range(c))

    def chunk_id(self, source: int, destination: int, piece: int) -> int:
        """Index into :attr:`chunks` (``destination`` is ignored for allgather)."""
        n, c = self.collective.num_ranks, self.collective.chunks_per_rank
        if self.multicast:
            return source * c + piece
        return (source * (n - 1) + destination - (destination > source)) * c + piece

    def image(self, permutation: tuple[int, ...], chunk: int) -> int:
        """The chunk a symmetry permutation maps ``chunk`` to."""
        c = self.collective.chunks_per_rank
        ch = self.chunks[chunk]
        piece = chunk % c
        return self.chunk_id(permutation[ch.source], permutation[ch.destinations[0]], piece)

    @cached_property
    def orbits(self) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """``(representative, (image under symmetry[0], symmetry[1], ...))`` per orbit."""
        seen: set[int] = set()
        orbits = []
        for chunk in range(len(self.chunks)):
            if chunk in seen:
                continue
            images = tuple(self.image(g, chunk) for g in self.symmetry)
            seen.update(images)
            orbits.append((chunk, images))
        return tuple(orbits)
