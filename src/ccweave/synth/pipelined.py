"""Pipelined allreduce for NVLink/PCIe nodes, with multipath inside sockets (the UCX/MPI
line: IEEE Micro 2022, Temuçin et al.).

``hierarchical-pipelined`` (Mist's winner): members of every socket (or node) reduce into
their leader, the leaders reduce-scatter and allgather the sums among themselves, and
every leader broadcasts the result to its members; the buffer moves in ``depth`` pieces
so the three stages overlap piece by piece.

``flat-pipelined`` (Cedar's winner, for fully connected nodes): every rank reduces one
``1/N`` segment from all peers, then broadcasts it; each segment moves in ``depth``
pieces (more than ``N`` chunks in all) so that sending, reducing and broadcasting overlap.

Transfers of one stage between one pair run one after another (a FIFO stream), which is
what lets pieces pipeline; pairs without a route relay through ranks. With ``multipath``
transfers are striped over the other paths the rest of the schedule leaves spare
(:func:`ccweave.multipath.stripe.stripe`): inside sockets, as the paper does, or
anywhere, whichever simulates faster. What is not given (depth, level, intra-group
shape, multipath scope) is chosen by the simulator at ``size`` bytes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from functools import lru_cache

import networkx as nx

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.schedule import Op, Schedule, ScheduleBuilder
from ccweave.simulate import simulate
from ccweave.synth.layout import reject_options, require_kind, schedule_name
from ccweave.synth.registry import register
from ccweave.topology.model import Topology
from ccweave.units import parse_size

IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH
Slot = tuple[Buffer, int]

DEPTHS = (1, 2, 4, 8, 16, 32)
"""Pipeline depths tried when none is given."""

TRANSFER_BUDGET = 2048
"""Depths whose schedule would send more than this many transfers are not tried (the
first depth always is): each is simulated, and deeper pipelines gain little more."""

DEFAULT_SIZE = 64 * 2**20
"""Message size (bytes) the automatic choices are tuned for when none is given."""

LEVELS = ("socket", "node")


class Pipeline:
    """A :class:`ScheduleBuilder` whose sends form FIFO streams per ``(src, dst, stage)``
    and relay through ranks where a pair has no route."""

    def __init__(self, topology: Topology, collective: Collective) -> None:
        self.topology = topology
        self.builder = ScheduleBuilder(collective)
        self._last: dict[tuple[int, int, int], int] = {}
        self._scratch: dict[int, int] = {}

    def scratch(self, rank: int, count: int) -> Slot:
        """``count`` fresh scratch chunks on ``rank``."""
        at = self._scratch.get(rank, 0)
        self._scratch[rank] = at + count
        return SCRATCH, at

    def local(self, rank: int, src: Slot, dst: Slot, count: int, op: Op = Op.COPY) -> int:
        return self.builder.add(rank, rank, *src, *dst, count, op)

    def send(self, src: int, dst: int, src_slot: Slot, dst_slot: Slot, count: int,
             stage: int, op: Op = Op.COPY) -> int:
        """``src_slot`` of ``src`` to ``dst_slot`` of ``dst`` (``op`` at the end), after the
        stream's previous send; through relay ranks' scratch where there is no route."""
        ranks = relay_path(self.topology, src, dst)
        slot = src_slot
        for a, b in itertools.pairwise(ranks):
            final = b == dst
            target = dst_slot if final else self.scratch(b, count)
            stream = (a, b, stage)
            after = [self._last[stream]] if stream in self._last else []
            index = self.builder.add(a, b, *slot, *target, count, op if final else Op.COPY,
                                     stage, after)
            self._last[stream] = index
            slot = target
        return index

    def reduce_into(self, root: int, sources: Sequence[int], slot: Slot, count: int,
                    stage: int, source: Buffer = OUT) -> None:
        """``root``'s ``slot`` (already holding its own part) += every source's same index
        of buffer ``source``: each arrives in fresh scratch, then ``root`` adds it."""
        for rank in sources:
            landing = self.scratch(root, count)
            self.send(rank, root, (source, slot[1]), landing, count, stage)
            self.local(root, landing, slot, count, Op.REDUCE)

    def build(self, name: str, **metadata: object) -> Schedule:
        return self.builder.build(name, **metadata)


@lru_cache(maxsize=256)
def _rank_graph(topology: Topology) -> nx.DiGraph:
    graph = nx.DiGraph()
    for a, b in itertools.permutations(topology.ranks, 2):
        if topology.has_route(a, b):
            graph.add_edge(a, b, cost=1 / topology.route_bandwidth(a, b))
    return graph


def relay_path(topology: Topology, src: int, dst: int) -> list[int]:
    """``[src, dst]`` when the pair has a route, else the ranks to relay through (the
    route of least summed ``1/bandwidth``)."""
    if topology.has_route(src, dst):
        return [src, dst]
    return nx.shortest_path(_rank_graph(topology), src, dst, weight="cost")


def _runs(start: int, count: int, parts: int) -> list[tuple[int, int]]:
    base, extra = divmod(count, parts)
    runs, at = [], start
    for k in range(parts):
        runs.append((at, base + (k < extra)))
        at += base + (k < extra)
    return runs


# ------------------------------------------------------------------- flat

def flat(topology: Topology, depth: int) -> Schedule:
    """Flat two-stage allreduce: rank ``j`` reduces segment ``j`` from all, then sends it
    to all, in ``depth`` pieces per segment."""
    n = topology.num_ranks
    coll = Collective(Kind.ALLREDUCE, n, depth)
    pipe = Pipeline(topology, coll)
    for p in range(depth):
        for j in range(n):
            piece = (OUT, j * depth + p)
            pipe.local(j, (IN, j * depth + p), piece, 1)
            peers = [(j + k) % n for k in range(1, n)]
            for rank in peers:
                landing = pipe.scratch(j, 1)
                pipe.send(rank, j, (IN, j * depth + p), landing, 1, stage=0)
                pipe.local(j, landing, piece, 1, Op.REDUCE)
        for j in range(n):
            for rank in [(j + k) % n for k in range(1, n)]:
                pipe.send(j, rank, (OUT, j * depth + p), (OUT, j * depth + p), 1, stage=1)
    return pipe.build(schedule_name("flat-pipelined", depth=depth), topology=topology.name,
                      depth=depth)


# ----------------------------------------------------------- hierarchical

def chain(topology: Topology, group: Sequence[int]) -> list[int]:
    """The group's ranks in a line ending at its leader (``group[0]``), each sending to the
    next: the order whose slowest hop is fastest (exhaustive up to 8 ranks, greedy from
    the leader backwards beyond)."""
    return list(_chain(topology, tuple(group)))


@lru_cache(maxsize=256)
def _chain(topology: Topology, group: tuple[int, ...]) -> tuple[int, ...]:
    leader, members = group[0], list(group[1:])
    bandwidth = {(a, b): topology.route_bandwidth(a, b) if topology.has_route(a, b) else 0.0
                 for a in group for b in group if a != b}

    def score(order: Sequence[int]) -> tuple[float, float]:
        hops = [bandwidth[pair] for pair in itertools.pairwise([*order, leader])]
        return min(hops, default=math.inf), -sum(1 / max(h, 1e-9) for h in hops)

    if len(members) <= 7:
        best = max(itertools.permutations(members), key=score, default=())
        return (*best, leader)
    line = [leader]
    left = set(members)
    while left:
        nearest = max(sorted(left), key=lambda r: bandwidth[(r, line[0])])
        line.insert(0, nearest)
        left.remove(nearest)
    return tuple(line)


def hierarchical(topology: Topology, groups: Sequence[Sequence[int]], depth: int,
                 intra: str = "star") -> Schedule:
    """Three-stage allreduce over ``groups`` (first member leads) in ``depth`` pieces;
    inside a group, members send to the leader directly (``star``) or along a line
    (``chain``: each adds its part and passes the sum on; the result comes back the
    same way)."""
    n, g = topology.num_ranks, len(groups)
    c = math.ceil(depth * g / n)
    coll = Collective(Kind.ALLREDUCE, n, c)
    pipe = Pipeline(topology, coll)
    leaders = [group[0] for group in groups]
    lines = [chain(topology, group) for group in groups] if intra == "chain" else None
    for start, length in _runs(0, n * c, depth):
        piece = (OUT, start)
        for number, group in enumerate(groups):  # stage 1: reduce into the leader
            if lines is None:
                pipe.local(group[0], (IN, start), piece, length)
                pipe.reduce_into(group[0], group[1:], piece, length, stage=0, source=IN)
                continue
            pipe.local(lines[number][0], (IN, start), piece, length)
            for a, b in itertools.pairwise(lines[number]):
                pipe.local(b, (IN, start), piece, length)
                pipe.reduce_into(b, [a], piece, length, stage=0)
        if g > 1:  # stage 2: leaders reduce-scatter, then allgather
            segments = _runs(start, length, g)
            for owner, (seg, size) in zip(leaders, segments):
                others = [lead for lead in leaders if lead != owner]
                pipe.reduce_into(owner, others, (OUT, seg), size, stage=1)
            for owner, (seg, size) in zip(leaders, segments):
                for lead in leaders:
                    if lead != owner:
                        pipe.send(owner, lead, (OUT, seg), (OUT, seg), size, stage=2)
        for number, group in enumerate(groups):  # stage 3: the leader sends the result
            if lines is None:
                for member in group[1:]:
                    pipe.send(group[0], member, piece, piece, length, stage=3)
            else:
                for a, b in itertools.pairwise(reversed(lines[number])):
                    pipe.send(a, b, piece, piece, length, stage=3)
    return pipe.build(schedule_name("hierarchical-pipelined", intra=intra, depth=depth),
                      topology=topology.name, intra=intra, depth=depth)


def _per_piece(topology: Topology, level: str) -> int:
    """Remote transfers one piece of a hierarchical schedule sends (at least)."""
    leaders = len(topology.groups[level])
    return 2 * (topology.num_ranks - leaders) + 2 * leaders * (leaders - 1)


def levels(topology: Topology) -> list[str]:
    """Group kinds a hierarchy can use: several groups, at least one with two ranks."""
    return [level for level in LEVELS if len(topology.groups.get(level, ())) > 1
            and max(len(group) for group in topology.groups[level]) > 1]


# ------------------------------------------------------------------ tuning

def _time(schedule: Schedule, topology: Topology, size: float) -> float:
    return simulate(schedule, topology, size).time_s


GOOD_ENOUGH = 0.02
"""Among schedules within this fraction of the fastest, the one listed first wins (the
shallower pipeline, the simpler shape): fewer transfers for almost the same time."""


def _fastest(schedules: Sequence[Schedule], topology: Topology, size: float,
             slack: float = 0.0) -> Schedule:
    """The fastest in simulation; with ``slack``, the first within that fraction of it."""
    times = [_time(s, topology, size) for s in schedules]
    best = min(times)
    return next(s for s, t in zip(schedules, times) if t <= best * (1 + slack))


def _depths(make: Callable[[int], Schedule], topology: Topology, depth: int | None,
            size: float, per_depth: int) -> Schedule:
    """``make(depth)`` at the given depth, else at the one simulating fastest among those
    whose ``per_depth * depth`` remote transfers fit :data:`TRANSFER_BUDGET`."""
    if depth is not None:
        return make(depth)
    depths = [d for d in DEPTHS if d == DEPTHS[0] or d * per_depth <= TRANSFER_BUDGET]
    return _fastest([make(d) for d in depths], topology, size, GOOD_ENOUGH)


def _with_multipath(schedule: Schedule, topology: Topology, size: float,
                    multipath: str) -> Schedule:
    """Stripe inside sockets (``socket``), anywhere the schedule leaves links spare
    (``all``), or the faster of the two (``auto``); ``off`` leaves it alone."""
    from ccweave.multipath.stripe import stripe

    if multipath == "off":
        return schedule
    scopes = ["socket", "all"] if multipath == "auto" else [multipath]
    striped = []
    for scope in scopes:
        pairs = None
        group = "socket" if "socket" in topology.groups else "node"
        if scope == "socket" and group in topology.groups:
            index = topology.group_index(group)
            pairs = lambda a, b, index=index: index[a][0] == index[b][0]  # noqa: E731
        result = stripe(schedule, topology, size, pairs=pairs)
        if result is not schedule:
            striped.append(result.with_name(
                schedule.name[:-1] + f", multipath={scope})", multipath=scope))
    return _fastest([schedule, *striped], topology, size)


MULTIPATH = ("auto", "socket", "all", "off")


def _options(strategy: str, options: dict[str, object],
             extra: Sequence[str] = ()) -> tuple[int | None, float, str]:
    """``depth``, ``size`` and ``multipath`` checked; other options must be in ``extra``
    (``fallback`` is read by :func:`_not_slower_than_ring`)."""
    reject_options({k: v for k, v in options.items() if k not in extra}, strategy,
                   ("depth", "size", "multipath", "fallback", *extra))
    depth = options.get("depth")
    size = options.get("size", DEFAULT_SIZE)
    if isinstance(size, str):
        size = parse_size(size)
    multipath = options.get("multipath", "auto")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int)
                              or depth < 1):
        raise InputError(f"strategy {strategy!r}: depth must be a positive integer, "
                         f"got {depth!r}")
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0:
        raise InputError(f"strategy {strategy!r}: size must be a positive number of bytes, "
                         f"got {size!r}")
    multipath = {True: "auto", False: "off"}.get(multipath, multipath)  # type: ignore[arg-type]
    if multipath not in MULTIPATH:
        raise InputError(f"strategy {strategy!r}: multipath must be one of "
                         f"{', '.join(MULTIPATH)}, got {multipath!r}")
    return depth, float(size), str(multipath)


def _common(options: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in options.items() if k in ("depth", "size", "multipath")}


def _not_slower_than_ring(schedule: Schedule, topology: Topology, size: float,
                          strategy: str, options: dict[str, object]) -> Schedule:
    """``schedule``, or the ring allreduce where that simulates faster at ``size`` (the
    pipelines pay a reduce into one rank per piece: at small sizes, or where a group's
    leader is a bottleneck, the ring wins). Option ``fallback=false`` keeps ours."""
    from ccweave.synth.registry import synthesize

    fallback = options.get("fallback", True)
    if not isinstance(fallback, bool):
        raise InputError(f"strategy {strategy!r}: fallback must be true or false, "
                         f"got {fallback!r}")
    if not fallback:
        return schedule
    try:
        ring = synthesize(topology, Kind.ALLREDUCE, "ring")
    except NotApplicableError:
        return schedule
    ours, theirs = _time(schedule, topology, size), _time(ring, topology, size)
    if ours <= theirs:
        return schedule
    message = (f"ring simulates faster at {size:.0f} bytes ({theirs * 1e6:.1f} us vs "
               f"{ours * 1e6:.1f} us for {schedule.name}); returning it (option "
               "fallback=false keeps the pipeline)")
    return ring.with_name(f"{strategy}->{ring.name}", fallback=message,
                          pipelined_schedule=schedule.name, pipelined_us=ours * 1e6)


@register("flat-pipelined", {Kind.ALLREDUCE},
          "each rank reduces one 1/N segment from all, then broadcasts it, pipelined in "
          "pieces; multipath on spare links (fully connected nodes); tuned at option size, "
          "the ring where that is faster", classic=False, sized=True)
def build_flat_pipelined(topology: Topology, kind: Kind, *, root: int = 0,
                         chunks: int | None = None, **options: object) -> Schedule:
    """Flat two-stage pipelined allreduce.

    Options: ``depth`` (pieces per segment; default ``chunks``, else the fastest of
    :data:`DEPTHS` in simulation), ``size`` (bytes to tune for, default 64 MiB),
    ``multipath`` (``auto``, ``socket``, ``all``, ``off``; default ``auto``: the faster
    of striping inside sockets and striping anywhere), ``fallback`` (default true: the
    ring allreduce where it simulates faster at ``size``). Needs a route between every
    pair and one node (several nodes: hierarchical-pipelined).
    """
    require_kind(kind, {Kind.ALLREDUCE}, "flat-pipelined")
    depth, size, multipath = _options("flat-pipelined", options)
    if len(topology.groups.get("node", ())) > 1:
        raise NotApplicableError(
            f"strategy 'flat-pipelined' is for one fully connected node; {topology.name!r} "
            f"has {len(topology.groups['node'])} nodes (try hierarchical-pipelined)")
    missing = next(((a, b) for a, b in itertools.permutations(topology.ranks, 2)
                    if not topology.has_route(a, b)), None)
    if missing:
        raise NotApplicableError(
            f"strategy 'flat-pipelined' needs a route between every pair of ranks; "
            f"{topology.name!r} has none from rank {missing[0]} to rank {missing[1]} "
            "(try hierarchical-pipelined or ring)")
    n = topology.num_ranks
    schedule = _depths(lambda d: flat(topology, d), topology, depth or chunks, size,
                       2 * n * (n - 1))
    return _not_slower_than_ring(_with_multipath(schedule, topology, size, multipath),
                                 topology, size, "flat-pipelined", options)


INTRA = ("star", "chain")


@register("hierarchical-pipelined", {Kind.ALLREDUCE},
          "reduce to socket/node leaders, leaders reduce-scatter + allgather, broadcast "
          "back, stages overlapped piece by piece; multipath inside sockets; tuned at "
          "option size, the ring where that is faster", classic=False, sized=True)
def build_hierarchical_pipelined(topology: Topology, kind: Kind, *, root: int = 0,
                                 chunks: int | None = None, **options: object) -> Schedule:
    """Three-stage hierarchical pipelined allreduce.

    Options: ``level`` (``socket`` or ``node``: the groups whose first rank leads),
    ``intra`` (``star`` or ``chain``: how a group reduces into its leader), ``depth``
    (pieces; default ``chunks``), ``size`` (bytes to tune for, default 64 MiB),
    ``multipath`` and ``fallback`` (as flat-pipelined's). What is not given is chosen by
    simulation at ``size``. Needs ``groups["socket"]`` or ``groups["node"]``: several
    groups, not all single ranks.
    """
    require_kind(kind, {Kind.ALLREDUCE}, "hierarchical-pipelined")
    depth, size, multipath = _options("hierarchical-pipelined", options, ("level", "intra"))
    level, intra = options.get("level"), options.get("intra")
    if level is not None and level not in LEVELS:
        raise InputError(f"strategy 'hierarchical-pipelined': level must be one of "
                         f"{', '.join(LEVELS)}, got {level!r}")
    if intra is not None and intra not in INTRA:
        raise InputError(f"strategy 'hierarchical-pipelined': intra must be one of "
                         f"{', '.join(INTRA)}, got {intra!r}")
    usable = levels(topology)
    if level is not None and level not in usable:
        raise NotApplicableError(f"strategy 'hierarchical-pipelined': {topology.name!r} has no "
                                 f"{level!r} groups to lead (several, not all single ranks)")
    if not usable:
        raise NotApplicableError(
            f"strategy 'hierarchical-pipelined' needs groups['socket'] or groups['node'] "
            f"with several groups; {topology.name!r} has none (try flat-pipelined or ring)")
    candidates = []
    for lv, how in itertools.product([level] if level else usable,
                                     [intra] if intra else INTRA):
        if how == "chain" and not intra and max(map(len, topology.groups[lv])) <= 2:
            continue  # a chain of two is the star
        built = _depths(lambda d, lv=lv, how=how: hierarchical(topology, topology.groups[lv],
                                                                 d, how),
                        topology, depth or chunks, size, _per_piece(topology, lv))
        candidates.append(built.with_name(built.name.replace("(", f"(level={lv}, ", 1),
                                          level=lv))
    schedule = _fastest(candidates, topology, size, GOOD_ENOUGH)
    return _not_slower_than_ring(_with_multipath(schedule, topology, size, multipath),
                                 topology, size, "hierarchical-pipelined", options)
