"""Pass 3: threadblocks, and the order of steps in each.

All instructions of all ranks go into one order: each after what it waits on, a receive
after its send, and on every connection (sender, receiver, channel) sends and receives
in transfer order, so both ends agree (FIFO). Every threadblock runs its steps in that
order, so none waits on a later step of its own and every wait is on something earlier:
no deadlock. A fused step that cannot be placed (its send waits on its own receive, or a
threadblock would need two send peers) is split again.

Per rank and channel: one threadblock per fused (recv peer, send peer) pair, one per
other peer and direction (past MSCCL's threadblock limit: peers paired up). A fused pair
is kept where its threadblock keeps pace with the schedule. Local copies and reductions
go on threadblocks of their own, in chains that each wait on the one before, so local
steps the schedule runs at once run at once.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass

from ccweave.export import msccl_spec as spec
from ccweave.export.lanes import SLACK, Reach
from ccweave.export.lowering import Program, transfer_order


@dataclass(frozen=True)
class Threadblock:
    """One ``tb``: its peers (-1 for none), channel and instructions in step order."""

    send: int
    recv: int
    chan: int
    instrs: tuple[int, ...]


@dataclass(frozen=True)
class Layout:
    """Threadblocks per rank (index = tb id), where each instruction sits, and the key
    order every rank's instructions run in."""

    tbs: tuple[tuple[Threadblock, ...], ...]
    place: dict[int, tuple[int, int, int]]
    key: dict[int, int]


def assign(program: Program, reach: Reach | None = None) -> Layout:
    """Pair peers, order the steps (undoing fusions that would deadlock), lay out; where
    a threadblock of fused pairs, in the order its steps run, falls behind the schedule
    (:func:`keeps_pace`), undo its fusions and lay out again. ``reach``: the schedule's
    dependency paths (made here if not given)."""
    order = transfer_order(program.schedule.transfers)
    if reach is None:
        reach = Reach(program.schedule.transfers, order)
    position = {t: p for p, t in enumerate(order)}
    _keep_pairs(program, reach, position)
    order = _schedule(program, position)
    layout = _layout(program, {i: k for k, i in enumerate(order)}, reach)
    behind = [i for blocks in layout.tbs for tb in blocks if tb.send >= 0 and tb.recv >= 0
              and not keeps_pace(program, list(tb.instrs), reach)
              for i in tb.instrs if program.instrs[i].parts is not None]
    if not behind:
        return layout
    for i in behind:  # in the order the steps run, the pair falls behind: undo it
        program.unfuse(i)
    order = _schedule(program, position)
    return _layout(program, {i: k for k, i in enumerate(order)}, reach)


def _primary(program: Program, index: int) -> int:
    instr = program.instrs[index]
    for transfer in (instr.recv, instr.local, instr.send):
        if transfer is not None:
            return transfer
    raise AssertionError("an instruction carries no transfer")


def _fused(program: Program) -> list[int]:
    return [i for i in program.live() if program.instrs[i].parts is not None]


def _parts(program: Program, index: int) -> tuple[int, int]:
    """The first and the last transfer an instruction carries (a fused one: what it
    receives, then what it sends)."""
    instr = program.instrs[index]
    carried = [t for t in (instr.recv, instr.local, instr.send) if t is not None]
    return carried[0], carried[-1]


def keeps_pace(program: Program, members: list[int], reach: Reach) -> bool:
    """A threadblock running ``members`` one after another delays none of them past its
    time by any of :meth:`.lanes.Reach.estimates`: a receive ends when its transfer
    arrives, a send takes its time from when both it and the step before may start."""
    for start, finish in reach.estimates():
        clock = 0.0
        for i in members:
            instr = program.instrs[i]
            for transfer in (instr.recv, instr.local):
                if transfer is not None:
                    if clock > finish[transfer] * SLACK:
                        return False
                    clock = finish[transfer]
            send = instr.send
            if send is not None:
                clock = max(clock, start[send]) + finish[send] - start[send]
                if clock > finish[send] * SLACK:
                    return False
    return True


def _keep_pairs(program: Program, reach: Reach, position: dict[int, int]) -> None:
    """A threadblock has one recv and one send peer: per rank and channel, keep the
    (recv, send) pairs with the most fused steps, each peer used once, where the
    threadblock they make (with the other steps from the recv peer and to the send peer)
    keeps pace with the schedule (:func:`keeps_pace`); undo the others, and any fused
    step that holds up another use of what it received (:func:`_holds_up`)."""
    for i in _holds_up(program, reach):
        program.unfuse(i)
    groups: dict[tuple[int, int], Counter] = defaultdict(Counter)
    for i in _fused(program):
        f = program.instrs[i]
        groups[(f.rank, f.channel)][(f.recv_peer, f.send_peer)] += 1
    accepted: set[tuple[int, int, int, int]] = set()
    for (rank, channel), pairs in groups.items():
        recvs: set[int] = set()
        sends: set[int] = set()
        for (a, c), _ in sorted(pairs.items(), key=lambda item: (-item[1], item[0])):
            if a not in recvs and c not in sends:
                recvs.add(a)
                sends.add(c)
                accepted.add((rank, channel, a, c))
    members: dict[tuple[int, int, int, int], list[int]] = defaultdict(list)
    by_recv = {(rank, channel, a): (rank, channel, a, c) for rank, channel, a, c in accepted}
    by_send = {(rank, channel, c): (rank, channel, a, c) for rank, channel, a, c in accepted}
    for i in program.live():
        f = program.instrs[i]
        group = by_recv.get((f.rank, f.channel, f.recv_peer)) or \
            by_send.get((f.rank, f.channel, f.send_peer))
        if group is not None:
            members[group].append(i)
    for group, items in members.items():
        items.sort(key=lambda i: (reach.level[_parts(program, i)[0]],
                                  program.instrs[i].code != "s", position[_parts(program, i)[0]]))
        if not keeps_pace(program, items, reach):
            accepted.discard(group)
    for i in _fused(program):
        f = program.instrs[i]
        if (f.rank, f.channel, f.recv_peer, f.send_peer) not in accepted:
            program.unfuse(i)


def _holds_up(program: Program, reach: Reach) -> list[int]:
    """Fused steps whose send would delay a step of another threadblock of their GPU
    that waits on what they received (a chunk forwarded to two peers: the second send
    waits on the whole fused step, its first send included), by any of
    :meth:`.lanes.Reach.estimates`."""
    transfers = program.schedule.transfers
    users: dict[int, list[int]] = defaultdict(list)
    for index, deps in enumerate(reach.deps):
        for dep in deps:
            users[dep].append(index)
    found = []
    for i in _fused(program):
        f = program.instrs[i]
        assert f.recv is not None and f.send is not None
        mine = {(f.recv_peer, f.rank), (f.rank, f.send_peer)}  # its threadblock's own
        others = [u for u in users[f.recv] if u != f.send
                  and f.rank in (transfers[u].src, transfers[u].dst)
                  and (transfers[u].src, transfers[u].dst) not in mine]
        if any(finish[f.send] > start[u] * SLACK
               for start, finish in reach.estimates() for u in others):
            found.append(i)
    return found


def _schedule(program: Program, position: dict[int, int]) -> list[int]:
    """One global order of the live instructions: after what each waits on, receives after
    their sends, and on every connection sends and receives in transfer order (FIFO).
    When nothing can go, the waiting instruction of the earliest transfer is a fused one
    (a plain one always can go then), which is split and the order goes on."""
    lanes: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for t in sorted(program.recv_of, key=position.__getitem__):
        transfer = program.schedule.transfers[t]
        if not transfer.is_local:
            lanes[(transfer.src, transfer.dst, program.instrs[program.recv_of[t]].channel)]\
                .append(t)
    previous = {t: lane[k - 1] for lane in lanes.values() for k, t in enumerate(lane) if k}

    def carrier(base: int) -> int:
        return program.fused_into.get(base, base)

    def preds(i: int) -> set[int]:
        instr = program.instrs[i]
        found = set(program.waits(i))
        if instr.recv is not None:
            found.add(carrier(program.send_of[instr.recv]))
            if instr.recv in previous:
                found.add(carrier(program.recv_of[previous[instr.recv]]))
        if instr.send is not None and instr.send in previous:
            found.add(carrier(program.send_of[previous[instr.send]]))
        found.discard(i)
        return found

    def priority(i: int) -> tuple[int, int, int]:
        """Sends first (they do not block: a send early lets its threadblock's receive
        overlap it), then transfer order."""
        instr = program.instrs[i]
        return 0 if instr.code == "s" else 1, position[_primary(program, i)], i

    emitted: set[int] = set()
    order: list[int] = []
    remaining = set(program.live())
    count: dict[int, int] = {}
    children: dict[int, set[int]] = defaultdict(set)
    ready: list[tuple[int, int, int]] = []

    def register(i: int) -> None:
        waiting = preds(i) - emitted
        count[i] = len(waiting)
        for p in waiting:
            children[p].add(i)
        if not waiting:
            heapq.heappush(ready, priority(i))

    for i in remaining:
        register(i)
    by_transfer = [(position[_primary(program, i)], i) for i in remaining]
    heapq.heapify(by_transfer)
    while remaining:
        while ready:
            *_, i = heapq.heappop(ready)
            if i not in remaining:
                continue
            emitted.add(i)
            order.append(i)
            remaining.discard(i)
            for child in children.pop(i, ()):
                if child in remaining:
                    count[child] -= 1
                    if count[child] == 0:
                        heapq.heappush(ready, priority(child))
        while by_transfer and by_transfer[0][1] not in remaining:
            heapq.heappop(by_transfer)
        if not remaining:
            break
        stuck = by_transfer[0][1]
        assert program.instrs[stuck].parts is not None, "a plain instruction is stuck"
        program.unfuse(stuck)
        remaining.discard(stuck)
        parts = program.instrs[stuck].parts or ()
        remaining.update(parts)
        for i in (*parts, *children.pop(stuck, ())):
            if i in remaining:
                register(i)
        for part in parts:
            heapq.heappush(by_transfer, (position[_primary(program, part)], part))
    return order


def _layout(program: Program, key: dict[int, int], reach: Reach) -> Layout:
    per_rank: dict[int, list[int]] = defaultdict(list)
    for i in program.live():
        per_rank[program.instrs[i].rank].append(i)
    tbs: list[tuple[Threadblock, ...]] = []
    place: dict[int, tuple[int, int, int]] = {}
    for rank in range(program.schedule.num_ranks):
        blocks = _rank_blocks(program, per_rank.get(rank, []), key, reach)
        tbs.append(blocks)
        for tb_id, tb in enumerate(blocks):
            for step, i in enumerate(tb.instrs):
                place[i] = (rank, tb_id, step)
    return Layout(tuple(tbs), place, key)


def _rank_blocks(program: Program, instrs: list[int], key: dict[int, int],
                 reach: Reach) -> tuple[Threadblock, ...]:
    """Threadblocks of one rank: those with peers sorted by (send, recv, channel) like
    msccl-tools, then the local ones; threadblocks another waits on first (a wait names
    threadblocks 0..127 only). A peer gets threadblocks of its own (steps of different
    peers in one threadblock would wait on each other); only past MSCCL's threadblock
    limit, or where more threadblocks are waited on than a wait can name, are send and
    receive peers paired up."""
    local = sorted((i for i in instrs if program.instrs[i].send_peer < 0
                    and program.instrs[i].recv_peer < 0), key=key.__getitem__)
    remote = [i for i in instrs if program.instrs[i].send_peer >= 0
              or program.instrs[i].recv_peer >= 0]
    blocks, awaited = _laid(program, remote, local, key, reach, merge=False)
    if len(blocks) - len(_local(blocks)) > spec.MAX_THREADBLOCKS \
            or len(awaited) > spec.MAX_DEPID + 1:
        blocks, awaited = _laid(program, remote, local, key, reach, merge=True)
    return tuple(blocks[k] for k in sorted(range(len(blocks)), key=lambda k: k not in awaited))


def _local(blocks: list[Threadblock]) -> list[Threadblock]:
    return [tb for tb in blocks if tb.send < 0 and tb.recv < 0]


def _laid(program: Program, remote: list[int], local: list[int], key: dict[int, int],
          reach: Reach, merge: bool) -> tuple[list[Threadblock], set[int]]:
    """The threadblocks of one rank's steps (``merge``: send and receive peers paired),
    and the indices of those another threadblock waits on."""
    blocks = _blocks(program, remote, key, merge=merge)
    blocks.sort(key=lambda tb: (tb.send, tb.recv, tb.chan))
    room = max(1, min(spec.MAX_DEPID + 1, spec.MAX_THREADBLOCKS) - len(blocks))
    blocks += _local_blocks(program, local, reach, room)
    where = {i: k for k, tb in enumerate(blocks) for i in tb.instrs}
    awaited = {where[a] for k, tb in enumerate(blocks) for i in tb.instrs
               for a in program.waits(i) if where.get(a, k) != k}
    return blocks, awaited


def _local_blocks(program: Program, local: list[int], reach: Reach,
                  room: int) -> list[Threadblock]:
    """Local copies and reductions (in step order) on threadblocks of their own: each
    joins one whose last step it waits on in the schedule (the latest such), so local
    steps the schedule runs at once run at once; past ``room`` threadblocks, it joins the
    one whose last step is earliest in dependency order, of those the one holding fewest
    steps (steps free at once are dealt round the threadblocks, not piled on the first)."""
    chains: list[list[int]] = []
    last: list[int] = []  # the transfer each chain's last step carries last
    level = reach.level
    for i in local:
        first, final = _parts(program, i)
        fitting = [k for k, t in enumerate(last) if reach.precedes(t, first)]
        if fitting:
            k = max(fitting, key=lambda k: level[last[k]])
        elif len(chains) >= room:
            k = min(range(len(chains)), key=lambda k: (level[last[k]], len(chains[k]), k))
        else:
            k = len(chains)
            chains.append([])
            last.append(final)
        chains[k].append(i)
        last[k] = final
    return [Threadblock(-1, -1, program.instrs[c[0]].channel, tuple(c)) for c in chains]


def _blocks(program: Program, instrs: list[int], key: dict[int, int],
            merge: bool) -> list[Threadblock]:
    by_channel: dict[int, list[int]] = defaultdict(list)
    for i in instrs:
        by_channel[program.instrs[i].channel].append(i)
    blocks: list[Threadblock] = []
    for channel, members in by_channel.items():
        ends = _ends(program, members, merge)
        content: dict[tuple[int, int], list[int]] = defaultdict(list)
        send_tb = {s: (s, r) for s, r in ends if s >= 0}
        recv_tb = {r: (s, r) for s, r in ends if r >= 0}
        for i in members:
            instr = program.instrs[i]
            if instr.recv_peer >= 0:
                content[recv_tb[instr.recv_peer]].append(i)
            elif instr.send_peer >= 0:
                content[send_tb[instr.send_peer]].append(i)
            else:
                content[(-1, -1)].append(i)
        for (s, r), items in content.items():
            blocks.append(Threadblock(s, r, channel, tuple(sorted(items, key=key.__getitem__))))
    return blocks


def _ends(program: Program, members: list[int], merge: bool) -> list[tuple[int, int]]:
    """(send peer, recv peer) of each threadblock on one channel: the fused pairs, and a
    threadblock per other peer and direction; ``merge`` pairs a peer sent to and
    received from, then the remaining send and receive peers in order."""
    pairs = set()
    recvs, sends = set(), set()
    for i in members:
        instr = program.instrs[i]
        if instr.parts is not None:
            pairs.add((instr.send_peer, instr.recv_peer))
        elif instr.recv_peer >= 0:
            recvs.add(instr.recv_peer)
        elif instr.send_peer >= 0:
            sends.add(instr.send_peer)
    recvs -= {r for _, r in pairs}
    sends -= {s for s, _ in pairs}
    if not merge:
        return sorted(pairs | {(p, -1) for p in sends} | {(-1, p) for p in recvs})
    both = recvs & sends
    pairs |= {(p, p) for p in both}
    lone_sends, lone_recvs = sorted(sends - both), sorted(recvs - both)
    for k in range(max(len(lone_sends), len(lone_recvs))):
        pairs.add((lone_sends[k] if k < len(lone_sends) else -1,
                   lone_recvs[k] if k < len(lone_recvs) else -1))
    return sorted(pairs)
