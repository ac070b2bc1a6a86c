"""The ``taccl`` strategy: sketch -> routing MILP -> greedy ordering -> contiguity MILP ->
Schedule, then a check in simulation against the classic strategies.

allgather and alltoall are synthesized directly; reduce-scatter is the reverse of an
allgather synthesized on the reversed topology; allreduce is that reduce-scatter
followed by the allgather. Every schedule is an ordinary ccweave Schedule: the verifier
proves it and the simulator times it like any other.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import CCWeaveError, InputError, NotApplicableError
from ccweave.schedule import Schedule, ScheduleBuilder
from ccweave.synth.layout import chunks_for
from ccweave.synth.registry import register, strategies_for, synthesize
from ccweave.synth.taccl import logical as logical_mod
from ccweave.synth.taccl import sketch as sketch_mod
from ccweave.synth.taccl.contiguity import (
    MAX_MERGE_BINARIES,
    MAX_SENDS,
    MERGE_ALPHA_RATIO,
    Contiguity,
    contiguity,
    singletons,
)
from ccweave.synth.taccl.defaults import default_sketch, default_sketches
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.lower import Lowered, lower
from ccweave.synth.taccl.milp import SolverSettings
from ccweave.synth.taccl.ordering import Ordering, order
from ccweave.synth.taccl.progress import Progress
from ccweave.synth.taccl.reduction import reduce_scatter_from
from ccweave.synth.taccl.routing import route
from ccweave.synth.taccl.sketch import Sketch
from ccweave.topology.model import Topology
from ccweave.units import parse_size

KINDS = frozenset({Kind.ALLGATHER, Kind.ALLTOALL, Kind.REDUCESCATTER, Kind.ALLREDUCE})

DEFAULT_SIZE = 64 * 2**20
"""The size a schedule is synthesized for when none is given (nccl-tests' ``size``)."""
DEFAULT_TIME_LIMIT_S = 120.0
"""Wall-clock budget of one synthesis when none is given."""
ROUTING_SHARE = 0.6
"""Part of the time limit the routing stage may use; contiguity gets the rest."""
MIN_STAGE_TIME_S = 0.5
"""No solver stage gets less than this, whatever is left of the limit."""
CHUNKUPS = {Kind.ALLGATHER: (2, 1, 4), Kind.ALLTOALL: (1, 2)}
"""Chunks per rank tried when neither a sketch nor ``chunks`` fixes them (allgather's
also serve reduce-scatter and allreduce): pipelining deeper pays at large sizes,
fewer transfers at small ones; the simulator decides."""
PORT_ORDERS = ("internode", "none")
"""Which sends through a rank's shared port wait for each other, tried in turn (see
:func:`~ccweave.synth.taccl.lower.shared_ports`): NIC sends one at a time pipeline a
relay's chunks; all at once overlap their latencies (alltoall)."""
REPLAY_ROUNDS = 3
"""Times queues are re-served in simulated arrival order (see ``_replayed``)."""
REPLAY_GAIN = 1e-3
"""A replay round must make the schedule this much faster to count."""
CONTIGUITY_TIME_LIMIT_S = 3.0
"""Default cap on the contiguity stage's solver time: its MILP closes its gap slowly,
and its warm start is already a good schedule."""


@dataclass(frozen=True)
class TacclOptions:
    """Options of the ``taccl`` strategy (``--option key=value`` on the command line).

    Parameters
    ----------
    sketch: a sketch file (or a :class:`Sketch`); ``None``: read one off the topology.
    size: bytes of the collective's size buffer to synthesize for (``64MB`` accepted).
    time_limit: wall-clock seconds for the whole synthesis. Each candidate gets a share
        and each solver stage a part of that; a stage at its limit returns its best
        solution so far with its MIP gap; candidates that would not finish are skipped.
    contiguity_time_limit: at most this many of them for each contiguity solve.
    mip_gap: relative gap at which a MILP counts as solved.
    max_paths, max_trees: candidates per (chunk, destination) and trees per root.
    contiguity: run stage 3 (merges on high-alpha links); off: stage-2 times stand.
    merge_alpha_ratio: edges whose alpha is at least this fraction of a chunk's
        streaming time are high-alpha.
    max_merges, contiguity_max_sends: caps on the contiguity MILP's merge decisions and
        sends; beyond the latter a batching heuristic merges instead.
    fallback: when a classic strategy simulates faster at ``size``, return it (the
        schedule's metadata says so).
    threads: solver threads.
    progress: a callback taking :class:`Progress` events.
    """

    sketch: str | Sketch | None = None
    size: int = DEFAULT_SIZE
    time_limit: float = DEFAULT_TIME_LIMIT_S
    contiguity_time_limit: float = CONTIGUITY_TIME_LIMIT_S
    mip_gap: float = 1e-3
    max_paths: int = 4
    max_trees: int = 3
    contiguity: bool = True
    merge_alpha_ratio: float = MERGE_ALPHA_RATIO
    max_merges: int = MAX_MERGE_BINARIES
    contiguity_max_sends: int = MAX_SENDS
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
        if "size" in values and isinstance(values["size"], str):
            values["size"] = parse_size(values["size"])
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

        positive("size", self.size)
        positive("time_limit", self.time_limit)
        positive("contiguity_time_limit", self.contiguity_time_limit)
        positive("mip_gap", self.mip_gap)
        positive("merge_alpha_ratio", self.merge_alpha_ratio)
        for name in ("max_paths", "max_trees", "max_merges", "contiguity_max_sends",
                     "threads"):
            positive(name, getattr(self, name), integer=True)
        for name in ("contiguity", "fallback"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"taccl option {name} must be true or false")


@dataclass(frozen=True)
class StageReport:
    """What one synthesis did: per stage, its status, gap, seconds and model makespan."""

    sketch: str
    chunks_per_rank: int
    routing: dict[str, object]
    ordering: dict[str, object]
    contiguity: dict[str, object]
    seconds: float

    def to_dict(self) -> dict[str, object]:
        return {"sketch": self.sketch, "chunks_per_rank": self.chunks_per_rank,
                "routing": self.routing, "ordering": self.ordering,
                "contiguity": self.contiguity, "seconds": round(self.seconds, 3)}


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
    """The sketch to use: a file, a :class:`Sketch`, or the topology's default."""
    if sketch is None:
        return default_sketch(topology, Kind.ALLTOALL if kind is Kind.ALLTOALL
                              else Kind.ALLGATHER)
    if isinstance(sketch, Sketch):
        return sketch
    return sketch_mod.load(Path(str(sketch)))


def synthesize_direct(topology: Topology, kind: Kind, sketch: Sketch, chunks: int,
                      options: TacclOptions, clock: _Clock) -> tuple[Schedule, StageReport]:
    """Allgather or alltoall through the three stages; see the module docstring."""
    progress = options.progress
    started = time.perf_counter()
    logical = logical_mod.apply(topology, sketch)
    collective = Collective(kind, topology.num_ranks, chunks)
    demand = Demand(collective, logical.symmetry)
    chunk_bytes = collective.chunk_bytes(options.size)
    settings = SolverSettings(clock.stage(ROUTING_SHARE), options.mip_gap, options.threads)
    routing = route(logical, demand, chunk_bytes, max_paths=options.max_paths,
                    max_trees=options.max_trees, settings=settings, progress=progress)
    if progress:
        progress(Progress("routing", routing.note, routing.makespan_s * 1e6,
                          gap=routing.gap, elapsed_s=routing.seconds))
    ordering = order(logical, routing, chunk_bytes)
    if progress:
        progress(Progress("ordering", f"{len(ordering.sends)} sends ordered greedily, "
                                      f"estimated makespan {ordering.makespan_s * 1e6:.1f} us"))
    if options.contiguity:
        settings = replace(settings, time_limit_s=min(clock.stage(1.0),
                                                      options.contiguity_time_limit))
        groups = contiguity(logical, ordering, chunk_bytes,
                            alpha_ratio=options.merge_alpha_ratio,
                            max_merges=options.max_merges,
                            max_sends=options.contiguity_max_sends, settings=settings,
                            progress=progress)
    else:
        groups = singletons(ordering, "contiguity off: stage-2 times")
    if progress:
        progress(Progress("contiguity", f"{groups.merges} merges, model makespan "
                                        f"{groups.makespan_s * 1e6:.1f} us; {groups.note}"))
    report = StageReport(
        sketch.name, chunks,
        {"status": routing.status, "gap": routing.gap, "seconds": round(routing.seconds, 3),
         "makespan_us": routing.makespan_s * 1e6, "variables": routing.variables,
         "note": routing.note},
        {"sends": len(ordering.sends), "makespan_us": ordering.makespan_s * 1e6},
        {"status": groups.status, "gap": groups.gap, "seconds": round(groups.seconds, 3),
         "merges": groups.merges, "makespan_us": groups.makespan_s * 1e6,
         "note": groups.note},
        time.perf_counter() - started)
    name = f"taccl({kind.value}, sketch={sketch.name}, chunks={chunks})"
    metadata = {"strategy": "taccl", "topology": topology.name, "size": options.size,
                "taccl": report.to_dict(), **logical.describe()}
    best: tuple[float, Schedule] | None = None
    for port_order in PORT_ORDERS:
        schedule, seconds = _replayed(
            topology, options.size, ordering, groups,
            lambda priority, port_order=port_order: lower(
                demand, logical, ordering, groups, name, {**metadata, "port_order": port_order},
                port_order=port_order, priority=priority))
        if best is None or seconds < best[0] * (1 - REPLAY_GAIN):
            best = (seconds, schedule)
    assert best is not None
    return best[1], report


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
    from ccweave.simulate import simulate

    if topology.num_ranks == 1:
        return _alone(kind, chunks_for(chunks))
    tried = candidates(topology, kind, chunks, options)
    clock = _Clock(options.time_limit)
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
        schedule = _one(topology, kind, sketch, count, options, share)
        seconds = simulate(schedule, topology, options.size).time_s
        per_chunk = max(per_chunk, (time.perf_counter() - started) / count)
        results.append({"sketch": sketch.name, "chunks": count, "time_us": seconds * 1e6})
        if options.progress and len(tried) > 1:
            options.progress(Progress("select", f"candidate {number + 1}/{len(tried)} "
                                                f"({sketch.name}, {count} chunk(s) per rank): "
                                                f"{seconds * 1e6:.1f} us simulated"))
        if best is None or seconds < best[0]:
            best = (seconds, schedule)
    assert best is not None
    return best[1].with_name(best[1].name, candidates=results)


def _alone(kind: Kind, chunks: int) -> Schedule:
    """One rank: its input is its output, one local copy."""
    builder = ScheduleBuilder(Collective(kind, 1, chunks))
    builder.copy(0, 0, (Buffer.INPUT, 0), (Buffer.OUTPUT, 0), count=chunks)
    return builder.build(f"taccl({kind.value}, one rank, chunks={chunks})")


def _one(topology: Topology, kind: Kind, sketch: Sketch, chunks: int,
         options: TacclOptions, clock: _Clock) -> Schedule:
    """One sketch at one chunk count: the stages for allgather or alltoall, and the
    reduce-scatter and allreduce built from allgathers."""
    from ccweave import transforms

    if kind in (Kind.ALLGATHER, Kind.ALLTOALL):
        return synthesize_direct(topology, kind, sketch, chunks, options, clock)[0]
    if self_reverse(topology):
        allgather = synthesize_direct(topology, Kind.ALLGATHER, sketch, chunks, options,
                                      clock)[0]
        reduce_scatter = reduce_scatter_from(allgather, topology, options.size)
    else:
        half = _Clock(clock.left() / 2)
        reversed_ag = synthesize_direct(topology.reversed(), Kind.ALLGATHER, sketch, chunks,
                                        options, half)[0]
        reduce_scatter = reduce_scatter_from(reversed_ag, topology, options.size)
        allgather = synthesize_direct(topology, Kind.ALLGATHER, sketch, chunks, options,
                                      clock)[0]
    name = f"taccl({kind.value}, sketch={sketch.name}, chunks={chunks})"
    if kind is Kind.REDUCESCATTER:
        return reduce_scatter.with_name(name, built_from="reverse(allgather)")
    return transforms.concat(reduce_scatter, allgather).with_name(
        name, built_from="reverse(allgather) + allgather")


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
    opts = TacclOptions.parse(options)
    schedule = synthesize_taccl(topology, kind, chunks, opts)
    if not opts.fallback:
        return schedule
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
