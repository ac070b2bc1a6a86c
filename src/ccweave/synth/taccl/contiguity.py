"""Stage 3, contiguity and send times: a MILP deciding which chunks travel together on
high-alpha links, and when every send starts.

The order of sends on each logical edge and physical link comes from stage 2. Sends
that follow each other on a high-alpha edge (one that leaves the node, or any edge on
a one-node machine, whose latency is large next to one chunk's streaming time) may be
*merged*: one transfer of
several chunks pays the latency once, but nothing in it arrives before all of it. As in
TACCL, a merged transfer holds at most ``window`` consecutive sends (TACCL's window of 6).
The model, per send ``i``: start ``t``, end of streaming ``e``, arrival ``a`` (the end
of its group); a chunk leaves a rank only after it arrived there; an edge carries one
group at a time (a connection is FIFO); a physical link streams the sends stage 2
ordered on it one after another; the makespan is the last arrival. Without merges the
stage-2 times are a solution, so they warm-start the solver.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ccweave.errors import SolverError
from ccweave.synth.taccl.logical import LogicalTopology
from ccweave.synth.taccl.ordering import Ordering
from ccweave.synth.taccl.progress import Progress
from ccweave.synth.taccl.solver import DEFAULT_SETTINGS, Model, SolverSettings

US_PER_S = 1e6
MERGE_ALPHA_RATIO = 0.05
"""An edge is high-alpha (merges allowed) when its latency is at least this fraction of
one chunk's streaming time on it."""
MAX_MERGE_BINARIES = 2000
"""At most this many merge decisions per solve; the highest-alpha edges get them."""
_SLACK = 1e-6
"""Relative room above the stage-2 makespan, so its times stay feasible after rounding."""
MAX_SENDS = 5000
"""Largest number of sends the MILP is built for; beyond it (tens of thousands of
continuous variables) the batching heuristic decides the merges."""
WINDOW = 6
"""Most sends one merged transfer may hold (TACCL's ``max_contig``)."""
EARLY_ARRIVAL_WEIGHT = 1e-3
"""Weight of the mean arrival time beside the makespan: among equal makespans, earlier."""


@dataclass(frozen=True)
class Contiguity:
    """Stage 3's answer: sends grouped into transfers, with their start times.

    ``groups`` lists, per transfer, the sends it carries (consecutive on one edge);
    ``start_s`` the model's start time of each group; ``makespan_s`` the model's
    makespan; ``status``, ``gap``, ``seconds`` and ``note`` come from the solver
    (``skipped`` when no edge is high-alpha: then the stage-2 times stand).
    """

    groups: tuple[tuple[int, ...], ...]
    start_s: tuple[float, ...]
    makespan_s: float
    status: str
    gap: float
    seconds: float
    merges: int
    note: str


def singletons(ordering: Ordering, note: str = "skipped") -> Contiguity:
    """Every send its own transfer, at its stage-2 time."""
    return Contiguity(tuple((i,) for i in range(len(ordering.sends))),
                      tuple(float(t) for t in ordering.start), ordering.makespan_s,
                      "skipped", 0.0, 0.0, 0, note)


def high_alpha_edges(logical: LogicalTopology, chunk_bytes: float,
                     ratio: float = MERGE_ALPHA_RATIO) -> set[int]:
    """Edges whose latency is at least ``ratio`` of one chunk's streaming time: among the
    internode edges when there are any (TACCL's high-alpha links: NICs), else among all."""
    internode = any(e.internode for e in logical.edges)
    return {i for i, e in enumerate(logical.edges)
            if (e.internode or not internode)
            and e.alpha > 0 and e.alpha >= ratio * chunk_bytes / e.bandwidth}


def contiguity(logical: LogicalTopology, ordering: Ordering, chunk_bytes: float, *,
               alpha_ratio: float = MERGE_ALPHA_RATIO,
               max_merges: int = MAX_MERGE_BINARIES,
               max_sends: int = MAX_SENDS, window: int = WINDOW,
               settings: SolverSettings = DEFAULT_SETTINGS,
               progress: Callable[[Progress], None] | None = None) -> Contiguity:
    """Decide merges and send times; see the module docstring."""
    eligible = high_alpha_edges(logical, chunk_bytes, alpha_ratio)
    candidates = [(logical.edges[e].alpha * logical.edges[e].bandwidth / chunk_bytes, e)
                  for e in eligible if len(ordering.edge_order.get(e, ())) > 1]
    if not candidates:
        return singletons(ordering, "no high-alpha edge carries two sends: stage-2 times")
    candidates.sort(reverse=True)
    mergeable: set[int] = set()
    budget = max_merges
    for _, e in candidates:
        need = len(ordering.edge_order[e]) - 1
        if need <= budget:
            mergeable.add(e)
            budget -= need
    if len(ordering.sends) > max_sends:
        return _grouped(ordering, batches(ordering, mergeable, window),
                        f"{len(ordering.sends)} sends are more than the MILP takes "
                        f"({max_sends}): merges by the batching heuristic", "heuristic")
    model, columns, warm = _build(logical, ordering, chunk_bytes, mergeable, window)
    warm = _best_warm_start(model, columns, warm, ordering, settings, window)
    if progress:
        progress(Progress("contiguity", f"MILP with {model.num_vars} variables "
                                        f"({model.num_integers} merge decisions on "
                                        f"{len(mergeable)} high-alpha edges), "
                                        f"{model.num_rows} rows"))
    try:
        result = model.solve(settings, warm, progress, "contiguity")
    except SolverError as error:
        raise SolverError(f"taccl contiguity: {error}") from None
    start, _, _, merge = columns
    values = result.values
    groups: list[list[int]] = []
    group_start: list[float] = []
    merges = 0
    for _, sends in sorted(ordering.edge_order.items()):
        for k, i in enumerate(sends):
            if k and merge.get(i, -1) >= 0 and values[merge[i]] > 0.5:
                groups[-1].append(i)
                merges += 1
            else:
                groups.append([i])
                group_start.append(float(values[start[i]]) / US_PER_S)
    order = sorted(range(len(groups)), key=lambda g: (group_start[g], groups[g][0]))
    makespan = max(float(values[a]) for a in columns[2]) / US_PER_S
    return Contiguity(tuple(tuple(groups[g]) for g in order),
                      tuple(group_start[g] for g in order), makespan,
                      result.status, result.gap, result.seconds, merges, result.describe())


def batched(logical: LogicalTopology, ordering: Ordering, chunk_bytes: float, *,
            alpha_ratio: float = MERGE_ALPHA_RATIO, window: int = WINDOW) -> Contiguity:
    """Merges by the batching heuristic alone (no solver): a quick stage 3 for comparing
    orderings."""
    eligible = high_alpha_edges(logical, chunk_bytes, alpha_ratio)
    mergeable = {e for e in eligible if len(ordering.edge_order.get(e, ())) > 1}
    if not mergeable:
        return singletons(ordering, "no high-alpha edge carries two sends: stage-2 times")
    return _grouped(ordering, batches(ordering, mergeable, window),
                    "merges by the batching heuristic", "heuristic")


def batches(ordering: Ordering, mergeable: set[int], window: int = WINDOW) -> set[int]:
    """The batching heuristic: when a high-alpha edge frees up, it sends every chunk that
    has arrived (by stage 2's times) as one transfer, at most ``window`` of them. Returns
    the sends that join the transfer of the send before them."""
    joined: set[int] = set()
    for edge, sequence in ordering.edge_order.items():
        if edge not in mergeable:
            continue
        group_start = None
        size = 0
        for k in sequence:
            ready = 0.0 if ordering.sends[k].parent < 0 else \
                ordering.finish[ordering.sends[k].parent]
            if group_start is not None and ready <= group_start + 1e-15 and size < window:
                joined.add(k)
                size += 1
            else:
                group_start = ordering.start[k]
                size = 1
    return joined


def _grouped(ordering: Ordering, joined: set[int], note: str, status: str) -> Contiguity:
    """Groups of consecutive sends per edge (``joined`` sends extend the one before),
    each at the time its last chunk is ready by stage 2."""
    groups: list[list[int]] = []
    for _, sequence in sorted(ordering.edge_order.items()):
        for k, i in enumerate(sequence):
            if k and i in joined:
                groups[-1].append(i)
            else:
                groups.append([i])

    def ready(i: int) -> float:
        parent = ordering.sends[i].parent
        return 0.0 if parent < 0 else float(ordering.finish[parent])

    start = [max(float(ordering.start[g[0]]), *(ready(i) for i in g)) for g in groups]
    order = sorted(range(len(groups)), key=lambda g: (start[g], groups[g][0]))
    return Contiguity(tuple(tuple(groups[g]) for g in order), tuple(start[g] for g in order),
                      ordering.makespan_s, status, 0.0, 0.0,
                      sum(len(g) - 1 for g in groups), note)


def _best_warm_start(model: Model, columns, warm: np.ndarray, ordering: Ordering,
                     settings: SolverSettings, window: int) -> np.ndarray:
    """The better of stage 2's times (no merges) and the batching heuristic, the latter
    timed exactly by the model with its merges fixed (an LP)."""
    merge = columns[3]
    joined = batches(ordering, {ordering.sends[k].edge for k in merge}, window)
    decisions = {column: float(k in joined) for k, column in merge.items()}
    if not joined:
        return warm
    try:
        timed = model.fixed(decisions).solve(settings)
    except SolverError:
        return warm
    return timed.values if timed.objective < model.cost_of(warm) else warm


def _build(logical: LogicalTopology, ordering: Ordering, chunk_bytes: float,
           mergeable: set[int], window: int):
    sends = ordering.sends
    count = len(sends)
    edges = logical.edges
    topology = logical.topology
    horizon = ordering.makespan_s * US_PER_S * (1 + _SLACK) + _SLACK
    model = Model("taccl contiguity")
    start = list(model.add_vars(count, upper=horizon))
    end = list(model.add_vars(count, upper=horizon))
    arrival = list(model.add_vars(count, upper=horizon, cost=EARLY_ARRIVAL_WEIGHT / count))
    makespan = model.add_vars(1, upper=horizon, cost=1.0)[0]
    alpha = [edges[s.edge].alpha * US_PER_S for s in sends]
    beta = [chunk_bytes / edges[s.edge].bandwidth * US_PER_S for s in sends]
    merge: dict[int, int] = {}
    for e in mergeable:
        for i in ordering.edge_order[e][1:]:
            merge[i] = model.add_vars(1, binary=True)[0]
    for i, s in enumerate(sends):
        if s.parent >= 0:
            model.add_row([start[i], arrival[s.parent]], [1.0, -1.0], 0.0)
        if i in merge:
            model.add_row([end[i], start[i], merge[i]], [1.0, -1.0, alpha[i]],
                          alpha[i] + beta[i])
        else:
            model.add_row([end[i], start[i]], [1.0, -1.0], alpha[i] + beta[i])
        model.add_row([arrival[i], end[i]], [1.0, -1.0], 0.0)
        model.add_row([makespan, arrival[i]], [1.0, -1.0], 0.0)
    big = horizon
    for sequence in ordering.edge_order.values():
        for prev, k in itertools.pairwise(sequence):
            if k in merge:
                m = merge[k]
                model.add_row([start[k], end[prev], m], [1.0, -1.0, big], 0.0)
                model.add_row([start[k], start[prev]], [1.0, -1.0], 0.0)
                model.add_row([start[k], start[prev], m], [1.0, -1.0, big], upper=big)
                model.add_row([end[k], end[prev], m], [1.0, -1.0, -big], beta[k] - big)
                model.add_row([arrival[prev], arrival[k], m], [1.0, -1.0, -big], -big)
            else:
                model.add_row([start[k], end[prev]], [1.0, -1.0], 0.0)
    for e in mergeable:  # a merged transfer holds at most ``window`` sends
        joins = [merge[i] for i in ordering.edge_order[e][1:]]
        for k in range(len(joins) - window + 1):
            model.add_row(joins[k:k + window], [1.0] * window, upper=window - 1)
    for link, sequence in ordering.link_order.items():
        stream = chunk_bytes / topology.links[link].bandwidth * US_PER_S
        for prev, k in itertools.pairwise(sequence):
            if sends[prev].edge != sends[k].edge:
                model.add_row([end[k], end[prev]], [1.0, -1.0], stream)
    warm = np.zeros(model.num_vars)
    for i in range(count):
        warm[start[i]] = ordering.start[i] * US_PER_S
        warm[end[i]] = warm[arrival[i]] = ordering.finish[i] * US_PER_S
    warm[makespan] = horizon
    return model, (start, end, arrival, merge), warm
