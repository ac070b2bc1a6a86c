"""Pick the best schedule per message size: the ``auto`` choice, as a :class:`Plan`.

Every candidate strategy is built, proven and simulated at a ladder of sizes; the fastest
wins each size, and range boundaries sit at the geometric midpoint between neighbouring
sizes where the winner changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ccweave.collectives import Kind
from ccweave.compare import compare
from ccweave.plan import Plan, PlanEntry
from ccweave.schedule import Schedule
from ccweave.topology.model import Topology

DEFAULT_SIZES = tuple(2**k for k in range(10, 31, 2))  # 1 KB .. 1 GB


def best_plan(topology: Topology, kind: Kind | str, sizes: Sequence[int] = DEFAULT_SIZES,
              strategies: Sequence[str] | None = None, root: int = 0,
              progress: Callable[[str], None] | None = None) -> Plan:
    """The plan that uses, at each size, the strategy the simulator finds fastest."""
    kind = Kind.parse(kind)
    sizes = sorted(set(sizes))
    result = compare(topology, kind, sizes, strategies, root=root, progress=progress)
    winners = [result.schedule(result.best(size)) for size in sizes]
    entries: list[tuple[int, Schedule]] = []  # (min_bytes, the proven schedule)
    for number, winner in enumerate(winners):
        if not entries or entries[-1][1] is not winner:
            start = 0 if number == 0 else int(math.sqrt(sizes[number - 1] * sizes[number]))
            entries.append((start, winner))
    bounds = [start for start, _ in entries[1:]] + [None]
    return Plan(tuple(PlanEntry(start, end, schedule)
                      for (start, schedule), end in zip(entries, bounds)),
                name=f"auto({topology.name}, {kind.value})")
