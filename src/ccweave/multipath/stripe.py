"""Multipath as a transform: stripe any schedule's rank-to-rank transfers over several paths.

Each transfer of the simulated schedule sees what the rest of the schedule leaves of every
link while it runs (its *residual* capacity); its chunks are split over its useful paths
(:mod:`~ccweave.multipath.paths`) in the shares that residual capacity gives
(:func:`~ccweave.multipath.shares.solve`). A path over links the collective already
saturates gets nothing: the paper switched multipath off during inter-socket traffic for
this reason. Transfers that may stripe at once compete for the same spare links, so each
gets its overlap-weighted part of them, and the alternative paths' shares are scaled by
each of ``scales`` in turn; the fastest schedule in simulation wins, the unstriped one
included, so striping never slows a schedule down at the size it is tuned for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ccweave.collectives import Buffer, Collective
from ccweave.errors import InputError
from ccweave.multipath.p2p import PATH_KINDS, apportion, split_run
from ccweave.multipath.paths import MAX_PATHS, MAX_RELAYS, Path, find_paths
from ccweave.multipath.shares import pieces, solve
from ccweave.schedule import Op, Schedule, Transfer, topological_order
from ccweave.simulate import SimResult, simulate
from ccweave.topology.model import Topology

SCALES = (1.0, 0.6, 0.3)
"""Factors tried on the alternative paths' shares (1: as the residual capacity says)."""

MIN_GAIN = 1e-3
"""A striped variant must be at least this fraction faster to replace the schedule."""

STRIPE_PIECES = 2
"""Pipeline pieces per relay path of one striped transfer at most: a pipelined schedule
already moves in pieces, and each piece more is a transfer more."""

MIN_SPARE = 0.05
"""An alternative path is used only if what it has spare is at least this fraction of
what the transfer gets on its own route (UCX drops lanes under 1/4 of the fastest; spare
capacity divided among many transfers is small, so the bar is lower here)."""

SPLIT = 32
"""Each chunk is cut into this many before striping, so a one-chunk transfer can split
and a path can take a small share (1/32 of it)."""

Pairs = Callable[[int, int], bool]


@dataclass(frozen=True)
class _Split:
    """How one transfer is striped: ``(path, chunks, pieces)`` per path, in chunk order."""

    parts: tuple[tuple[Path, int, int], ...]


def stripe(schedule: Schedule, topology: Topology, size_bytes: float, *,
           kinds: Sequence[str] = PATH_KINDS, pairs: Pairs | None = None,
           max_paths: int = MAX_PATHS, max_relays: int = MAX_RELAYS,
           max_pieces: int = STRIPE_PIECES, scales: Sequence[float] = SCALES,
           split: int = SPLIT) -> Schedule:
    """Stripe ``schedule``'s transfers over several paths where that is faster.

    Parameters
    ----------
    schedule: any schedule.
    topology: the machine.
    size_bytes: the size to tune for (contention depends on it).
    kinds: path kinds to stripe onto (``direct``, ``fabric``, ``relay``).
    pairs: ``(src, dst) -> bool``: which transfers may be striped (default: all).
    scales: factors tried on the alternative paths' shares.
    split: cut every chunk into this many first (:func:`finer`), so that even a
        one-chunk transfer can be striped.

    Returns
    -------
    The fastest of the striped variants and ``schedule`` itself, in simulation at
    ``size_bytes``; transfers on other routes than the cheapest pin them (``via``).
    """
    best_time, striped_ones = _variants(schedule, topology, size_bytes, kinds, pairs,
                                        max_paths, max_relays, max_pieces, scales, split)
    best = schedule
    for striped in striped_ones:
        time_s = simulate(striped, topology, size_bytes).time_s
        if time_s < best_time * (1 - MIN_GAIN):
            best, best_time = striped, time_s
    return best


def variants(schedule: Schedule, topology: Topology, size_bytes: float, *,
             kinds: Sequence[str] = PATH_KINDS, pairs: Pairs | None = None,
             max_paths: int = MAX_PATHS, max_relays: int = MAX_RELAYS,
             max_pieces: int = STRIPE_PIECES, scales: Sequence[float] = SCALES,
             split: int = SPLIT) -> list[Schedule]:
    """The striped schedules :func:`stripe` chooses from, one per scale that splits any
    transfer (same parameters)."""
    return _variants(schedule, topology, size_bytes, kinds, pairs, max_paths, max_relays,
                     max_pieces, scales, split)[1]


def _variants(schedule: Schedule, topology: Topology, size_bytes: float,
              kinds: Sequence[str], pairs: Pairs | None, max_paths: int, max_relays: int,
              max_pieces: int, scales: Sequence[float],
              split: int) -> tuple[float, list[Schedule]]:
    """The unstriped schedule's simulated time, and the striped variants."""
    unknown = set(kinds) - set(PATH_KINDS)
    if unknown:
        raise InputError(f"unknown path kind {sorted(unknown)[0]!r}; use "
                         + ", ".join(PATH_KINDS))
    schedule = finer(schedule, split)
    base = simulate(schedule, topology, size_bytes)
    plans = _plans(schedule, base, topology, kinds, pairs, max_paths, max_relays, max_pieces)
    chunk = schedule.collective.chunk_bytes(size_bytes)
    striped = []
    for scale in scales:
        splits = {index: _split(plan, schedule.transfers[index].count, scale,
                                schedule.transfers[index].count * chunk, max_pieces)
                  for index, plan in plans.items()}
        splits = {index: s for index, s in splits.items() if len(s.parts) > 1}
        if splits:
            striped.append(_emit(schedule, splits, scale))
    return base.time_s, striped


Plan = list[tuple[Path, float, np.ndarray]]
"""Per path of one transfer: the path, its share, the link capacities it was solved on."""


def _plans(schedule: Schedule, base: SimResult, topology: Topology, kinds: Sequence[str],
           pairs: Pairs | None, max_paths: int, max_relays: int,
           max_pieces: int) -> dict[int, Plan]:
    """Shares over its useful paths for every transfer that may be striped, on what the
    rest of the schedule leaves of each link (:class:`_Loads`)."""
    loads = _Loads(base, topology)
    chunk = schedule.collective.chunk_bytes(base.size_bytes)
    eligible: dict[int, tuple[list[Path], np.ndarray, set[int]]] = {}
    for index, t in enumerate(schedule.transfers):
        if t.is_local or t.count < 2 or t.via is not None \
                or (pairs and not pairs(t.src, t.dst)):
            continue
        candidates = [p for p in find_paths(topology, t.src, t.dst, max_paths=max_paths,
                                            max_relays=max_relays)
                      if p.kind in kinds or p.is_direct]
        if len(candidates) < 2 or not candidates[0].is_direct:
            continue
        links = sorted({link for p in candidates for hop in p.hops for link in hop.links})
        capacity = loads.residual(index, links)
        if capacity is not None:
            spare = set(links) - set(candidates[0].link_uses)
            eligible[index] = (candidates, capacity, spare)
    loads.share_spare({index: spare for index, (_, _, spare) in eligible.items()},
                      {index: capacity for index, (_, capacity, _) in eligible.items()})
    plans: dict[int, Plan] = {}
    solved: dict[tuple, np.ndarray] = {}
    for index, (candidates, capacity, _) in eligible.items():
        t = schedule.transfers[index]
        spare = [_bottleneck(p, capacity) for p in candidates]
        candidates = [p for p, bw in zip(candidates, spare)
                      if p.is_direct or bw >= MIN_SPARE * spare[0]]
        if len(candidates) < 2:
            continue
        links = sorted({link for p in candidates for hop in p.hops for link in hop.links})
        key = (t.src, t.dst, t.count, tuple(candidates),
               tuple(np.round(capacity[links] / topology.bandwidths[links] * 20).tolist()))
        if key not in solved:  # symmetric schedules pose the same problem many times
            solved[key] = solve(candidates, t.count * chunk, topology, max_pieces,
                                capacity=capacity)[0]
        plans[index] = [(p, x, capacity) for p, x in zip(candidates, solved[key])]
    return plans


def _bottleneck(path: Path, capacity: np.ndarray) -> float:
    return min(capacity[link] for hop in path.hops for link in hop.links)


def finer(schedule: Schedule, k: int) -> Schedule:
    """The same transfers on chunks cut into ``k``: chunk ``i`` becomes ``k*i .. k*i+k-1``
    and a transfer of ``c`` chunks moves ``k*c`` (unlike :func:`~ccweave.transforms.refine`,
    no transfer is split, so transfer indices stay valid)."""
    if not isinstance(k, int) or k < 1:
        raise InputError(f"split must be a positive integer, got {k!r}")
    if k == 1:
        return schedule
    coll = schedule.collective
    collective = Collective(coll.kind, coll.num_ranks, coll.chunks_per_rank * k, coll.root,
                            coll.peer)
    transfers = tuple(replace(t, src_index=t.src_index * k, dst_index=t.dst_index * k,
                              count=t.count * k) for t in schedule.transfers)
    return replace(schedule, collective=collective, transfers=transfers,
                   scratch_chunks=schedule.scratch_chunks * k)


def _split(plan: Plan, count: int, scale: float,
           nbytes: float, max_pieces: int) -> _Split:
    """Whole chunks per path, the alternatives' shares scaled by ``scale``."""
    shares = np.array([x for _, x, _ in plan])
    shares[1:] *= scale
    shares[0] = max(0.0, 1.0 - shares[1:].sum())
    chunks = apportion(shares, count)
    parts = []
    for (path, _, capacity), m in zip(plan, chunks):
        if m:
            k = min(m, pieces(path, m / count, nbytes, max_pieces, capacity))
            parts.append((path, m, k))
    return _Split(tuple(parts))


class _Loads:
    """Per link, the transfers that crossed it in simulation, when and at what mean rate."""

    def __init__(self, sim: SimResult, topology: Topology) -> None:
        self.sim = sim
        self.topology = topology
        schedule = sim.schedule
        chunk = schedule.collective.chunk_bytes(sim.size_bytes)
        flows: dict[int, list[int]] = {}
        self.rate = np.zeros(len(schedule.transfers))
        self.links: list[tuple[int, ...]] = []
        for index, t in enumerate(schedule.transfers):
            links = () if t.is_local else topology.route_via(t.src, t.dst, t.via)
            self.links.append(links)
            span = sim.finish[index] - sim.start[index]
            if links and span > 0:
                self.rate[index] = t.count * chunk / span
                for link in links:
                    flows.setdefault(link, []).append(index)
        self.flows = {link: np.array(members) for link, members in flows.items()}

    def residual(self, index: int, links: Sequence[int]) -> np.ndarray | None:
        """Each of ``links``' bandwidth less the mean rate of the other transfers on it
        during transfer ``index`` (other links: their bandwidth); ``None`` if it took no
        time."""
        start, finish = self.sim.start[index], self.sim.finish[index]
        span = finish - start
        if span <= 0:
            return None
        capacity = self.topology.bandwidths.copy()
        for link in links:
            members = self.flows.get(link)
            if members is None:
                continue
            overlap = np.clip(np.minimum(self.sim.finish[members], finish)
                              - np.maximum(self.sim.start[members], start), 0, None)
            used = self.rate[members] * overlap / span
            used[members == index] = 0.0
            capacity[link] = max(0.0, capacity[link] - used.sum())
        return capacity


    def share_spare(self, spare: dict[int, set[int]],
                    capacity: dict[int, np.ndarray]) -> None:
        """Divide each transfer's ``capacity`` on its ``spare`` links (those off its own
        route) among the transfers that may stripe onto them at the same time, in
        proportion to how long they overlap it (max-min fair sharing, expected)."""
        users: dict[int, list[int]] = {}
        for index, links in spare.items():
            for link in links:
                users.setdefault(link, []).append(index)
        members = {link: np.array(indices) for link, indices in users.items()}
        start, finish = self.sim.start, self.sim.finish
        for index, links in spare.items():
            span = finish[index] - start[index]
            for link in links:
                others = members[link]
                overlap = np.clip(np.minimum(finish[others], finish[index])
                                  - np.maximum(start[others], start[index]), 0, None)
                crowd = overlap.sum() / span  # includes this transfer's own 1
                capacity[index][link] /= max(crowd, 1.0)


def _emit(schedule: Schedule, splits: dict[int, _Split], scale: float) -> Schedule:
    """``schedule`` with the striped transfers split over their paths.

    Deps are mapped, not re-derived: a piece waits for everything its transfer waited
    for, and whatever waited for the transfer waits for all its pieces, so every
    ordering of the original holds; relays use fresh scratch, which nothing else
    touches. (Linear in the transfers, unlike replaying slot by slot.)
    """
    out = _Out(schedule.scratch_chunks)
    finals: dict[int, list[int]] = {}
    for index in topological_order(schedule.transfers):
        t = schedule.transfers[index]
        after = tuple(new for dep in t.deps for new in finals[dep])
        if index not in splits:
            finals[index] = [out.add(replace(t, deps=after))]
        else:
            finals[index] = _emit_split(out, t, splits[index], after)
    return replace(schedule, transfers=tuple(out.transfers),
                   scratch_chunks=out.scratch_chunks, name=f"{schedule.name}+stripe",
                   metadata={**schedule.metadata, "striped_transfers": len(splits),
                             "stripe_scale": scale})


class _Out:
    """The transfers being written and the relays' scratch."""

    def __init__(self, scratch_base: int) -> None:
        self.transfers: list[Transfer] = []
        self.base = scratch_base
        self.used: dict[int, int] = {}
        self.scratch_chunks = scratch_base

    def add(self, transfer: Transfer) -> int:
        self.transfers.append(transfer)
        return len(self.transfers) - 1

    def scratch(self, rank: int, count: int) -> int:
        at = self.base + self.used.get(rank, 0)
        self.used[rank] = at - self.base + count
        self.scratch_chunks = max(self.scratch_chunks, at + count)
        return at


def _emit_split(out: _Out, t: Transfer, split: _Split, after: tuple[int, ...]) -> list[int]:
    """The transfers of one striped transfer; returns those that complete it. Pieces of
    one path follow one another on every hop (a FIFO stream)."""
    ends: list[int] = []
    offset = 0
    for path, chunks, count in split.parts:
        last_on_hop: list[int | None] = [None] * len(path.hops)
        for start, length in split_run(offset, chunks, count):
            slot = (t.src_buffer, t.src_index + start)
            previous: int | None = None
            for number, hop in enumerate(path.hops):
                final = number == len(path.hops) - 1
                target = (t.dst_buffer, t.dst_index + start) if final \
                    else (Buffer.SCRATCH, out.scratch(hop.dst, length))
                deps = list(after) if previous is None else [previous]
                if last_on_hop[number] is not None:
                    deps.append(last_on_hop[number])
                previous = out.add(Transfer(hop.src, hop.dst, *slot, *target, length,
                                            t.op if final else Op.COPY, tuple(deps),
                                            t.channel, hop.via))
                last_on_hop[number] = previous
                slot = target
            ends.append(previous)
        offset += chunks
    return ends
