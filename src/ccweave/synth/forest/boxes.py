"""Identical boxes on one switch: the forest of one box, lifted to all of them.

Multi-node machines are ``K`` copies of a server (a *box*: its ranks and its own fabric,
NICs included) whose NICs meet on one network switch. By symmetry one box's trees serve
all: rank ``i`` of every box is on *rail* ``i``. Root ``(b, i)`` sends each of its chunks
to rank ``i`` of every other box straight through the switch (its NIC sends ``K - 1``
copies, one box after another, each root starting at the next box over, so every NIC
receives from one rail peer at a time), and every box spreads the chunks that arrive on
rail ``i`` over its ranks with the box's own trees from rank ``i``. The box trees are a
ForestColl forest of one box whose roots each carry ``K`` shards, on the box's links
minus what the rails take from them; the time is the least at which both fit. A box is
synthesized once, whatever ``K`` is.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ccweave.bounds import allgather_cut
from ccweave.errors import CCWeaveError
from ccweave.synth.forest.lower import Edge
from ccweave.topology.model import Link, Node, Topology

SEARCH_STEPS = 30
"""Bisection steps for the time at which rails and box trees both fit."""


@dataclass(frozen=True)
class Boxes:
    """``K`` isomorphic boxes meeting at one shared fabric node.

    ``maps[b]`` sends box 0's nodes (ranks and fabric) to box ``b``'s; ``exit[i]`` and
    ``entry[i]`` are the fabric names (box 0's) from rank ``i`` to the shared node and
    back; ``box`` is box 0 alone with its links to the shared node.
    """

    shared: str
    ranks: tuple[int, ...]
    """Box 0's ranks, in rail order."""
    maps: tuple[dict[Node, Node], ...]
    exit: tuple[tuple[str, ...], ...]
    entry: tuple[tuple[str, ...], ...]
    box: Topology

    @property
    def count(self) -> int:
        return len(self.maps)


def detect(topology: Topology) -> Boxes | None:
    """The box structure of ``topology``, or ``None`` if it is not ``K >= 2`` isomorphic
    node groups whose fabric meets at exactly one shared node."""
    parts = topology.groups.get("node", ())
    if len(parts) < 2 or len({len(p) for p in parts}) != 1 or len(parts[0]) < 1:
        return None
    region = _regions(topology, parts)
    if region is None:
        return None
    owner, shared = region
    box_nodes = [[node for node in topology.nodes if owner.get(node) == b]
                 for b in range(len(parts))]
    maps = [_isomorphism(topology, box_nodes[0], box_nodes[b], shared, parts[0], parts[b])
            for b in range(len(parts))]
    if any(m is None for m in maps):
        return None
    box = _box_topology(topology, box_nodes[0], parts[0], shared)
    ranks = tuple(parts[0])
    exits, entries = [], []
    for rank in ranks:
        found = _paths(topology, rank, shared, set(box_nodes[0]))
        if found is None:
            return None
        exits.append(found[0])
        entries.append(found[1])
    return Boxes(shared, ranks, tuple(maps), tuple(exits), tuple(entries),  # type: ignore[arg-type]
                 box)


def _regions(topology: Topology, parts: Sequence[Sequence[int]]
             ) -> tuple[dict[Node, int], str] | None:
    """Each node's box (nearest box by hops through fabric) and the one shared node."""
    near: dict[Node, set[int]] = {}
    distance: dict[Node, int] = {}
    frontier: list[tuple[int, Node, int]] = []
    for b, part in enumerate(parts):
        for rank in part:
            heapq.heappush(frontier, (0, rank, b))
    neighbours: dict[Node, set[Node]] = {node: set() for node in topology.nodes}
    for link in topology.links:
        neighbours[link.src].add(link.dst)
        neighbours[link.dst].add(link.src)
    while frontier:
        d, node, b = heapq.heappop(frontier)
        if node in distance and d > distance[node]:
            continue
        if node in distance and d == distance[node]:
            if b in near[node]:
                continue
            near[node].add(b)
        else:
            distance[node] = d
            near[node] = {b}
        for other in neighbours[node]:
            if not topology.is_rank(other):
                heapq.heappush(frontier, (d + 1, other, b))
    shared = [node for node, boxes in near.items() if len(boxes) > 1]
    if len(shared) != 1 or topology.is_rank(shared[0]):
        return None
    owner = {node: next(iter(boxes)) for node, boxes in near.items() if len(boxes) == 1}
    for b, part in enumerate(parts):
        if any(owner.get(rank) != b for rank in part):
            return None
    return owner, str(shared[0])


def _isomorphism(topology: Topology, first: list[Node], other: list[Node], shared: str,
                 first_ranks: Sequence[int], other_ranks: Sequence[int]
                 ) -> dict[Node, Node] | None:
    """A map of box ``first`` onto box ``other`` that keeps every link (bandwidth and
    alpha, the links to the shared node included): by position of ranks and by name of
    fabric first (zoo machines), else networkx's matcher."""
    if len(first) != len(other):
        return None
    guess: dict[Node, Node] = dict(zip(first_ranks, other_ranks))
    renamed = {_strip(node): node for node in other if not topology.is_rank(node)}
    for node in first:
        if not topology.is_rank(node):
            guess[node] = renamed.get(_strip(node))  # type: ignore[assignment]
    if all(v is not None for v in guess.values()) and _keeps_links(topology, guess, shared):
        return guess
    import networkx as nx
    from networkx.algorithms import isomorphism

    def graph(nodes: list[Node]) -> nx.DiGraph:
        g = nx.DiGraph()
        for node in nodes:
            g.add_node(node, kind=topology.kind(node).value)
        g.add_node(shared, kind="shared")
        keep = {*nodes, shared}
        for link in topology.links:
            if link.src in keep and link.dst in keep:
                g.add_edge(link.src, link.dst, bw=link.bandwidth, alpha=link.alpha)
        return g

    matcher = isomorphism.DiGraphMatcher(
        graph(first), graph(other), node_match=lambda a, b: a["kind"] == b["kind"],
        edge_match=lambda a, b: a["bw"] == b["bw"] and a["alpha"] == b["alpha"])
    for mapping in matcher.isomorphisms_iter():
        if mapping[shared] == shared:
            return {a: b for a, b in mapping.items() if a != shared}
    return None


def _strip(node: Node) -> str:
    """A fabric name without its ``n<box>.`` prefix (the zoo's naming of copies)."""
    text = str(node)
    head, dot, tail = text.partition(".")
    return tail if dot and head[:1] == "n" and head[1:].isdigit() else text


def _keeps_links(topology: Topology, mapping: dict[Node, Node], shared: str) -> bool:
    full = {**mapping, shared: shared}
    for link in topology.links:
        if link.src in mapping or link.dst in mapping:
            if link.src not in full or link.dst not in full:
                return False
            image = topology.link(full[link.src], full[link.dst])
            if image is None or image.bandwidth != link.bandwidth or image.alpha != link.alpha:
                return False
    return True


def _box_topology(topology: Topology, nodes: list[Node], ranks: Sequence[int],
                  shared: str) -> Topology:
    """Box 0 and its links to the shared node, its ranks renumbered 0..n-1: the box may
    relay through its own NICs and back, the switch being non-blocking."""
    index = {rank: i for i, rank in enumerate(ranks)}

    def rename(node: Node) -> Node:
        return index[node] if topology.is_rank(node) else node

    keep = {*nodes, shared}
    links = tuple(Link(rename(lk.src), rename(lk.dst), lk.bandwidth, lk.alpha, lk.kind)
                  for lk in topology.links if lk.src in keep and lk.dst in keep)
    fabric = {str(node): topology.kind(node) for node in (*nodes, shared)  # in order: the
              if not topology.is_rank(node)}  # box's vertex numbers follow it
    return Topology(f"{topology.name}/box", len(ranks), links, fabric)


def _paths(topology: Topology, rank: int, shared: str, inside: set[Node]
           ) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The cheapest fabric path (as the router weighs links) from ``rank`` to the shared
    node inside the box, and back."""
    import networkx as nx

    from ccweave.topology.model import ROUTE_REFERENCE_BYTES

    graph = nx.DiGraph()
    for link in topology.links:
        ends = (link.src, link.dst)
        if all(e in inside or e == shared for e in ends) and \
                all(not topology.is_rank(e) or e == rank for e in ends):
            graph.add_edge(*ends, cost=link.alpha + ROUTE_REFERENCE_BYTES / link.bandwidth)
    try:
        out = nx.shortest_path(graph, rank, shared, weight="cost")
        back = nx.shortest_path(graph, shared, rank, weight="cost")
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        return None
    return tuple(map(str, out[1:-1])), tuple(map(str, back[1:-1]))


# ------------------------------------------------------------------------ the forest


def rail_loads(topology: Topology, boxes: Boxes) -> dict[tuple[Node, Node], float]:
    """Bytes per byte of the size that the rails put on each link of box 0 (and on its
    links to the shared node): each root's shard leaves ``K - 1`` times, each rank takes
    ``K - 1`` shards in."""
    n = topology.num_ranks
    copies = (boxes.count - 1) / n
    load: dict[tuple[Node, Node], float] = {}
    for i, rank in enumerate(boxes.ranks):
        for path in ((rank, *boxes.exit[i], boxes.shared), (boxes.shared, *boxes.entry[i], rank)):
            for a, b in itertools.pairwise(path):
                load[a, b] = load.get((a, b), 0.0) + copies
    return load


def residual_box(topology: Topology, boxes: Boxes, seconds_per_byte: float
                 ) -> Topology | None:
    """Box 0 with what the rails leave of each link when the collective of one byte takes
    ``seconds_per_byte``; ``None`` if the rails alone do not fit."""
    load = rail_loads(topology, boxes)
    for (a, b), share in load.items():
        link = topology.link(a, b)
        if link is None or share > link.bandwidth * seconds_per_byte * (1 + 1e-12):
            return None
    links = []
    for link in boxes.box.links:
        src = boxes.ranks[link.src] if boxes.box.is_rank(link.src) else link.src
        dst = boxes.ranks[link.dst] if boxes.box.is_rank(link.dst) else link.dst
        left = link.bandwidth - load.get((src, dst), 0.0) / seconds_per_byte
        if left > link.bandwidth * 1e-9:
            links.append(Link(link.src, link.dst, left, link.alpha, link.kind))
    return Topology(boxes.box.name, boxes.box.num_ranks, tuple(links),
                    dict(boxes.box.fabric))


def fitting_time(topology: Topology, boxes: Boxes) -> float:
    """Least seconds per byte at which the rails and the box trees (each box root
    carrying ``K`` shards) fit together."""
    def box_time(seconds: float) -> float:
        """Seconds per byte of the size the box trees need on what the rails leave: the
        box allgathers K shards of 1/N per root, n K / N = all of the size."""
        box = residual_box(topology, boxes, seconds)
        if box is None:
            return math.inf
        try:
            return allgather_cut(box)[0]
        except CCWeaveError:
            return math.inf

    low, _ = allgather_cut(topology)
    high = low * 2
    while box_time(high) > high:
        high *= 2
        if high > low * 2**20:
            raise CCWeaveError(f"trees: the boxes of {topology.name!r} never fit (a bug)")
    if box_time(low) <= low:
        return low
    for _ in range(SEARCH_STEPS):
        middle = (low + high) / 2
        if box_time(middle) <= middle:
            high = middle
        else:
            low = middle
    return high


class LiftedTrees(Sequence[tuple[int, int, tuple[Edge, ...]]]):
    """The trees of every root, made on demand from the box forest: the rails from the
    root, then each box's copy of the box tree from its rail rank."""

    def __init__(self, boxes: Boxes, box_trees: Sequence[tuple[int, int, tuple[Edge, ...]]],
                 num_ranks: int) -> None:
        self.boxes = boxes
        self.num_ranks = num_ranks
        self.by_root: dict[int, list[tuple[int, tuple[Edge, ...]]]] = {}
        for root, units, edges in box_trees:
            self.by_root.setdefault(root, []).append((units, edges))
        self.index = [(b, i, t) for b in range(boxes.count)
                      for i in range(len(boxes.ranks))
                      for t in range(len(self.by_root.get(i, [])))]
        self.rank_of = [[m[r] for r in boxes.ranks] for m in boxes.maps]
        self.names = [{str(node): str(target) for node, target in m.items()}
                      | {boxes.shared: boxes.shared} for m in boxes.maps]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, position):  # type: ignore[override]
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        b, i, t = self.index[position]
        units, edges = self.by_root[i][t]
        return self.rank_of[b][i], units, tuple(self.edges(b, i, edges))

    def __iter__(self) -> Iterator[tuple[int, int, tuple[Edge, ...]]]:
        for position in range(len(self)):
            yield self[position]

    def edges(self, b: int, i: int, box_edges: tuple[Edge, ...]) -> Iterator[Edge]:
        boxes = self.boxes
        k = boxes.count
        root = self.rank_of[b][i]
        exit_names = tuple(self.names[b][name] for name in boxes.exit[i])
        for step in range(1, k):
            other = (b + step) % k
            entry = tuple(self.names[other][name] for name in boxes.entry[i])
            yield root, self.rank_of[other][i], (*exit_names, boxes.shared, *entry)
        for other in range(k):
            ranks, names = self.rank_of[other], self.names[other]
            for parent, child, via in box_edges:
                yield ranks[parent], ranks[child], tuple(names[name] for name in via)

    def rails(self) -> int:
        """How many edges at the start of every tree are the root's rail sends."""
        return self.boxes.count - 1
