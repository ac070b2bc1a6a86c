"""Event-driven alpha-beta simulation of a schedule on a topology, with link contention.

A transfer starts when its deps have finished, spends its route's latency (the sum of
its links' ``alpha``), then streams its bytes through every link of its route at once
(cut-through). Flows that share links split them max-min fairly (progressive filling);
a local copy or reduction (``src == dst``) streams through its rank's memory at
``topology.local_bandwidth``, shared the same way. Reductions cost nothing beyond the
receive. docs/simulator.md explains the model and what it leaves out.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush
from itertools import chain
from operator import attrgetter

import numpy as np

from ccweave.errors import InputError, TopologyError
from ccweave.gc_pause import gc_paused
from ccweave.schedule import Schedule, Transfer, topological_order
from ccweave.topology.model import Topology

__all__ = ["PathStep", "SimResult", "simulate"]


@dataclass(frozen=True, slots=True)
class PathStep:
    """One transfer on the critical path.

    ``stretch`` is how much longer it took than it would alone on an idle machine
    (``alpha + bytes / bottleneck bandwidth``): the delay contention caused.
    """

    transfer: int
    src: int
    dst: int
    ready: float
    finish: float
    stretch: float


@dataclass(frozen=True, eq=False)
class SimResult:
    """What :func:`simulate` found: the time, per-transfer times, per-link load.

    Per transfer ``i``: ``ready[i]`` is when its last dep finished (0 without deps),
    ``start[i] = ready[i] + route alpha`` when its first byte moves, ``finish[i]`` when
    its last byte lands. Per link (indices into ``topology.links``): ``link_busy_s`` is
    the time it carried at least one flow, ``link_bytes`` the bytes it carried,
    ``link_utilization`` their share of ``bandwidth * time_s``. ``critical_path`` runs
    in time order and ends with the transfer that finished last.
    """

    schedule: Schedule = field(repr=False)
    topology: Topology = field(repr=False)
    size_bytes: float
    time_s: float
    ready: np.ndarray = field(repr=False)
    start: np.ndarray = field(repr=False)
    finish: np.ndarray = field(repr=False)
    link_busy_s: np.ndarray = field(repr=False)
    link_bytes: np.ndarray = field(repr=False)
    link_utilization: np.ndarray = field(repr=False)
    critical_path: tuple[PathStep, ...] = field(repr=False)

    @property
    def algbw(self) -> float:
        """nccl-tests' algorithm bandwidth, ``size / time`` in bytes/second."""
        if self.time_s > 0:
            return self.size_bytes / self.time_s
        return math.inf if self.size_bytes > 0 else 0.0

    @property
    def busbw(self) -> float:
        """nccl-tests' bus bandwidth, ``algbw * busbw_factor`` in bytes/second."""
        return self.algbw * self.schedule.collective.busbw_factor

    def link_name(self, index: int) -> str:
        link = self.topology.links[index]
        return f"{link.src}->{link.dst}"

    def busiest_links(self, k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` most utilised links as ``("src->dst", utilization)``, busiest first."""
        order = np.argsort(-self.link_utilization, kind="stable")[:max(k, 0)]
        return [(self.link_name(int(i)), float(self.link_utilization[i])) for i in order]

    def __repr__(self) -> str:
        return (f"SimResult({self.schedule.name or 'schedule'!r} on {self.topology.name!r}, "
                f"size={self.size_bytes:g} B, time={self.time_s * 1e6:.3f} us, "
                f"algbw={self.algbw / 1e9:.3f} GB/s, transfers={len(self.finish)})")


def simulate(schedule: Schedule, topology: Topology, size_bytes: float) -> SimResult:
    """Simulate ``schedule`` on ``topology`` when the size buffer holds ``size_bytes``.

    Parameters
    ----------
    schedule: the algorithm; a transfer moves ``count * chunk_bytes(size_bytes)`` bytes.
    topology: the machine; it must have the schedule's rank count and a route for every
        remote transfer.
    size_bytes: nccl-tests' ``size`` (bytes of the collective's size buffer).

    Returns
    -------
    SimResult with the completion time, per-transfer times, per-link load and the
    critical path.
    """
    if not (isinstance(size_bytes, (int, float, np.integer, np.floating))
            and not isinstance(size_bytes, bool) and 0 <= size_bytes < 2.0**1000):
        raise InputError(f"simulate: size_bytes must be a finite number >= 0, "
                         f"got {size_bytes!r:.40}")
    with gc_paused():
        plan = _Plan(schedule, topology, float(size_bytes))
        ready, start, finish, last_dep, busy = _run(plan)
    num_links = len(topology.links)
    time_s = max(finish, default=0.0)
    link_bytes = plan.link_bytes()
    capacity = topology.bandwidths * time_s
    utilization = np.divide(link_bytes, capacity, out=np.zeros(num_links), where=capacity > 0)
    return SimResult(schedule, topology, float(size_bytes), time_s,
                     np.array(ready), np.array(start), np.array(finish),
                     np.array(busy[:num_links]), link_bytes, utilization,
                     _critical_path(plan, ready, finish, last_dep))


class _Plan:
    """Per-transfer arrays the event loop reads: route, bytes, latency, children.

    Resources ``0..L-1`` are the topology's links; ``L + rank`` is ``rank``'s memory;
    ``L + N + host`` a host's CPUs when the topology's cost model limits them (a remote
    transfer holds its route and the hosts of its two ends). Plain lists of Python
    floats: the loop indexes them faster than numpy arrays. Routes are looked up once per
    rank pair.
    """

    def __init__(self, schedule: Schedule, topology: Topology, size_bytes: float) -> None:
        if topology.num_ranks != schedule.num_ranks:
            raise TopologyError(
                f"schedule {schedule.name or '(unnamed)'!r} is for {schedule.num_ranks} ranks "
                f"but topology {topology.name!r} has {topology.num_ranks}; simulate it on a "
                f"{schedule.num_ranks}-rank topology or synthesize a schedule for this one")
        self.schedule = schedule
        self.topology = topology
        self.chunk = schedule.collective.chunk_bytes(size_bytes)
        cost = topology.cost
        self.num_links = len(topology.links)
        self.capacity = [float(b) * cost.link_efficiency for b in topology.bandwidths]
        self.capacity += [float(topology.local_bandwidth)] * topology.num_ranks
        self.hosts: list[int] | None = None
        self.host_base: int | None = None
        if cost.host_bandwidth is not None:
            first = self.host_base = len(self.capacity)
            self.hosts = [first + host for host in topology.host_of]
            self.capacity += [float(cost.host_bandwidth)] * (max(topology.host_of) + 1)
        self.overhead = float(cost.message_overhead)
        self.issuer_of: list[int] | None = None  # each rank's host, where CPUs are shared
        self.issuers: list[int] = []
        if self.overhead and cost.host_cores is not None:
            host_of = topology.host_of
            sizes = np.bincount(np.array(host_of, dtype=np.int64))
            if (sizes > cost.host_cores).any():  # some host has more ranks than cores
                self.issuer_of = list(host_of)
                self.issuers = [cost.host_cores] * len(sizes)
        transfers = schedule.transfers
        self.count = len(transfers)
        src, dst = _column(transfers, "src"), _column(transfers, "dst")
        self._check_ranks(src, dst)
        self.src = src.tolist()
        self.fifo = cost.connection_fifo
        self.conn_of: list[int] = []
        self.num_conns = 0
        if self.fifo:  # a connection per (src, dst, channel); local transfers have none
            channel = _column(transfers, "channel")
            keys, conn = np.unique(np.stack([src, dst, channel]), axis=1, return_inverse=True)
            conn = conn.reshape(-1)
            conn[src == dst] = -1
            self.conn_of, self.num_conns = conn.tolist(), keys.shape[1]
        self._routes(src, dst)
        counts = _column(transfers, "count")
        if len(counts) and counts.min() < 0:
            index = int(np.argmin(counts))
            raise InputError(f"transfer {index} moves {counts[index]} chunks; a count is "
                             "a number of chunks >= 0, fix the schedule")
        counts = counts.astype(float)
        self.nbytes = (counts * self.chunk).tolist()
        self.pair_chunks = np.bincount(self.pair_of, weights=counts,
                                       minlength=len(self.pairs))
        self._dependencies()
        if self.chunk == 0:  # nothing streams: every transfer is pure latency
            self.route = [()] * self.count

    def _check_ranks(self, src: np.ndarray, dst: np.ndarray) -> None:
        ranks = self.topology.num_ranks
        bad = np.flatnonzero((src < 0) | (src >= ranks) | (dst < 0) | (dst >= ranks))
        if len(bad):
            index = int(bad[0])
            transfer = self.schedule.transfers[index]
            raise TopologyError(
                f"transfer {index} ({transfer.src} -> {transfer.dst}) names a rank outside "
                f"topology {self.topology.name!r} (0..{ranks - 1}); fix the schedule")

    def _routes(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Per transfer: its resources, route alpha and bottleneck bandwidth."""
        vias = [t.via for t in self.schedule.transfers]
        if any(via is not None for via in vias):
            self._pinned_routes(src.tolist(), dst.tolist(), vias)
            return
        ranks = self.topology.num_ranks
        keys, first, pair_of = np.unique(src * ranks + dst, return_index=True,
                                         return_inverse=True)
        pairs = [self._pair(int(index), int(key) // ranks, int(key) % ranks)
                 for key, index in zip(keys, first)]
        self._set_routes(pairs, pair_of.reshape(-1))

    def _pinned_routes(self, src: list[int], dst: list[int],
                       vias: list[tuple[str, ...] | None]) -> None:
        """Routes keyed by (src, dst, via) where some transfers pin theirs. A pinned route
        through host memory (a CPU node) is staged there: its bytes land in host memory
        before they go on (the copy in and the copy out of the multipath host path), so
        each such stage streams after the one before, with its own latency."""
        keys: dict[tuple, int] = {}
        pairs, pair_of = [], []
        segments: dict[int, list[tuple[tuple[int, ...], float, float]]] = {}
        for index, key in enumerate(zip(src, dst, vias)):
            if key not in keys:
                keys[key] = len(pairs)
                pairs.append(self._pair(index, *key))
                staged = self._stages(*key)
                if staged:
                    segments[keys[key]] = staged
            pair_of.append(keys[key])
        self._set_routes(pairs, np.array(pair_of, dtype=np.int64))
        lines: dict[tuple, int] = {}
        channels = [t.channel for t in self.schedule.transfers]
        for index, pair in enumerate(pair_of):
            if pair in segments:
                first, *rest = segments[pair]
                self.route[index], self.alpha[index], self.bottleneck[index] = first
                self.stages[index] = rest
                key = (src[index], dst[index], vias[index], channels[index])
                if key not in lines:
                    lines[key] = self.num_stage_lines
                    self.num_stage_lines += len(segments[pair])
                self.stage_line[index] = lines[key]
                if self.fifo:  # its stages are its lines: not the connection's
                    self.conn_of[index] = -1

    def _stages(self, src: int, dst: int, via: tuple[str, ...] | None
                ) -> list[tuple[tuple[int, ...], float, float]]:
        """The two stages of a pinned route through host memory, cut at the first CPU
        node it passes (one host buffer, as a host-staged copy or NCCL's shared-memory
        transport has); none when the route passes no CPU node."""
        topology = self.topology
        if src == dst or not topology.staged(via):
            return []
        hosts = tuple(dict.fromkeys((self.hosts[src], self.hosts[dst]))) if self.hosts \
            else ()
        latency = topology.cost.message_latency + topology.cost.staging_latency
        return [(part + hosts, float(sum(topology.links[i].alpha for i in part)) + latency,
                 float(min(self.capacity[i] for i in (*part, *hosts))))
                for part in topology.stages(src, dst, via)]

    def _set_routes(self, pairs: list[tuple[tuple[int, ...], float, float]],
                    pair_of: np.ndarray) -> None:
        self.stages: dict[int, list[tuple[tuple[int, ...], float, float]]] = {}
        """Per staged transfer, the stages after its first (route, alpha, bottleneck)."""
        self.stage_line: dict[int, int] = {}
        """Per staged transfer, its first stage's line: stage ``s`` of a route (and
        channel) moves one message at a time, line ``stage_line + s``, so pieces pipeline:
        piece ``j + 1`` is copied in while piece ``j`` is copied out."""
        self.num_stage_lines = 0
        self.pairs = pairs
        self.pair_of = pair_of
        pick = pair_of.tolist()
        self.route = list(map([p[0] for p in pairs].__getitem__, pick))
        self.alpha = np.array([p[1] for p in pairs], dtype=float)[pair_of].tolist()
        self.bottleneck = np.array([p[2] for p in pairs], dtype=float)[pair_of].tolist()

    def _pair(self, index: int, src: int, dst: int, via: tuple[str, ...] | None = None
              ) -> tuple[tuple[int, ...], float, float]:
        """(resources, alpha, bottleneck bandwidth) of the route ``src -> dst`` (through
        ``via`` when pinned); ``index`` is the first such transfer, for the error message."""
        topology = self.topology
        if src == dst:
            return (self.num_links + src,), 0.0, float(topology.local_bandwidth)
        try:
            route = topology.route_via(src, dst, via)
        except TopologyError as error:
            if via is not None:
                raise TopologyError(f"transfer {index} ({src} -> {dst}): {error}") from None
            raise TopologyError(
                f"transfer {index} ({src} -> {dst}): topology {topology.name!r} has no route "
                f"from rank {src} to rank {dst} that avoids other ranks; relay it through a "
                "rank with explicit transfers, or add the missing link") from None
        alpha = float(sum(topology.links[i].alpha for i in route)) \
            + topology.cost.message_latency
        resources = tuple(route)
        if self.hosts is not None:
            resources += tuple(dict.fromkeys((self.hosts[src], self.hosts[dst])))
        bottleneck = float(min(self.capacity[i] for i in resources))
        return resources, alpha, bottleneck

    def _dependencies(self) -> None:
        """``num_deps`` per transfer and the children of transfer ``i`` as
        ``kids[offsets[i]:offsets[i + 1]]`` (CSR, cheaper than a list per transfer)."""
        count = self.count
        deps = list(map(attrgetter("deps"), self.schedule.transfers))
        num_deps = np.fromiter(map(len, deps), dtype=np.int64, count=count)
        flat = np.fromiter(chain.from_iterable(deps), dtype=np.int64,
                           count=int(num_deps.sum()))
        owner = np.repeat(np.arange(count), num_deps)
        bad = np.flatnonzero((flat < 0) | (flat >= count) | (flat == owner))
        if len(bad):
            index, dep = int(owner[bad[0]]), int(flat[bad[0]])
            raise InputError(f"transfer {index} depends on transfer {dep}, which is not "
                             f"another transfer (the schedule has {count}); fix its deps")
        offsets = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(np.bincount(flat, minlength=count), out=offsets[1:])
        self.kids = owner[np.argsort(flat, kind="stable")].tolist()
        self.offsets = offsets.tolist()
        self.num_deps = num_deps.tolist()

    def link_bytes(self) -> np.ndarray:
        """Bytes each topology link carried over the run."""
        carried = np.zeros(len(self.capacity))
        for (resources, _, _), chunks in zip(self.pairs, self.pair_chunks.tolist()):
            carried[list(resources)] += chunks * self.chunk
        return carried[:self.num_links]


def _column(transfers: tuple[Transfer, ...], name: str) -> np.ndarray:
    return np.fromiter(map(attrgetter(name), transfers), dtype=np.int64, count=len(transfers))


def _run(plan: _Plan) -> tuple[list[float], list[float], list[float], list[int], list[float]]:
    """The event loop. Returns ready, start, finish, last dep per transfer, busy per resource.

    Events sit in per-time buckets (``finishes``/``starts``: time -> transfers) with a
    heap of times, so transfers that move in lockstep cost one heap operation per step.
    A finish event is current only while ``predicted[i]`` equals its time (lazy
    invalidation). Fair shares are recomputed once per instant, for the flows connected
    to a link whose set of flows changed; a flow alone on all its links skips that.
    """
    count = plan.count
    route, nbytes, alpha, solo_rate = plan.route, plan.nbytes, plan.alpha, plan.bottleneck
    overhead, src_of = plan.overhead, plan.src
    engine = [0.0] * (max(src_of, default=-1) + 1)  # when each rank may issue its next transfer
    host_of = plan.issuer_of
    cores = [[0.0] * n for n in plan.issuers]  # when each core of each host is free

    def issue(rank: int, now: float) -> float:
        """When a transfer ``rank`` makes ready at ``now`` has been issued: after the
        rank's previous one and, where the host's CPUs are shared, a free core."""
        free = engine[rank]
        begin = free if free > now else now
        if host_of is not None:
            host = cores[host_of[rank]]
            core = min(range(len(host)), key=host.__getitem__)
            if host[core] > begin:
                begin = host[core]
            host[core] = begin + overhead
        engine[rank] = begin + overhead
        return begin + overhead
    stages, next_stage = plan.stages, dict.fromkeys(plan.stages, 0)
    stage_line = plan.stage_line
    stage_holder = [-1] * plan.num_stage_lines
    stage_queue: list[deque[int]] = [deque() for _ in range(plan.num_stage_lines)]

    # the hot paths below queue starts inline; these helpers serve the rarer events
    def start_at(when: float, index: int) -> None:
        bucket = starts.get(when)
        if bucket is None:
            starts[when] = [index]
            heappush(times, when)
        else:
            bucket.append(index)

    def release_stage(index: int, now: float) -> None:
        """The stage ``index`` was on is free: the next piece waiting for it starts."""
        line = stage_line[index] + next_stage[index]
        stage_holder[line] = -1
        if stage_queue[line]:
            start_at(now, stage_queue[line].popleft())

    fifo, conn_of = plan.fifo, plan.conn_of
    holder = [-1] * plan.num_conns  # the transfer streaming on each connection
    queued: list[deque[int]] = [deque() for _ in range(plan.num_conns)]
    kids, offsets, pending = plan.kids, plan.offsets, list(plan.num_deps)
    capacity = plan.capacity
    flows: list[set[int]] = [set() for _ in capacity]
    busy_since = [0.0] * len(capacity)
    busy = [0.0] * len(capacity)
    ready, start, finish = [0.0] * count, [0.0] * count, [0.0] * count
    last_dep = [-1] * count
    remaining, rate, since = [0.0] * count, [0.0] * count, [0.0] * count
    predicted = [-1.0] * count
    times: list[float] = []
    finishes: dict[float, list[int]] = {}
    starts: dict[float, list[int]] = {}
    dirty: set[int] = set()
    for index in range(count):
        if not pending[index]:
            # ranks issue their transfers one after another
            when = (issue(src_of[index], 0.0) if overhead else 0.0) + alpha[index]
            bucket = starts.get(when)
            if bucket is None:
                starts[when] = [index]
                times.append(when)
            else:
                bucket.append(index)
    heapify(times)
    now = 0.0
    while times:
        now = heappop(times)
        while True:
            done = finishes.pop(now, None)
            if done is not None:
                for index in done:
                    if predicted[index] != now:
                        continue  # stale: its rate changed after this event was queued
                    predicted[index] = -1.0
                    if stages and index in stages:
                        if next_stage[index] < len(stages[index]):  # the next stage starts
                            for link in route[index]:
                                others = flows[link]
                                others.discard(index)
                                if others:
                                    dirty.add(link)
                                else:
                                    busy[link] += now - busy_since[link]
                            release_stage(index, now)
                            stage = stages[index][next_stage[index]]
                            next_stage[index] += 1
                            route[index], solo_rate[index] = stage[0], stage[2]
                            start_at(now + stage[1], index)
                            continue
                        release_stage(index, now)
                    finish[index] = now
                    if fifo:  # the connection's next message streams now
                        line = conn_of[index]
                        waiting = queued[line] if line >= 0 else None
                        if waiting:
                            start_at(now, waiting.popleft())
                        if line >= 0:
                            holder[line] = -1
                    for link in route[index]:
                        others = flows[link]
                        others.discard(index)
                        if others:
                            dirty.add(link)
                        else:
                            busy[link] += now - busy_since[link]
                    for child in kids[offsets[index]:offsets[index + 1]]:
                        left = pending[child] - 1
                        pending[child] = left
                        if not left:
                            ready[child] = now
                            last_dep[child] = index
                            if overhead:
                                when = issue(src_of[child], now) + alpha[child]
                            else:
                                when = now + alpha[child]
                            bucket = starts.get(when)
                            if bucket is None:
                                starts[when] = [child]
                                heappush(times, when)
                            else:
                                bucket.append(child)
            begun = starts.pop(now, None)
            if begun is not None:
                for index in begun:
                    if fifo:  # one message at a time per connection, in ready order
                        line = conn_of[index]
                        if line >= 0:
                            if holder[line] >= 0 and holder[line] != index:
                                queued[line].append(index)
                                continue
                            holder[line] = index
                    if stages and index in stages:  # one piece at a time per stage
                        line = stage_line[index] + next_stage[index]
                        if stage_holder[line] >= 0 and stage_holder[line] != index:
                            stage_queue[line].append(index)
                            continue
                        stage_holder[line] = index
                    if not stages or not next_stage.get(index):  # a later stage: started
                        start[index] = now
                    links = route[index]
                    alone = True
                    for link in links:
                        others = flows[link]
                        if others:
                            alone = False
                            dirty.add(link)
                        else:
                            busy_since[link] = now
                        others.add(index)
                    size = nbytes[index]
                    remaining[index] = size
                    since[index] = now
                    if alone:  # no one to share with: full bottleneck rate now
                        speed = solo_rate[index]
                        rate[index] = speed
                        when = now + size / speed if links else now
                        predicted[index] = when
                        bucket = finishes.get(when)
                        if bucket is None:
                            finishes[when] = [index]
                            heappush(times, when)
                        else:
                            bucket.append(index)
                    else:
                        rate[index] = 0.0  # set when this instant's shares are computed
            if done is None and begun is None:
                break
        if dirty:
            for when, index in _reshare(now, dirty, flows, route, capacity, rate, remaining,
                                        since, predicted, plan.host_base):
                bucket = finishes.get(when)
                if bucket is None:
                    finishes[when] = [index]
                    heappush(times, when)
                else:
                    bucket.append(index)
    if pending and max(pending) > 0:
        topological_order(plan.schedule.transfers)  # raises, naming a transfer on the cycle
    return ready, start, finish, last_dep, busy


def _reshare(now: float, dirty: set[int], flows: list[set[int]], route: list[tuple[int, ...]],
             capacity: list[float], rate: list[float], remaining: list[float],
             since: list[float], predicted: list[float],
             host_base: int | None = None) -> list[tuple[float, int]]:
    """Recompute max-min fair rates for the flows connected to the ``dirty`` links.

    Brings each flow whose rate changes up to ``now`` and returns its new finish event.
    """
    links = set(dirty)
    stack = list(dirty)
    dirty.clear()
    members: set[int] = set()
    while stack:  # the flows connected to the dirty links, and all their links
        fresh = flows[stack.pop()] - members
        if fresh:
            members |= fresh
            reach = set(chain.from_iterable(map(route.__getitem__, fresh)))
            reach -= links
            links |= reach
            stack.extend(reach)
    shares = _max_min_rates(links, flows, route, capacity, host_base)
    events = []
    for flow in members:
        new, old = shares[flow], rate[flow]
        if new != old:
            left = remaining[flow] - old * (now - since[flow])
            left = left if left > 0.0 else 0.0
            remaining[flow], since[flow], rate[flow] = left, now, new
            when = now + left / new
            predicted[flow] = when
            events.append((when, flow))
    return events


def _max_min_rates(links: set[int], flows: list[set[int]], route: list[tuple[int, ...]],
                   capacity: list[float], host_base: int | None = None) -> dict[int, float]:
    """Max-min fair rates by progressive filling over a closed set of links and flows.

    Repeatedly takes the link with the smallest fair share (spare capacity / unfixed
    flows), fixes its flows at that share, and takes it from their other links; a flow
    bottlenecked elsewhere thus leaves its spare to the others. Fixing flows at the
    lowest share never lowers another link's share, so heap keys are lower bounds,
    refreshed when popped; the level never falls, which also absorbs rounding.

    Resources from ``host_base`` on are hosts' CPUs: they are not shared max-min but
    slow every flow they carry alike (a host short of CPU delays all its processes), so
    after the links' fair rates, each host whose flows would take more than its capacity
    scales them all down to fit.
    """
    hosts = [link for link in links if link >= host_base] if host_base is not None else []
    spare = {link: capacity[link] for link in links}
    for host in hosts:  # never the tightest link: scaled below instead
        spare[host] = math.inf
    unfixed = {link: len(flows[link]) for link in links}
    heap = [(spare[link] / unfixed[link], link) for link in links if unfixed[link]]
    heapify(heap)
    rates: dict[int, float] = {}
    level = 0.0
    while heap:
        share, link = heappop(heap)
        left = unfixed[link]
        if not left:
            continue
        current = spare[link] / left
        if current > share:  # others were fixed since: its share rose
            heappush(heap, (current, link))
            continue
        level = current if current > level else level
        for flow in flows[link]:
            if flow not in rates:
                rates[flow] = level
                for other in route[flow]:
                    spare[other] -= level
                    unfixed[other] -= 1
    slowdown: dict[int, float] = {}
    for host in hosts:
        total = sum(rates[flow] for flow in flows[host])
        if total > capacity[host]:
            factor = capacity[host] / total
            for flow in flows[host]:
                slowdown[flow] = min(slowdown.get(flow, 1.0), factor)
    for flow, factor in slowdown.items():
        rates[flow] *= factor
    return rates


def _critical_path(plan: _Plan, ready: list[float], finish: list[float],
                   last_dep: list[int]) -> tuple[PathStep, ...]:
    """From the last transfer to finish back through the dep that finished last."""
    if not finish:
        return ()
    transfers = plan.schedule.transfers
    index = finish.index(max(finish))
    steps = []
    while index >= 0:
        transfer = transfers[index]
        ideal = plan.alpha[index] + plan.overhead
        if plan.nbytes[index]:
            ideal += plan.nbytes[index] / plan.bottleneck[index]
        stretch = max(0.0, finish[index] - ready[index] - ideal)
        steps.append(PathStep(index, transfer.src, transfer.dst, ready[index], finish[index],
                              stretch))
        index = last_dep[index]
    return tuple(reversed(steps))
