"""Limits that keep one input from exhausting the machine, checked before allocating.

A topology of a billion ranks, a schedule of a billion chunks or a million message sizes
would take the memory or the time of the machine before anything failed; each is refused
at once with a :class:`~ccweave.errors.LimitError` that names the input, the estimate,
the limit and the fix. The limits are generous: the largest figures the project stands
behind (1024-rank synthesis of ``dgx-a100:128``, within 8 GiB) fit with room to spare.
"""

from __future__ import annotations

from ccweave.errors import LimitError

MAX_RANKS = 4096
"""Ranks of a topology or a collective: four times the largest machine the benchmarks
synthesize for (``dgx-a100:128``, 1024 ranks)."""

MAX_FABRIC_NODES = 65536
"""Fabric nodes of a topology (``dgx-a100:128`` has 1153)."""

MAX_LINKS = 2**20
"""Directed links of a topology: ``fully-connected:1024`` has 1,047,552, and ``topo show``
takes it in about 0.7 GB."""

MAX_CHUNKS_PER_RANK = 2**15
"""Chunks per rank: the most MSCCL can address (its chunk offsets are int16); the
strategies choose at most 1024."""

MAX_SLOTS = 40_000_000
"""Buffer slots of a schedule over all ranks, ``ranks x (input + output + scratch)``
chunks: what the builders and the verifier track one by one. ``dgx-a100:128``'s
hierarchical allreduce has 33.6 million, its ring allreduce 25.2 million (and 25 million
transfers, about 6 GiB at peak); this keeps a schedule's bookkeeping near 8 GiB."""

MAX_SIZES = 1000
"""Message sizes in one ``--sizes`` list or range (nccl-tests' 1KB:1GB doubling is 21)."""

MAX_SIZE_BYTES = 2**50
"""The largest message size, 1 PiB (1024TB)."""

MAX_INPUT_BYTES = 2**30
"""Bytes one input file may hold, 1 GiB: a million-transfer schedule is about 40 MB; an
endless stream (``/dev/zero``) is refused here instead of taking the host's memory."""

MAX_SPEC_DIGITS = 12
"""Digits of one number in a topology spec such as ``ring:N``: whatever is longer is
over every limit, and Python refuses to convert some such strings at all."""


def check(subject: str, estimate: int, limit: int, unit: str, fix: str) -> None:
    """Raise ``LimitError`` when ``estimate`` (of ``unit``) exceeds ``limit``.

    The message reads ``SUBJECT: ESTIMATE UNIT, over the limit of LIMIT; FIX``.
    """
    if estimate > limit:
        raise LimitError(f"{subject}: {estimate:,} {unit}, over the limit of {limit:,}; {fix}")


def check_ranks(subject: str, ranks: int) -> None:
    check(subject, ranks, MAX_RANKS, "ranks",
          "ccweave models machines of up to that many ranks")


def check_collective(subject: str, ranks: int, chunks_per_rank: int, slots_per_rank: int,
                     ) -> None:
    """Ranks, chunks per rank and buffer slots of a collective (before its buffers exist).

    ``slots_per_rank`` is the input, output and scratch chunks of one rank.
    """
    check_ranks(subject, ranks)
    check(subject, chunks_per_rank, MAX_CHUNKS_PER_RANK, "chunks per rank",
          "use fewer chunks (the most MSCCL can address)")
    check(subject, ranks * slots_per_rank, MAX_SLOTS,
          "buffer slots (ranks x (input + output + scratch) chunks)",
          "use fewer chunks per rank or fewer ranks (about what 8 GiB of bookkeeping holds)")
