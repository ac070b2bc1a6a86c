"""Per-transfer routes: a transfer may take another route than its pair's cheapest one.

The IR routes every transfer between a rank pair the same way (``Topology.route``), so a
host-staged stripe ``0 -> cpu0 -> 1`` beside the direct NVLink ``0 -> 1`` cannot be told
apart from it. Until :class:`~ccweave.schedule.Transfer` carries its route, a schedule
names the exception in ``metadata["via"]``: transfer index (as a string, for JSON) ->
the fabric nodes the route passes, in order (``[]``: the direct link). :func:`simulate`
honours them (the core simulator would put them on the cheapest route); :func:`check`
proves them routable.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from ccweave import simulate as core
from ccweave.errors import TopologyError
from ccweave.schedule import Schedule
from ccweave.topology.model import Topology

VIA = "via"
"""The metadata key: ``{"<transfer index>": ["cpu0", ...]}``."""

Via = tuple[str, ...]


def vias(schedule: Schedule) -> dict[int, Via]:
    """Transfer index -> fabric nodes its route passes, for the transfers that say so."""
    table = schedule.metadata.get(VIA) or {}
    return {int(index): tuple(nodes) for index, nodes in dict(table).items()}


def with_vias(schedule: Schedule, table: Mapping[int, Via]) -> Schedule:
    """``schedule`` with ``table`` as its per-transfer routes (replacing any before)."""
    shown = {str(index): list(via) for index, via in sorted(table.items()) if via is not None}
    metadata = {key: value for key, value in schedule.metadata.items() if key != VIA}
    if shown:
        metadata[VIA] = shown
    return replace(schedule, metadata=metadata)


def route_links(topology: Topology, src: int, dst: int,
                via: Via | None = None) -> tuple[int, ...]:
    """Link indices of the route ``src -> via... -> dst`` (``()``: the direct link); the
    cheapest route when ``via`` is ``None``. Raises ``TopologyError`` naming a missing link
    or a rank inside ``via``."""
    if via is None:
        return topology.route(src, dst) if src != dst else ()
    nodes = (src, *via, dst)
    links = []
    for a, b in itertools.pairwise(nodes):
        if b in via and topology.is_rank(b):
            raise TopologyError(f"route {_show(nodes)}: {b} is a rank; routes pass fabric "
                                "nodes only, relay through ranks with explicit transfers")
        index = topology.link_id.get((a, b))
        if index is None:
            raise TopologyError(f"route {_show(nodes)}: topology {topology.name!r} has no "
                                f"link {a} -> {b}")
        links.append(index)
    return tuple(links)


def _show(nodes: tuple) -> str:
    return " -> ".join(map(str, nodes))


def check(schedule: Schedule, topology: Topology) -> None:
    """Raise ``TopologyError`` unless every named route is a chain of links through fabric
    nodes between its transfer's ranks."""
    for index, via in vias(schedule).items():
        if not 0 <= index < len(schedule.transfers):
            raise TopologyError(f"metadata 'via' names transfer {index}, which does not exist")
        t = schedule.transfers[index]
        if t.src == t.dst:
            raise TopologyError(f"transfer {index} is local; it cannot take route {via}")
        if any(not isinstance(node, str) or node not in topology.fabric for node in via):
            raise TopologyError(f"transfer {index}: route {via} passes a node that is not "
                                f"fabric of {topology.name!r}")
        route_links(topology, t.src, t.dst, via)


class _RoutedPlan(core._Plan):
    """The core simulator's plan with each transfer on its own route where it names one."""

    def __init__(self, schedule: Schedule, topology: Topology, size_bytes: float) -> None:
        self._via = vias(schedule)
        super().__init__(schedule, topology, size_bytes)

    def _routes(self, src: np.ndarray, dst: np.ndarray) -> None:
        keys: dict[tuple[int, int, Via | None], int] = {}
        pairs, pair_of = [], []
        for index, (a, b) in enumerate(zip(src.tolist(), dst.tolist())):
            key = (a, b, self._via.get(index))
            if key not in keys:
                keys[key] = len(pairs)
                pairs.append(self._routed_pair(index, *key))
            pair_of.append(keys[key])
        self.pairs = pairs
        self.pair_of = np.array(pair_of, dtype=np.int64)
        self.route = [pairs[p][0] for p in pair_of]
        self.alpha = [pairs[p][1] for p in pair_of]
        self.bottleneck = [pairs[p][2] for p in pair_of]

    def _routed_pair(self, index: int, src: int, dst: int, via: Via | None):
        if via is None:
            return self._pair(index, src, dst)
        links = route_links(self.topology, src, dst, via)
        alpha = float(sum(self.topology.links[i].alpha for i in links))
        return links, alpha, float(min(self.capacity[i] for i in links))


def simulate(schedule: Schedule, topology: Topology, size_bytes: float) -> core.SimResult:
    """:func:`ccweave.simulate.simulate`, with every transfer on the route it names."""
    if not vias(schedule):
        return core.simulate(schedule, topology, size_bytes)
    if not (math.isfinite(size_bytes) and size_bytes >= 0):
        raise core.InputError(f"simulate: size_bytes must be a finite number >= 0, "
                              f"got {size_bytes!r}")
    with core._gc_paused():
        plan = _RoutedPlan(schedule, topology, float(size_bytes))
        ready, start, finish, last_dep, busy = core._run(plan)
    num_links = len(topology.links)
    time_s = max(finish, default=0.0)
    link_bytes = plan.link_bytes()
    capacity = topology.bandwidths * time_s
    utilization = np.divide(link_bytes, capacity, out=np.zeros(num_links), where=capacity > 0)
    return core.SimResult(schedule, topology, float(size_bytes), time_s, np.array(ready),
                          np.array(start), np.array(finish), np.array(busy[:num_links]),
                          link_bytes, utilization,
                          core._critical_path(plan, ready, finish, last_dep))
