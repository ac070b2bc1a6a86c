"""Run an out-of-place schedule in place, where it can be: alias each rank's input with
its output (MSCCL's layout), drop copies that become no-ops, add the ordering the
aliasing needs, and prove the result. A schedule that reads an input after its alias
was overwritten (most alltoalls) cannot, and the verifier says where."""

from __future__ import annotations

from dataclasses import replace

from ccweave.collectives import Buffer
from ccweave.errors import NotApplicableError, VerificationError
from ccweave.schedule import Op, Schedule, Transfer, topological_order
from ccweave.verify import verify


def in_place(schedule: Schedule) -> Schedule:
    """The in-place variant of ``schedule`` (itself when already in place), verified.

    Raises ``NotApplicableError`` naming the first problem when the schedule cannot run
    in place.
    """
    if schedule.in_place:
        return schedule
    coll = schedule.collective
    transfers = schedule.transfers

    def key(rank: int, buffer: Buffer, index: int) -> tuple[int, Buffer, int]:
        return (rank, *coll.in_place_alias(rank, buffer, index))

    def no_op(t: Transfer) -> bool:
        return (t.is_local and t.op is Op.COPY
                and key(t.src, t.src_buffer, t.src_index) == key(t.dst, t.dst_buffer, t.dst_index))

    order = topological_order(transfers)
    kept: dict[int, int] = {}  # old index -> new index
    inherited: dict[int, set[int]] = {}  # dropped old index -> new deps it stood for
    writer: dict[tuple, int] = {}
    readers: dict[tuple, list[int]] = {}
    out: list[Transfer] = []
    for old in order:
        t = transfers[old]
        deps: set[int] = set()
        for dep in t.deps:
            deps.update(inherited[dep] if dep in inherited else {kept[dep]})
        if no_op(t):
            inherited[old] = deps
            continue
        reads = [key(t.src, t.src_buffer, t.src_index + k) for k in range(t.count)]
        writes = [key(t.dst, t.dst_buffer, t.dst_index + k) for k in range(t.count)]
        for slot in reads + writes:
            if slot in writer:
                deps.add(writer[slot])
        for slot in writes:
            deps.update(readers.get(slot, ()))
        new = len(out)
        kept[old] = new
        out.append(replace(t, deps=tuple(sorted(deps))))
        for slot in reads:
            readers.setdefault(slot, []).append(new)
        for slot in writes:
            writer[slot] = new
            readers[slot] = []
    result = replace(schedule, transfers=tuple(out), in_place=True)
    try:
        verify(result)
    except VerificationError as error:
        raise NotApplicableError(f"{schedule.name or 'the schedule'} cannot run in place: "
                                 f"{str(error).splitlines()[0]}") from None
    return result
