"""Never slower than stock: whether, at a message size, a group's own collective (the
incumbent: ``dist.all_reduce`` on gloo or NCCL) beats the schedule ccweave would run.

Two ways to know, per size class (a power of two of bytes, :func:`size_class`):

- **the calibrated model** (a topology that ``ccweave profile --calibrate`` or ``bench
  --save-model`` fitted, :func:`model_choices`): both are simulated on it; gloo's
  allreduce is a ring through the ranks in order, each rank's share cut in two segments
  (gloo's ``allreduce.cc``: send to rank + 1, at least twice as many segments as ranks);
- **a measured first call** (:func:`measured_choice`): both run on scratch buffers of the
  call's size, in alternated rounds, each round timed on every rank; the slowest rank's
  time counts (an all-reduce of the times with MAX), so every rank sees the same numbers
  and picks the same.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ccweave.plan import Plan
from ccweave.schedule import Schedule
from ccweave.topology.model import Topology

ROUNDS = 3
"""Timed rounds of each candidate in a measured choice (after one untimed run of each)."""
GLOO_SEGMENTS_PER_RANK = 2
"""Gloo's ring allreduce cuts each rank's share into at least two segments (one in
flight while the other is reduced)."""


def size_class(nbytes: int) -> int:
    """The power-of-two class of a size: ``k`` for ``2**(k-1) <= nbytes < 2**k``."""
    return int(nbytes).bit_length()


def class_sizes(classes: Sequence[int]) -> list[int]:
    """A representative size of each class (the geometric middle of its range)."""
    return [max(1, round(2 ** (k - 0.5))) for k in classes]


@dataclass(frozen=True)
class Choice:
    """What runs at one size class: the incumbent or the plan's schedule, and why."""

    incumbent: bool
    ccweave_s: float
    incumbent_s: float
    how: str
    """``model`` or ``measured``."""

    def describe(self) -> str:
        winner = "the group's own all_reduce" if self.incumbent else "ccweave's schedule"
        return (f"{winner} ({self.how}: ccweave {self.ccweave_s * 1e3:.3f} ms, incumbent "
                f"{self.incumbent_s * 1e3:.3f} ms)")


def gloo_allreduce(num_ranks: int) -> Schedule:
    """The schedule gloo's allreduce runs: a ring through the ranks in order (rank r
    sends to r + 1), reduce-scatter then allgather, two segments a rank."""
    from ccweave.synth.registry import synthesize
    from ccweave.topology.io import load

    return synthesize(load(f"switch:{num_ranks}"), "allreduce", "ring",
                      chunks=GLOO_SEGMENTS_PER_RANK, channels=1)


def is_calibrated(topology: Topology) -> bool:
    """Whether ``topology`` carries a fitted cost model (what ``ccweave profile
    --calibrate`` and ``bench --save-model`` write), not only its links' figures."""
    return not topology.cost.is_empty


def model_choices(plan: Plan, topology: Topology, classes: Sequence[int]
                  ) -> dict[int, Choice]:
    """Per size class, the plan's schedule against gloo's allreduce, both simulated on
    ``topology`` (a calibrated machine of the plan's size)."""
    from ccweave.simulate import simulate

    incumbent = gloo_allreduce(topology.num_ranks)
    found = {}
    for klass, size in zip(classes, class_sizes(classes)):
        ours = simulate(plan.schedule_for(size), topology, size).time_s
        theirs = simulate(incumbent, topology, size).time_s
        found[klass] = Choice(theirs < ours, ours, theirs, "model")
    return found


def measured_choice(run_ccweave: Callable[[], None], run_incumbent: Callable[[], None],
                    barrier: Callable[[], None],
                    slowest: Callable[[list[float]], list[float]],
                    rounds: int = ROUNDS) -> Choice:
    """Time both candidates (every rank calls this at the same point, with its own
    runners): one untimed run of each, then ``rounds`` rounds, the order reversed every
    other round, each run started together (``barrier``). ``slowest(times)`` gives the
    element-wise maximum over the ranks, so every rank compares the same medians."""
    run_ccweave()
    run_incumbent()
    mine = [[], []]
    for number in range(rounds):
        order = (0, 1) if number % 2 == 0 else (1, 0)
        for which in order:
            barrier()
            start = time.perf_counter()
            (run_ccweave, run_incumbent)[which]()
            mine[which].append(time.perf_counter() - start)
    everyone = slowest(mine[0] + mine[1])
    ours = statistics.median(everyone[:rounds])
    theirs = statistics.median(everyone[rounds:])
    return Choice(theirs < ours, ours, theirs, "measured")
