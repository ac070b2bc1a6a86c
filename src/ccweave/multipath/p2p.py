"""The multipath point-to-point planner: one message striped over every useful path.

:func:`plan_p2p` finds the paths (:mod:`~ccweave.multipath.paths`), gives each a share
and pipeline pieces (:mod:`~ccweave.multipath.shares`), then corrects the shares with
the simulator until the paths finish together, and keeps the direct path alone when
striping does not pay. :meth:`P2PPlan.to_schedule` is an ordinary ``sendrecv``
schedule: each piece is one transfer per hop, relays hold pieces in scratch, and a
transfer on another route than its pair's cheapest pins it (``Transfer.via``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.multipath.paths import MAX_PATHS, MAX_RELAYS, Path, direct_path, find_paths
from ccweave.multipath.shares import MAX_PIECES, path_cost, pieces, solve
from ccweave.schedule import Op, Schedule, ScheduleBuilder
from ccweave.simulate import simulate
from ccweave.topology.model import Topology

RESOLUTION = 1024
"""Chunks the message is cut into (at least): shares are whole chunks, so 1/1024 steps."""

TOLERANCE = 0.01
"""Shares are corrected until the paths' simulated finish times lie within this fraction."""

MIN_SHARE = 0.02
"""Paths given less than this share are dropped (and the rest scaled up): they add a
transfer for next to no bandwidth."""

PATH_KINDS = ("direct", "fabric", "relay")
DEFAULT_KINDS = ("direct", "fabric")
"""UCX's choice: the direct route and routes through host memory and other fabric.
Relays through peer ranks go beyond the multipath paper (option ``kinds``)."""

DEFAULT_SIZE = 64 * 2**20
"""Message size the ``multipath`` strategy plans for when none is given."""


@dataclass(frozen=True)
class PathShare:
    """One path's part of a plan: ``share`` of the bytes in ``chunks`` chunks, sent in
    ``pieces`` pipelined pieces; ``finish_s`` when its last byte landed in simulation."""

    path: Path
    share: float
    chunks: int
    pieces: int
    finish_s: float = math.nan


@dataclass(frozen=True)
class P2PPlan:
    """How ``size_bytes`` go from ``src`` to ``dst``: the paths, their shares and pieces,
    and the simulated time beside the direct path's alone."""

    topology: Topology = field(repr=False)
    src: int
    dst: int
    size_bytes: int
    paths: tuple[PathShare, ...]
    time_s: float
    direct_s: float
    """The direct path alone (``inf`` when the pair has no route)."""
    chunks_per_rank: int

    @property
    def bandwidth(self) -> float:
        """Bytes/second, as ``osu_bw`` reports it (size over time)."""
        return self.size_bytes / self.time_s if self.time_s > 0 else math.inf

    @property
    def direct_bandwidth(self) -> float:
        return self.size_bytes / self.direct_s if self.direct_s > 0 else math.inf

    @property
    def speedup(self) -> float:
        """Direct-path time over multipath time (>= 1 by construction)."""
        return self.direct_s / self.time_s if self.time_s > 0 else 1.0

    def to_schedule(self) -> Schedule:
        """The plan as a verifiable ``sendrecv`` schedule."""
        return build_schedule(self.topology, self.src, self.dst,
                              [(p.path, p.chunks, p.pieces) for p in self.paths],
                              self.chunks_per_rank,
                              name=f"multipath({self.src}->{self.dst}, paths={len(self.paths)})")


def split_run(start: int, count: int, parts: int) -> list[tuple[int, int]]:
    """``[start, start+count)`` as ``parts`` consecutive runs of near-equal length."""
    parts = max(1, min(parts, count))
    base, extra = divmod(count, parts)
    runs, at = [], start
    for k in range(parts):
        length = base + (k < extra)
        runs.append((at, length))
        at += length
    return runs


def apportion(shares: Sequence[float], total: int) -> list[int]:
    """Whole chunks per path summing to ``total`` (largest remainder)."""
    weights = np.clip(np.asarray(shares, dtype=float), 0, None)
    weights = weights / weights.sum() * total
    whole = np.floor(weights).astype(int)
    for index in np.argsort(-(weights - whole), kind="stable")[:total - whole.sum()]:
        whole[index] += 1
    return whole.tolist()


def build_schedule(topology: Topology, src: int, dst: int,
                   parts: Sequence[tuple[Path, int, int]], chunks_per_rank: int,
                   name: str = "multipath") -> Schedule:
    """A ``sendrecv`` schedule moving consecutive chunk ranges over ``parts``:
    ``(path, chunks, pieces)``, in order. Pieces of one path follow one another on every
    hop (a FIFO stream per hop), so a relay forwards piece ``j`` while piece ``j+1``
    arrives; on a hop staged in host memory the stages keep that order themselves (each
    copies one piece at a time), so piece ``j+1`` is copied in while ``j`` is copied
    out."""
    coll = Collective(Kind.SENDRECV, topology.num_ranks, chunks_per_rank, src, dst)
    if sum(chunks for _, chunks, _ in parts) != coll.total_chunks:
        raise InputError(f"multipath: parts cover {sum(c for _, c, _ in parts)} chunks, the "
                         f"message has {coll.total_chunks}")
    builder = ScheduleBuilder(coll)
    scratch_used: dict[int, int] = {}
    finals: list[list[int]] = []
    offset = 0
    for channel, (path, chunks, count) in enumerate(parts):
        last_on_hop: list[int | None] = [None] * len(path.hops)
        mine: list[int] = []
        for start, length in split_run(offset, chunks, count):
            slot = (Buffer.INPUT, start)
            for number, hop in enumerate(path.hops):
                if number == len(path.hops) - 1:
                    target = (Buffer.OUTPUT, start)
                else:
                    at = scratch_used.get(hop.dst, 0)
                    scratch_used[hop.dst] = at + length
                    target = (Buffer.SCRATCH, at)
                after = [] if last_on_hop[number] is None or hop.stages \
                    else [last_on_hop[number]]
                index = builder.add(hop.src, hop.dst, *slot, *target, length, Op.COPY,
                                    channel, after, hop.via)
                last_on_hop[number] = index
                slot = target
            mine.append(index)
        finals.append(mine)
        offset += chunks
    return builder.build(name, topology=topology.name,
                         paths=[path.describe() for path, _, _ in parts],
                         path_transfers=finals)


def plan_p2p(topology: Topology, src: int, dst: int, size_bytes: int, *,
             kinds: Sequence[str] = DEFAULT_KINDS, max_paths: int = MAX_PATHS,
             max_relays: int = MAX_RELAYS, max_pieces: int = MAX_PIECES,
             iterations: int = 6, chunks_per_rank: int | None = None) -> P2PPlan:
    """Plan ``size_bytes`` from rank ``src`` to rank ``dst`` over every useful path.

    Parameters
    ----------
    kinds: path kinds to use: ``direct``, ``fabric`` (other routes through switches and
        host memory; through host memory the route is staged there), ``relay`` (through
        peer ranks; beyond the multipath paper). Default: direct and fabric, as UCX.
    max_paths, max_relays: bounds on path discovery (:func:`find_paths`); ranks that
        no path of ``max_relays`` relays joins are joined through as many as it takes.
    max_pieces: pipeline pieces per relay path at most.
    iterations: rounds of simulator correction of the shares.
    chunks_per_rank: message granularity (default: ``RESOLUTION`` chunks in all).

    Returns
    -------
    The plan; never slower in simulation than the direct path alone.
    """
    unknown = set(kinds) - set(PATH_KINDS)
    if unknown:
        raise InputError(f"unknown path kind {sorted(unknown)[0]!r}; use "
                         + ", ".join(PATH_KINDS))
    if size_bytes <= 0:
        raise InputError(f"size must be positive, got {size_bytes}")
    c = chunks_per_rank or math.ceil(RESOLUTION / topology.num_ranks)
    total = c * topology.num_ranks
    candidates = [p for p in find_paths(topology, src, dst, max_paths=max_paths,
                                        max_relays=max_relays) if p.kind in kinds]
    direct = direct_path(topology, src, dst)
    if not candidates and direct is None:  # no route of these kinds: relays must join them
        kinds = (*kinds, "relay")
        candidates = [p for p in find_paths(topology, src, dst, max_paths=max_paths,
                                            max_relays=max_relays) if p.kind in kinds]
    if not candidates and max_relays < topology.num_ranks - 2:  # far apart: relay more
        candidates = [p for p in find_paths(topology, src, dst, max_paths=max_paths,
                                            max_relays=topology.num_ranks - 2)
                      if p.kind in kinds]
    direct_s = math.inf
    if direct is not None:
        alone = build_schedule(topology, src, dst, [(direct, total, 1)], c)
        direct_s = simulate(alone, topology, size_bytes).time_s
    if not candidates:
        if direct is None:
            raise NotApplicableError(f"{topology.name!r}: no path from rank {src} to rank "
                                     f"{dst} of kinds {', '.join(kinds)}")
        candidates = [direct]
    shares, _ = solve(candidates, size_bytes, topology, max_pieces)
    best: P2PPlan | None = None
    for _ in range(iterations + 1):
        plan = _simulated(topology, src, dst, size_bytes, candidates, shares, c, max_pieces)
        if best is None or plan.time_s < best.time_s:
            best = plan
        shares = _corrected(plan, candidates)
        if shares is None:
            break
    assert best is not None
    if direct is not None and best.time_s >= direct_s:
        best = P2PPlan(topology, src, dst, size_bytes,
                       (PathShare(direct, 1.0, total, 1, direct_s),), direct_s, direct_s, c)
    return P2PPlan(topology, src, dst, size_bytes, best.paths, best.time_s, direct_s, c)


def _simulated(topology: Topology, src: int, dst: int, size_bytes: int,
               candidates: Sequence[Path], shares: np.ndarray, c: int,
               max_pieces: int) -> P2PPlan:
    """Build the plan for ``shares`` and simulate it."""
    total = c * topology.num_ranks
    shares = np.where(shares >= MIN_SHARE * shares.sum(), shares, 0.0)
    chunks = apportion(shares, total)
    parts = []
    for path, count in zip(candidates, chunks):
        if count:
            k = min(count, pieces(path, count / total, size_bytes, max_pieces))
            parts.append((path, count, k))
    schedule = build_schedule(topology, src, dst, parts, c)
    sim = simulate(schedule, topology, size_bytes)
    finals = schedule.metadata["path_transfers"]
    used = [PathShare(path, count / total, count, k,
                      float(max(sim.finish[i] for i in ends)))
            for (path, count, k), ends in zip(parts, finals)]
    return P2PPlan(topology, src, dst, size_bytes, tuple(used), sim.time_s, math.inf, c)


def _corrected(plan: P2PPlan, candidates: Sequence[Path]) -> np.ndarray | None:
    """Shares that would make the simulated finish times equal if each path's time grew
    linearly with its bytes; ``None`` once they already agree within ``TOLERANCE``."""
    finish = [p.finish_s for p in plan.paths]
    if max(finish) - min(finish) <= TOLERANCE * max(finish):
        return None
    index = {id(p.path): i for i, p in enumerate(plan.paths)}
    latency, slope, current = [], [], []
    for path in candidates:
        if id(path) not in index:
            continue
        used = plan.paths[index[id(path)]]
        d = path_cost(path, used.pieces).latency
        latency.append(d)
        slope.append(max(used.finish_s - d, 1e-12) / max(used.share, 1e-12))
        current.append(path)
    lat, per = np.array(latency), np.array(slope)
    target = (1 + (lat / per).sum()) / (1 / per).sum()
    new = np.clip((target - lat) / per, 0, None)
    if new.sum() <= 0:
        return None
    out = np.zeros(len(candidates))
    for path, x in zip(current, new / new.sum()):
        out[next(i for i, c in enumerate(candidates) if c is path)] = x
    return out
