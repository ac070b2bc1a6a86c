"""Routes that schedule well: a local search over the tree selection's options, scored by
the ordering stage.

The routing stages bound the makespan by link loads and by each chunk's path on an idle
machine, each on its own (TACCL's relaxation). Routes that meet that bound may still
order badly: two chunks of a GPU pair share their NIC, one crosses second, and a star
from its receiver then takes fifteen switch hops after it landed, while a tree that
shares the fan-out with a helper would not. The relaxation cannot tell the two apart;
the list scheduling of stage 2 can. So, starting from the selection's answer, each chunk
orbit tries the other trees and relays it was offered, one change at a time, and a change
stays when stage 2 orders the routes faster; until no change helps or the time is up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

State = TypeVar("State", bound=Hashable)
Score = tuple[float, float]
"""(makespan, tie-break): the tie-break (the mean time chunks land) lets the search cross
plateaus where one change alone cannot shorten the makespan (two chunks of a pair, either
of which may cross the NIC last, need better trees both)."""

MAX_SCORED = 200
"""Most routings one search scores: small problems stop here, before any time limit, so
the answer does not depend on how loaded the machine is."""
GAIN = 1e-9
"""A change must shorten the scored makespan, or keep it and shorten the tie-break, by
this fraction to stay."""


def better(a: Score, b: Score) -> bool:
    """Whether score ``a`` beats ``b`` by more than :data:`GAIN`."""
    if a[0] < b[0] * (1 - GAIN):
        return True
    return a[0] <= b[0] * (1 + GAIN) and a[1] < b[1] * (1 - GAIN)


@dataclass(frozen=True)
class Searched:
    """The local search's answer: the state kept, its score, the first state's score, and
    how many states were scored in how long."""

    state: object
    score: Score
    start_score: Score
    scored: int
    seconds: float
    finished: bool
    """Whether no change helped any more (else the time ran out)."""

    def note(self, unit: float = 1e6, label: str = "us") -> str:
        how = "no single change helps" if self.finished else \
            "stopped at its time or count limit"
        return (f"route search: {self.start_score[0] * unit:.4g} -> "
                f"{self.score[0] * unit:.4g} "
                f"{label} ordered, {self.scored} routings scored in {self.seconds:.1f} s, "
                f"{how}")


def hill_climb(start: State, neighbours: Callable[[State], Sequence[State]],
               score: Callable[[State], Score], seconds: float,
               max_scored: int = MAX_SCORED) -> Searched:
    """First-improvement hill climbing from ``start``: the first neighbour that scores
    lower becomes the current state, until none does, ``seconds`` have passed or
    ``max_scored`` states were scored."""
    began = time.perf_counter()
    seen: dict[State, Score] = {start: score(start)}
    current, best = start, seen[start]

    def answer(finished: bool) -> Searched:
        return Searched(current, best, seen[start], len(seen), time.perf_counter() - began,
                        finished)

    while True:
        improved = False
        for candidate in neighbours(current):
            if time.perf_counter() - began > seconds or len(seen) >= max_scored:
                return answer(False)
            if candidate in seen:
                continue
            value = seen[candidate] = score(candidate)
            if better(value, best):
                current, best, improved = candidate, value, True
                break
        if not improved:
            return answer(True)
