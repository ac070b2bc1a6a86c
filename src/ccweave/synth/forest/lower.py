"""Trees to a Schedule: each tree carries a run of its root's chunks, pipelined down it.

A tree of ``u`` units gets its share of the root's chunks (largest remainders) and sends
them as ``u`` lanes side by side, one contiguous run of chunks each, so links shared
fairly between lanes give every tree the rate its units ask for. Every arc sends a
lane's chunks one after another (a connection is FIFO, as NCCL's and MSCCL's are), so
chunk ``j`` goes down the next level while chunk ``j + 1`` crosses this one. Reductions
run the same trees backwards: each rank adds what its children send into its
accumulator and sends the sum up. Routes are pinned to the fabric each arc was split
from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.schedule import Schedule, ScheduleBuilder
from ccweave.topology.model import NodeKind, Topology

IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH

IN_FLIGHT = 1
"""Serial sends from one port keep this many copies in flight (one's latency passes
while the other streams)."""
STAGED_IN_FLIGHT = 3
"""Chunks of a lane in flight at once on an arc staged through host memory (a route
through a CPU node): the copy in of one overlaps the copy out of the other, and the
staging latency of each passes while the one before streams. Elsewhere one at a time,
so each chunk crosses an arc at the lane's full rate and goes on down the tree."""

STAGGERED_IN_FLIGHT = 2
"""Messages of a staggered lane in flight at once on an arc. One at a time, every lane
on a link waits out its route's latency after each message at the same moment (lanes
sharing a link move in step), so a broadcast root's port idled once per chunk: dgx-a100
1 GB at 1.04 of the bound whatever the chunk count. Two in flight side by side only move
in step as one message twice the size; so a staggered lane's first message is one chunk
and the rest two (:func:`messages`): while one message streams, the next one's latency
passes, and the port never waits (1.002)."""

STAGED_LINES = 2
"""Channels a staggered lane's messages alternate between on an arc staged through host
memory, where :func:`build` is asked for them. The simulator moves a staged copy one
message at a time through each host buffer (one per channel), paying the staging
latency for each (docs/simulator.md); with two buffers one message's latency passes
while the other's streams. With one, a
staggered lane's staged arcs fall behind the lanes beside them (dgx1's 1 GB broadcast,
staggered at 8192 chunks a rank: 1.061 of the bound, 1.029 with two; plain lanes, which
cannot stagger there, leave the root's NVLinks idle for a link latency after every
chunk: 1.042). Where host memory is the link the staged arcs share it can lose (cedar:
1.016 -> 1.10), so the strategy keeps it only where it simulates faster."""

NIC_FED_EXTRA = 1
"""Chunks (staggered: messages) more in flight on a reduction's arc whose sums go on
through a NIC, where the arc's route is nearly saturated (:func:`nic_fed`): fair shares
then favour the sums that still have the long way to go. Their first messages reach a
NIC only after the levels below it have filled; with plain shares they never catch up,
and the NIC carries the backlog alone after the GPUs' ports are done (dgx2:2's 1 GB
reduce-scatter: 1.079 of the bound at 64 chunks a rank, 1.029 with one more in flight;
staggered at 201 chunks 1.089, 1.027)."""
SATURATED = 0.95
"""A link carrying at least this share of the busiest link's load is saturated: an arc
through one gains from priority. Where a NIC-fed arc's links have slack (dgx-a100:4's
switch ports carry 0.78 of its NICs' load, ndv2's PCIe less), it gets its rate anyway,
and more in flight only slows the arcs beside it (dgx-a100:4 with every NIC-fed arc at
twice the messages in flight: 1.016 -> 1.044)."""

THREADBLOCKS = 128
"""Threadblocks a GPU may give MSCCL and still wait on any of them (a step's ``depid`` is 8
bits, 0..127); lanes go on channels, up to two threadblocks per peer on each."""
CHANNELS = 32
"""NCCL's MAXCHANNELS."""

Edge = tuple[int, int, tuple[str, ...]]
"""(parent rank, child rank, fabric names the route passes)."""

Tree = tuple[int, int, Sequence[Edge], int]
"""(root, chunks, edges parents first, lanes)."""


def shares(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainders)."""
    weights_arr = np.asarray(weights, dtype=float)
    exact = total * weights_arr / weights_arr.sum()
    counts = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - counts), kind="stable")[:total - int(counts.sum())]:
        counts[i] += 1
    return counts.tolist()


def lower(kind: Kind, topology: Topology, chunks_per_rank: int, root: int,
          trees: Iterable[Tree], serial: int = 0, stagger: bool = False,
          staged_lines: int = 1) -> ScheduleBuilder:
    """Allgather or broadcast along ``trees``, each taking the next ``chunks`` of its
    root's chunks in turn: root ``r``'s output slots ``r * c ...`` (allgather) or the
    buffer's ``N * c`` chunks, all the root's (broadcast). The first ``serial`` edges of
    every tree send each block one after another, :data:`IN_FLIGHT` at a time (one port:
    each receiver gets its copy fast and passes it on while the next ones are sent).
    With ``stagger`` (:func:`build` allows it only where no arc is staged through host
    memory, or where ``staged_lines`` are more than one), lanes send :func:`messages` of
    two chunks, two in flight, half a message out of step (see
    :data:`STAGGERED_IN_FLIGHT`); on a staged arc a lane keeps its
    :data:`STAGED_IN_FLIGHT` and its messages take ``staged_lines`` channels in turn
    (see :data:`STAGED_LINES`). Returns the builder."""
    n = topology.num_ranks
    coll = Collective(kind, n, chunks_per_rank, root)
    b = ScheduleBuilder(coll)
    c = chunks_per_rank
    if kind is Kind.ALLGATHER:
        for rank in range(n):
            b.copy(rank, rank, (IN, 0), (OUT, rank * c), c)
    else:
        b.copy(root, root, (IN, 0), (OUT, 0), coll.total_chunks)
    taken: dict[int, int] = {}
    channels = channel_count(topology.num_ranks)
    lines = max(1, min(staged_lines, channels))
    lane = 0
    for tree_root, count, edges, lanes in trees:
        first = taken.get(tree_root, 0)
        taken[tree_root] = first + count
        slot = (tree_root * c if kind is Kind.ALLGATHER else 0) + first
        flights = [in_flight(topology, via) for _, _, via in edges]
        staged = [flight > 1 for flight in flights]
        depth = [max(STAGGERED_IN_FLIGHT if stagger else 1, flight) for flight in flights]
        start = 0
        for run in shares(count, [1] * max(1, min(lanes, count))):
            channel = lane % channels
            lane += 1
            history: list[list[int]] = [[] for _ in edges]
            for m, size in enumerate(messages(run, stagger)):
                sent: list[int] = []
                line = (channel + (m % lines) * (channels // lines)) % channels
                for e, (parent, child, via) in enumerate(edges):
                    src = (IN, first + start) if parent == tree_root else (OUT, slot + start)
                    before = history[e]
                    after = [before[-depth[e]]] if len(before) >= depth[e] else []
                    if e < serial and len(sent) >= IN_FLIGHT:
                        after.append(sent[-IN_FLIGHT])
                    before.append(b.add(parent, child, *src, OUT, slot + start, size,
                                        channel=line if staged[e] else channel,
                                        after=after, via=via))
                    del before[:-depth[e]]
                    sent.append(before[-1])
                start += size
    return b


def messages(run: int, staggered: bool) -> list[int]:
    """Chunks per message of a lane of ``run`` chunks: one each, or staggered ``[1, 2,
    ..., 2]`` (a last 1 where ``run`` is even), so two messages in flight are half a
    message out of step."""
    if not staggered or run < 3:
        return [1] * run
    return [1] + [2] * ((run - 1) // 2) + [1] * ((run - 1) % 2)


def nic_fed(topology: Topology, trees: Sequence[Tree]) -> list[list[bool]]:
    """Per tree of a reduction (out-trees of the reversed topology, ``edges`` parents
    first), per arc: whether the sums it carries cross a NIC on their way to the root
    (its own route passes one, or its parent's path does) and its route passes a
    :data:`SATURATED` link (each tree's chunks counted on every link it crosses) that
    also carries sums that do not: only there does a larger share take anything from
    the sums that have less far to go."""
    through_nic: dict[tuple[str, ...], bool] = {}
    crossing = []
    for tree_root, _, edges, _ in trees:
        crosses = {tree_root: False}
        for parent, child, via in edges:
            if via not in through_nic:
                through_nic[via] = any(topology.kind(node) is NodeKind.NIC for node in via)
            crosses[child] = crosses[parent] or through_nic[via]
        crossing.append([crosses[child] for _, child, _ in edges])
    carried: dict[Edge, int] = {}  # chunks over each arc, summed over the trees
    stays: set[Edge] = set()  # arcs that carry sums staying on this side of every NIC
    for (_, count, edges, _), crosses in zip(trees, crossing):
        for edge, fed in zip(edges, crosses):
            carried[edge] = carried.get(edge, 0) + count
            if not fed:
                stays.add(edge)
    routes = {edge: list(topology.route_via(edge[1], edge[0], tuple(reversed(edge[2]))))
              for edge in carried}
    load = np.zeros(len(topology.links))
    local = np.zeros(len(topology.links), dtype=bool)
    for edge, count in carried.items():
        load[routes[edge]] += count
        if edge in stays:
            local[routes[edge]] = True
    load /= topology.bandwidths
    contended = local & (load >= SATURATED * load.max())
    hot = {edge: bool(contended[links].any()) for edge, links in routes.items()}
    return [[fed and hot[edge] for edge, fed in zip(edges, crosses)]
            for (_, _, edges, _), crosses in zip(trees, crossing)]


def unstaged(topology: Topology, tree_edges: Iterable[Sequence[Edge]]) -> bool:
    """No arc of these trees is staged through host memory: their lanes may stagger."""
    return all(in_flight(topology, via) == 1 for edges in tree_edges for _, _, via in edges)


def in_flight(topology: Topology, via: tuple[str, ...]) -> int:
    """Chunks of a lane an arc carries at once: :data:`STAGED_IN_FLIGHT` where its route
    is staged through host memory, else 1."""
    return STAGED_IN_FLIGHT if topology.staged(via) else 1


def channel_count(num_ranks: int) -> int:
    """Channels the lanes are dealt over: as many as MSCCL runs with a threadblock per
    peer on each (a connection is FIFO per channel, so lanes on their own channels keep
    their own order when exported)."""
    return max(1, min(CHANNELS, THREADBLOCKS // (2 * num_ranks)))


def build(kind: Kind, topology: Topology, chunks_per_rank: int, root: int,
          trees: Iterable[Tree], name: str, serial: int = 0, stagger: bool = False,
          staged_lines: int = 1, **metadata: object) -> Schedule:
    """:func:`lower` or :func:`lower_reduction` (for reduce-scatter and reduce: ``trees``
    are out-trees of the reversed topology), then the schedule; its metadata says
    whether the lanes ``staggered``, and over how many ``staged_lines`` where they
    stagger over staged arcs too (allgather and broadcast only: ``staged_lines`` more
    than one lets them)."""
    trees = list(trees)
    if unstaged(topology, (edges for _, _, edges, _ in trees)):
        staged_lines = 1
    elif staged_lines == 1 or kind in (Kind.REDUCESCATTER, Kind.REDUCE):
        stagger = False  # over one host buffer its staged arcs would fall behind
    if not stagger:
        staged_lines = 1
    if stagger:
        metadata["staggered"] = True
    if staged_lines > 1:
        metadata["staged_lines"] = staged_lines
    if kind in (Kind.REDUCESCATTER, Kind.REDUCE):
        builder = lower_reduction(kind, topology, chunks_per_rank, root, trees, serial,
                                  stagger)
    else:
        builder = lower(kind, topology, chunks_per_rank, root, trees, serial, stagger,
                        staged_lines)
    return builder.build(name, topology=topology.name, **metadata)


def lower_reduction(kind: Kind, topology: Topology, chunks_per_rank: int, root: int,
                    trees: Iterable[Tree], serial: int = 0,
                    stagger: bool = False) -> ScheduleBuilder:
    """Reduce-scatter or reduce along ``trees`` taken backwards: a tree of the reversed
    topology from ``r`` collects segment ``r`` (reduce: the root's whole buffer). Each
    rank adds its children's partial sums into its accumulator (the output slot at the
    root, a scratch slot at an inner rank, its own input at a leaf) and sends the sum to
    its parent, which receives each child into a scratch slot of its own (children arrive
    side by side) and adds it locally; lanes and the FIFO per arc are as in
    :func:`lower`, but an arc whose sums go on through a NIC keeps
    :data:`NIC_FED_EXTRA` more in flight where it contends with sums that stay
    (:func:`nic_fed`). A lane seeds its accumulators one chunk after another (all at
    once, the local copies would share the rank's memory and the first sum would wait
    for the last copy). ``stagger`` is as in :func:`lower`: a message of partial sums is a
    :func:`messages` run of chunks, two in flight. (``serial`` is for sends; it does not
    apply.)"""
    del serial
    coll = Collective(kind, topology.num_ranks, chunks_per_rank, root)
    b = ScheduleBuilder(coll)
    c = chunks_per_rank
    scratch: dict[int, int] = {}
    taken: dict[int, int] = {}
    channels = channel_count(topology.num_ranks)
    lane = 0
    trees = list(trees)
    for (tree_root, count, edges, lanes), fed in zip(trees, nic_fed(topology, trees)):
        first = taken.get(tree_root, 0)
        taken[tree_root] = first + count
        base = tree_root * c if kind is Kind.REDUCESCATTER else 0
        inner = sorted({parent for parent, _, _ in edges} - {tree_root})
        depth = [(STAGGERED_IN_FLIGHT if stagger else in_flight(topology, via))
                 + NIC_FED_EXTRA * priority for (_, _, via), priority in zip(edges, fed)]
        j = first
        for run in shares(count, [1] * max(1, min(lanes, count))):
            channel = lane % channels
            lane += 1
            last: list[list[int]] = [[] for _ in edges]
            seeded: dict[int, int] = {}
            for size in messages(run, stagger):
                chunk = base + j
                acc: dict[int, tuple[Buffer, int]] = {
                    tree_root: (OUT, j if kind is Kind.REDUCESCATTER else chunk)}
                for rank in inner:
                    acc[rank] = (SCRATCH, scratch.get(rank, 0))
                    scratch[rank] = acc[rank][1] + size
                for rank in (tree_root, *inner):  # one message after another, as needed
                    before = seeded.get(rank)
                    seeded[rank] = b.copy(rank, rank, (IN, chunk), acc[rank], size,
                                          channel=channel,
                                          after=() if before is None else (before,))
                for e in reversed(range(len(edges))):
                    parent, child, via = edges[e]
                    slot = scratch.get(parent, 0)
                    scratch[parent] = slot + size
                    before = last[e]
                    before.append(b.add(child, parent, *acc.get(child, (IN, chunk)), SCRATCH,
                                        slot, size, channel=channel, via=tuple(reversed(via)),
                                        after=() if len(before) < depth[e]
                                        else (before[-depth[e]],)))
                    del before[:-depth[e]]
                    b.reduce(parent, parent, (SCRATCH, slot), acc[parent], size,
                             channel=channel)
                j += size
    return b


__all__ = ["STAGED_LINES", "Edge", "Tree", "build", "lower", "lower_reduction", "messages",
           "nic_fed", "shares", "unstaged"]
