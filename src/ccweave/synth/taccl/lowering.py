"""From the stages' answer to an ordinary ccweave :class:`~ccweave.schedule.Schedule`.

Each group of stage 3 becomes one transfer of ``count`` chunks. A transfer needs
consecutive slots at both ends: chunks headed for consecutive output slots land there
directly; otherwise they land in fresh scratch slots and a local copy puts each where
it belongs, and chunks that sit apart at the sender are first packed into scratch by
local copies (cheap next to a link: device memory). Transfers on one logical edge run
in stage 3's order (each waits for the one before, as on a FIFO connection); data
dependencies come from the slots, through :class:`~ccweave.schedule.ScheduleBuilder`.
Sends of one rank through a shared port (its way to the NIC) also go one after
another, so a NIC carries a few chunks at a time in stage 2's order instead of all at
once (the simulator shares a link fairly between everything on it). Sends of several
ranks through one link (a NIC all GPUs of an NDv2 share) cannot wait for each other in
MSCCL, whose dependencies stay on one GPU; *pacing* keeps the model's order there by
making each such send wait for what its rank received just before it, by the model.
A relay's copy of a chunk may also go first (*relay first*): its copies to receivers
that keep the chunk wait for its copies to receivers that pass it on, which MSCCL XML
carries (the wait is on the same GPU), so the next relay's fan-out starts when the
model says rather than when the whole fan-out through the shared port has ended.

Channels (:class:`ChannelPolicy`) decide what MSCCL's export may fuse: with the default,
a chunk's consecutive hops run on channels 0 and 1 in turn, so no receive is fused with
the send that forwards it and every threadblock runs exactly the order scored here.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ccweave.collectives import Buffer
from ccweave.errors import InputError
from ccweave.schedule import Schedule, ScheduleBuilder
from ccweave.synth.taccl.contiguity import Contiguity
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.logical import LogicalTopology
from ccweave.synth.taccl.ordering import Ordering, Send
from ccweave.topology.model import Topology

Slot = tuple[Buffer, int]


class ChannelPolicy(str, enum.Enum):
    """How transfers are spread over channels (MSCCL's ``chan``: a threadblock serves one
    peer and direction per channel, and a receive fuses with the send that forwards it
    only on one channel)."""

    ALTERNATE = "alternate"
    """A chunk's hops alternate between channels 0 and 1 (local copies take the channel of
    the transfer they serve): the export fuses no relay step, so the XML runs exactly the
    order the schedule states (what the simulator scored)."""
    ONE = "one"
    """Everything on channel 0, as TACCL's ``One`` policy: the export fuses relays into
    ``rcs`` steps, whose threadblocks add waits the schedule does not state (the taccl
    strategy then scores and returns the schedule the XML describes)."""


def shared_ports(logical: LogicalTopology, scope: str) -> dict[int, tuple[int, ...]]:
    """Per edge, the physical links of its route that other edges from the same rank also
    use (a rank's port into a switch, its way to a NIC): sends through one port go one
    after another. ``scope``: ``none``, ``internode`` (only edges that leave the node)
    or ``all``."""
    if scope == "none":
        return {}
    users: dict[tuple[int, int], int] = {}
    for e in logical.edges:
        for link in e.route:
            users[(e.src, link)] = users.get((e.src, link), 0) + 1
    return {i: tuple(link for link in e.route if users[(e.src, link)] > 1)
            for i, e in enumerate(logical.edges) if scope == "all" or e.internode}


@dataclass(frozen=True)
class Lowered:
    """A lowered schedule and, per group of stage 3, the transfer that carries it."""

    schedule: Schedule
    carrier: tuple[int, ...]


def lower(demand: Demand, logical: LogicalTopology, ordering: Ordering,
          contiguity: Contiguity, name: str, metadata: Mapping[str, object],
          port_order: str = "internode", priority: Sequence[float] | None = None,
          channels: ChannelPolicy = ChannelPolicy.ALTERNATE, pace: bool = False,
          relay_first: bool = False) -> Lowered:
    """The schedule that carries out ``contiguity``'s groups; see the module docstring.

    ``port_order``: which sends through a rank's shared port also go one after another
    (see :func:`shared_ports`). ``priority``: per group, the time it should go (default:
    stage 3's start times); queues serve groups in this order. ``channels``: see
    :class:`ChannelPolicy`. ``pace``: a transfer whose route crosses a link that other
    ranks' transfers also cross waits for the last transfer into its rank that lands, by
    the model's times, before it starts (see :func:`_pacer`). ``relay_first``: see
    :func:`relayed_first`.
    """
    coll = demand.collective
    builder = ScheduleBuilder(coll)
    c = coll.chunks_per_rank
    for rank in range(coll.num_ranks):  # each rank's own block, locally
        own = 0 if demand.multicast else rank * c
        builder.copy(rank, rank, (Buffer.INPUT, own), (Buffer.OUTPUT, rank * c), count=c)
    where: dict[tuple[int, int], Slot] = {}
    for chunk_id, chunk in enumerate(demand.chunks):
        where[(chunk_id, chunk.source)] = (Buffer.INPUT, chunk.input_index)
    scratch = [0] * coll.num_ranks
    last_on: dict[object, int] = {}
    ports = shared_ports(logical, port_order)
    sends = ordering.sends
    depth = [0] * len(sends)
    forwards = forwarding(sends)
    for i, send in enumerate(sends):  # parents come first
        depth[i] = 0 if send.parent < 0 else depth[send.parent] + 1
    carrier = [0] * len(contiguity.groups)
    shared = shared_across_ranks(logical, ordering) if pace else set()
    landed: dict[int, list[tuple[float, int]]] = {}  # rank -> (model arrival, transfer)
    for number in _in_order(ordering, contiguity, priority or contiguity.start_s):
        group = contiguity.groups[number]
        edge = logical.edges[sends[group[0]].edge]
        u, v = edge.src, edge.dst
        chunks = sorted((sends[i].chunk for i in group),
                        key=lambda ch: (demand.chunks[ch].output_index, ch))
        targets = [demand.chunks[ch].output_index if v in demand.chunks[ch].destinations
                   else None for ch in chunks]
        count = len(chunks)
        if all(t is not None for t in targets) and \
                targets == list(range(targets[0], targets[0] + count)):  # type: ignore[operator]
            dst: Slot = (Buffer.OUTPUT, targets[0])  # type: ignore[assignment]
            unpack = False
        elif count == 1 and targets[0] is None:
            dst, unpack = (Buffer.SCRATCH, scratch[v]), False
            scratch[v] += 1
        else:
            dst, unpack = (Buffer.SCRATCH, scratch[v]), True
            scratch[v] += count
        channel = depth[group[0]] % 2 if channels is ChannelPolicy.ALTERNATE else 0
        relays = relay_first and any(forwards[i] for i in group)
        channel += RELAY_CHANNELS if relays else 0
        src = _gathered(builder, u, [where[(ch, u)] for ch in chunks], scratch, channel)
        queues = [("edge", sends[group[0]].edge, relays),
                  *(("port", u, link) for link in ports.get(sends[group[0]].edge, ()))]
        after = [last_on[q] for q in queues if q in last_on]
        model_start = contiguity.start_s[number]
        if shared and any(link in shared for link in edge.route):
            after += _pacer(landed.get(u, []), model_start)
        index = builder.copy(u, v, src, dst, count=count, after=after, channel=channel)
        carrier[number] = index
        if shared:
            arrival = model_start + edge.alpha + sum(
                float(ordering.finish[i] - ordering.start[i]) - edge.alpha for i in group)
            bisect.insort(landed.setdefault(v, []), (arrival, index))
        for q in queues:
            last_on[q] = index
        for j, (ch, target) in enumerate(zip(chunks, targets)):
            slot = (dst[0], dst[1] + j)
            where[(ch, v)] = slot
            if unpack and target is not None:
                builder.copy(v, v, slot, (Buffer.OUTPUT, target), channel=channel)
    schedule = builder.build(name, **metadata)
    if relay_first:
        schedule = relayed_first(schedule, logical, ordering, contiguity, carrier, forwards)
    return Lowered(schedule, tuple(carrier))


RELAY_CHANNELS = 2
"""With ``relay_first``, a transfer whose receiver forwards its chunks goes this many
channels above the others: its own connection, so it queues behind no copy that ends
there."""


def relayed_first(schedule: Schedule, logical: LogicalTopology, ordering: Ordering,
                  contiguity: Contiguity, carrier: Sequence[int],
                  forwards: Sequence[bool]) -> Schedule:
    """Each copy of a chunk that a rank sends through a port and whose receiver keeps it
    waits for the rank's copies of that chunk through the same port whose receivers pass
    it on. The model streams a port's sends one at a time; the machine shares a port
    fairly, so a relay's fan-out would reach the next relay only with the last of its
    copies, and that relay's own fan-out would start late. The wait is on the rank's
    own transfer, which MSCCL XML carries. ``schedule`` itself where the waits would
    close a cycle."""
    from ccweave.schedule import topological_order

    sends = ordering.sends
    copies: dict[tuple[int, int, int], tuple[list[int], list[int]]] = {}
    for number, group in enumerate(contiguity.groups):
        for i in group:
            key = _port_chunk(logical, sends[i])
            copies.setdefault(key, ([], []))[0 if forwards[i] else 1].append(carrier[number])
    extra: dict[int, set[int]] = {}
    for relays, leaves in copies.values():
        for leaf in leaves if relays else ():
            extra.setdefault(leaf, set()).update(r for r in relays if r != leaf)
    if not extra:
        return schedule
    transfers = tuple(replace(t, deps=tuple(sorted({*t.deps, *extra[k]}))) if k in extra
                      else t for k, t in enumerate(schedule.transfers))
    try:
        topological_order(transfers)
    except InputError:
        return schedule
    return replace(schedule, transfers=transfers)


def _pacer(landed: list[tuple[float, int]], start: float) -> list[int]:
    """The transfer that lands last at a rank, by the model's times, no later than
    ``start`` (``landed`` sorted by arrival): MSCCL orders nothing across GPUs, so a send
    through a link other GPUs share keeps its place in the model's order on that link by
    waiting on its own GPU's clock, the data it received. Every transfer in ``landed``
    was built before, so the dependency keeps the schedule acyclic."""
    at = bisect.bisect_right(landed, (start * (1 + 1e-12) + 1e-15, -1))
    return [landed[at - 1][1]] if at else []


def relays_share_ports(logical: LogicalTopology, ordering: Ordering) -> bool:
    """Whether some rank sends a chunk through one port both to a receiver that passes it
    on and to one that keeps it (where ``relay_first`` changes anything)."""
    forwards = forwarding(ordering.sends)
    kinds: dict[tuple[int, int, int], set[bool]] = {}
    for i, send in enumerate(ordering.sends):
        kinds.setdefault(_port_chunk(logical, send), set()).add(forwards[i])
    return any(len(k) == 2 for k in kinds.values())


def forwarding(sends: Sequence[Send]) -> list[bool]:
    """Per send, whether its receiver passes the chunk on (some send has it as parent)."""
    forwards = [False] * len(sends)
    for send in sends:
        if send.parent >= 0:
            forwards[send.parent] = True
    return forwards


def _port_chunk(logical: LogicalTopology, send: Send) -> tuple[int, int, int]:
    """The sending rank, the first hop of its route (the port) and the chunk."""
    edge = logical.edges[send.edge]
    return edge.src, edge.route[0], send.chunk


def shared_across_ranks(logical: LogicalTopology, ordering: Ordering) -> set[int]:
    """Physical links that sends from more than one rank cross: no MSCCL queue orders
    them, since a threadblock waits only on its own GPU."""
    ranks: dict[int, set[int]] = {}
    for link, sends in ordering.link_order.items():
        ranks[link] = {logical.edges[ordering.sends[i].edge].src for i in sends}
    return {link for link, who in ranks.items() if len(who) > 1}


def _gathered(builder: ScheduleBuilder, rank: int, slots: list[Slot],
              scratch: list[int], channel: int) -> Slot:
    """A run of consecutive slots holding ``slots``' chunks in order at ``rank``: the
    slots themselves when they are one, else a scratch run filled by local copies."""
    first = slots[0]
    if all(s == (first[0], first[1] + j) for j, s in enumerate(slots)):
        return first
    base = scratch[rank]
    scratch[rank] += len(slots)
    for j, slot in enumerate(slots):
        builder.copy(rank, rank, slot, (Buffer.SCRATCH, base + j), channel=channel)
    return Buffer.SCRATCH, base


def _in_order(ordering: Ordering, contiguity: Contiguity,
              priority: Sequence[float]) -> list[int]:
    """Group numbers in ``priority`` order, each after the groups that bring its chunks
    and the groups its edge serves before it (edges serve groups by ``priority``, ties
    by stage 2's order). Falls back to stage 3's own times should the priorities
    contradict the data (they come from a simulation of another order)."""
    order = _topological(ordering, contiguity, priority)
    if order is None:
        order = _topological(ordering, contiguity, contiguity.start_s)
    if order is None:
        raise AssertionError("taccl: stage 3 grouped sends into a cycle")  # a bug, not input
    return order


def _topological(ordering: Ordering, contiguity: Contiguity,
                 priority: Sequence[float]) -> list[int] | None:
    group_of = {}
    for g, group in enumerate(contiguity.groups):
        for i in group:
            group_of[i] = g
    needs: list[set[int]] = [set() for _ in contiguity.groups]
    for g, group in enumerate(contiguity.groups):
        for i in group:
            parent = ordering.sends[i].parent
            if parent >= 0 and group_of[parent] != g:
                needs[g].add(group_of[parent])
    position = {i: k for sequence in ordering.edge_order.values()
                for k, i in enumerate(sequence)}
    by_edge: dict[int, list[int]] = {}
    for g, group in enumerate(contiguity.groups):
        by_edge.setdefault(ordering.sends[group[0]].edge, []).append(g)
    for groups in by_edge.values():
        groups.sort(key=lambda g: (priority[g], position[contiguity.groups[g][0]]))
        for a, b in itertools.pairwise(groups):
            needs[b].add(a)
    waiting = [len(n) for n in needs]
    children: list[list[int]] = [[] for _ in contiguity.groups]
    for g, n in enumerate(needs):
        for h in n:
            children[h].append(g)
    heap = [(priority[g], g) for g in range(len(needs)) if not waiting[g]]  # type: ignore
    heapq.heapify(heap)
    result = []
    while heap:
        _, g = heapq.heappop(heap)
        result.append(g)
        for h in children[g]:
            waiting[h] -= 1
            if not waiting[h]:
                heapq.heappush(heap, (priority[h], h))
    return result if len(result) == len(needs) else None


def serialize_local_steps(schedule: Schedule, topology: Topology, size: float) -> Schedule:
    """Each rank's local copies and reductions on one channel, one after another in the
    order they start when simulated at ``size``: MSCCL runs them in one threadblock, one
    step after the other, so the schedule says so (and its export adds no wait it does
    not state). Returns ``schedule`` itself when that order would not be acyclic."""
    from ccweave.schedule import topological_order
    from ccweave.simulate import simulate

    start = simulate(schedule, topology, size).start
    lanes: dict[tuple[int, int], list[int]] = {}
    for index, t in enumerate(schedule.transfers):
        if t.is_local:
            lanes.setdefault((t.src, t.channel), []).append(index)
    previous: dict[int, int] = {}
    for members in lanes.values():
        members.sort(key=lambda i: (start[i], i))
        for before, after in itertools.pairwise(members):
            if before not in schedule.transfers[after].deps:
                previous[after] = before
    if not previous:
        return schedule
    transfers = tuple(replace(t, deps=tuple(sorted({*t.deps, previous[i]})))
                      if i in previous else t for i, t in enumerate(schedule.transfers))
    chained = replace(schedule, transfers=transfers)
    try:
        topological_order(chained.transfers)
    except InputError:
        return schedule
    return chained
