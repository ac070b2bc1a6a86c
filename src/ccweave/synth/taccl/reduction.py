"""Reduce-scatter from an allgather: TACCL's reversal, with the timing kept.

:func:`~ccweave.transforms.reverse` turns an allgather into a reduce-scatter on the
reversed topology and keeps the data dependencies. Two things a fast reduce-scatter
also needs are not data, so they are rebuilt here:

- the order on each connection: reversed in time (what the allgather delivered last
  is reduced and sent first), or scheduled afresh on the reversed routes by TACCL's
  reverse heuristic (:func:`reverse_order`: where most travel meets, first);
- fan-in without waiting: where several ranks reduce into one slot, each transfer
  fused with its reduction must wait for the previous one; instead each lands in its
  own scratch slot and a local reduction (device-memory speed) adds it in.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from ccweave.collectives import Buffer
from ccweave.schedule import Op, Schedule, ScheduleBuilder, topological_order
from ccweave.synth.taccl.logical import LogicalTopology
from ccweave.synth.taccl.ordering import sends_of
from ccweave.synth.taccl.routing_result import Routing
from ccweave.topology.model import Topology

SlotKey = tuple[int, Buffer, int]
LOCAL_CHANNEL_BASE = 2
"""First channel of the local reductions (one channel per peer reduced from)."""
_SWAP_CHANNEL = {0: 1, 1: 0}

_SWAP = {Buffer.INPUT: Buffer.OUTPUT, Buffer.OUTPUT: Buffer.INPUT,
         Buffer.SCRATCH: Buffer.SCRATCH}


def reduce_scatter_from(allgather: Schedule, topology: Topology, size: float,
                        priority: Mapping[SlotKey, float] | None = None,
                        unfuse: bool = True) -> Schedule:
    """The reduce-scatter for ``topology`` from an ``allgather`` built for its reverse;
    ``priority`` (see :func:`reverse_order`) orders each connection, else the reversed
    simulated times of the allgather do. ``unfuse``: fan-in through scratch and local
    reductions (:func:`unfuse_fan_in`); else each transfer reduces on arrival, after the
    one before it into the same slot."""
    reversed_ = reverse_in_time(allgather, topology, size, priority)
    return unfuse_fan_in(reversed_) if unfuse else swap_channels(reversed_)


def swap_channels(schedule: Schedule) -> Schedule:
    """Remote transfers on channel 0 move to 1 and back (see :func:`unfuse_fan_in`)."""
    return replace(schedule, transfers=tuple(
        t if t.is_local else replace(t, channel=_SWAP_CHANNEL.get(t.channel, t.channel))
        for t in schedule.transfers))


def reverse_in_time(allgather: Schedule, topology: Topology, size: float,
                    priority: Mapping[SlotKey, float] | None = None) -> Schedule:
    """Reduce-scatter as the reverse of ``allgather`` (on the reversed ``topology``), with
    the order on every connection reversed in time as well.

    :func:`~ccweave.transforms.reverse` keeps the data dependencies; the order in which
    a connection carries its chunks is not data, so it is rebuilt here: each reversed
    transfer waits for the one before it between the same two ranks, and "before" is
    "finished later in the allgather" (simulated at ``size``), so the chunks the
    allgather delivered last are reduced and sent first.
    """
    from ccweave import transforms
    from ccweave.simulate import simulate

    finished_at: dict[SlotKey, float] = {}
    if priority is None:
        finish = simulate(allgather, topology.reversed(), size).finish
        for index, t in enumerate(allgather.transfers):
            if not t.is_local:
                for m in range(t.count):
                    finished_at[(t.dst, t.dst_buffer, t.dst_index + m)] = float(finish[index])
    else:  # reduced first what the reverse schedule sends first: "finished latest"
        finished_at = {slot: -when for slot, when in priority.items()}
    dual = transforms.reverse(allgather)
    position = {index: n for n, index in enumerate(topological_order(dual.transfers))}

    def key(index: int) -> tuple[float, int]:
        t = dual.transfers[index]
        done = finished_at.get((t.src, _SWAP[t.src_buffer], t.src_index), 0.0)
        return -done, position[index]

    rank = {index: n for n, index in enumerate(_in_priority(dual, key))}
    previous: dict[int, int] = {}
    chains: dict[tuple[int, int], list[int]] = {}
    for index, t in enumerate(dual.transfers):
        if not t.is_local:
            chains.setdefault((t.src, t.dst), []).append(index)
    for members in chains.values():
        members.sort(key=rank.__getitem__)
        for before, after in itertools.pairwise(members):
            previous[after] = before
    transfers = tuple(replace(t, deps=tuple(sorted({*t.deps, previous[i]})))
                      if i in previous else t for i, t in enumerate(dual.transfers))
    return replace(dual, transfers=transfers)


def _in_priority(schedule: Schedule, key) -> list[int]:
    """A topological order of ``schedule``'s transfers that takes, among those whose deps
    are done, the one with the least ``key``: chaining connections in this order keeps
    the dependencies acyclic whatever the keys say."""
    transfers = schedule.transfers
    waiting = [len(set(t.deps)) for t in transfers]
    children: list[list[int]] = [[] for _ in transfers]
    for index, t in enumerate(transfers):
        for d in set(t.deps):
            children[d].append(index)
    heap = [(key(i), i) for i in range(len(transfers)) if not waiting[i]]
    heapq.heapify(heap)
    order = []
    while heap:
        _, i = heapq.heappop(heap)
        order.append(i)
        for child in children[i]:
            waiting[child] -= 1
            if not waiting[child]:
                heapq.heappush(heap, (key(child), child))
    return order


def reverse_order(allgather: Schedule, logical: LogicalTopology, routing: Routing,
                  chunk_bytes: float, branch: bool = False) -> dict[SlotKey, float]:
    """TACCL's reverse scheduling of the reduce-scatter that reverses ``allgather``
    (lowered from ``routing`` on ``logical``): every hop is turned around; a turned hop
    goes when the reductions from below it have arrived, each link streams one at a time,
    and among the hops that may go the first is, by TACCL's heuristic 12, the one where
    most travel meets (the allgather path time to it, summed over the ranks behind it),
    or with ``branch`` (its heuristic 18) the one with the longest branch behind it (its
    own time plus the longest chain of hops the allgather made after it). Returns, per
    landing slot of the allgather's remote transfers, when its reversed transfer starts."""
    sends = sends_of(routing)
    edges = logical.edges
    count = len(sends)
    cost = np.array([edges[s.edge].seconds(chunk_bytes) for s in sends])
    children: list[list[int]] = [[] for _ in range(count)]
    for i, s in enumerate(sends):
        if s.parent >= 0:
            children[s.parent].append(i)
    depth = np.zeros(count)
    for i, s in enumerate(sends):
        depth[i] = cost[i] + (depth[s.parent] if s.parent >= 0 else 0.0)
    behind = np.ones(count)  # ranks whose reduction crosses the turned hop
    for i in range(count - 1, -1, -1):
        behind[i] += sum(behind[c] for c in children[i])
    travel = depth * behind
    if branch:
        travel = cost.copy()
        for i in range(count - 1, -1, -1):
            if children[i]:
                travel[i] += max(travel[c] for c in children[i])
    waiting = [len(c) for c in children]
    ready = np.zeros(count)
    start = np.zeros(count)
    edge_free: dict[int, float] = {}
    link_free: dict[int, float] = {}
    heap = [(-travel[i], i) for i in range(count) if not waiting[i]]
    heapq.heapify(heap)
    while heap:
        _, i = heapq.heappop(heap)
        s = sends[i]  # its edge's links, turned around, are the turned hop's resources
        t = max(ready[i], edge_free.get(s.edge, 0.0))
        for link in edges[s.edge].route:
            t = max(t, link_free.get(link, 0.0))
        start[i] = t
        done = t + cost[i]
        edge_free[s.edge] = done
        for link in edges[s.edge].route:
            link_free[link] = done
        if s.parent >= 0:
            p = s.parent
            ready[p] = max(ready[p], done)
            waiting[p] -= 1
            if not waiting[p]:
                heapq.heappush(heap, (-travel[p], p))
    when = {(s.chunk, s.edge): float(start[i]) for i, s in enumerate(sends)}
    return _by_slot(allgather, logical, when)


def _by_slot(allgather: Schedule, logical: LogicalTopology,
             when: Mapping[tuple[int, int], float]) -> dict[SlotKey, float]:
    """Per landing slot of every remote transfer of ``allgather``, the latest ``when`` of
    the (chunk, edge) hops it carries (chunks followed through the slots): a reversed
    transfer of several chunks goes when the last of them may."""
    c = allgather.collective.chunks_per_rank
    holds: dict[SlotKey, int] = {}
    for rank in range(allgather.num_ranks):
        for k in range(c):
            holds[(rank, Buffer.INPUT, k)] = rank * c + k
    found: dict[SlotKey, float] = {}
    for index in topological_order(allgather.transfers):
        t = allgather.transfers[index]
        chunks = [holds.get((t.src, t.src_buffer, t.src_index + m)) for m in range(t.count)]
        for m, chunk in enumerate(chunks):
            if chunk is not None:
                holds[(t.dst, t.dst_buffer, t.dst_index + m)] = chunk
        if t.is_local:
            continue
        edge = logical.edge_id.get((t.src, t.dst))
        times = [when[(chunk, edge)] for chunk in chunks
                 if chunk is not None and (chunk, edge) in when]
        if times:
            found[(t.dst, t.dst_buffer, t.dst_index)] = max(times)
    return found


def unfuse_fan_in(schedule: Schedule) -> Schedule:
    """Remote reductions into a slot that several ranks reduce into become a copy into
    fresh scratch and a local reduction, so the transfers need not wait for each other.

    A transfer keeps its explicit order on its connection (the dep on the previous
    transfer between the same ranks); data dependencies are derived again. Remote
    transfers swap channels 0 and 1 (so the allgather after a reduce-scatter fuses no
    step with it), and the local reductions of what each peer sent take a channel of
    their own (:data:`LOCAL_CHANNEL_BASE` on): MSCCL runs a channel's local steps in one
    threadblock, one after another, which would make one peer's data wait for another's.
    """
    in_peers: dict[int, list[int]] = {}
    for t in schedule.transfers:
        if not t.is_local and t.src not in in_peers.setdefault(t.dst, []):
            in_peers[t.dst].append(t.src)
    peer_channel = {(dst, src): LOCAL_CHANNEL_BASE + k
                    for dst, peers in in_peers.items() for k, src in enumerate(sorted(peers))}
    fan_in: dict[tuple[int, Buffer, int], int] = {}
    for t in schedule.transfers:
        if t.op is Op.REDUCE and not t.is_local:
            for m in range(t.count):
                key = (t.dst, t.dst_buffer, t.dst_index + m)
                fan_in[key] = fan_in.get(key, 0) + 1
    builder = ScheduleBuilder(schedule.collective, schedule.in_place)
    builder.scratch_chunks = schedule.scratch_chunks
    scratch = [schedule.scratch_chunks] * schedule.num_ranks
    new: dict[int, int] = {}
    transfers = schedule.transfers
    for index in topological_order(transfers):
        t = transfers[index]
        order = [new[d] for d in t.deps if not transfers[d].is_local
                 and (transfers[d].src, transfers[d].dst) == (t.src, t.dst)]
        shared = t.op is Op.REDUCE and not t.is_local and any(
            fan_in[(t.dst, t.dst_buffer, t.dst_index + m)] > 1 for m in range(t.count))
        channel = t.channel if t.is_local else _SWAP_CHANNEL.get(t.channel, t.channel)
        if not shared:
            new[index] = builder.add(t.src, t.dst, t.src_buffer, t.src_index, t.dst_buffer,
                                     t.dst_index, t.count, t.op, channel, after=order,
                                     via=t.via)
            continue
        landing = scratch[t.dst]
        scratch[t.dst] += t.count
        new[index] = builder.add(t.src, t.dst, t.src_buffer, t.src_index, Buffer.SCRATCH,
                                 landing, t.count, Op.COPY, channel, after=order, via=t.via)
        builder.add(t.dst, t.dst, Buffer.SCRATCH, landing, t.dst_buffer, t.dst_index, t.count,
                    Op.REDUCE, peer_channel[(t.dst, t.src)])
    return builder.build(schedule.name, **schedule.metadata)
