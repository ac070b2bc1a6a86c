"""``direct-multipath``: direct allgather whose blocks also take the other routes through
fabric, host memory included, in the shares that balance every link.

``direct`` sends each block on its pair's cheapest route, so on an NVSwitch server with
host paths (Azure ND H100 v5: each GPU's PCIe Gen5 x16 into its socket's memory) the
host paths idle. Here each pair's block is split over its one-hop routes
(:func:`ccweave.multipath.paths.find_paths`, no relays) in the shares of a
concurrent-flow LP: every pair moves its ``M/N`` bytes, every link carries at most its
bandwidth times ``T``, minimise ``T``. Fabric copies nothing and a direct schedule
copies nothing either, so where the delivery bound binds (a socket's GPUs sharing its
memory link) the LP's ``T`` meets it. A part on a route staged through host memory
moves chunk by chunk, :data:`IN_FLIGHT` at a time on each of :data:`STAGED_CHANNELS`
channels (each channel a host buffer), so one chunk is copied out while the next is
copied in and their staging latencies overlap. The chunk count is picked by simulation
at option ``size``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import NotApplicableError, SolverError
from ccweave.limits import MAX_CHUNKS_PER_RANK
from ccweave.lp import LinearProgram, solve
from ccweave.multipath.p2p import apportion
from ccweave.multipath.paths import Path, find_paths
from ccweave.schedule import Schedule, ScheduleBuilder
from ccweave.synth.layout import (
    chunks_for,
    reject_options,
    require_kind,
    require_routes,
    schedule_name,
)
from ccweave.synth.registry import register
from ccweave.topology.model import Topology
from ccweave.units import parse_size

IN, OUT = Buffer.INPUT, Buffer.OUTPUT

MAX_RANKS = 16
"""Ranks at most (one server: DGX-2 has 16 GPUs): the routes of every pair are searched
(Yen's), n(n-1) of them; at 32 ranks that took 2-4 s, at 64 ranks 16-19 s, before a zoo
machine was found to have nothing to split over."""
STAGED_CHANNELS = 2
"""Channels (host buffers) a staged part's chunks alternate between."""
IN_FLIGHT = 8
"""Chunks of a staged part in flight at once on each of its channels (simulated on the
Azure ND H100 v5 import at 1 GB, 1024 chunks: 4 to 8 in flight on 1 to 4 channels within
0.2% of each other where the shares balance)."""
MIN_GAIN = 1e-3
"""The LP must beat the cheapest routes alone by this share, else ``direct`` is the
same schedule and this strategy does not apply."""
CHUNK_CHOICES = tuple(2**i for i in range(4, 13))
"""Chunks per rank tried in simulation at a size (16 .. 4096), within the budget."""
MAX_TRANSFERS = 50_000
"""Chunk counts whose schedule would have more transfers are not tried."""
DEFAULT_CHUNKS = 64
"""Chunks per rank without a size or ``chunks``."""


@register("direct-multipath", {Kind.ALLGATHER},
          "direct allgather over every one-hop route (host-staged ones beside NVLink) in "
          "the shares a concurrent-flow LP balances; chunks picked in simulation at "
          "option size", classic=False, sized=True)
def build_direct_multipath(topology: Topology, kind: Kind, *, root: int = 0,
                           chunks: int | None = None, **options: object) -> Schedule:
    """Allgather with each pair's block split over its fabric routes (see the module
    docstring). Raises ``NotApplicableError`` where no route beside the cheapest ones
    makes it faster, or the topology has more than :data:`MAX_RANKS` ranks."""
    require_kind(kind, {Kind.ALLGATHER}, "direct-multipath")
    reject_options(options, "direct-multipath", ["size"])
    n = topology.num_ranks
    if n > MAX_RANKS:
        raise NotApplicableError(f"strategy 'direct-multipath' searches the routes of every "
                                 f"rank pair; {topology.name!r} has {n} ranks, more than "
                                 f"{MAX_RANKS} (try direct or trees)")
    pairs = [(s, d) for s in range(n) for d in range(n) if s != d]
    require_routes(topology, pairs, "direct-multipath")
    shares = _shares(topology, pairs)
    if chunks is not None or "size" not in options:
        return _build(topology, shares, chunks_for(chunks, DEFAULT_CHUNKS))
    from ccweave.simulate import simulate

    size = options["size"]
    size = parse_size(size) if isinstance(size, str) else size
    best, best_time = None, float("inf")
    for c in CHUNK_CHOICES:
        if c > MAX_CHUNKS_PER_RANK or _transfers(shares, c) > MAX_TRANSFERS:
            break
        candidate = _build(topology, shares, c)
        time_s = simulate(candidate, topology, size).time_s  # type: ignore[arg-type]
        if time_s < best_time:
            best, best_time = candidate, time_s
    return best if best is not None else _build(topology, shares, DEFAULT_CHUNKS)


Shares = dict[tuple[int, int], list[tuple[Path, float]]]


def _shares(topology: Topology, pairs: list[tuple[int, int]]) -> Shares:
    """Per pair, its one-hop routes with the share of its block each carries: the
    concurrent-flow LP of the module docstring (HiGHS, :func:`ccweave.lp.solve`)."""
    routes = {pair: [p for p in find_paths(topology, *pair, max_relays=0) if len(p.hops) == 1]
              for pair in pairs}
    if all(len(found) < 2 for found in routes.values()):
        raise NotApplicableError(f"strategy 'direct-multipath': no rank pair of "
                                 f"{topology.name!r} has a route beside its cheapest one "
                                 "(use direct)")
    columns = [(pair, path) for pair in pairs for path in routes[pair]]
    e = len(topology.links)
    unit = float(topology.bandwidths.max())
    t = len(columns)  # the last column is T, in seconds per byte times ``unit``
    load = np.zeros((e, t + 1))
    for j, (_, path) in enumerate(columns):
        for link, uses in path.link_uses.items():
            load[link, j] += uses
    load[:, t] = -topology.bandwidths / unit
    equal = np.zeros((len(pairs), t + 1))
    row = {pair: i for i, pair in enumerate(pairs)}
    for j, (pair, _) in enumerate(columns):
        equal[row[pair], j] = 1.0
    cost = np.zeros(t + 1)
    cost[t] = 1.0
    rows_upper = np.concatenate([np.zeros(e), np.ones(len(pairs))])
    rows_lower = np.concatenate([np.full(e, -np.inf), np.ones(len(pairs))])
    program = LinearProgram(cost, scipy.sparse.csr_array(np.vstack([load, equal])),
                            rows_lower, rows_upper, np.zeros(t + 1), np.full(t + 1, np.inf))
    try:
        x = solve(program)
    except SolverError as error:
        raise SolverError(f"direct-multipath on {topology.name!r}: the share LP failed "
                          f"({error})") from None
    direct = max(float((load[:, [j for j, (_, p) in enumerate(columns) if p.is_direct]]
                        .sum(axis=1) / -load[:, t]).max()), 0.0)
    if not x[t] < direct * (1 - MIN_GAIN):
        raise NotApplicableError(f"strategy 'direct-multipath': on {topology.name!r} no "
                                 "route beside the cheapest ones makes the pairs faster "
                                 "(use direct)")
    shares: Shares = {pair: [] for pair in pairs}
    for j, (pair, path) in enumerate(columns):
        shares[pair].append((path, float(x[j])))
    return shares


def _parts(shares: Shares, pair: tuple[int, int], c: int) -> list[tuple[Path, int]]:
    """The pair's routes with their whole chunks (summing to ``c``)."""
    paths = shares[pair]
    return list(zip((p for p, _ in paths), apportion([s for _, s in paths], c), strict=True))


def _transfers(shares: Shares, c: int) -> int:
    """Transfers of the schedule at ``c`` chunks per rank (one per chunk where staged)."""
    total = 0
    for pair in shares:
        for path, count in _parts(shares, pair, c):
            total += count if path.hops[0].stages else (1 if count else 0)
    return total


def _build(topology: Topology, shares: Shares, c: int) -> Schedule:
    n = topology.num_ranks
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, n, c))
    for r in range(n):
        b.copy(r, r, (IN, 0), (OUT, r * c), c)
    for s, d in sorted(shares, key=lambda pair: ((pair[1] - pair[0]) % n, pair[0])):
        start = 0
        for path, count in _parts(shares, (s, d), c):
            via = path.hops[0].via
            if not path.hops[0].stages:
                if count:
                    b.add(s, d, IN, start, OUT, s * c + start, count, via=via)
            else:  # chunk by chunk, a window in flight on each channel
                sent: list[list[int]] = [[] for _ in range(STAGED_CHANNELS)]
                for k in range(count):
                    line = sent[k % STAGED_CHANNELS]
                    after = [line[-IN_FLIGHT]] if len(line) >= IN_FLIGHT else []
                    line.append(b.add(s, d, IN, start + k, OUT, s * c + start + k, 1,
                                      channel=k % STAGED_CHANNELS, after=after, via=via))
            start += count
    return b.build(schedule_name("direct-multipath", chunks=c), topology=topology.name)
