"""Multipath as a transform: stripe any schedule's rank-to-rank transfers over several paths.

Each transfer of the simulated schedule sees what the rest of the schedule leaves of every
link while it runs (its *residual* capacity); its chunks are split over its useful paths
(:mod:`~ccweave.multipath.paths`) in the shares that residual capacity gives
(:func:`~ccweave.multipath.shares.solve`). A path over links the collective already
saturates gets nothing: the paper switched multipath off during inter-socket traffic for
this reason. Transfers striped at once compete for the same spare links, so the
alternative paths' shares are scaled by each of ``scales`` in turn and the fastest
schedule in simulation wins, the unstriped one included: striping never slows a schedule
down at the size it is tuned for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ccweave.collectives import Buffer, Collective
from ccweave.errors import InputError
from ccweave.multipath import routes
from ccweave.multipath.p2p import PATH_KINDS, apportion, split_run
from ccweave.multipath.paths import MAX_PATHS, MAX_RELAYS, Path, find_paths
from ccweave.multipath.shares import MAX_PIECES, pieces, solve
from ccweave.schedule import Op, Schedule, ScheduleBuilder, Transfer, topological_order
from ccweave.simulate import SimResult
from ccweave.topology.model import Topology

SCALES = (1.0, 0.6, 0.3)
MIN_SPARE = 0.25
"""An alternative path is used only if what it has spare is at least this fraction of
what the transfer gets on its own route (UCX drops lanes under 1/4 of the fastest)."""

SPLIT = 8
"""Each chunk is cut into this many before striping, so a one-chunk transfer can split."""
"""Factors tried on the alternative paths' shares (1: as the residual capacity says)."""

Pairs = Callable[[int, int], bool]


@dataclass(frozen=True)
class _Split:
    """How one transfer is striped: ``(path, chunks, pieces)`` per path, in chunk order."""

    parts: tuple[tuple[Path, int, int], ...]


def stripe(schedule: Schedule, topology: Topology, size_bytes: float, *,
           kinds: Sequence[str] = PATH_KINDS, pairs: Pairs | None = None,
           max_paths: int = MAX_PATHS, max_relays: int = MAX_RELAYS,
           max_pieces: int = MAX_PIECES, scales: Sequence[float] = SCALES,
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
    ``size_bytes``; routes other than the cheapest are in ``metadata["via"]``.
    """
    unknown = set(kinds) - set(PATH_KINDS)
    if unknown:
        raise InputError(f"unknown path kind {sorted(unknown)[0]!r}; use "
                         + ", ".join(PATH_KINDS))
    original = schedule
    schedule = finer(schedule, split)
    base = routes.simulate(schedule, topology, size_bytes)
    loads = _Loads(base, topology)
    fixed = routes.vias(schedule)
    chunk = schedule.collective.chunk_bytes(size_bytes)
    plans: dict[int, list[tuple[Path, float, np.ndarray]]] = {}
    solved: dict[tuple, np.ndarray] = {}
    for index, t in enumerate(schedule.transfers):
        if t.is_local or t.count < 2 or index in fixed or (pairs and not pairs(t.src, t.dst)):
            continue
        candidates = [p for p in find_paths(topology, t.src, t.dst, max_paths=max_paths,
                                            max_relays=max_relays)
                      if p.kind in kinds or p.is_direct]
        if len(candidates) < 2 or not candidates[0].is_direct:
            continue
        links = sorted({link for p in candidates for hop in p.hops for link in hop.links})
        capacity = loads.residual(index, links)
        if capacity is None:
            continue
        spare = [_bottleneck(p, capacity) for p in candidates]
        candidates = [p for p, bw in zip(candidates, spare)
                      if p.is_direct or bw >= MIN_SPARE * spare[0]]
        if len(candidates) < 2:
            continue
        key = (t.src, t.dst, t.count, tuple(candidates),
               tuple(np.round(capacity[links] / topology.bandwidths[links] * 50).tolist()))
        if key not in solved:  # symmetric schedules pose the same problem many times
            solved[key] = solve(candidates, t.count * chunk, topology, max_pieces,
                                capacity=capacity)[0]
        shares = solved[key]
        plans[index] = [(p, x, capacity) for p, x in zip(candidates, shares)]
    best, best_time = original, base.time_s
    for scale in scales:
        splits = {index: _split(t_plan, schedule.transfers[index].count, scale,
                                schedule.transfers[index].count * chunk, max_pieces)
                  for index, t_plan in plans.items()}
        splits = {index: s for index, s in splits.items() if len(s.parts) > 1}
        if not splits:
            continue
        striped = _emit(schedule, splits, fixed, scale)
        time_s = routes.simulate(striped, topology, size_bytes).time_s
        if time_s < best_time:
            best, best_time = striped, time_s
    return best


def _bottleneck(path: Path, capacity: np.ndarray) -> float:
    return min(capacity[link] for hop in path.hops for link in hop.links)


def finer(schedule: Schedule, k: int) -> Schedule:
    """The same transfers on chunks cut into ``k``: chunk ``i`` becomes ``k*i .. k*i+k-1``
    and a transfer of ``c`` chunks moves ``k*c`` (unlike :func:`~ccweave.transforms.refine`,
    no transfer is split, so transfer indices and their routes stay valid)."""
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


def _split(plan: list[tuple[Path, float, np.ndarray]], count: int, scale: float,
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
        vias = routes.vias(schedule)
        flows: dict[int, list[int]] = {}
        self.rate = np.zeros(len(schedule.transfers))
        self.links: list[tuple[int, ...]] = []
        for index, t in enumerate(schedule.transfers):
            links = () if t.is_local else routes.route_links(topology, t.src, t.dst,
                                                             vias.get(index))
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


def _emit(schedule: Schedule, splits: dict[int, _Split], fixed: dict[int, tuple[str, ...]],
          scale: float) -> Schedule:
    """Replay ``schedule`` with the striped transfers split over their paths."""
    builder = ScheduleBuilder(schedule.collective, schedule.in_place)
    builder.scratch_chunks = schedule.scratch_chunks
    scratch_used: dict[int, int] = {}
    via: dict[int, tuple[str, ...]] = {}
    finals: dict[int, list[int]] = {}
    for index in topological_order(schedule.transfers):
        t = schedule.transfers[index]
        after = [new for dep in t.deps for new in finals[dep]]
        if index not in splits:
            new = builder.add(t.src, t.dst, t.src_buffer, t.src_index, t.dst_buffer,
                              t.dst_index, t.count, t.op, t.channel, after)
            if index in fixed:
                via[new] = fixed[index]
            finals[index] = [new]
            continue
        finals[index] = _emit_split(builder, t, splits[index], after, scratch_used,
                                    schedule.scratch_chunks, via)
    striped = builder.build(f"{schedule.name}+stripe", **{
        **{k: v for k, v in schedule.metadata.items() if k != routes.VIA},
        "striped_transfers": len(splits), "stripe_scale": scale})
    return routes.with_vias(striped, via)


def _emit_split(builder: ScheduleBuilder, t: Transfer, split: _Split, after: list[int],
                scratch_used: dict[int, int], scratch_base: int,
                via: dict[int, tuple[str, ...]]) -> list[int]:
    """The transfers of one striped transfer; returns those that complete it."""
    ends: list[int] = []
    offset = 0
    for path, chunks, count in split.parts:
        last_on_hop: list[int | None] = [None] * len(path.hops)
        for start, length in split_run(offset, chunks, count):
            slot = (t.src_buffer, t.src_index + start)
            for number, hop in enumerate(path.hops):
                final = number == len(path.hops) - 1
                if final:
                    target = (t.dst_buffer, t.dst_index + start)
                else:
                    at = scratch_base + scratch_used.get(hop.dst, 0)
                    scratch_used[hop.dst] = at - scratch_base + length
                    target = (Buffer.SCRATCH, at)
                deps = list(after) if number == 0 else []
                if last_on_hop[number] is not None:
                    deps.append(last_on_hop[number])
                new = builder.add(hop.src, hop.dst, *slot, *target, length,
                                  t.op if final else Op.COPY, t.channel, deps)
                if hop.via is not None:
                    via[new] = hop.via
                last_on_hop[number] = new
                slot = target
            ends.append(new)
        offset += chunks
    return ends
