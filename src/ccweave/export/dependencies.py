"""Pass 4: cross-threadblock dependencies as MSCCL writes them.

A step waits on the instructions it is anchored on; those in its own threadblock come
earlier and need nothing. For the others it keeps only what it does not already know is
done: what earlier steps of its threadblock waited on, and (transitively) what the steps
it waits on had waited on. The first remaining wait is the step's ``depid``/``deps``; each
further one is a ``nop`` before it. Every step waited on gets ``hasdep="1"``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccweave.export.lowering import Program
from ccweave.export.threadblocks import Layout


@dataclass(frozen=True)
class Step:
    """One ``step`` element: an instruction (``None`` for a nop) and its one wait."""

    instr: int | None
    depid: int = -1
    deps: int = -1
    hasdep: bool = False


def infer(program: Program, layout: Layout) -> tuple[tuple[tuple[Step, ...], ...], ...]:
    """Steps of every threadblock of every rank (same nesting as ``layout.tbs``)."""
    waits: dict[int, list[tuple[int, int]]] = {}
    for rank in range(len(layout.tbs)):
        waits.update(_rank_waits(program, layout, rank))
    # positions once the nops are in, and who is waited on
    final: dict[tuple[int, int, int], int] = {}
    signals: set[tuple[int, int, int]] = set()
    for rank, blocks in enumerate(layout.tbs):
        for tb_id, tb in enumerate(blocks):
            position = 0
            for step, i in enumerate(tb.instrs):
                position += max(len(waits[i]) - 1, 0)
                final[(rank, tb_id, step)] = position
                position += 1
                signals.update((rank, u, q) for u, q in waits[i])
    result = []
    for rank, blocks in enumerate(layout.tbs):
        rank_steps = []
        for tb_id, tb in enumerate(blocks):
            steps: list[Step] = []
            for step, i in enumerate(tb.instrs):
                targets = [(u, final[(rank, u, q)]) for u, q in waits[i]]
                steps.extend(Step(None, u, q) for u, q in targets[1:])
                u, q = targets[0] if targets else (-1, -1)
                steps.append(Step(i, u, q, (rank, tb_id, step) in signals))
            rank_steps.append(tuple(_keep_reductions_apart(program, steps)))
        result.append(tuple(rank_steps))
    return tuple(result)


def _rank_waits(program: Program, layout: Layout, rank: int) -> dict[int, list[tuple[int, int]]]:
    """For each instruction of ``rank``: (tb, step) pairs it must wait on, reduced."""
    blocks = layout.tbs[rank]
    instrs = sorted((i for tb in blocks for i in tb.instrs), key=layout.key.__getitem__)
    known: dict[int, dict[int, int]] = {}  # instr -> {tb: last step known done}
    waits: dict[int, list[tuple[int, int]]] = {}
    for i in instrs:
        _, tb_id, step = layout.place[i]
        before = dict(known[blocks[tb_id].instrs[step - 1]]) if step else {}
        anchors = sorted(program.waits(i), key=layout.key.__getitem__, reverse=True)
        chosen: list[tuple[int, int]] = []
        for a in anchors:
            _, u, q = layout.place[a]
            if u == tb_id:
                assert q < step, "an instruction waits on a later step of its threadblock"
                continue
            if before.get(u, -1) >= q:
                continue
            chosen.append((u, q))
            for v, r in known[a].items():
                if before.get(v, -1) < r:
                    before[v] = r
            before[u] = max(before.get(u, -1), q)
        before[tb_id] = step
        known[i] = before
        waits[i] = sorted(chosen)
    return waits


def _keep_reductions_apart(program: Program, steps: list[Step]) -> list[Step]:
    """The runtime fuses back-to-back ``re`` steps into one destination (summing several
    sources with the first one's cnt); mark the first with hasdep where counts differ."""
    out = list(steps)
    previous: tuple[int, Step] | None = None
    for k, st in enumerate(out):
        instr = None if st.instr is None else program.instrs[st.instr]
        if instr is not None and instr.code == "re" and previous is not None \
                and st.depid < 0 and not previous[1].hasdep:
            before = program.instrs[previous[1].instr]  # type: ignore[index]
            if before.code == "re" and (before.dst, before.src[0]) == (instr.dst, instr.src[0]) \
                    and before.count != instr.count:
                out[previous[0]] = Step(previous[1].instr, previous[1].depid, previous[1].deps,
                                        True)
        previous = (k, out[k]) if instr is not None else None
    return out

