"""Candidates for the routing stage: a few cheap ways for a chunk to travel within the
sketch (TACCL's shortest-path sets, made compact).

- Paths (alltoall): stay in the node, or leave the source's node once: intranode hops
  to a sender that carries the chunk, one relay to a receiver in the destination's
  node, intranode hops to the destination. The shortest-path tree's path comes first.
- Trees (allgather): spanning trees of one node from a root (the source, or the rank a
  relay delivers to), the shortest-path tree first and then trees that avoid the edges
  earlier ones used, so the routing stage can spread load.

Costs are idle-machine times of one chunk (``alpha + bytes / bandwidth`` per hop).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx

from ccweave.synth.taccl.logical import LogicalTopology

Path = tuple[int, ...]
"""Edge indices of the logical topology, in order."""

SPLIT_MIN_RANKS = 4
"""Nodes with fewer ranks get no split trees (a helper would save one send at most)."""
SPLIT_ALL_MAX_RANKS = 4
"""Nodes of at most this many ranks are offered every split tree (every helper, every way
to share the others), a set that renumbering the ranks maps onto itself; larger nodes a
few, chosen by rank number."""

TREE_DIVERSITY_PENALTY = 1.0
"""Each earlier tree that used an edge adds this multiple of its cost when the next
candidate tree is grown, steering it onto other edges."""


@dataclass(frozen=True)
class Tree:
    """A spanning tree of one node from ``root``: its edges and each rank's depth
    (seconds of idle-machine time from the root)."""

    root: int
    edges: tuple[int, ...]
    depth: dict[int, float]

    @property
    def height(self) -> float:
        return max(self.depth.values(), default=0.0)


@dataclass(eq=False)
class PathFinder:
    """Candidate paths on one logical topology for chunks of ``chunk_bytes``."""

    logical: LogicalTopology
    chunk_bytes: float
    max_paths: int = 4
    max_trees: int = 3
    _intra: dict[tuple[int, int], list[Path]] = field(default_factory=dict)
    _trees: dict[int, dict[int, Path]] = field(default_factory=dict)
    _node_trees: dict[int, list[Tree]] = field(default_factory=dict)

    def cost(self, edge: int) -> float:
        return self.logical.edges[edge].seconds(self.chunk_bytes)

    def path_cost(self, path: Path) -> float:
        return sum(self.cost(e) for e in path)

    @cached_property
    def _node_graphs(self) -> list[nx.DiGraph]:
        graphs = [nx.DiGraph() for _ in self.logical.nodes]
        for number, node in enumerate(self.logical.nodes):
            graphs[number].add_nodes_from(node)
        for i, e in enumerate(self.logical.edges):
            if not e.internode:
                graphs[self.logical.node_of[e.src]].add_edge(e.src, e.dst, id=i,
                                                              cost=self.cost(i))
        return graphs

    def intra_paths(self, u: int, v: int) -> list[Path]:
        """Up to ``max_paths`` cheapest simple paths from ``u`` to ``v`` inside their node."""
        if u == v:
            return [()]
        key = (u, v)
        if key not in self._intra:
            graph = self._node_graphs[self.logical.node_of[u]]
            found = []
            for nodes in itertools.islice(nx.shortest_simple_paths(graph, u, v, weight="cost"),
                                          self.max_paths):
                found.append(tuple(graph.edges[a, b]["id"] for a, b in itertools.pairwise(nodes)))
            self._intra[key] = found
        return self._intra[key]

    def tree(self, source: int) -> dict[int, Path]:
        """The shortest-path tree from ``source`` (one relay at most): destination -> path."""
        if source not in self._trees:
            self._trees[source] = self._shortest_tree(source)
        return self._trees[source]

    def _shortest_tree(self, source: int) -> dict[int, Path]:
        logical = self.logical
        home = logical.node_of[source]
        dist = {source: 0.0}
        parent: dict[int, int] = {}
        heap = [(0.0, source)]
        done: set[int] = set()
        while heap:
            d, u = heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            for i in logical.out_edges[u]:
                e = logical.edges[i]
                if e.internode and (logical.node_of[u] != home
                                    or not logical.may_carry(u, source)):
                    continue
                if not e.internode and logical.node_of[e.dst] != logical.node_of[u]:
                    continue
                cand = d + self.cost(i)
                if cand < dist.get(e.dst, float("inf")) - 1e-18:
                    dist[e.dst] = cand
                    parent[e.dst] = i
                    heapq.heappush(heap, (cand, e.dst))
        paths: dict[int, Path] = {source: ()}
        for v in sorted(dist, key=dist.__getitem__):
            if v != source:
                paths[v] = (*paths[logical.edges[parent[v]].src], parent[v])
        return paths

    def candidates(self, source: int, destination: int) -> list[Path]:
        """The tree path first, then other cheap paths; at most ``max_paths`` in all."""
        logical = self.logical
        found: list[Path] = [self.tree(source)[destination]]
        if logical.node_of[source] == logical.node_of[destination]:
            options = self.intra_paths(source, destination)
        else:
            options = self._cross_paths(source, destination)
        for path in options:
            if len(found) >= self.max_paths:
                break
            if path not in found:
                found.append(path)
        return found

    def _cross_paths(self, source: int, destination: int) -> list[Path]:
        logical = self.logical
        target = logical.node_of[destination]
        combos = []
        for x in logical.nodes[logical.node_of[source]]:
            if not logical.may_carry(x, source):
                continue
            for i in logical.out_edges[x]:
                e = logical.edges[i]
                if not e.internode or logical.node_of[e.dst] != target:
                    continue
                head = self.intra_paths(source, x)[0]
                tail = self.intra_paths(e.dst, destination)[0]
                path = (*head, i, *tail)
                combos.append((self.path_cost(path), path))
        combos.sort()
        return [path for _, path in combos[: 2 * self.max_paths]]

    def node_trees(self, root: int) -> list[Tree]:
        """Up to ``max_trees`` distinct spanning trees of ``root``'s node, cheapest first."""
        if root not in self._node_trees:
            graph = self._node_graphs[self.logical.node_of[root]]
            uses: dict[int, int] = {}
            trees: list[Tree] = []
            for _ in range(self.max_trees):
                tree = self._grow(graph, root, uses)
                if all(set(tree.edges) != set(t.edges) for t in trees):
                    trees.append(tree)
                for e in tree.edges:
                    uses[e] = uses.get(e, 0) + 1
            trees += self._split_trees(graph, root)
            self._node_trees[root] = trees
        return self._node_trees[root]

    def _split_trees(self, graph: nx.DiGraph, root: int) -> list[Tree]:
        """In a node where every rank sends to every other (a switch), trees that share
        the fan-out with a helper: the root sends to the helper and half the others, the
        helper to the rest (in small nodes every such tree; else helpers the next rank and
        the one half a node on). A star puts a relay's whole fan-out on its one switch
        port; these let the routing stage spread it."""
        node = self.logical.nodes[self.logical.node_of[root]]
        size = len(node)
        if size < SPLIT_MIN_RANKS or any(not graph.has_edge(u, v)
                                         for u in node for v in node if u != v):
            return []
        at = node.index(root)
        others = [node[(at + k) % size] for k in range(1, size)]
        if size <= SPLIT_ALL_MAX_RANKS:
            shares = []
            for helper in others:
                rest = [v for v in others if v != helper]
                for mine in itertools.combinations(rest, (len(rest) + 1) // 2):
                    shares.append((helper, list(mine), [v for v in rest if v not in mine]))
        else:
            shares = []
            for step in dict.fromkeys((1, size // 2)):
                helper = node[(at + step) % size]
                rest = [v for v in others if v != helper]
                half = (len(rest) + 1) // 2
                shares.append((helper, rest[:half], rest[half:]))
        return [self._split(graph, root, *share) for share in shares]

    @staticmethod
    def _split(graph: nx.DiGraph, root: int, helper: int, mine: list[int],
               helped: list[int]) -> Tree:
        """The tree where ``root`` sends to ``helper`` and ``mine``, ``helper`` to
        ``helped``."""
        edges = [graph.edges[root, helper]["id"]]
        depth = {root: 0.0, helper: graph.edges[root, helper]["cost"]}
        for v in mine:
            edges.append(graph.edges[root, v]["id"])
            depth[v] = graph.edges[root, v]["cost"]
        for v in helped:
            edges.append(graph.edges[helper, v]["id"])
            depth[v] = depth[helper] + graph.edges[helper, v]["cost"]
        return Tree(root, tuple(sorted(edges)), depth)

    def _grow(self, graph: nx.DiGraph, root: int, uses: dict[int, int]) -> Tree:
        """Dijkstra from ``root`` on costs inflated by earlier use; depths in true costs."""
        best = {root: 0.0}
        depth = {root: 0.0}
        parent: dict[int, int] = {}
        heap = [(0.0, root)]
        done: set[int] = set()
        while heap:
            d, u = heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            for _, v, data in graph.out_edges(u, data=True):
                e = data["id"]
                cand = d + data["cost"] * (1 + TREE_DIVERSITY_PENALTY * uses.get(e, 0))
                if v not in done and cand < best.get(v, float("inf")) - 1e-18:
                    best[v] = cand
                    parent[v] = e
                    depth[v] = depth[u] + data["cost"]
                    heapq.heappush(heap, (cand, v))
        return Tree(root, tuple(sorted(parent.values())), depth)
