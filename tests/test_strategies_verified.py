"""Every classic strategy's schedule, for every collective, on every zoo machine it applies
to, is proven by the verifier; and the proof is not vacuous: deleting any one transfer
or duplicating any one reduction of those schedules makes it fail."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.collectives import Kind
from ccweave.errors import NotApplicableError
from ccweave.schedule import Op, Schedule
from ccweave.synth import strategies, strategies_for, synthesize
from ccweave.topology import zoo
from ccweave.verify import check, verify

MACHINES = ["dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "mist", "cedar", "ndv2:2",
            "ring:8", "switch:6", "mesh:2x4", "torus:3x3", "hypercube:3", "fully-connected:5"]
CLASSIC = sorted(name for name, s in strategies().items() if s.classic)


@pytest.mark.parametrize("machine", MACHINES)
def test_every_classic_strategy_verifies_on_every_machine(machine):
    """(dgx2:2 is covered by each strategy's own tests; 32 ranks are slow for all at once.)"""
    topo = zoo.get(machine)
    covered = set()
    for kind in Kind.collectives():
        for name in strategies_for(kind, classic_only=True):
            try:
                sched = synthesize(topo, kind, name, root=topo.num_ranks - 1)
            except NotApplicableError:
                continue
            verify(sched, topo)
            covered.add(kind)
    assert covered == set(Kind.collectives())  # every collective has a strategy here


def _delete(schedule: Schedule, victim: int) -> Schedule:
    """The schedule without transfer ``victim``: later indices shift, deps on it vanish."""
    kept = []
    for index, t in enumerate(schedule.transfers):
        if index == victim:
            continue
        deps = tuple(d - (d > victim) for d in t.deps if d != victim)
        kept.append(replace(t, deps=deps))
    return replace(schedule, transfers=tuple(kept))


def _duplicate(schedule: Schedule, index: int) -> Schedule:
    t = schedule.transfers[index]
    return replace(schedule, transfers=(*schedule.transfers, replace(t, deps=(index,))))


_SCHEDULES: dict[tuple[str, str, str], Schedule] = {}


def _schedule(machine: str, kind: Kind, name: str) -> Schedule | None:
    key = (machine, kind.value, name)
    if key not in _SCHEDULES:
        try:
            _SCHEDULES[key] = synthesize(zoo.get(machine), kind, name, chunks=1)
        except NotApplicableError:
            _SCHEDULES[key] = None  # type: ignore[assignment]
    return _SCHEDULES[key]


@settings(max_examples=300, deadline=None)
@given(machine=st.sampled_from(["switch:4", "ring:5", "hypercube:2", "mist", "cedar"]),
       kind=st.sampled_from(Kind.collectives()), name=st.sampled_from(CLASSIC),
       pick=st.integers(0, 10**9))
def test_deleting_any_transfer_of_a_strategy_schedule_is_caught(machine, kind, name, pick):
    sched = _schedule(machine, kind, name)
    if sched is None:
        return
    victim = pick % len(sched.transfers)
    assert not check(_delete(sched, victim)).ok, f"{sched.name}: transfer {victim} redundant"


@settings(max_examples=200, deadline=None)
@given(machine=st.sampled_from(["switch:4", "ring:5", "hypercube:2", "cedar"]),
       kind=st.sampled_from([Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.REDUCE]),
       name=st.sampled_from(CLASSIC), pick=st.integers(0, 10**9))
def test_duplicating_any_reduction_of_a_strategy_schedule_is_caught(machine, kind, name, pick):
    sched = _schedule(machine, kind, name)
    if sched is None:
        return
    reductions = [i for i, t in enumerate(sched.transfers) if t.op is Op.REDUCE]
    assert reductions, sched.name
    assert not check(_duplicate(sched, reductions[pick % len(reductions)])).ok


def test_mutation_is_exhaustive_on_one_schedule_per_strategy():
    """Every single deletion of a few whole schedules, not just samples."""
    rng = random.Random(0)
    for name in CLASSIC:
        for kind in Kind.collectives():
            sched = _schedule("switch:4", kind, name)
            if sched is None or len(sched.transfers) > 80:
                continue
            for victim in rng.sample(range(len(sched.transfers)), min(20, len(sched.transfers))):
                assert not check(_delete(sched, victim)).ok, (sched.name, kind, victim)
