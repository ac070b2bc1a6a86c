"""What ``ccweave bench`` runs: each algorithm's schedule per size with the model's
prediction beside it, and the incumbents (gloo's and Open MPI's own collectives).

Every ccweave schedule is synthesized and proven here, before any process starts; a
schedule that two entries share (``auto`` picking ``ring`` at a size) is measured once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ccweave import schedule as schedule_io
from ccweave.collectives import Collective, Kind
from ccweave.compare import build_verified, default_strategies
from ccweave.errors import InputError, NotApplicableError, SolverError
from ccweave.runtime.batch import Case
from ccweave.runtime.native import NATIVE_KINDS, native_name
from ccweave.schedule import Schedule
from ccweave.simulate import simulate
from ccweave.synth.registry import get_strategy, strategies_for, synthesize
from ccweave.topology.model import Topology

AUTO = "auto"
BASELINES = ("gloo", "mpi")
TARGET_SECONDS = 0.5
"""Timed iterations per repetition are chosen so that one repetition lasts about this."""
MAX_ITERS = 20


@dataclass(frozen=True)
class Entry:
    """One algorithm of the comparison.

    ``schedules`` and ``predicted`` (seconds) by size for ccweave's; empty for an
    incumbent (``native``), which runs in a ``backend`` job of its own.
    """

    label: str
    backend: str
    native: bool = False
    schedules: dict[int, Schedule] = field(default_factory=dict)
    predicted: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    label: str
    reason: str


def plan_entries(topology: Topology, kind: Kind, sizes: Sequence[int],
                 strategies: Sequence[str] | None, baselines: Sequence[str], *,
                 root: int = 0, backend: str = "gloo", scale: float = 1.0,
                 options: dict[str, dict[str, object]] | None = None,
                 progress: Callable[[str], None] | None = None
                 ) -> tuple[list[Entry], list[Skipped]]:
    """Entries for ``strategies`` (default: every fast one, and ``auto``) and the
    incumbents of ``baselines`` (``gloo``, ``mpi``); ccweave's run over ``backend``.

    ``topology`` is what the jobs run on (the testbed's emulated machine, with its cost
    model when calibrated): schedules, ``auto``'s choice and predictions come from it;
    predictions are multiplied by ``scale`` into the emulated machine's time. ``options``
    gives a strategy its options (``{"multipath": {"kinds": "direct,relay"}}``)."""
    check_baselines(baselines, kind)
    names = strategy_names(strategies, kind)
    entries: list[Entry] = []
    skipped: list[Skipped] = []
    for name in names:
        if progress:
            progress(f"{name}: synthesize, verify, simulate")
        try:
            schedules = (_auto(topology, kind, sizes, root) if name == AUTO
                         else _schedules(topology, kind, name, sizes, root,
                                         (options or {}).get(name, {})))
        except (NotApplicableError, SolverError) as error:  # the others still run
            skipped.append(Skipped(name, str(error)))
            continue
        predicted = {size: simulate(schedules[size], topology, size).time_s * scale
                     for size in sizes}
        entries.append(Entry(name, backend, False, schedules, predicted))
    if not entries and not baselines:
        raise InputError(f"no strategy builds {kind.value} on {topology.name}: "
                         + "; ".join(f"{s.label}: {s.reason}" for s in skipped))
    entries += [Entry(native_name(base, kind), base, True) for base in baselines]
    return entries, skipped


def strategy_names(strategies: Sequence[str] | None, kind: Kind) -> list[str]:
    """The strategies a bench runs: ``strategies`` (each known and building ``kind``,
    ``auto`` among them or not), or every fast strategy for ``kind`` and ``auto``."""
    if strategies is None:
        return [*default_strategies(kind), AUTO]
    for name in strategies:
        if name != AUTO and kind not in get_strategy(name).collectives:
            raise InputError(f"--strategies: {name} does not build {kind.value}; strategies "
                             f"that do: {', '.join(strategies_for(kind))}")
    return list(strategies)


def check_baselines(baselines: Sequence[str], kind: Kind) -> None:
    """Refuse an unknown incumbent, or any for a collective neither backend has."""
    for base in baselines:
        if base not in BASELINES:
            raise InputError(f"--baselines {base!r}: choose from {', '.join(BASELINES)}")
    if baselines and kind not in NATIVE_KINDS:
        raise InputError(f"{kind.value} has no native collective in gloo or MPI to compare "
                         "with; pass --baselines ''")


def check_options(topology: Topology, kind: Kind, sizes: Sequence[int],
                  options: dict[str, dict[str, object]], *, root: int = 0) -> None:
    """Build each strategy given options once on ``topology`` (at the first size), so an
    option it does not take, or a value it refuses, is refused before any rank starts
    (the bench's own builds come after the calibration); a strategy that does not apply
    here is left to the bench, which says so."""
    for name, given in options.items():
        sized = {"size": sizes[0]} if get_strategy(name).sized else {}
        try:
            synthesize(topology, kind, name, root=root, **sized, **given)
        except (NotApplicableError, SolverError):
            continue
        except InputError as error:
            shown = " ".join(f"{name}:{key}={value}" for key, value in given.items())
            raise InputError(f"--option {shown}: {error}") from None


def _schedules(topology: Topology, kind: Kind, name: str, sizes: Sequence[int],
               root: int, options: dict[str, object]) -> dict[int, Schedule]:
    if get_strategy(name).sized:
        return {size: build_verified(topology, kind, name, root=root, size=size, **options)
                for size in sizes}
    return dict.fromkeys(sizes, build_verified(topology, kind, name, root=root, **options))


def _auto(topology: Topology, kind: Kind, sizes: Sequence[int],
          root: int) -> dict[int, Schedule]:
    from ccweave.select import best_plan

    plan = best_plan(topology, kind, sizes, root=root)
    return {size: plan.schedule_for(size) for size in sizes}


def batch_cases(entries: Sequence[Entry], sizes: Sequence[int], collective: Collective,
                backend: str, *, reps: int = 3, warmup: int = 1,
                scale: float = 1.0) -> list[Case]:
    """The cases one ``backend`` job runs: each distinct schedule at the sizes that use
    it, and the incumbent at every size; iterations per size from the prediction (or,
    for an incumbent, the slowest prediction at that size).

    The ``reps`` repetitions are rounds: every case once per round, every other round in
    reverse order, the first round after ``warmup`` untimed runs. A drift in the host's
    load then falls on every schedule alike instead of on whichever ran during it (the
    rows of one case are merged by :func:`median_row`)."""
    once = _cases_once(entries, sizes, collective, backend, warmup, scale)
    rounds = [once] + [[replace(case, warmup=0) for case in (once[::-1] if r % 2 else once)]
                       for r in range(1, max(1, reps))]
    return [case for round_ in rounds for case in round_]


def median_row(rows: Sequence[dict]) -> dict:
    """One case's rows from its rounds as one: the round of median out-of-place time
    (the lower middle of an even count), its wrong elements the most any round found,
    every round's time kept in ``round_times_us``."""
    def time_of(row: dict) -> float:
        return row["out_of_place"]["time_us"] or 0.0

    ordered = sorted(rows, key=time_of)
    middle = dict(ordered[(len(ordered) - 1) // 2])
    wrongs = [row["out_of_place"]["wrong"] for row in rows
              if row["out_of_place"]["wrong"] is not None]
    middle["out_of_place"] = {**middle["out_of_place"],
                              "wrong": max(wrongs) if wrongs else None}
    middle["round_times_us"] = [time_of(row) for row in rows]
    return middle


def _cases_once(entries: Sequence[Entry], sizes: Sequence[int], collective: Collective,
                backend: str, warmup: int, scale: float) -> list[Case]:
    cases: list[Case] = []
    seen: set[str] = set()
    slowest = {size: max((e.predicted[size] / scale for e in entries if not e.native),
                         default=0.0) for size in sizes}
    for entry in entries:
        if entry.backend != backend:
            continue
        for size in sizes:
            if entry.native:
                cases.append(Case(case_name(entry, size), None, (size,), modes=(False,),
                                  iters=iters_for(slowest[size]), warmup=warmup,
                                  native=collective))
                continue
            schedule = entry.schedules[size]
            key = schedule_key(schedule, size)
            if key in seen:
                continue
            seen.add(key)
            cases.append(Case(schedule_key(schedule, size), schedule, (size,),
                              modes=(False,), iters=iters_for(entry.predicted[size] / scale),
                              warmup=warmup))
    return cases


def iters_for(predicted_s: float) -> int:
    """Timed runs per repetition: about :data:`TARGET_SECONDS` of work, 1..MAX_ITERS."""
    if predicted_s <= 0:
        return MAX_ITERS
    return max(1, min(MAX_ITERS, round(TARGET_SECONDS / predicted_s)))


def case_name(entry: Entry, size: int) -> str:
    return f"{entry.label}@{size}"


def schedule_key(schedule: Schedule, size: int) -> str:
    """The case name of a ccweave schedule at a size: equal schedules (``auto``'s pick and
    the strategy it picked) share one measurement."""
    return f"{schedule.name or 'schedule'}#{_digest(schedule)}@{size}"


def _digest(schedule: Schedule) -> str:
    return hashlib.sha1(json.dumps(schedule_io.to_dict(schedule)).encode()).hexdigest()[:12]


def measured_key(entry: Entry, size: int) -> str:
    """The case whose result is ``entry``'s at ``size``."""
    return case_name(entry, size) if entry.native else schedule_key(entry.schedules[size], size)
