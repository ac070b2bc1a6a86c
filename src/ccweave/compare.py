"""Compare strategies on one machine: synthesize, verify, simulate each over sizes, beside
the lower bound — the table ``ccweave compare`` prints.

Each schedule is built and proven once and simulated at every size; a strategy that takes
the size as an input of its synthesis (``sized``: taccl) is built and proven once per size.
The best strategy per size is marked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from ccweave.bounds import Bound, lower_bound
from ccweave.collectives import Kind
from ccweave.errors import CCWeaveError, NotApplicableError, SolverError
from ccweave.schedule import Schedule
from ccweave.simulate import simulate
from ccweave.synth.registry import get_strategy, strategies_for, synthesize
from ccweave.topology.model import Topology
from ccweave.units import GB_PER_S, format_size
from ccweave.verify import verify


@dataclass(frozen=True)
class Result:
    """One strategy at one size, in nccl-tests' terms plus the bound."""

    strategy: str
    schedule: str
    size_bytes: int
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    bound_s: float
    ratio_to_bound: float
    best: bool = False
    rs_ag_s: float | None = None
    """Allreduce: the RS + AG reference (reduce-scatter bound + allgather bound), not a
    bound; ``None`` for the other collectives."""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Skipped:
    """A strategy that could not take part, and why."""

    strategy: str
    reason: str


@dataclass(frozen=True)
class Comparison:
    topology: str
    kind: Kind
    results: tuple[Result, ...]
    skipped: tuple[Skipped, ...]
    bounds: tuple[Bound, ...]
    schedules: Mapping[tuple[str, int], Schedule] = field(default_factory=dict, repr=False,
                                                          compare=False)
    """The proven schedule behind each result, by (strategy, size_bytes); strategies
    that are not ``sized`` share one schedule over all sizes."""

    def best(self, size_bytes: int) -> Result:
        return min((r for r in self.results if r.size_bytes == size_bytes),
                   key=lambda r: r.time_s)

    def schedule(self, result: Result) -> Schedule:
        """The schedule ``result`` was simulated with."""
        return self.schedules[result.strategy, result.size_bytes]


def default_strategies(kind: Kind) -> list[str]:
    """Every registered strategy for ``kind`` that ``auto`` tries: all but the slow
    solvers that do not ask to be (taccl), so the best marked per size is auto's pick."""
    return [name for name in strategies_for(kind) if get_strategy(name).auto]


def build_verified(topology: Topology, kind: Kind, strategy: str, root: int = 0,
                   chunks: int | None = None, **options: object) -> Schedule:
    """Synthesize and prove a schedule; raises if the strategy emits a wrong one."""
    schedule = synthesize(topology, kind, strategy, root=root, chunks=chunks, **options)
    verify(schedule, topology)
    return schedule


def compare(topology: Topology, kind: Kind | str, sizes: Sequence[int],
            strategies: Sequence[str] | None = None, root: int = 0,
            chunks: int | None = None,
            progress: Callable[[str], None] | None = None) -> Comparison:
    """Simulate every strategy in ``strategies`` (default: :func:`default_strategies`) at
    every size.

    Strategies that do not apply to this topology, or whose solver found nothing, are
    listed in ``skipped`` with the reason.
    """
    kind = Kind.parse(kind)
    names = list(strategies) if strategies else default_strategies(kind)
    for name in names:
        get_strategy(name)  # unknown names fail before any work
    bounds = tuple(lower_bound(topology, kind, size, root=root) for size in sizes)
    rows: list[Result] = []
    skipped: list[Skipped] = []
    built: dict[tuple[str, int], Schedule] = {}
    for name in names:
        try:
            schedules = _schedules(topology, kind, name, sizes, root, chunks, progress)
        except (NotApplicableError, SolverError) as error:  # the others still compare
            skipped.append(Skipped(name, str(error)))
            continue
        for size, bound in zip(sizes, bounds, strict=True):
            label = strategy_label(name, schedules[size])
            built[label, size] = schedules[size]
            rows.append(_result(label, schedules[size], topology, size, bound))
    if not rows:
        reasons = "; ".join(f"{s.strategy}: {s.reason}" for s in skipped)
        raise CCWeaveError(f"no strategy builds {kind.value} on {topology.name} ({reasons})")
    return Comparison(topology.name, kind, tuple(_mark_best(rows)), tuple(skipped), bounds,
                      built)


def _schedules(topology: Topology, kind: Kind, name: str, sizes: Sequence[int], root: int,
               chunks: int | None, progress: Callable[[str], None] | None
               ) -> dict[int, Schedule]:
    """The proven schedule for each size: one per size for a ``sized`` strategy, else one
    for all."""

    def build(**sized: int) -> Schedule:
        if progress:
            at = f" for {format_size(sized['size'])}" if sized else ""
            progress(f"{name}: synthesize{at} and verify")
        return build_verified(topology, kind, name, root=root, chunks=chunks, **sized)

    if get_strategy(name).sized:
        return {size: build(size=size) for size in sizes}
    return dict.fromkeys(sizes, build())


def strategy_label(name: str, schedule: Schedule) -> str:
    """``name``, or ``name->other`` when the strategy fell back to another's schedule (its
    metadata names it: ``best_classic`` beside a ``fallback`` note)."""
    if schedule.metadata.get("fallback") and schedule.metadata.get("best_classic"):
        return f"{name}->{schedule.metadata['best_classic']}"
    return name


def _result(name: str, schedule: Schedule, topology: Topology, size: int,
            bound: Bound) -> Result:
    sim = simulate(schedule, topology, size)
    algbw = size / sim.time_s / GB_PER_S
    return Result(name, schedule.name, size, sim.time_s, algbw,
                  algbw * schedule.collective.busbw_factor, bound.time_s,
                  bound.ratio(sim.time_s), rs_ag_s=bound.rs_ag_s)


def _mark_best(rows: list[Result]) -> list[Result]:
    best = {}
    for row in rows:
        if row.size_bytes not in best or row.time_s < best[row.size_bytes].time_s:
            best[row.size_bytes] = row
    return [Result(**{**asdict(r), "best": r is best[r.size_bytes]}) for r in rows]
