"""The ``taccl`` strategy: sketch -> routing MILP -> greedy ordering -> contiguity MILP ->
Schedule, then a check in simulation against the classic strategies.

allgather and alltoall are synthesized directly; reduce-scatter is the reverse of an
allgather synthesized on the reversed topology; allreduce is that reduce-scatter
followed by the allgather. Every schedule is an ordinary ccweave Schedule: the verifier
proves it and the simulator times it like any other. The schedule returned is the one
``ccweave export`` writes: its figure is the figure of the MSCCL XML.
"""

from __future__ import annotations

import enum
import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import CCWeaveError, InputError, NotApplicableError
from ccweave.schedule import Schedule, ScheduleBuilder
from ccweave.synth.layout import chunks_for
from ccweave.synth.registry import register, strategies_for, synthesize
from ccweave.synth.taccl import logical as logical_mod
from ccweave.synth.taccl import ordering_joint as joint_mod
from ccweave.synth.taccl import profile as profile_mod
from ccweave.synth.taccl import sketch as sketch_mod
from ccweave.synth.taccl.contiguity import (
    MAX_MERGE_BINARIES,
    MAX_SENDS,
    MERGE_ALPHA_RATIO,
    WINDOW,
    Contiguity,
    contiguity,
    singletons,
)
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.logical import LogicalTopology
from ccweave.synth.taccl.lowering import (
    ChannelPolicy,
    Lowered,
    lower,
    relays_share_ports,
    serialize_local_steps,
    shared_across_ranks,
    shared_ports,
)
from ccweave.synth.taccl.ordering import Heuristic, Ordering, heuristics_for, order
from ccweave.synth.taccl.ordering_bound import order_bound
from ccweave.synth.taccl.progress import Progress
from ccweave.synth.taccl.reduction import reduce_scatter_from, reverse_order
from ccweave.synth.taccl.routing import RoutingMethod, route
from ccweave.synth.taccl.routing_result import Routing
from ccweave.synth.taccl.sketch_canonical import canonical, global_permutation, relabel_schedule
from ccweave.synth.taccl.sketch_defaults import (
    VARIANTS,
    default_sketch,
    default_sketches,
    named_sketch,
)
from ccweave.synth.taccl.sketch_model import Sketch
from ccweave.synth.taccl.solver import SolverSettings
from ccweave.topology.model import Topology
from ccweave.units import parse_size

KINDS = frozenset({Kind.ALLGATHER, Kind.ALLTOALL, Kind.REDUCESCATTER, Kind.ALLREDUCE})

DEFAULT_SIZE = 64 * 2**20
"""The size a schedule is synthesized for when none is given (nccl-tests' ``size``)."""
DEFAULT_TIME_LIMIT_S = 120.0
"""Wall-clock budget of one synthesis when none is given."""
ROUTING_SHARE = 0.4
"""Part of a candidate's time the routing stage may use."""
ROUTING_TIME_LIMIT_S = 10.0
"""Default cap on the routing stage's solver time per candidate."""
MIN_STAGE_TIME_S = 0.5
"""No solver stage gets less than this, whatever is left of the limit."""
CHUNKUPS = {Kind.ALLGATHER: (2, 1, 4), Kind.ALLTOALL: (1, 2)}
"""Chunks per rank tried when neither a sketch nor ``chunks`` fixes them (allgather's
also serve reduce-scatter and allreduce): pipelining deeper pays at large sizes,
fewer transfers at small ones; the simulator decides."""
PORT_ORDERS = ("internode", "none", "all")
"""Which sends through a rank's shared port wait for each other, tried in turn (see
:func:`~ccweave.synth.taccl.lowering.shared_ports`): NIC sends one at a time pipeline a
relay's chunks; all at once overlap their latencies (alltoall)."""
ORDER_RESERVE = 4.0
"""A further ordering is made only while the time left is this many times the slowest
ordering so far (the rest of the time goes to lowering what was ordered)."""
ORDER_PRUNE = 1.1
"""An ordering whose model makespan is over this multiple of the best ordering of the same
routes is not lowered (it is listed with its makespan): lowering costs far more than
ordering, and such orders do not win."""
REVERSE_BASES = 3
"""Most allgather lowerings a reduce-scatter is reversed from (the kept one and the
fastest without relays first within :data:`ORDER_PRUNE` of it): reversed, a relay's
copies waiting for each other are reductions waiting for each other, and on two DGX-2
the fastest allgather, whose relays go first, reverses 18% slower (findings.md)."""
REPLAY_ROUNDS = 3
"""Times queues are re-served in simulated arrival order (see ``_replayed``)."""
REPLAY_GAIN = 1e-3
"""A replay round must make the schedule this much faster to count."""
CONTIGUITY_TIME_LIMIT_S = 3.0
"""Default cap on the contiguity stage's solver time per candidate (shared by the
orderings tried): its MILP closes its gap slowly, and its warm start is already a good
schedule."""
EXPORT_RESERVE = 0.1
"""Part of the time limit kept for exporting the chosen schedule (its figure must be the
export's)."""
BEST = "best"
"""Option value: try every choice and keep the schedule that simulates fastest."""
JOINT = "joint"
"""``ordering`` value: routes and order from the joint MILP alone
(:mod:`~ccweave.synth.taccl.ordering_joint`), warm-started by the best heuristic order."""
JOINT_SHARE = 0.5
"""Most part of a candidate's time left that the joint MILP may use."""
SAME = 1e-9
"""Relative difference below which two simulated times are the same."""
EXPORT_ROUNDS = 3
"""Times the schedule read back from its XML is exported again, until its XML times the
same (a read-back schedule whose steps MSCCL fuses further)."""


class ReduceOrder(str, enum.Enum):
    """How a reduce-scatter built by reversing an allgather orders each connection."""

    REVERSED_TIMES = "reversed-times"
    """What the allgather delivered last is reduced and sent first (its simulated times,
    reversed)."""
    REVERSE_HEURISTIC = "reverse-heuristic"
    """TACCL's reverse scheduling (its heuristic 12): the reversed hops list-scheduled
    afresh, where most travel meets first
    (:func:`~ccweave.synth.taccl.reduction.reverse_order`)."""
    REVERSE_BRANCH = "reverse-branch"
    """TACCL's heuristic 18: the same, the hop with the longest branch behind it first."""


@dataclass(frozen=True)
class TacclOptions:
    """Options of the ``taccl`` strategy (``--option key=value`` on the command line).

    Parameters
    ----------
    sketch: a sketch file (ccweave's or TACCL's format), a :class:`Sketch`, or the name of
        one of the sketches read off the topology (``relay-per-nic``, ``relay-all``,
        ``fully-connected``, ``one-node``); ``None``: try those read off the topology.
    size: bytes of the collective's size buffer to synthesize for (``64MB`` accepted).
    time_limit: wall-clock seconds for the whole synthesis. Each candidate gets a share
        and each solver stage a part of that; a stage at its limit returns its best
        solution so far with its MIP gap; candidates that would not finish are skipped.
    routing: ``milp`` (TACCL's routing MILP, warm-started by the tree selection; both
        routings are lowered and the faster kept) or ``trees`` (the tree selection alone).
    routing_time_limit: at most this many seconds of solver time for routing, per
        candidate.
    relay_hops: most node-to-node hops a chunk takes (1: TACCL's relay; more: chunks
        may be relayed on through nodes they reached, routing ``milp`` only).
    ordering: ``best`` (every heuristic of :class:`Heuristic`, and the joint MILP where
        it has at most ``joint_max_binaries`` binaries; the fastest kept), ``joint`` (the
        joint MILP's routes and order alone) or one heuristic's name.
    joint_time_limit: at most this many seconds for the joint routing-and-ordering MILP
        (:mod:`~ccweave.synth.taccl.ordering_joint`).
    joint_max_binaries: the joint MILP is solved only for sketches whose model has at most
        this many binaries (sends and pairs of sends that share a link).
    contiguity_time_limit: at most this many seconds for the contiguity stage of a
        candidate, shared by the orderings tried.
    contiguity_window: most sends one merged transfer holds (TACCL's window, 6).
    mip_gap: relative gap at which a MILP counts as solved.
    max_paths, max_trees: the tree selection's candidates per (chunk, destination) and
        trees per root.
    contiguity: run stage 3 (merges on high-alpha links); off: stage-2 times stand.
    route_search: improve the tree selection's routes by a local search scored by stage 2
        (:mod:`~ccweave.synth.taccl.routing_search`), within part of the routing time.
    merge_alpha_ratio: edges whose alpha is at least this fraction of a chunk's
        streaming time are high-alpha.
    max_merges, contiguity_max_sends: caps on the contiguity MILP's merge decisions and
        sends; beyond the latter a batching heuristic merges instead.
    reduce_order: ``best``, ``reversed-times``, ``reverse-heuristic`` or ``reverse-branch``
        (:class:`ReduceOrder`), for reduce-scatter and allreduce.
    channels: ``alternate`` or ``one`` (:class:`~ccweave.synth.taccl.lowering.ChannelPolicy`).
    profile: a TACCL profiled-topology file whose link costs replace the machine's
        (:mod:`~ccweave.synth.taccl.profile`); ``profile_chunk`` is the chunk size its
        betas are for (default 1MB), ``profile_scale`` the factor its figures were
        multiplied by (default 1).
    fallback: when a classic strategy simulates faster at ``size``, return it (the
        schedule's metadata says so).
    threads: solver threads.
    progress: a callback taking :class:`Progress` events.
    """

    sketch: str | Sketch | None = None
    size: int = DEFAULT_SIZE
    time_limit: float = DEFAULT_TIME_LIMIT_S
    routing: RoutingMethod = RoutingMethod.MILP
    routing_time_limit: float = ROUTING_TIME_LIMIT_S
    relay_hops: int = 1
    ordering: str = BEST
    joint_time_limit: float = joint_mod.TIME_LIMIT_S
    joint_max_binaries: int = joint_mod.MAX_BINARIES
    contiguity_time_limit: float = CONTIGUITY_TIME_LIMIT_S
    contiguity_window: int = WINDOW
    mip_gap: float = 1e-3
    max_paths: int = 4
    max_trees: int = 3
    contiguity: bool = True
    route_search: bool = True
    merge_alpha_ratio: float = MERGE_ALPHA_RATIO
    max_merges: int = MAX_MERGE_BINARIES
    contiguity_max_sends: int = MAX_SENDS
    reduce_order: str = BEST
    channels: ChannelPolicy = ChannelPolicy.ALTERNATE
    profile: str | Path | profile_mod.Profile | None = None
    profile_chunk: int = profile_mod.DEFAULT_CHUNK_BYTES
    profile_scale: float = 1.0
    fallback: bool = True
    threads: int = 1
    progress: Callable[[Progress], None] | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, options: dict[str, object]) -> TacclOptions:
        """Options from keyword arguments, checked; unknown names are an ``InputError``."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InputError(f"strategy 'taccl' has no option {unknown[0]!r}; it takes "
                             f"chunks, {', '.join(sorted(known))}")
        values = dict(options)
        for name in ("size", "profile_chunk"):
            if name in values and isinstance(values[name], str):
                values[name] = parse_size(values[name])
        for name, kind in (("routing", RoutingMethod), ("channels", ChannelPolicy)):
            if name in values:
                values[name] = _member(kind, values[name], name)
        parsed = cls(**values)  # type: ignore[arg-type]
        parsed._check()
        return parsed

    def _check(self) -> None:
        def positive(name: str, value: object, integer: bool = False) -> None:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
            if integer:
                ok = ok and isinstance(value, int)
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                kind = "a positive integer" if integer else "a positive number"
                raise InputError(f"taccl option {name} must be {kind}, got {value!r}")

        for name in ("size", "time_limit", "routing_time_limit", "contiguity_time_limit",
                     "mip_gap", "merge_alpha_ratio", "profile_chunk", "profile_scale",
                     "joint_time_limit"):
            positive(name, getattr(self, name))
        for name in ("max_paths", "max_trees", "max_merges", "contiguity_max_sends",
                     "threads", "relay_hops", "contiguity_window", "joint_max_binaries"):
            positive(name, getattr(self, name), integer=True)
        for name in ("contiguity", "fallback", "route_search"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"taccl option {name} must be true or false")
        _member(RoutingMethod, self.routing, "routing")
        _member(ChannelPolicy, self.channels, "channels")
        self.heuristics()
        self.reduce_orders()
        if self.relay_hops > 1 and _member(RoutingMethod, self.routing, "routing") \
                is RoutingMethod.TREES:
            raise InputError("taccl option relay_hops above 1 needs routing=milp (the tree "
                             "selection relays once)")
        if self.profile is not None and not isinstance(self.profile,
                                                       (str, Path, profile_mod.Profile)):
            raise InputError(f"taccl option profile must be a file name, got {self.profile!r}")

    def heuristics(self) -> tuple[Heuristic, ...] | None:
        """The ordering heuristics asked for; ``None``: every one that applies (with
        ``best``, and with ``joint``, whose MILP starts from the best of them)."""
        if self.ordering in (BEST, JOINT):
            return None
        return (_member(Heuristic, self.ordering, "ordering", BEST, JOINT),)

    def reduce_orders(self) -> tuple[ReduceOrder, ...]:
        if self.reduce_order == BEST:
            return tuple(ReduceOrder)
        return (_member(ReduceOrder, self.reduce_order, "reduce_order", BEST),)


def _member(kind: type[enum.Enum], value: object, name: str, *extra: str):
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join([*extra, *(m.value for m in kind)])
        raise InputError(f"taccl option {name} is {value!r}; use one of {choices}") from None


@dataclass(frozen=True)
class StageReport:
    """What one synthesis did: per stage, its status, gap, seconds and model makespan."""

    sketch: str
    chunks_per_rank: int
    routing: dict[str, object]
    ordering: dict[str, object]
    contiguity: dict[str, object]
    seconds: float
    routings: tuple[dict[str, object], ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"sketch": self.sketch, "chunks_per_rank": self.chunks_per_rank,
                "routing": self.routing, "routings": list(self.routings),
                "ordering": self.ordering, "contiguity": self.contiguity,
                "seconds": round(self.seconds, 3)}


class _Clock:
    """The time limit shared by the stages of one build."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.started = time.perf_counter()

    def left(self) -> float:
        return self.limit - (time.perf_counter() - self.started)

    def stage(self, share: float) -> float:
        return max(MIN_STAGE_TIME_S, share * self.left())


def resolve_sketch(topology: Topology, sketch: str | Sketch | None, kind: Kind) -> Sketch:
    """The sketch to use: a file, a :class:`Sketch`, a default sketch by name
    (:data:`~ccweave.synth.taccl.sketch_defaults.VARIANTS`), or the topology's default."""
    direct = Kind.ALLTOALL if kind is Kind.ALLTOALL else Kind.ALLGATHER
    if sketch is None:
        return default_sketch(topology, direct)
    if isinstance(sketch, Sketch):
        return sketch
    if str(sketch) in VARIANTS:
        return named_sketch(topology, direct, str(sketch))
    return sketch_mod.load(Path(str(sketch)))


def profiled(topology: Topology, options: TacclOptions) -> Topology:
    """``topology`` with the link costs of ``options.profile`` (unchanged without one)."""
    if options.profile is None:
        return topology
    return profile_mod.apply(_read_profile(options).profile, topology)


def _read_profile(options: TacclOptions) -> TacclOptions:
    """``options`` with its profile file read (once: a pipe or FIFO gives it only once)."""
    if not isinstance(options.profile, (str, Path)):
        return options
    return replace(options, profile=profile_mod.load(options.profile, options.profile_chunk,
                                                     options.profile_scale))


@dataclass(frozen=True)
class Direct:
    """An allgather or alltoall through the stages, with what reversal needs:
    ``alternatives`` are the fastest lowerings without relays first (schedule, routing,
    heuristic) other than the kept one, at most :data:`REVERSE_BASES` - 1 of them within
    :data:`ORDER_PRUNE` of it, as the fastest allgather need not reverse into the
    fastest reduce-scatter."""

    schedule: Schedule
    report: StageReport
    logical: LogicalTopology
    routing: Routing
    chunk_bytes: float
    time_s: float
    alternatives: tuple[tuple[Schedule, Routing, str], ...] = ()


@dataclass(frozen=True)
class _Lowering:
    routing: Routing
    ordering: Ordering
    groups: Contiguity
    schedule: Schedule
    time_s: float
    plain: Schedule  # the fastest lowering without relays first (``schedule`` if it is)
    plain_s: float


def synthesize_direct(topology: Topology, kind: Kind, sketch: Sketch, chunks: int,
                      options: TacclOptions, clock: _Clock) -> Direct:
    """Allgather or alltoall through the three stages; see the module docstring."""

    progress = options.progress
    started = time.perf_counter()
    logical = logical_mod.apply(topology, sketch)
    collective = Collective(kind, topology.num_ranks, chunks)
    demand = Demand(collective, logical.symmetry)
    chunk_bytes = collective.chunk_bytes(options.size)
    settings = SolverSettings(min(clock.stage(ROUTING_SHARE), options.routing_time_limit),
                              options.mip_gap, options.threads)
    score = _ordering_score(logical, chunk_bytes) if options.route_search else None
    routings = route(logical, demand, chunk_bytes, method=RoutingMethod(options.routing),
                     max_paths=options.max_paths, max_trees=options.max_trees,
                     relay_hops=options.relay_hops, settings=settings, progress=progress,
                     score=score)
    for routing in routings:
        if progress:
            progress(Progress("routing", f"{routing.method}: {routing.note}",
                              routing.makespan_s * 1e6, gap=routing.gap,
                              elapsed_s=routing.seconds))
    name = f"taccl({kind.value}, sketch={sketch.name}, chunks={chunks})"
    metadata = {"strategy": "taccl", "topology": topology.name, "size": options.size,
                **logical.describe()}
    lowerings: list[_Lowering] = []
    tried_orders: dict[str, dict[str, float | str]] = {}
    unique = [r for k, r in enumerate(routings)  # a MILP that kept its warm start's routes
              if all(r.hops != earlier.hops for earlier in routings[:k])]
    plans = [(routing, heuristic) for routing in unique
             for heuristic in _heuristics(routing, options)]
    seen: list[tuple[Routing, Ordering, Heuristic]] = []
    slowest = 0.0  # wall seconds of the slowest (routing, heuristic) tried so far
    orderings: dict[tuple[int, Heuristic], Ordering] = {}
    slowest_order = 0.0
    for r, h in plans:  # ordering is cheap next to lowering, but not free on 80 GPUs
        if any(rr is r for rr, _ in orderings) and \
                slowest_order * ORDER_RESERVE > clock.left():
            tried_orders.setdefault(r.method, {})[h.value] = "skipped: time (not ordered)"
            continue
        began = time.perf_counter()
        orderings[(id(r), h)] = order(logical, r, chunk_bytes, h)
        slowest_order = max(slowest_order, time.perf_counter() - began)
    joint = _joint_routing(logical, demand, chunk_bytes, routings, orderings.values(),
                           options, clock)
    if joint is not None:
        routings = [*routings, joint]
        unique.append(joint)
        orderings[(id(joint), Heuristic.SOLVER_TIMES)] = order(logical, joint, chunk_bytes,
                                                              Heuristic.SOLVER_TIMES)
        plans = [(joint, Heuristic.SOLVER_TIMES)] if options.ordering == JOINT else \
            [*plans, (joint, Heuristic.SOLVER_TIMES)]
        if progress:
            progress(Progress("routing", f"{joint.method}: {joint.note}",
                              joint.makespan_s * 1e6, gap=joint.gap, elapsed_s=joint.seconds))
    best_model = {id(r): min(o.makespan_s for (key, _), o in orderings.items()
                             if key == id(r)) for r in unique}
    for routing, heuristic in plans:
        ordering = orderings.get((id(routing), heuristic))
        if ordering is None:
            continue
        if ordering.makespan_s > best_model[id(routing)] * ORDER_PRUNE:
            tried_orders.setdefault(routing.method, {})[heuristic.value] = (
                f"not lowered: {ordering.makespan_s * 1e6:.1f} us ordered, over "
                f"{ORDER_PRUNE}x the best order of these routes")
            continue
        if lowerings and slowest > clock.left():
            tried_orders.setdefault(routing.method, {})[heuristic.value] = "skipped: time"
            continue  # would not finish within the candidate's time
        began = time.perf_counter()
        twin = next((h for r, o, h in seen if r is routing and o.edge_order == ordering.edge_order
                     and o.link_order == ordering.link_order), None)
        seen.append((routing, ordering, heuristic))
        if twin is not None:  # the same order as a heuristic tried: the same schedule
            tried_orders.setdefault(routing.method, {})[heuristic.value] = \
                tried_orders[routing.method][twin.value]
            continue
        if options.contiguity:
            limit = min(clock.stage(0.5), options.contiguity_time_limit) / len(plans)
            groups = contiguity(logical, ordering, chunk_bytes,
                                alpha_ratio=options.merge_alpha_ratio,
                                max_merges=options.max_merges,
                                max_sends=options.contiguity_max_sends,
                                window=options.contiguity_window,
                                settings=replace(settings, time_limit_s=limit),
                                progress=progress)
        else:
            groups = singletons(ordering, "contiguity off: stage-2 times")
        (schedule, seconds), plain = _lowered(topology, demand, logical, ordering, groups,
                                              name, metadata, options)
        tried_orders.setdefault(routing.method, {})[heuristic.value] = seconds * 1e6
        if progress:
            progress(Progress("ordering", f"{routing.method} routes, heuristic "
                                          f"{heuristic.value}: {groups.merges} merges "
                                          f"({groups.note}); {seconds * 1e6:.1f} us "
                                          "simulated"))
        lowerings.append(_Lowering(routing, ordering, groups, schedule, seconds, *plain))
        slowest = max(slowest, time.perf_counter() - began)
    kept = min(lowerings, key=lambda lowered: lowered.time_s)
    lowered_us: dict[int, float] = {}
    for low in lowerings:
        lowered_us[id(low.routing)] = min(lowered_us.get(id(low.routing), math.inf),
                                          low.time_s * 1e6)
    unlowered = ("not lowered: ordering=joint lowers the joint MILP's routes alone"
                 if options.ordering == JOINT else "the same routes as the tree selection")
    routing_facts = tuple({**r.report(), "lowered_us": lowered_us[id(r)]} if id(r) in
                          lowered_us else {**r.report(), "lowered": unlowered}
                          for r in routings)
    bound = order_bound(logical, kept.routing, chunk_bytes)
    report = StageReport(
        sketch.name, chunks, {**kept.routing.report(), "kept": kept.routing.method,
                              "order_bound_us": bound.seconds * 1e6,
                              "order_bound_set_by": bound.link},
        {"heuristic": kept.ordering.heuristic.value, "sends": len(kept.ordering.sends),
         "makespan_us": kept.ordering.makespan_s * 1e6,
         "tried_us": tried_orders.get(kept.routing.method, {})},
        {"status": kept.groups.status, "gap": kept.groups.gap,
         "seconds": round(kept.groups.seconds, 3), "merges": kept.groups.merges,
         "makespan_us": kept.groups.makespan_s * 1e6, "note": kept.groups.note},
        time.perf_counter() - started, routing_facts)
    schedule = kept.schedule.with_name(name, taccl=report.to_dict())
    runners_up = sorted((low for low in lowerings if low.plain is not kept.schedule
                         and low.plain_s <= kept.time_s * ORDER_PRUNE),
                        key=lambda low: low.plain_s)
    alternatives = tuple((low.plain, low.routing, low.ordering.heuristic.value)
                         for low in runners_up[:REVERSE_BASES - 1])
    return Direct(schedule, report, logical, kept.routing, chunk_bytes, kept.time_s,
                  alternatives)


def _joint_routing(logical: LogicalTopology, demand: Demand, chunk_bytes: float,
                   routings: Sequence[Routing], orders: Iterable[Ordering],
                   options: TacclOptions, clock: _Clock) -> Routing | None:
    """The joint MILP's routes and order (``ordering`` ``best`` or ``joint``), warm-started
    by the fastest of ``orders``; ``None`` where it is not asked for or (``best``) its
    model is larger than ``joint_max_binaries`` or the fastest order already meets the
    routing MILP's LP bound (which bounds every schedule: the routing model relaxes the
    joint one)."""
    if options.ordering not in (BEST, JOINT):
        return None
    incumbent = min(orders, key=lambda o: o.makespan_s)
    floor = max((r.bound_s for r in routings if r.bound_s is not None), default=0.0)
    if options.ordering == BEST and incumbent.makespan_s <= floor * (1 + options.mip_gap):
        return None
    size = joint_mod.joint_binaries(logical, demand, options.joint_max_binaries,
                                    options.relay_hops)
    if size is None:
        if options.ordering == JOINT:
            raise InputError(
                f"taccl option ordering=joint: the joint MILP of sketch "
                f"{logical.sketch.name} has more than {options.joint_max_binaries} binaries "
                f"(joint_max_binaries); raise joint_max_binaries, or use ordering=best")
        return None
    limit = min(options.joint_time_limit, clock.stage(JOINT_SHARE))
    settings = SolverSettings(limit, options.mip_gap, options.threads)
    return joint_mod.route_and_order(logical, demand, chunk_bytes, incumbent, floor_s=floor,
                                     relay_hops=options.relay_hops, settings=settings,
                                     progress=options.progress)


SEARCH_HEURISTICS = (Heuristic.EARLIEST_START,)
"""The orderings that score a routing in the route search: quick, and the best of stage
2's on most sketches (each more would double the time a score takes)."""


def _ordering_score(logical: LogicalTopology, chunk_bytes: float
                    ) -> Callable[[tuple], tuple[float, float]]:
    """Hops -> the least makespan stage 2 orders them in, and that order's mean send end
    (the route search's score)."""
    def score(hops: tuple) -> tuple[float, float]:
        routing = Routing(hops, 0.0, "", 0.0, 0.0, 0, "")
        orders = [order(logical, routing, chunk_bytes, h) for h in SEARCH_HEURISTICS]
        return min((o.makespan_s, float(o.finish.mean()) if len(o.finish) else 0.0)
                   for o in orders)
    return score


ORDER_PREFERENCE = (Heuristic.EARLIEST_START, Heuristic.OWN_NODE_FIRST, Heuristic.BACKWARD,
                    Heuristic.SOLVER_TIMES, Heuristic.LONGEST_REMAINING,
                    Heuristic.LONGEST_SOURCES_FIRST, Heuristic.LONGEST_OWN_NODE,
                    Heuristic.INSERTION)
"""The order ``ordering=best`` tries heuristics in (the time limit may cut the last):
those that won most often in benchmarks/taccl.py first. ``longest-remaining-insertion``
comes last: its tighter model pays where relays go first (the ``relay_first`` lowering;
sk1-dgx2-n2: 513.1 us exported against own-node-first's 550.7), and an order over
:data:`ORDER_PRUNE` of the best model is not lowered."""


def _heuristics(routing: Routing, options: TacclOptions) -> tuple[Heuristic, ...]:
    """The ordering heuristics to try for ``routing``: those asked for that apply (the
    joint MILP's routes: its own times)."""
    if routing.method == joint_mod.METHOD:
        return (Heuristic.SOLVER_TIMES,)
    usable = heuristics_for(routing)
    return tuple(h for h in options.heuristics() or ORDER_PREFERENCE if h in usable) or \
        (Heuristic.EARLIEST_START,)  # solver times asked for, but these routes have none


def _lowered(topology: Topology, demand: Demand, logical: LogicalTopology,
             ordering: Ordering, groups: Contiguity, name: str, metadata: dict[str, object],
             options: TacclOptions) -> tuple[tuple[Schedule, float], tuple[Schedule, float]]:
    """The fastest lowering of ``groups`` over the port orders, paced or not (where links
    are shared across ranks), relays first or not (where a rank sends a chunk through one
    port to a relay and to a receiver that keeps it), replayed, with each rank's local
    steps in threadblock order, and its simulated time; then the same for the fastest
    without relays first (the same pair where that is the fastest)."""
    from ccweave.simulate import simulate

    best: tuple[float, Schedule] | None = None
    plain: tuple[float, Schedule] | None = None
    paces = (False, True) if shared_across_ranks(logical, ordering) else (False,)
    relays = (False, True) if relays_share_ports(logical, ordering) else (False,)
    ports = {}  # port orders that queue the same sends are the same lowering
    for port_order in PORT_ORDERS:
        ports.setdefault(tuple(sorted(shared_ports(logical, port_order).items())), port_order)
    for port_order, pace, relay in itertools.product(ports.values(), paces, relays):
        schedule, seconds = _replayed(
            topology, options.size, ordering, groups,
            lambda priority, port_order=port_order, pace=pace, relay=relay: lower(
                demand, logical, ordering, groups, name,
                {**metadata, "port_order": port_order, "paced": pace, "relay_first": relay},
                port_order=port_order, priority=priority,
                channels=ChannelPolicy(options.channels), pace=pace, relay_first=relay))
        found = (seconds, schedule)
        if best is None or seconds < best[0] * (1 - REPLAY_GAIN):
            best = found
        if not relay and (plain is None or seconds < plain[0] * (1 - REPLAY_GAIN)):
            plain = found
    assert best is not None and plain is not None

    def finished(found: Schedule) -> tuple[Schedule, float]:
        schedule = serialize_local_steps(found, topology, options.size)
        return schedule, simulate(schedule, topology, options.size).time_s

    kept = finished(best[1])
    return kept, (kept if plain is best else finished(plain[1]))


def _replayed(topology: Topology, size: float, ordering: Ordering, groups: Contiguity,
              lowered: Callable[[Sequence[float] | None], Lowered]) -> tuple[Schedule, float]:
    """Lower with stage 3's times, then re-serve every queue in the order its chunks
    really arrive when simulated (the model streams one send per link at a time, the
    machine shares links), while that makes the schedule faster."""
    from ccweave.simulate import simulate

    current = lowered(None)
    best_time = simulate(current.schedule, topology, size)
    best = current.schedule
    group_of = {i: g for g, group in enumerate(groups.groups) for i in group}
    for _ in range(REPLAY_ROUNDS):
        finish = best_time.finish
        priority = [max((float(finish[current.carrier[group_of[ordering.sends[i].parent]]])
                         if ordering.sends[i].parent >= 0 else 0.0) for i in group)
                    for group in groups.groups]
        current = lowered(priority)
        timed = simulate(current.schedule, topology, size)
        if timed.time_s >= best_time.time_s * (1 - REPLAY_GAIN):
            break
        best, best_time = current.schedule, timed
    return best, best_time.time_s


def self_reverse(topology: Topology) -> bool:
    """Whether turning every link around gives the same machine (duplex links)."""
    ours = {(lk.src, lk.dst, lk.bandwidth, lk.alpha) for lk in topology.links}
    return ours == {(lk.dst, lk.src, lk.bandwidth, lk.alpha) for lk in topology.links}


def candidates(topology: Topology, kind: Kind, chunks: int | None,
               options: TacclOptions) -> list[tuple[Sketch, int]]:
    """(sketch, chunks per rank) pairs to try: the given sketch, or the defaults read off
    the topology, each at the given chunks or at every count of :data:`CHUNKUPS`."""
    if options.sketch is not None:
        sketch = resolve_sketch(topology, options.sketch, kind)
        return [(sketch, chunks_for(chunks, sketch.input_chunkup))]
    sketches = default_sketches(topology, Kind.ALLTOALL if kind is Kind.ALLTOALL
                                else Kind.ALLGATHER)
    counts = [chunks_for(chunks)] if chunks is not None else \
        list(CHUNKUPS[Kind.ALLTOALL if kind is Kind.ALLTOALL else Kind.ALLGATHER])
    return [(sketch, count) for count in counts for sketch in sketches]


def synthesize_taccl(topology: Topology, kind: Kind, chunks: int | None,
                     options: TacclOptions) -> Schedule:
    """The taccl pipeline for any of its collectives, without the classic fallback: every
    candidate (:func:`candidates`) is synthesized and simulated at ``options.size``, and
    the fastest is returned; its metadata lists them all."""

    if topology.num_ranks == 1:
        return _alone(kind, chunks_for(chunks))
    topology = profiled(topology, options)
    tried = candidates(topology, kind, chunks, options)
    clock = _Clock(options.time_limit * (1 - EXPORT_RESERVE))
    best: tuple[float, Schedule] | None = None
    results: list[dict[str, object]] = []
    per_chunk = 0.0  # most wall seconds a candidate took per chunk per rank
    for number, (sketch, count) in enumerate(tried):
        if number and per_chunk * count > clock.left():
            results.append({"sketch": sketch.name, "chunks": count,
                            "skipped": "would not finish within the time limit"})
            continue
        started = time.perf_counter()
        share = _Clock(clock.left() / (len(tried) - number))
        schedule, seconds = _one(topology, kind, sketch, count, options, share)
        per_chunk = max(per_chunk, (time.perf_counter() - started) / count)
        results.append({"sketch": sketch.name, "chunks": count, "time_us": seconds * 1e6})
        if options.progress and len(tried) > 1:
            options.progress(Progress("select", f"candidate {number + 1}/{len(tried)} "
                                                f"({sketch.name}, {count} chunk(s) per rank): "
                                                f"{seconds * 1e6:.1f} us simulated"))
        if best is None or seconds < best[0]:
            best = (seconds, schedule)
    assert best is not None
    chosen = best[1].with_name(best[1].name, candidates=results)
    if options.profile is not None:
        chosen = chosen.with_name(chosen.name, profiled_topology=topology.name)
    return as_exported(chosen, topology, options.size, best[0])


def as_exported(schedule: Schedule, topology: Topology, size: int, seconds: float
                ) -> Schedule:
    """The schedule MSCCL's export runs: ``schedule`` when its XML times the same, else
    (a fused step adds a wait, or threadblock order lets a send go sooner) the schedule
    read back from the XML, so the figure reported is the XML's. An export the runtime
    would refuse is said in the metadata."""
    from ccweave.export.msccl_xml import as_run
    from ccweave.simulate import simulate

    try:
        exported = as_run(schedule)
    except InputError as error:
        return schedule.with_name(schedule.name, export=f"MSCCL export refuses it: {error}")
    exported_s = simulate(exported, topology, size).time_s
    if abs(exported_s - seconds) <= seconds * SAME:
        return schedule.with_name(schedule.name, export="the MSCCL XML runs this order "
                                  f"({exported_s * 1e6:.1f} us simulated)")
    change = "add waits" if exported_s > seconds else "reorder sends"
    for _ in range(EXPORT_ROUNDS):  # the XML of the read-back may fuse once more
        again = as_run(exported)
        again_s = simulate(again, topology, size).time_s
        if abs(again_s - exported_s) <= exported_s * SAME:
            break
        exported, exported_s = again, again_s
    note = (f"the MSCCL XML's threadblocks {change} ({seconds * 1e6:.1f} us -> "
            f"{exported_s * 1e6:.1f} us simulated): this is the schedule the XML describes")
    return exported.with_name(schedule.name, **schedule.metadata, export=note)


def _alone(kind: Kind, chunks: int) -> Schedule:
    """One rank: its input is its output, one local copy."""
    builder = ScheduleBuilder(Collective(kind, 1, chunks))
    builder.copy(0, 0, (Buffer.INPUT, 0), (Buffer.OUTPUT, 0), count=chunks)
    return builder.build(f"taccl({kind.value}, one rank, chunks={chunks})")


def _one(topology: Topology, kind: Kind, sketch: Sketch, chunks: int,
         options: TacclOptions, clock: _Clock) -> tuple[Schedule, float]:
    """One sketch at one chunk count, solved in canonical labels
    (:mod:`.sketch_canonical`) and renumbered back: the schedule and its simulated time at
    ``options.size``."""
    from ccweave.simulate import simulate

    found = canonical(topology, sketch)
    schedule, seconds = _one_as_written(topology, kind, found.sketch, chunks, options, clock)
    if found.identity:
        return schedule.with_name(schedule.name, labels=found.note), seconds
    nodes = tuple(topology.groups.get("node", ())) or (tuple(topology.ranks),)
    back = global_permutation(nodes, tuple(sorted(range(len(found.local)),
                                                  key=found.local.__getitem__)))
    renumbered = relabel_schedule(schedule, back)
    split = len(renumbered.transfers) - len(schedule.transfers)
    note = found.note + (f"; renumbered back, {split} transfer(s) more: merged slots the "
                         "renumbering parts go as one transfer each" if split else "")
    return (renumbered.with_name(schedule.name, labels=note),
            simulate(renumbered, topology, options.size).time_s)


def _one_as_written(topology: Topology, kind: Kind, sketch: Sketch, chunks: int,
                    options: TacclOptions, clock: _Clock) -> tuple[Schedule, float]:
    """One sketch at one chunk count: the stages for allgather or alltoall, and the
    reduce-scatter and allreduce built from allgathers; the schedule and its simulated
    time at ``options.size``."""
    from ccweave import transforms
    from ccweave.simulate import simulate

    if kind in (Kind.ALLGATHER, Kind.ALLTOALL):
        direct = synthesize_direct(topology, kind, sketch, chunks, options, clock)
        return direct.schedule, direct.time_s
    if self_reverse(topology):
        allgather = synthesize_direct(topology, Kind.ALLGATHER, sketch, chunks, options,
                                      clock)
        reversed_ag = allgather
    else:
        half = _Clock(clock.left() / 2)
        reversed_ag = synthesize_direct(topology.reversed(), Kind.ALLGATHER, sketch, chunks,
                                        options, half)
        allgather = synthesize_direct(topology, Kind.ALLGATHER, sketch, chunks, options,
                                      clock)
    name = f"taccl({kind.value}, sketch={sketch.name}, chunks={chunks})"
    built_from = "reverse(allgather)" if kind is Kind.REDUCESCATTER else \
        "reverse(allgather) + allgather"
    best: tuple[float, Schedule, str] | None = None
    times: dict[str, float] = {}
    for label, reduce_scatter in _reduce_scatters(reversed_ag, topology, options):
        schedule = reduce_scatter if kind is Kind.REDUCESCATTER else \
            transforms.concat(reduce_scatter, allgather.schedule)
        schedule = serialize_local_steps(schedule, topology, options.size)
        seconds = simulate(schedule, topology, options.size).time_s
        schedule = schedule.with_name(name, built_from=built_from)
        times[label] = seconds * 1e6
        if best is None or seconds < best[0] * (1 - SAME):
            best = (seconds, schedule, label)
    assert best is not None
    return best[1].with_name(name, reduce_order={"kept": best[2], "tried_us": times}), best[0]


def _reduce_scatters(allgather: Direct, topology: Topology, options: TacclOptions
                     ) -> list[tuple[str, Schedule]]:
    """The reduce-scatters reversing ``allgather`` and its alternatives: each connection
    order of ``reduce_order``, each with fan-in through local reductions and on arrival."""
    built = []
    bases = [(allgather.schedule, allgather.routing, ""),
             *((s, r, f", from {h}") for s, r, h in allgather.alternatives)]
    for schedule, routing, source in bases:
        for how in options.reduce_orders():
            priority = None if how is ReduceOrder.REVERSED_TIMES else reverse_order(
                schedule, allgather.logical, routing, allgather.chunk_bytes,
                branch=how is ReduceOrder.REVERSE_BRANCH)
            for unfuse in (True, False):
                label = (f"{how.value}, fan-in {'local-reduce' if unfuse else 'on-arrival'}"
                         + source)
                built.append((label, reduce_scatter_from(schedule, topology, options.size,
                                                         priority, unfuse)))
    return built


def _best_classic(topology: Topology, kind: Kind, size: int
                  ) -> tuple[str, Schedule, float] | None:
    """The classic strategy that simulates fastest at ``size``, if any applies."""
    from ccweave.simulate import simulate

    best = None
    for name in strategies_for(kind, classic_only=True):
        try:
            schedule = synthesize(topology, kind, name)
        except (NotApplicableError, CCWeaveError):
            continue
        seconds = simulate(schedule, topology, size).time_s
        if best is None or seconds < best[2]:
            best = (name, schedule, seconds)
    return best


@register("taccl", KINDS,
          "TACCL: a communication sketch, a routing MILP, greedy ordering and a contiguity "
          "MILP (HiGHS); reduce-scatter by reversal, allreduce = RS + AG; options sketch, "
          "size, time_limit", classic=False, slow=True, sized=True)
def build_taccl(topology: Topology, kind: Kind, *, root: int = 0, chunks: int | None = None,
                **options: object) -> Schedule:
    """Synthesize with TACCL's stages; see the module docstring and :class:`TacclOptions`.

    With ``fallback`` (default on) the schedule is simulated at ``size`` beside the
    classic strategies, and the fastest is returned; its metadata names both.
    """
    from ccweave.simulate import simulate

    if kind not in KINDS:
        built = ", ".join(sorted(k.value for k in KINDS))
        raise NotApplicableError(f"strategy 'taccl' builds {built}, not {kind.value}")
    opts = _read_profile(TacclOptions.parse(options))
    schedule = synthesize_taccl(topology, kind, chunks, opts)
    if not opts.fallback:
        return schedule
    topology = profiled(topology, opts)  # the costs the schedule was made for
    ours = simulate(schedule, topology, opts.size).time_s
    best = _best_classic(topology, kind, opts.size)
    facts = {"taccl_time_us": ours * 1e6, "taccl_schedule": schedule.name}
    if best is None or best[2] >= ours:
        if opts.progress:
            opts.progress(Progress("select", f"the taccl schedule is the fastest at "
                                             f"{opts.size} bytes ({ours * 1e6:.1f} us)"))
        return schedule.with_name(schedule.name, **facts,
                                  **({} if best is None else {"best_classic": best[0],
                                                              "best_classic_us": best[2] * 1e6}))
    name, classic, seconds = best
    message = (f"classic {name} simulates faster at {opts.size} bytes ({seconds * 1e6:.1f} us "
               f"vs taccl's {ours * 1e6:.1f} us); returning it (option fallback=false keeps "
               "the taccl schedule)")
    if opts.progress:
        opts.progress(Progress("select", message))
    return classic.with_name(f"taccl->{classic.name}", **schedule.metadata, **facts,
                             fallback=message, best_classic=name,
                             best_classic_us=seconds * 1e6)
