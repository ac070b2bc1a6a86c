"""The ``trees`` strategy: ForestColl's forests lowered to schedules, per collective.

The forest (rate, switch removal, packing) is computed once per topology; the size only
picks the pipeline: how many chunks each lane carries. Deeper pipelines shorten the fill
and drain of the trees (about ``(depth - 1) / chunks`` of the time) but pay a latency per
chunk on every hop, so at 64 KB a lane moves one chunk and at 1 GB dozens to hundreds.
A closed-form estimate places the depth; where the schedule is small enough to simulate,
halving or doubling its chunks while the simulation improves settles it, so a calibrated
cost model (per-message costs, link efficiency) decides the depth as it decides ``auto``.
"""

from __future__ import annotations

import collections
import math

import numpy as np

from ccweave.collectives import Kind
from ccweave.limits import MAX_CHUNKS_PER_RANK
from ccweave.schedule import Schedule
from ccweave.synth.forest.forest import (
    Forest,
    allgather_forest,
    broadcast_forest,
    reversed_topology,
)
from ccweave.synth.forest.lower import (
    IN_FLIGHT,
    STAGED_IN_FLIGHT,
    STAGED_LINES,
    STAGGERED_IN_FLIGHT,
    build,
    shares,
    unstaged,
)
from ccweave.synth.layout import chunks_for, reject_options, require_kind, schedule_name
from ccweave.synth.registry import register
from ccweave.topology.model import Topology
from ccweave.transforms import concat
from ccweave.units import parse_size

KINDS = frozenset({Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.BROADCAST,
                   Kind.REDUCE})
MAX_TRANSFERS = 250_000
"""The pipeline never makes a schedule of more transfers than this (or one chunk per
unit, if that is more): simulating and verifying it stays a matter of seconds."""
TRANSFERS_PER_MOVE = {Kind.ALLGATHER: 1.0, Kind.BROADCAST: 1.0, Kind.REDUCESCATTER: 2.5,
                      Kind.REDUCE: 2.5, Kind.ALLREDUCE: 3.5}
"""Transfers per chunk moved over an arc: a reduction adds a local copy and a local
reduce; allreduce is both phases."""
DRAIN = 0.15
"""Share of a lane chunk's time each level of a tree adds at the end (fitted in
simulation: the fill and drain cost about ``DRAIN * (depth - 1) / blocks``)."""
SERIAL_RATIO = 4.0
"""A root sends its rail copies one after another when each streams at least this many
latencies (else all at once: at small sizes the latencies would add up)."""
DIRECT_BUDGET = 4
"""Topologies without fabric get this many times the transfer budget."""
EXACT_LOADS = 200_000
"""Forests of more arcs than this take their rate as the link time of every pipeline."""
MIN_MESSAGE_BYTES = 64 << 10
"""On a topology that charges no time per message (every link's alpha 0, no message
overhead in its cost model; a latency alone overlaps) the estimate would cut a buffer
into ever smaller messages for free (a calibration that found 249 us of latency and no
overhead made a 1 MB allreduce 1 KB messages, 5.7x slower measured); no runtime sends
a message for free, so chunks stay at least this big there (NCCL's simple protocol moves
a few hundred KiB per step; sockets and gloo pay tens of microseconds a message)."""


HIDDEN = 2.0
"""A staggered lane hides its messages' latency where each message streams at least this
many times its route's latency (fitted in simulation: one NVSwitch box's 1 GB broadcast
at 1.002-1.004 of the bound where its messages stream 2.2-2.9 route latencies, 1.010 at
1.9, 1.10 at 1.5)."""


UNHIDDEN = 0.2
"""Of its route's latency, the share a staggered reduction's message still waits: lanes
into one root move in step, so their latencies fall together while the senders' ports
are busy elsewhere (simulated on dgx-h100's 1 GB reduce-scatter: 0.19-0.23 at 256-1024
chunks; dgx-a100 0.09)."""


SIMULATED_TRANSFERS = 20_000
"""Pipelines of at most this many transfers are tuned by simulation around the
estimate's pick (a simulation of this many takes a fraction of a second)."""
GAIN = 0.01
"""A deeper or shallower pipeline replaces the estimate's only if it simulates at least
this much faster (else the fewer transfers win)."""


@register("trees", KINDS,
          "ForestColl's optimal spanning-tree packing: out-trees from every root reach the "
          "cut bound, chunks pipelined down them (RS: reversed trees; allreduce: RS+AG)",
          classic=False, sized=True)
def build_trees(topology: Topology, kind: Kind, *, root: int = 0, chunks: int | None = None,
                **options: object) -> Schedule:
    """Tree-packing schedule of ``kind`` (allgather, reducescatter, allreduce, broadcast,
    reduce) on any connected topology.

    Option ``size`` (bytes, or a string like ``64MB``) picks the pipeline depth when
    ``chunks`` (per rank) is not given; with neither, every unit of a tree is one chunk,
    the compact form a runtime that loops over the buffer (MSCCL) pipelines itself.
    Reduce-scatter and reduce run the allgather and broadcast trees of the reversed
    topology backwards; allreduce is that reduce-scatter followed by the allgather.
    """
    require_kind(kind, KINDS, "trees")
    reject_options(options, "trees", ["size"])
    size = _size(options["size"]) if "size" in options else None
    schedule = _build(topology, kind, root, chunks, size, stagger=chunks is None)
    if chunks is None and size is not None:
        schedule = _tuned(topology, kind, root, size, schedule)
    return schedule


def _build(topology: Topology, kind: Kind, root: int, chunks: int | None,
           size: int | None, stagger: bool = True) -> Schedule:
    """The schedule; ``stagger`` lets a sized reduce-scatter's lanes stagger where its
    estimate says so (an allreduce's reduce-scatter never does: unconfirmed)."""
    if kind is Kind.ALLREDUCE:
        rs = _allgather(topology, chunks, size, Kind.REDUCESCATTER, Kind.ALLREDUCE)
        ag = _allgather(topology, rs.collective.chunks_per_rank, size, Kind.ALLGATHER)
        return concat(rs, ag).with_name(
            schedule_name("trees", chunks=rs.collective.chunks_per_rank))
    if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER):
        return _allgather(topology, chunks, size, kind, stagger=stagger)
    return _broadcast(topology, root, chunks, size, kind)


def _tuned(topology: Topology, kind: Kind, root: int, size: int,
           schedule: Schedule) -> Schedule:
    """The estimate's pipeline (``schedule``), or a neighbour that simulates faster.

    The estimate (:func:`_pipeline`) places the optimum only roughly where a cost model
    charges per message; from its pick, halving and doubling the chunks step by step
    while the simulation improves finds the depth the simulator (the calibrated one
    included) prefers. Schedules over :data:`SIMULATED_TRANSFERS` are not tuned. A
    staggered reduce-scatter small enough to simulate is first held against the plain
    one (which wins a tie); a larger one ships as the estimate picked it. A plain
    broadcast whose forest has staged arcs is then held against the same messages
    staggered (twice the chunks, two host buffers per staged arc: see
    :data:`~ccweave.synth.forest.lower.STAGED_LINES`), whatever its size: the estimate
    does not weigh that form."""
    from ccweave.simulate import simulate

    simulated: dict[int, tuple[Schedule, float]] = {}  # holding each keeps its id unique

    def seconds(candidate: Schedule) -> float:
        if id(candidate) not in simulated:
            simulated[id(candidate)] = (candidate,
                                        simulate(candidate, topology, size).time_s)
        return simulated[id(candidate)][1]

    stagger = bool(schedule.metadata.get("staggered"))
    if stagger and kind is Kind.REDUCESCATTER and \
            len(schedule.transfers) <= SIMULATED_TRANSFERS:  # where simulation is cheap
        plain = _build(topology, kind, root, None, size, stagger=False)
        if len(plain.transfers) <= SIMULATED_TRANSFERS and \
                seconds(plain) <= seconds(schedule):
            schedule, stagger = plain, False
    if _messages_are_free(topology):
        return schedule  # the simulator would cut it to dust
    best = schedule
    if len(schedule.transfers) <= SIMULATED_TRANSFERS:  # else too big to tune
        best_time = seconds(schedule)
        per_chunk = len(schedule.transfers) / schedule.collective.chunks_per_rank
        for step in (2.0, 0.5):
            chunks = best.collective.chunks_per_rank
            while True:
                chunks = int(chunks * step)
                if chunks < 1 or chunks * per_chunk > SIMULATED_TRANSFERS:
                    break
                candidate = _build(topology, kind, root, chunks, size, stagger)
                time = seconds(candidate)
                if time >= best_time * (1 - GAIN):
                    break
                best, best_time = candidate, time
            if best is not schedule:
                break  # doubling helped: no need to try halving
    if kind is Kind.BROADCAST and not stagger and 2 * best.collective.chunks_per_rank \
            <= MAX_CHUNKS_PER_RANK and not unstaged(topology, (
                edges for _, _, edges in broadcast_forest(topology, root).trees)):
        # the same messages, staggered, on two channels where staged (STAGED_LINES)
        lined = _broadcast(topology, root, 2 * best.collective.chunks_per_rank, None,
                           kind, STAGED_LINES)
        if seconds(lined) < seconds(best) * (1 - GAIN):
            return lined
    return best


def _size(value: object) -> int:
    from ccweave.errors import InputError

    size = parse_size(value) if isinstance(value, str) else value
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0:
        raise InputError(f"trees: option size must be a positive number of bytes (or like "
                         f"64MB), got {value!r}")
    return int(size)


def _allgather(topology: Topology, chunks: int | None, size: int | None, kind: Kind,
               budget_for: Kind | None = None, stagger: bool = False) -> Schedule:
    """Allgather on the topology's forest, or reduce-scatter on the reversed topology's
    forest taken backwards (staggered where ``stagger`` and the estimate say so)."""
    packed_on = topology if kind is Kind.ALLGATHER else reversed_topology(topology)
    forest = allgather_forest(packed_on)
    n = topology.num_ranks
    if chunks is None and size is None:
        chunks = max(forest.units)
    c, staggered = chunks, False
    if size is not None:  # the size decides the lanes' messages, and chunks if not given
        picked, staggered, _ = _pipeline(forest, packed_on, size, n,
                                      TRANSFERS_PER_MOVE[budget_for or kind],
                                      kind is Kind.REDUCESCATTER,
                                      stagger=stagger and kind is Kind.REDUCESCATTER)
        c = picked if chunks is None else chunks
    c = chunks_for(c)
    trees = []
    for root in range(n):
        mine = forest.of_root(root)
        for count, (units, edges) in zip(shares(c, [u for u, _ in mine]), mine):
            if count:
                trees.append((root, count, edges, min(units, count)))
    # the rails go one copy at a time only where a copy streams longer than it waits
    alpha = max((link.alpha for link in topology.links), default=0.0)
    serial = forest.serial
    if size is not None:
        copy = size * forest.seconds_per_byte / max(1.0, c / max(forest.units)) / \
            max(1, forest.serial)
        serial = forest.serial if copy > SERIAL_RATIO * alpha else 0
    return build(kind, topology, c, 0, trees, schedule_name("trees", chunks=c), serial,
                 stagger=staggered, **_facts(forest))


def _broadcast(topology: Topology, root: int, chunks: int | None, size: int | None,
               kind: Kind, staged_lines: int = 1) -> Schedule:
    """Broadcast on the topology's forest from ``root``, or reduce on the reversed
    topology's forest taken backwards. ``staged_lines`` more than one: a broadcast of
    ``chunks`` staggered over staged arcs too (:data:`~.lower.STAGED_LINES`)."""
    packed_on = topology if kind is Kind.BROADCAST else reversed_topology(topology)
    forest = broadcast_forest(packed_on, root)
    n = topology.num_ranks
    total, staggered, per_lane = forest.units[root], False, 1
    mine = forest.of_root(root)
    together = _lane_units(topology, mine) if kind is Kind.BROADCAST else 1
    if size is not None:  # the size decides the lanes' messages, and chunks if not given
        total, staggered, per_lane = _pipeline(
            forest, packed_on, size, 1, TRANSFERS_PER_MOVE[kind], kind is Kind.REDUCE,
            stagger=kind is Kind.BROADCAST, staggered_lane_units=together)
    if chunks is not None:
        total = chunks * n
    if staged_lines > 1:
        staggered, per_lane = True, 1
    c = chunks_for(chunks, math.ceil(total / n))
    trees = [(root, count, edges, min(units // per_lane, count)) for count, (units, edges)
             in zip(shares(n * c, [u for u, _ in mine]), mine) if count]
    return build(kind, topology, c, root, trees, schedule_name("trees", chunks=c),
                 stagger=staggered, staged_lines=staged_lines, **_facts(forest))


def _lane_units(topology: Topology, trees: list[tuple[int, tuple]]) -> int:
    """Units one staggered lane of a broadcast may carry: where no two of the root's trees
    share a link, the units their lanes exist to weigh (ratios of fair shares) weigh
    nothing, and the lanes of a tree would only split its links between them, each
    pipeline the slower (torus:8x8's four arc-disjoint trees of 16 units, 1 GB: 1.047 of
    the bound at 16 lanes a tree and 1M transfers, 1.013 at one lane and 258k); so the
    greatest common divisor of their units, else 1. Staggered lanes only: plain ones
    need each other to hide their latencies."""
    used: set[int] = set()
    for _, edges in trees:
        links = {link for parent, child, via in edges
                 for link in topology.route_via(parent, child, via)}
        if used & links:
            return 1
        used |= links
    return math.gcd(*(units for units, _ in trees)) or 1


def _facts(forest: Forest) -> dict[str, object]:
    return {"tree_count": len(forest.trees), "depth": forest.depth, "forest": forest.method,
            "rate_over_bound": (forest.seconds_per_byte / forest.optimal_seconds_per_byte
                                if forest.optimal_seconds_per_byte else 1.0)}


def _pipeline(forest: Forest, topology: Topology, size: int, roots: int,
              per_move: float = 1.0, reduction: bool = False,
              stagger: bool = False, staggered_lane_units: int = 1
              ) -> tuple[int, bool, int]:
    """Chunks per root minimizing the estimate ``link time + drain + latency``, and whether
    its lanes are staggered: the busiest
    link's time with the chunks as shared out (fewer chunks than units unbalance the
    trees); the drain, ``DRAIN * relays / p`` of it for ``p`` chunks per lane, ``relays``
    the most copies a chunk waits for on its way down (the children of every rank it
    passes before the last, :func:`relays`); and a latency per chunk of a lane and per
    level. A reduction adds the local sums its root makes after the last chunk arrives,
    one per child. A cost model adds its per-message latency to every hop's and the
    overhead of the messages each rank issues, one after another (on a host's shared
    cores, where it has more ranks than cores). Forests without fabric
    routes get a larger transfer budget (their simulation shares no link between routes).
    Where an arc is staged through host memory, a lane keeps :data:`STAGED_IN_FLIGHT`
    chunks in flight: a chunk's latency is charged a third, and its two staging latencies
    only where the chunks in flight do not cover them (charged in full, cedar's and
    dgx1's 1 GB pipelines stopped short: broadcast 1.037 and 1.053 of the bound, 1.027
    and 1.042 with this; at 16 MB the staging latency is what keeps chunks large).
    With ``stagger`` (and no arc staged through host memory) staggered lanes are weighed
    too: two chunks a message, so half the messages and twice the drain, and no latency
    per chunk where a message streams :data:`HIDDEN` route latencies; staggered lanes of
    ``staggered_lane_units`` units each are weighed as well (fewer, longer lanes: see
    :func:`_lane_units`). The lowest estimate wins; returns its chunks per root, whether
    staggered, and the units a lane carries."""
    n = topology.num_ranks
    k = max(forest.units)
    if len(forest.trees) * n > EXACT_LOADS:  # too many arcs to weigh: take the rate
        def loads(c: int) -> float:
            return forest.seconds_per_byte * (1 if c >= k else k / c)
    else:
        loads = _link_loads(forest, topology)
    alpha = max((link.alpha for link in topology.links), default=0.0)
    depth = max(forest.depth, 1)
    waits = relays(forest)
    fanin = max((sum(1 for parent, _, _ in edges if parent == root)
                 for root, _, edges in forest.trees[:4096]), default=0) if reduction else 0
    direct = not topology.fabric
    cost = topology.cost
    latency = alpha + cost.message_latency
    sends = roots * (n - 1) * per_move / n  # messages a rank issues per chunk of a root
    overhead = cost.message_overhead
    if cost.host_cores:  # every rank of a crowded host sends at once: they share its cores
        crowd = max(collections.Counter(topology.host_of).values())
        overhead *= max(1.0, crowd / cost.host_cores)

    def candidates(staggered: bool) -> list[int]:
        per_message = STAGGERED_IN_FLIGHT if staggered else 1
        extra = DIRECT_BUDGET if direct and not staggered else per_message
        budget = max(k, int(MAX_TRANSFERS * extra / per_move) // max(1, roots * (n - 1)))
        budget = min(budget, MAX_CHUNKS_PER_RANK * n // roots)  # what MSCCL can address
        # the budget too: a pipeline it holds back gets all of it (ndv2:4's 1 GB
        # reduce-scatter: 64 chunks 1.043 of the bound, 100 chunks 1.028); not where
        # links alone are the fabric, whose larger budget is already 1M transfers
        powers = {*(2**i for i in range(16)), *(k * 2**i for i in range(16)),
                  *((budget,) if staggered or not direct else ())}
        if _messages_are_free(topology):
            budget = min(budget, max(1, int(size // (roots * MIN_MESSAGE_BYTES))))
        return sorted(c for c in powers if c <= budget) or [1]

    def estimate(c: int, staggered: bool, lane_units: int) -> float:
        p = max(1.0, c * lane_units / k)  # chunks a lane carries
        bandwidth = size * loads(c) / cost.link_efficiency
        serial = p * latency * forest.serial / IN_FLIGHT  # the rails' latencies in turn
        local = fanin * size / (roots * c) / topology.local_bandwidth  # last sums at a root
        if staggered:  # a message's latency passes while the one before streams
            m = STAGGERED_IN_FLIGHT
            waited = max(0.0, HIDDEN * p * hop / m - bandwidth)
            if reduction:  # no serial rails (lower_reduction has none), see UNHIDDEN
                waited += UNHIDDEN * p / m * hop
                serial = 0.0
            return (bandwidth * (1 + DRAIN * m * waits / p) + depth * latency + waited
                    + serial + local + c * sends * overhead / m)
        if not unstaged_forest:  # a staged lane's chunks in flight overlap their latencies
            per_chunk = bandwidth / p  # a lane's time per chunk on the busiest link
            staging = max(0.0, (2 * cost.staging_latency + per_chunk) / STAGED_IN_FLIGHT
                          - per_chunk)
            return (bandwidth * (1 + DRAIN * waits / p) + depth * latency
                    + p * (latency / STAGED_IN_FLIGHT + staging) + serial
                    + local + c * sends * overhead)
        return (bandwidth * (1 + DRAIN * waits / p) + (p + depth) * latency + serial
                + local + c * sends * overhead)

    modes = [(False, 1)]
    unstaged_forest = not topology.has_host or \
        unstaged(topology, (edges for _, _, edges in forest.trees))
    if stagger and unstaged_forest:
        modes += [(True, units) for units in sorted({1, staggered_lane_units})]
        hop = _longest_hop(forest, topology) + cost.message_latency
    return min(((c, staggered, units) for staggered, units in modes
                for c in candidates(staggered)), key=lambda pick: estimate(*pick))


def _longest_hop(forest: Forest, topology: Topology) -> float:
    """The largest latency of any arc's route (its links' alpha summed), over the first
    trees of a large forest."""
    routes = {(parent, child, via) for _, _, edges in forest.trees[:4096]
              for parent, child, via in edges}
    alphas = topology.alphas
    return max((float(alphas[list(topology.route_via(*route))].sum()) for route in routes),
               default=0.0)


def _messages_are_free(topology: Topology) -> bool:
    """The topology charges a message no time of its own on a link or a rank: every
    link's alpha is 0 and its cost model has no message overhead (a message latency alone
    overlaps with the next message's, so it does not bound how small messages pay; see
    :data:`MIN_MESSAGE_BYTES`)."""
    return (all(link.alpha == 0 for link in topology.links)
            and topology.cost.message_overhead == 0)


def relays(forest: Forest) -> int:
    """The most a chunk waits on its way down a tree, in copies: over root-to-leaf paths,
    the children of every rank on the path but the root (a rank sends a chunk to each of
    its children before the last one has it). 0 for stars. Symmetric forests of many
    trees are weighed by their first root's trees."""
    trees = forest.trees if len(forest.trees) <= 4096 else \
        [forest.trees[i] for i in forest.by_root.get(forest.trees[0][0], [0])]
    worst = 0
    for root, _, edges in trees:
        fanout: dict[int, int] = {}
        for parent, _, _ in edges:
            fanout[parent] = fanout.get(parent, 0) + 1
        waited = {root: 0}
        for parent, child, _ in edges:
            waited[child] = waited[parent] + (fanout[parent] if parent != root else 0)
        worst = max(worst, max(waited.values()))
    return worst


def _link_loads(forest: Forest, topology: Topology):
    """``loads(c)``: seconds per byte of the size on the busiest link when every root's
    ``c`` chunks (a chunk is ``1 / (roots * c)`` of the size) are shared out over its
    trees."""
    roots = sorted({root for root, _, _ in forest.trees})
    weights = {root: [u for u, _ in forest.of_root(root)] for root in roots}
    rows = []
    for root in roots:
        for _, edges in forest.of_root(root):
            row = np.zeros(len(topology.links))
            for parent, child, via in edges:
                row[list(topology.route_via(parent, child, via))] += 1
            rows.append(row / topology.bandwidths)
    matrix = np.array(rows)

    def loads(c: int) -> float:
        counts = np.concatenate([shares(c, weights[root]) for root in roots])
        return float((counts @ matrix).max()) / (c * len(roots))

    return loads
