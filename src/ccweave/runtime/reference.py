"""Deterministic inputs and the outputs they must produce, computed locally from the
collective's postcondition, so a run is checked element by element without trusting
any other implementation.

Values are small integers, so every sum, max, min and product is exact in every dtype
(bfloat16 included) whatever order a schedule reduces in: a wrong element is a bug, not
rounding.
"""

from __future__ import annotations

import torch

from ccweave.collectives import Buffer, Collective
from ccweave.runtime.layout import Layout
from ccweave.runtime.reduce_ops import RedOp

SENTINEL = -77
"""What output buffers hold before a run: an output left unwritten counts as wrong."""

_EXACT = {torch.float16: 2048, torch.bfloat16: 256}
"""Largest magnitude up to which every integer is exact (float32 and integers: ample)."""


def magnitude(collective: Collective, dtype: torch.dtype) -> int:
    """Inputs lie in ``[-k, k]`` with ``k`` small enough that sums over all ranks stay exact."""
    limit = _EXACT.get(dtype, 1 << 20)
    if collective.kind.is_reduction:
        return max(1, min(50, (limit - 1) // collective.num_ranks))
    return 50


def values(collective: Collective, rank: int, index: int, chunk: int, dtype: torch.dtype,
           op: RedOp, device: torch.device | str = "cpu") -> torch.Tensor:
    """Input chunk ``index`` of ``rank`` (as int64): small integers that differ by rank,
    chunk and element; for products, 1s and 2s so a product of all ranks stays exact.
    Computed in place, two chunk-sized temporaries at most (a rank's peak memory)."""
    mixed = torch.arange(chunk, dtype=torch.int64, device=device)
    high = (mixed >> 3).mul_(3)
    mixed.mul_(5).add_(high).add_(rank * 7 + index * 13)  # j*5 + (j>>3)*3 + ...
    del high
    if collective.kind.is_reduction and op is RedOp.PROD:
        return mixed.remainder_(2).add_(1)
    k = magnitude(collective, dtype)
    return mixed.remainder_(2 * k + 1).sub_(k)


def make_buffers(collective: Collective, rank: int, layout: Layout, dtype: torch.dtype,
                 op: RedOp, in_place: bool, device: torch.device | str = "cpu",
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input, output)`` for one run: inputs filled, outputs :data:`SENTINEL`.

    In place both are one buffer of the size-buffer's length, holding the input where
    :meth:`Collective.in_place_alias` puts it.
    """
    e = layout.chunk
    if in_place:
        buffer = torch.full((layout.size_elements,), SENTINEL, dtype=dtype, device=device)
        if collective.has_input(rank):
            for i in range(collective.input_chunks):
                _, at = collective.in_place_alias(rank, Buffer.INPUT, i)
                buffer[at * e:(at + 1) * e] = values(collective, rank, i, e, dtype, op, device)
        return buffer, buffer
    data = torch.full((layout.input,), SENTINEL, dtype=dtype, device=device)
    if collective.has_input(rank):
        for i in range(collective.input_chunks):
            data[i * e:(i + 1) * e] = values(collective, rank, i, e, dtype, op, device)
    return data, torch.full((layout.output,), SENTINEL, dtype=dtype, device=device)


def expected_chunk(collective: Collective, rank: int, j: int, chunk: int,
                   dtype: torch.dtype, op: RedOp, device: torch.device | str) -> torch.Tensor:
    """What output chunk ``j`` of ``rank`` must hold after the run (as int64): its
    sources' inputs combined."""
    mask, index = collective.unpack(collective.postcondition[(rank, j)])
    total = None
    for source in range(collective.num_ranks):
        if mask >> source & 1:
            part = values(collective, source, index, chunk, dtype, op, device)
            total = part if total is None else _combine(op, total, part)
    assert total is not None
    return total


def _combine(op: RedOp, total: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
    """``total`` combined with ``part``, in place."""
    if op is RedOp.SUM:
        return total.add_(part)
    if op is RedOp.PROD:
        return total.mul_(part)
    return torch.maximum(total, part, out=total) if op is RedOp.MAX else \
        torch.minimum(total, part, out=total)


def output_view(collective: Collective, rank: int, layout: Layout, output: torch.Tensor,
                in_place: bool) -> torch.Tensor:
    """The part of ``output`` (the one buffer, in place) that holds the rank's output."""
    if not in_place:
        return output
    _, at = collective.in_place_alias(rank, Buffer.OUTPUT, 0)
    return output[at * layout.chunk:at * layout.chunk + layout.output]


def count_wrong(collective: Collective, rank: int, layout: Layout, output: torch.Tensor,
                op: RedOp, in_place: bool) -> int:
    """Elements of ``rank``'s output that differ from :func:`expected_chunk` (0 when it
    has none), compared a chunk at a time so the check holds one chunk's expectation, not
    a second output buffer (a 64 MB allreduce rank peaked 0.3 GB higher checked than not)."""
    if not collective.has_output(rank):
        return 0
    got = output_view(collective, rank, layout, output, in_place)
    e = layout.chunk
    wrong = 0
    for j in range(collective.output_chunks):
        want = expected_chunk(collective, rank, j, e, output.dtype, op, output.device)
        wrong += int((got[j * e:(j + 1) * e] != want.to(output.dtype)).sum().item())
    return wrong
