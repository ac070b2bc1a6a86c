"""Stage 1, fast routing: a MILP choosing each chunk's route among a few candidate trees
and paths. It is the ``trees`` routing option and the warm start of TACCL's routing MILP
(:mod:`ccweave.synth.taccl.routing_milp`).

One representative chunk per symmetry orbit is routed; the rest are its images.

- allgather (multicast): the chunk spreads through its own node along one of a few
  candidate trees, enters every other node exactly once over one relay the sketch
  allows (a sender that carries it, to a receiver), and spreads there along one of a
  few trees from that receiver. So every choice is a tree, and a node's NIC carries
  the chunk once.
- alltoall (unicast): one of a few candidate paths per (source, destination).

The makespan ``T`` is bounded below by each choice's idle-machine time (tree height,
path time), by every physical link's load: the bytes crossing it, summed over the
whole symmetry orbit, over its bandwidth (the bandwidth relaxation), and by every
logical edge's load counted with its latency per chunk (a connection carries its
chunks one after another, each paying ``alpha``: TACCL's ``alpha + beta`` per send).
Switch ports and shared NICs are physical links, so their sharing is in the same rows.
Ties are broken towards fast delivery (shallow trees, near relays), cheaper hops, and
by the sketch's hyperedge policy (``uc-max``/``uc-min``: more or fewer distinct peers
through a switch).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ccweave.errors import SolverError
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.logical import LogicalTopology
from ccweave.synth.taccl.progress import Progress
from ccweave.synth.taccl.routing_paths import PathFinder
from ccweave.synth.taccl.routing_result import Hop, Routing, tree_hops
from ccweave.synth.taccl.routing_search import MAX_SCORED, better, hill_climb
from ccweave.synth.taccl.sketch_model import Hyperedge
from ccweave.synth.taccl.solver import DEFAULT_SETTINGS, MilpResult, Model, SolverSettings

US_PER_S = 1e6
HOP_TIE_BREAK = 1e-3
"""Weight of the mean hop cost beside the makespan: among equal makespans, cheaper hops."""
LATENCY_TIE_BREAK = 0.05
"""Weight of the mean delivery time (entry plus spreading tree height, path time)
beside the makespan: among routes that load links alike, shallow trees and near relays."""
SEARCH_MAX_SENDS = 4000
"""Routings of more sends are not searched: stage 2 orders one in seconds (ndv2:10's
12,640 sends: about 10 s under load), so a search would score a handful."""
SEARCH_SENDS = 80_000
"""Sends the route search orders in all (both starts together): it scores at most this
many over the routing's sends routings (and :data:`~.routing_search.MAX_SCORED`), so where
it stops depends on the problem, not on how loaded the machine is (``search_s`` is only a
backstop); about 4 s on one core."""
UC_TIE_BREAK = 1e-3
"""Weight of the switch-connection count, relative to the warm start's makespan."""


def route_trees(logical: LogicalTopology, demand: Demand, chunk_bytes: float, *,
                max_paths: int = 4, max_trees: int = 3,
                settings: SolverSettings = DEFAULT_SETTINGS,
                progress: Callable[[Progress], None] | None = None,
                score: Callable[[tuple[tuple[Hop, ...], ...]], tuple[float, float]] | None
                = None,
                search_s: float = 0.0) -> list[Routing]:
    """Choose every chunk's route; see the module docstring for the model. With ``score``
    (hops -> the ordering stage's makespan and tie-break) the selection's answer is
    improved for ``search_s`` seconds by
    :func:`~ccweave.synth.taccl.routing_search.hill_climb`; when that changed the routes,
    the searched routing (method ``trees+search``) follows the selection's."""
    finder = PathFinder(logical, chunk_bytes, max_paths, max_trees)
    problem = _Problem(logical, demand, finder)
    model, warm = problem.build()
    if progress:
        progress(Progress("routing", f"MILP with {model.num_vars} variables "
                                     f"({model.num_integers} binary), {model.num_rows} rows, "
                                     f"{len(demand.orbits)} chunk orbits"))
    try:
        result = model.solve(settings, warm, progress, "routing")
    except SolverError as error:
        raise SolverError(f"taccl routing with sketch {logical.sketch.source}: {error}") \
            from None
    selection = problem.selection(result.values)
    routing = Routing(problem.hops_of(selection), problem.makespan(result), result.status,
                      result.gap, result.seconds, model.num_vars, result.describe(), "trees")
    if score is None or search_s <= 0:
        return [routing]
    sends = sum(len(hops) for hops in routing.hops)
    if sends > SEARCH_MAX_SENDS:  # one score would take seconds
        return [replace(routing, note=f"{routing.note}; route search: skipped, {sends} sends "
                                      f"(over {SEARCH_MAX_SENDS})")]
    scored = lambda chosen: score(problem.hops_of(chosen))  # noqa: E731
    budget = min(MAX_SCORED, max(1, SEARCH_SENDS // sends))
    searched = hill_climb(selection, problem.neighbours, scored, search_s, budget)
    first = problem.first_options()
    if first != selection and searched.scored < budget:  # a second start: every chunk on
        again = hill_climb(first, problem.neighbours, scored,  # its first trees and relays
                           search_s - searched.seconds, budget - searched.scored)
        if better(again.score, searched.score):
            searched = again
    if progress:
        progress(Progress("routing", searched.note()))
    if searched.state == selection:
        return [replace(routing, note=f"{routing.note}; {searched.note()}")]
    chosen = searched.state
    return [routing, Routing(problem.hops_of(chosen),  # type: ignore[arg-type]
                             problem._time_of(problem.values_of(chosen)) / US_PER_S,
                             result.status, result.gap, result.seconds + searched.seconds,
                             model.num_vars, searched.note(), "trees+search")]


@dataclass
class _Choice:
    """A group of options of which exactly ``activation`` (1, or a sum of columns) is taken;
    option ``i`` is column ``cols[i]`` (or always taken if there is one option and the
    activation is 1: ``cols == [-1]``) and loads ``edges[i]``. A spreading tree's choice
    is active when its ``entry`` choice (an index among its chunk's choices) takes an
    option landing at its ``receiver``; ``lands`` says, for an entry, where each option
    lands."""

    edges: list[tuple[int, ...]]
    latency: list[float]
    cols: list[int]
    entry: int | None = None
    receiver: int | None = None
    lands: list[int] | None = None


Selection = tuple[tuple[int, ...], ...]
"""Per representative chunk, per choice, the option taken (-1: the choice is inactive)."""


class _Problem:
    """The routing MILP for one logical topology and demand."""

    def __init__(self, logical: LogicalTopology, demand: Demand, finder: PathFinder) -> None:
        self.logical = logical
        self.demand = demand
        self.finder = finder
        self.bytes = finder.chunk_bytes
        self.model = Model("taccl routing")
        self.time = self.model.add_vars(1, cost=1.0)[0]
        self.choices: list[list[_Choice]] = []
        """per representative chunk, its choices"""
        self.latency_rows: list[tuple[list[tuple[int, float]], float]] = []
        """(terms, constant): sum of the taken terms plus the constant is at most T"""
        self.warm = np.zeros(0)
        self.floor = 0.0
        self.uc: dict[int, tuple[int, list[int]]] = {}

    def _us(self, seconds: float) -> float:
        return seconds * US_PER_S

    def _cost(self, edges: Sequence[int]) -> float:
        return self._us(sum(self.finder.cost(e) for e in edges))

    # ------------------------------------------------------------------ build

    def build(self) -> tuple[Model, np.ndarray]:
        warm: dict[int, float] = {}
        for rep, _ in self.demand.orbits:
            chunk = self.demand.chunks[rep]
            if self.demand.multicast:
                self.choices.append(self._multicast(chunk.source, warm))
            else:
                self.choices.append(self._unicast(chunk.source, chunk.destinations[0], warm))
        self._load_rows()
        for terms, constant in self.latency_rows:
            if terms:
                self.model.add_row([c for c, _ in terms] + [self.time],
                                   [v for _, v in terms] + [-1.0], upper=-constant)
            else:
                self.floor = max(self.floor, constant)
        self.model._lower[self.time] = self.floor
        self._tie_breaks()
        values = np.zeros(self.model.num_vars)
        for col, value in warm.items():
            values[col] = value
        for z, cols in self.uc.values():
            values[z] = float(any(values[c] > 0.5 for c in cols))
        values[self.time] = self._time_of(values)
        return self.model, values

    def _options(self, edges: list[tuple[int, ...]], latency: list[float],
                 activation: list[int] | None, warm: dict[int, float], pick: int | None
                 ) -> _Choice:
        """Add a choice; ``activation`` None means exactly one option is taken."""
        model = self.model
        if activation is None and len(edges) == 1:
            choice = _Choice(edges, latency, [-1])
            self.floor = max(self.floor, latency[0])
            return choice
        cols = list(model.add_vars(len(edges), binary=True))
        if activation is None:
            model.add_row(cols, [1.0] * len(cols), 1.0, 1.0)
        else:
            model.add_row(cols + activation, [1.0] * len(cols) + [-1.0] * len(activation),
                          0.0, 0.0)
        if pick is not None:
            warm[cols[pick]] = 1.0
        return _Choice(edges, latency, cols)

    def _multicast(self, source: int, warm: dict[int, float]) -> list[_Choice]:
        logical, finder = self.logical, self.finder
        home = logical.node_of[source]
        trees = finder.node_trees(source)
        choices = [self._options([t.edges for t in trees],
                                 [self._us(t.height) for t in trees], None, warm, 0)]
        self._latency([choices[-1]])
        home_depth = finder.node_trees(source)[0].depth
        for b in range(len(logical.nodes)):
            if b == home:
                continue
            entries = [i for x in logical.nodes[home] if logical.may_carry(x, source)
                       for i in logical.out_edges[x]
                       if logical.edges[i].internode
                       and logical.node_of[logical.edges[i].dst] == b]
            entry_latency = [self._us(home_depth[logical.edges[i].src] + finder.cost(i))
                             for i in entries]
            best_entry = None
            for i, e in enumerate(entries):
                reach = entry_latency[i] + self._us(finder.node_trees(logical.edges[e].dst)[0]
                                                    .height)
                if best_entry is None or reach < best_entry[0]:
                    best_entry = (reach, i)
            assert best_entry is not None  # reachability was checked with the sketch
            entry = self._options([(e,) for e in entries], entry_latency, None, warm,
                                  best_entry[1])
            entry.lands = [logical.edges[e].dst for e in entries]
            entry_index = len(choices)
            choices.append(entry)
            chosen_receiver = logical.edges[entries[best_entry[1]]].dst
            spreads = []
            for receiver in dict.fromkeys(logical.edges[e].dst for e in entries):
                active = [col for col, e in zip(entry.cols, entries)
                          if logical.edges[e].dst == receiver]
                trees = finder.node_trees(receiver)
                spread = self._options(
                    [t.edges for t in trees], [self._us(t.height) for t in trees],
                    active if active[0] >= 0 else None, warm,
                    0 if receiver == chosen_receiver else None)
                spread.entry, spread.receiver = entry_index, receiver
                choices.append(spread)
                spreads.append(spread)
            self._latency([entry, *spreads])
        return choices

    def _unicast(self, source: int, destination: int, warm: dict[int, float]) -> list[_Choice]:
        paths = self.finder.candidates(source, destination)
        choice = self._options(list(paths), [self._cost(p) for p in paths], None, warm, 0)
        self._latency([choice])
        return [choice]

    def _latency(self, chain: list[_Choice]) -> None:
        """One row: the taken options of ``chain`` (choices along one way) fit in T."""
        terms: list[tuple[int, float]] = []
        constant = 0.0
        for choice in chain:
            if choice.cols[0] < 0:
                constant += choice.latency[0]
            else:
                terms += list(zip(choice.cols, choice.latency))
        self.latency_rows.append((terms, constant))

    def _image_links(self, edge: int) -> Counter:
        """Physical links the symmetry orbit of ``edge`` loads, with multiplicities."""
        counts: Counter = Counter()
        for g in self.logical.symmetry:
            counts.update(self.logical.edges[self.logical.edge_image(g, edge)].route)
        return counts

    def _columns(self) -> list[tuple[int, tuple[int, ...]]]:
        """(column, edges it loads) for every option that is a variable."""
        return [(col, edges) for choices in self.choices for choice in choices
                for col, edges in zip(choice.cols, choice.edges) if col >= 0]

    def _fixed_edges(self) -> list[tuple[int, ...]]:
        return [choice.edges[0] for choices in self.choices for choice in choices
                if choice.cols[0] < 0]

    def _link_coefficients(self, edges: tuple[int, ...], cache: dict[int, Counter]
                           ) -> Counter:
        topology = self.logical.topology
        total: Counter = Counter()
        for e in edges:
            if e not in cache:
                cache[e] = self._image_links(e)
            for link, mult in cache[e].items():
                total[link] += mult * self._us(self.bytes / topology.links[link].bandwidth)
        return total

    def _load_rows(self) -> None:
        cache: dict[int, Counter] = {}
        rows: dict[int, dict[int, float]] = {}
        fixed: Counter = Counter()
        for edges in self._fixed_edges():
            fixed.update(self._link_coefficients(edges, cache))
        for col, edges in self._columns():
            for link, coef in self._link_coefficients(edges, cache).items():
                row = rows.setdefault(link, {})
                row[col] = row.get(col, 0.0) + coef
        for link, constant in fixed.items():
            self.floor = max(self.floor, constant) if link not in rows else self.floor
        for link, row in rows.items():
            self.model.add_row([*row, self.time], [*row.values(), -1.0],
                               upper=-fixed.get(link, 0.0))
        self._fixed_loads = fixed
        self._cache = cache
        self._edge_rows()

    def _edge_rows(self) -> None:
        """Per logical edge: its chunks one after another, each ``alpha + beta``."""
        logical = self.logical
        rows: dict[int, dict[int, float]] = {}
        fixed: Counter = Counter()
        for edges in self._fixed_edges():
            for e in edges:
                for g in logical.symmetry:
                    fixed[logical.edge_image(g, e)] += self._us(self.finder.cost(e))
        for col, edges in self._columns():
            for e in edges:
                for g in logical.symmetry:
                    row = rows.setdefault(logical.edge_image(g, e), {})
                    row[col] = row.get(col, 0.0) + self._us(self.finder.cost(e))
        for e, constant in fixed.items():
            if e not in rows:
                self.floor = max(self.floor, constant)
        for e, row in rows.items():
            self.model.add_row([*row, self.time], [*row.values(), -1.0],
                               upper=-fixed.get(e, 0.0))
        self._fixed_edge_loads = fixed
        self._edge_load_rows = rows

    def _tie_breaks(self) -> None:
        model = self.model
        columns = self._columns()
        destinations = max(1, sum(len(self.demand.chunks[rep].destinations)
                                  for rep, _ in self.demand.orbits))
        for col, edges in columns:
            model.add_cost(col, HOP_TIE_BREAK * self._cost(edges) / destinations)
        rows = max(1, len(self.latency_rows))
        for terms, _ in self.latency_rows:
            for col, latency in terms:
                model.add_cost(col, LATENCY_TIE_BREAK * latency / rows)
        policy = self.logical.sketch.intranode.hyperedge
        if policy is None:
            return
        orbit_of: dict[int, int] = {}
        for i, e in enumerate(self.logical.edges):
            if e.switch is not None and i not in orbit_of:
                for g in self.logical.symmetry:
                    orbit_of[self.logical.edge_image(g, i)] = i
        members: dict[int, list[int]] = {}
        for col, edges in columns:
            for e in edges:
                if e in orbit_of:
                    members.setdefault(orbit_of[e], []).append(col)
        if not members:
            return
        reference = max(self.floor, 1e-9)
        weight = UC_TIE_BREAK * reference / len(members)
        sign = 1.0 if policy is Hyperedge.UC_MIN else -1.0
        for orbit, cols in members.items():
            z = model.add_vars(1, binary=True, cost=sign * weight)[0]
            self.uc[orbit] = (z, cols)
            if policy is Hyperedge.UC_MIN:
                for col in cols:
                    model.add_row([z, col], [1.0, -1.0], 0.0)
            else:
                model.add_row([z, *cols], [1.0] + [-1.0] * len(cols), upper=0.0)

    # --------------------------------------------------------------- solution

    def _time_of(self, values: np.ndarray) -> float:
        """The makespan the rows imply for a choice of columns."""
        loads: Counter = Counter(self._fixed_loads)
        for col, edges in self._columns():
            if values[col] > 0.5:
                loads.update(self._link_coefficients(edges, self._cache))
        latency = [constant + sum(v for c, v in terms if values[c] > 0.5)
                   for terms, constant in self.latency_rows]
        edge_loads = [self._fixed_edge_loads.get(e, 0.0)
                      + sum(coef for c, coef in row.items() if values[c] > 0.5)
                      for e, row in self._edge_load_rows.items()]
        return max([self.floor, *latency, *loads.values(), *edge_loads])

    def makespan(self, result: MilpResult) -> float:
        return self._time_of(result.values) / US_PER_S

    # ------------------------------------------------------------- selections

    def selection(self, values: np.ndarray) -> Selection:
        """The option each choice takes in a solution (-1: inactive)."""
        return tuple(tuple(0 if choice.cols[0] < 0 else next(
            (i for i, col in enumerate(choice.cols) if values[col] > 0.5), -1)
            for choice in choices) for choices in self.choices)

    def values_of(self, selection: Selection) -> np.ndarray:
        """A solution vector taking ``selection``'s options (hyperedge columns set)."""
        values = np.zeros(self.model.num_vars)
        for choices, taken in zip(self.choices, selection):
            for choice, option in zip(choices, taken):
                if option >= 0 and choice.cols[0] >= 0:
                    values[choice.cols[option]] = 1.0
        for z, cols in self.uc.values():
            values[z] = float(any(values[c] > 0.5 for c in cols))
        values[self.time] = self._time_of(values)
        return values

    def first_options(self) -> Selection:
        """Every chunk's first tree in each node and its first relay to each node (the
        shortest ones), the spreading trees of other receivers inactive."""
        found = []
        for choices in self.choices:
            taken = [0] * len(choices)
            for j, choice in enumerate(choices):
                if choice.entry is not None:
                    entry = choices[choice.entry]
                    taken[j] = 0 if entry.lands and entry.lands[0] == choice.receiver else -1
            found.append(tuple(taken))
        return tuple(found)

    def neighbours(self, selection: Selection) -> list[Selection]:
        """Selections that take another option in one choice of one chunk: another tree,
        or another relay (whose receiver then spreads along its first tree)."""
        found = []
        for r, (choices, taken) in enumerate(zip(self.choices, selection)):
            for k, (choice, option) in enumerate(zip(choices, taken)):
                if option < 0 or len(choice.edges) < 2:
                    continue
                for other in range(len(choice.edges)):
                    if other == option:
                        continue
                    new = list(taken)
                    new[k] = other
                    if choice.lands is not None:
                        for j, spread in enumerate(choices):
                            if spread.entry == k:
                                new[j] = (0 if spread.receiver == choice.lands[other]
                                          else -1)
                    found.append((*selection[:r], tuple(new), *selection[r + 1:]))
        return found

    def hops_of(self, selection: Selection) -> tuple[tuple[Hop, ...], ...]:
        """Every chunk's hops under ``selection``."""
        logical, demand = self.logical, self.demand
        hops: list[tuple[Hop, ...]] = [()] * len(demand.chunks)
        for (rep, images), choices, taken in zip(demand.orbits, self.choices, selection):
            edges = [e for choice, option in zip(choices, taken) if option >= 0
                     for e in choice.edges[option]]
            tree = tree_hops(logical, demand.chunks[rep].source, edges)
            for g, chunk in zip(logical.symmetry, images):
                hops[chunk] = tuple((logical.edge_image(g, e), parent) for e, parent in tree)
        return tuple(hops)

    def expand(self, result: MilpResult) -> tuple[tuple[Hop, ...], ...]:
        """Every chunk's hops: each representative's tree mapped by its symmetries."""
        return self.hops_of(self.selection(result.values))
