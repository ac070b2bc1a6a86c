"""Path discovery: the ways one rank can reach another at once.

A :class:`Path` is a chain of :class:`Hop`\\ s. A hop is one rank-to-rank transfer along a
route through fabric nodes (cut-through): the direct NVLink, or a host-staged route
``0 -> cpu0 -> 1``. Between hops the data rests in a relay rank's scratch
(store-and-forward), so relay paths pipeline in pieces. Candidates: the cheapest route,
other routes through fabric only (Yen's k-shortest simple paths, networkx, on the graph
with ranks split so that none is crossed), one relay through each third rank, and with
``max_relays > 1`` Yen's paths that cross ranks as explicit relays. A path whose links
include all of another's is dropped, since it can only carry less.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from functools import cached_property, lru_cache

import networkx as nx

from ccweave.errors import InputError
from ccweave.topology.model import ROUTE_REFERENCE_BYTES, Topology

MAX_PATHS = 8
"""Candidate paths kept per rank pair by default."""

MAX_RELAYS = 1
"""Relay ranks a path may cross by default (each adds a store-and-forward stage)."""

MIN_RATIO = 0.1
"""Paths slower than this fraction of the fastest are dropped (UCX drops lanes under 1/4)."""

_SEARCH = 16
"""Simple paths Yen's algorithm may enumerate per pair before giving up on more."""


@dataclass(frozen=True)
class Hop:
    """One transfer ``src -> dst`` along ``links``; ``via`` lists the fabric nodes it passes
    when that is not the pair's cheapest route (``None``: the cheapest route)."""

    src: int
    dst: int
    via: tuple[str, ...] | None
    links: tuple[int, ...]
    alpha: float
    bandwidth: float
    """Bottleneck bandwidth of the route, bytes/second."""
    stages: tuple[tuple[tuple[int, ...], float, float], ...] = ()
    """A pinned route through host memory (a CPU node) is staged in one host buffer at the
    first CPU node, store-and-forward (the copy in, then the copy out): its (links,
    alpha, bandwidth) per stage; empty when the route is cut-through, one stage."""


@dataclass(frozen=True)
class Path:
    """Hops from the sender to the receiver; ranks between hops relay."""

    hops: tuple[Hop, ...]
    nodes: tuple[object, ...]
    """Every node passed, sender to receiver, for people."""

    @property
    def src(self) -> int:
        return self.hops[0].src

    @property
    def dst(self) -> int:
        return self.hops[-1].dst

    @property
    def relays(self) -> tuple[int, ...]:
        return tuple(hop.dst for hop in self.hops[:-1])

    @property
    def is_direct(self) -> bool:
        """One hop on the pair's cheapest route: what stock MPI uses alone."""
        return len(self.hops) == 1 and self.hops[0].via is None

    @property
    def bandwidth(self) -> float:
        return min(hop.bandwidth for hop in self.hops)

    @cached_property
    def link_uses(self) -> Counter:
        """Link index -> how many hops of this path cross it."""
        return Counter(link for hop in self.hops for link in hop.links)

    @property
    def kind(self) -> str:
        """``direct``, ``fabric`` (another route through switches/host memory) or ``relay``."""
        if len(self.hops) > 1:
            return "relay"
        return "direct" if self.is_direct else "fabric"

    def describe(self) -> str:
        """``0 -> cpu0 -> 1``; relay ranks in brackets: ``0 -> [2] -> 1``."""
        relays = set(self.relays)
        return " -> ".join(f"[{node}]" if node in relays and node not in (self.src, self.dst)
                           else str(node) for node in self.nodes)


def hop(topology: Topology, src: int, dst: int, via: tuple[str, ...] | None = None) -> Hop:
    """The hop ``src -> via... -> dst`` (the cheapest route when ``via`` is ``None``)."""
    links = topology.route_via(src, dst, via)
    if via is not None and links == topology.route(src, dst):
        via = None
    stages: list[tuple[tuple[int, ...], float, float]] = []
    if topology.staged(via):
        stages = [(part, float(sum(topology.links[i].alpha for i in part)
                               + topology.cost.staging_latency),
                   float(min(topology.links[i].bandwidth for i in part)))
                  for part in topology.stages(src, dst, via)]
    return Hop(src, dst, None if via is None else tuple(via), links,
               float(sum(topology.links[i].alpha for i in links)),
               float(min(topology.links[i].bandwidth for i in links)), tuple(stages))


def direct_path(topology: Topology, src: int, dst: int) -> Path | None:
    """The pair's cheapest route as a one-hop path; ``None`` when it has none."""
    if not topology.has_route(src, dst):
        return None
    one = hop(topology, src, dst)
    return Path((one,), _nodes(topology, (one,)))


def _nodes(topology: Topology, hops: tuple[Hop, ...]) -> tuple[object, ...]:
    nodes: list[object] = [hops[0].src]
    for h in hops:
        nodes += [topology.links[i].dst for i in h.links]
    return tuple(nodes)


def find_paths(topology: Topology, src: int, dst: int, *, max_paths: int = MAX_PATHS,
               max_relays: int = MAX_RELAYS, min_ratio: float = MIN_RATIO) -> tuple[Path, ...]:
    """Useful paths from rank ``src`` to rank ``dst``, cheapest first.

    Parameters
    ----------
    max_paths: at most this many paths.
    max_relays: a path crosses at most this many relay ranks (0: fabric routes only).
    min_ratio: drop paths whose bottleneck is under this fraction of the fastest's.

    The first path is the direct one when the pair has a route.
    """
    for rank in (src, dst):
        if not topology.is_rank(rank):
            raise InputError(f"rank {rank!r} is not a rank of {topology.name!r} "
                             f"(0..{topology.num_ranks - 1})")
    if src == dst:
        raise InputError(f"a path needs two different ranks, got {src} -> {dst}")
    if max_paths < 1 or max_relays < 0:
        raise InputError("max_paths must be >= 1 and max_relays >= 0")
    return _find(topology, src, dst, max_paths, max_relays, min_ratio)


@lru_cache(maxsize=4096)
def _find(topology: Topology, src: int, dst: int, max_paths: int, max_relays: int,
          min_ratio: float) -> tuple[Path, ...]:
    direct = direct_path(topology, src, dst)
    found: list[Path] = [] if direct is None else [direct]
    others = [*_fabric_routes(topology, src, dst), *_one_relay(topology, src, dst)]
    if max_relays > 1:
        others += _walks(topology, src, dst, relays=True)
    others.sort(key=lambda p: (-p.bandwidth, len(p.hops), sum(h.alpha for h in p.hops)))
    for path in others:
        if len(path.relays) > max_relays or path.is_direct:
            continue
        if any(set(old.link_uses) <= set(path.link_uses) for old in found):
            continue  # crosses every link another path crosses: never worth more
        found.append(path)
        if len(found) >= max_paths:
            break
    if not found:
        return ()
    fastest = max(p.bandwidth for p in found)
    return tuple(p for p in found if p.bandwidth >= min_ratio * fastest)


def _fabric_routes(topology: Topology, src: int, dst: int) -> list[Path]:
    """Other routes through fabric nodes only (host staging, a second switch)."""
    return _walks(topology, src, dst, relays=False)


def _one_relay(topology: Topology, src: int, dst: int) -> list[Path]:
    """Through each third rank, on the cheapest routes to and from it."""
    paths = []
    for relay in topology.ranks:
        if relay not in (src, dst) and topology.has_route(src, relay) \
                and topology.has_route(relay, dst):
            hops = (hop(topology, src, relay), hop(topology, relay, dst))
            paths.append(Path(hops, _nodes(topology, hops)))
    return paths


def _walks(topology: Topology, src: int, dst: int, relays: bool) -> list[Path]:
    """Yen's k-shortest simple paths (at most ``_SEARCH``) on the rank-split graph."""
    graph = _split_graph(topology, src, dst, relays)
    paths = []
    try:
        walks = nx.shortest_simple_paths(graph, ("out", src), ("in", dst), weight="cost")
        for walk in itertools.islice(walks, _SEARCH):
            path = _to_path(topology, walk)
            if path is not None:
                paths.append(path)
    except nx.NetworkXNoPath:
        pass
    return paths


def _split_graph(topology: Topology, src: int, dst: int, relays: bool) -> nx.DiGraph:
    """Ranks split into ``("out", r)`` and ``("in", r)``; a third rank is crossed only
    through its relay edge ``in -> out`` (none without ``relays``)."""
    graph = nx.DiGraph()

    def vertex(node: object, leaving: bool) -> object:
        if topology.is_rank(node):
            return ("out", node) if leaving else ("in", node)
        return node

    for index, link in enumerate(topology.links):
        a, b = vertex(link.src, True), vertex(link.dst, False)
        if a == ("out", dst) or b == ("in", src):
            continue
        cost = link.alpha + ROUTE_REFERENCE_BYTES / link.bandwidth
        graph.add_edge(a, b, cost=cost, link=index)
    for rank in topology.ranks if relays else ():
        if rank not in (src, dst):
            graph.add_edge(("in", rank), ("out", rank), cost=0.0, link=None)
    return graph


def _to_path(topology: Topology, walk: list[object]) -> Path | None:
    hops: list[Hop] = []
    start: int = walk[0][1]
    via: list[str] = []
    for vertex in walk[1:]:
        if isinstance(vertex, tuple):
            if vertex[0] == "in":
                hops.append(hop(topology, start, vertex[1], tuple(via)))
            else:
                start, via = vertex[1], []
        else:
            via.append(vertex)
    path = Path(tuple(hops), _nodes(topology, tuple(hops)))
    return None if path.is_direct else path
