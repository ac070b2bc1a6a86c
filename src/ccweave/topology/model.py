"""The topology model: ranks and fabric nodes joined by directed alpha-beta links.

Ranks (``0..N-1``) compute, reduce and relay (through explicit transfers only);
fabric nodes (named strings: NVSwitch, PCIe switch, CPU/host memory, NIC, network
switch) only forward. A message between two ranks follows a *route*: the links it
occupies at once, cut-through through fabric nodes, never through a third rank.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from ccweave.errors import TopologyError
from ccweave.topology.cost import HOST_GROUP, CostModel
from ccweave.topology.provenance import Provenance

Node = int | str
"""A rank (``int`` 0..N-1) or a fabric node (its ``str`` name)."""

ROUTE_REFERENCE_BYTES = 2**20
"""Routes minimise ``sum(alpha + ROUTE_REFERENCE_BYTES / bandwidth)`` over their links:
fast links first, latency breaking near-ties (a 1 MiB message's store-and-forward time)."""


class NodeKind(str, enum.Enum):
    """What a node is; every kind but ``rank`` only forwards."""

    RANK = "rank"
    SWITCH = "switch"
    NIC = "nic"
    CPU = "cpu"
    PCIE = "pcie"


@dataclass(frozen=True, slots=True)
class Link:
    """One directed link: ``alpha`` seconds of latency, ``bandwidth`` bytes/second."""

    src: Node
    dst: Node
    bandwidth: float
    alpha: float = 0.0
    kind: str = ""
    """What the link is physically (``nvlink``, ``pcie``, ``ib``...): for people, not maths."""


@dataclass(frozen=True, eq=False)
class Topology:
    """A machine as a directed graph of ranks and fabric nodes.

    Parameters
    ----------
    name: what to call it (``dgx1``, ``ndv2:2``, a file's ``name``).
    num_ranks: ranks are ``0..num_ranks-1``.
    links: directed links; parallel links between one pair are merged into one with the
        summed bandwidth and the larger alpha (a message striped over both waits for the
        slower start; docs/topology-format.md says how to keep a slow path apart).
    fabric: fabric node name -> kind.
    groups: named partitions of the ranks that hierarchical strategies read, e.g.
        ``{"node": ((0, 1, 2, 3), (4, 5, 6, 7)), "socket": ...}``.
    local_bandwidth: bytes/second of a copy or reduction inside one rank's memory.
    source: where the figures come from, for people.
    cost: per-rank and per-host costs a profile measured beside the links (none by
        default; see :mod:`ccweave.topology.cost`).
    provenance: per link kind, where an imported machine's figures came from, and what the
        import corrected (see :mod:`ccweave.topology.provenance`).
    """

    name: str
    num_ranks: int
    links: tuple[Link, ...]
    fabric: Mapping[str, NodeKind] = field(default_factory=dict)
    groups: Mapping[str, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    local_bandwidth: float = 1e12
    source: str = ""
    cost: CostModel = field(default_factory=CostModel)
    provenance: Provenance = field(default_factory=Provenance)

    def __post_init__(self) -> None:
        if not isinstance(self.num_ranks, int) or self.num_ranks < 1:
            raise TopologyError(f"topology {self.name!r}: ranks must be a positive integer, "
                                f"got {self.num_ranks!r}")
        fabric = {}
        for fname, kind in dict(self.fabric).items():
            if not isinstance(fname, str) or not fname:
                raise TopologyError(f"topology {self.name!r}: fabric node names are non-empty "
                                    f"strings, got {fname!r}")
            try:
                fabric[fname] = NodeKind(kind)
            except ValueError:
                raise TopologyError(
                    f"topology {self.name!r}: fabric node {fname!r} has kind {kind!r}; use one of "
                    + ", ".join(k.value for k in NodeKind if k is not NodeKind.RANK)) from None
            if fabric[fname] is NodeKind.RANK:
                raise TopologyError(f"topology {self.name!r}: fabric node {fname!r} cannot be a "
                                    "rank; ranks are the integers 0..ranks-1")
        object.__setattr__(self, "fabric", fabric)
        object.__setattr__(self, "links", _merge_parallel(self._checked_links()))
        object.__setattr__(self, "groups", self._checked_groups())
        if not self.local_bandwidth > 0:
            raise TopologyError(f"topology {self.name!r}: local_bandwidth must be positive")
        if not isinstance(self.cost, CostModel):
            raise TopologyError(f"topology {self.name!r}: cost must be a CostModel")
        if not isinstance(self.provenance, Provenance):
            raise TopologyError(f"topology {self.name!r}: provenance must be a Provenance")

    def _checked_links(self) -> list[Link]:
        checked = []
        for number, link in enumerate(self.links):
            where = f"topology {self.name!r}, link {number} ({link.src!r} -> {link.dst!r})"
            for end in (link.src, link.dst):
                if not self.has_node(end):
                    raise TopologyError(f"{where}: unknown node {end!r}; ranks are integers "
                                        f"0..{self.num_ranks - 1}, fabric nodes must be declared")
            if link.src == link.dst:
                raise TopologyError(f"{where}: a link must join two different nodes")
            if not (isinstance(link.bandwidth, (int, float)) and math.isfinite(link.bandwidth)
                    and link.bandwidth > 0):
                raise TopologyError(f"{where}: bandwidth must be a positive number, "
                                    f"got {link.bandwidth!r}")
            if not (isinstance(link.alpha, (int, float)) and math.isfinite(link.alpha)
                    and link.alpha >= 0):
                raise TopologyError(f"{where}: alpha must be a number >= 0, got {link.alpha!r}")
            checked.append(link)
        return checked

    def _checked_groups(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        groups = {}
        for kind, members in dict(self.groups).items():
            seen: set[int] = set()
            parts = []
            for part in members:
                part = tuple(part)
                for rank in part:
                    if not self.is_rank(rank):
                        raise TopologyError(f"topology {self.name!r}, group {kind!r}: {rank!r} "
                                            f"is not a rank (0..{self.num_ranks - 1})")
                    if rank in seen:
                        raise TopologyError(f"topology {self.name!r}, group {kind!r}: rank "
                                            f"{rank} is in two groups; groups partition ranks")
                    seen.add(rank)
                parts.append(part)
            if len(seen) != self.num_ranks:
                missing = sorted(set(range(self.num_ranks)) - seen)[:5]
                raise TopologyError(f"topology {self.name!r}, group {kind!r}: ranks {missing} "
                                    "are in no group; groups must cover every rank")
            groups[kind] = tuple(parts)
        return groups

    # ----------------------------------------------------------------- nodes

    def is_rank(self, node: object) -> bool:
        return isinstance(node, (int, np.integer)) and not isinstance(node, bool) \
            and 0 <= node < self.num_ranks

    def has_node(self, node: object) -> bool:
        return self.is_rank(node) or (isinstance(node, str) and node in self.fabric)

    @property
    def ranks(self) -> range:
        return range(self.num_ranks)

    @cached_property
    def nodes(self) -> tuple[Node, ...]:
        """Every node: the ranks first, then the fabric nodes in declaration order."""
        return (*range(self.num_ranks), *self.fabric)

    @cached_property
    def node_index(self) -> dict[Node, int]:
        return {node: i for i, node in enumerate(self.nodes)}

    def kind(self, node: Node) -> NodeKind:
        return NodeKind.RANK if self.is_rank(node) else self.fabric[node]  # type: ignore[index]

    @cached_property
    def host_of(self) -> tuple[int, ...]:
        """Per rank, the number of the host whose CPUs it shares (its ``host`` group;
        every rank its own host when there is no such group)."""
        if HOST_GROUP not in self.groups:
            return tuple(self.ranks)
        index = self.group_index(HOST_GROUP)
        return tuple(index[rank][0] for rank in self.ranks)

    def with_cost(self, cost: CostModel, hosts: tuple[tuple[int, ...], ...] | None = None
                  ) -> Topology:
        """The same machine with ``cost`` (and, when given, ``hosts`` as its host group)."""
        groups = dict(self.groups)
        if hosts is not None:
            groups[HOST_GROUP] = hosts
        return Topology(self.name, self.num_ranks, self.links, self.fabric, groups,
                        self.local_bandwidth, self.source, cost, self.provenance)

    def group_of(self, kind: str, rank: int) -> tuple[int, ...]:
        """The group of ``kind`` (``node``, ``socket``) that holds ``rank``."""
        return self.group_index(kind)[rank][1]

    def group_index(self, kind: str) -> dict[int, tuple[int, tuple[int, ...]]]:
        """rank -> (number of its group, the group) for groups of ``kind``."""
        if kind not in self.groups:
            raise TopologyError(f"topology {self.name!r} has no {kind!r} groups; it has "
                                f"{sorted(self.groups) or 'none'}")
        return {rank: (number, part) for number, part in enumerate(self.groups[kind])
                for rank in part}

    # ----------------------------------------------------------------- links

    @cached_property
    def link_id(self) -> dict[tuple[Node, Node], int]:
        """(src, dst) -> index into :attr:`links`."""
        return {(link.src, link.dst): i for i, link in enumerate(self.links)}

    def link(self, src: Node, dst: Node) -> Link | None:
        index = self.link_id.get((src, dst))
        return None if index is None else self.links[index]

    @cached_property
    def bandwidths(self) -> np.ndarray:
        return np.array([link.bandwidth for link in self.links], dtype=float)

    @cached_property
    def alphas(self) -> np.ndarray:
        return np.array([link.alpha for link in self.links], dtype=float)

    def out_bandwidth(self, node: Node) -> float:
        return sum(link.bandwidth for link in self.links if link.src == node)

    def in_bandwidth(self, node: Node) -> float:
        return sum(link.bandwidth for link in self.links if link.dst == node)

    def reversed(self) -> Topology:
        """The same machine with every link turned around (for reduce-scatter by duality)."""
        return Topology(f"{self.name}(reversed)", self.num_ranks,
                        tuple(Link(lk.dst, lk.src, lk.bandwidth, lk.alpha, lk.kind)
                              for lk in self.links),
                        self.fabric, self.groups, self.local_bandwidth, self.source, self.cost,
                        self.provenance)

    def to_networkx(self):
        """A ``networkx.DiGraph`` with node attribute ``kind`` and link attributes
        ``bandwidth``, ``alpha``, ``kind``."""
        import networkx as nx

        graph = nx.DiGraph(name=self.name)
        for node in self.nodes:
            graph.add_node(node, kind=self.kind(node).value)
        for link in self.links:
            graph.add_edge(link.src, link.dst, bandwidth=link.bandwidth, alpha=link.alpha,
                           kind=link.kind)
        return graph

    # ---------------------------------------------------------------- routes

    @cached_property
    def _router(self) -> _Router:
        return _Router(self)

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """The cheapest route from rank ``src`` to rank ``dst`` as link indices.

        Raises ``TopologyError`` if ``dst`` can only be reached through another rank.
        """
        return self._router.route(src, dst)

    def route_via(self, src: int, dst: int, via: tuple[str, ...] | None) -> tuple[int, ...]:
        """Link indices of the route ``src -> via... -> dst`` (``via=()``: the direct link;
        ``None``: the cheapest route). Raises ``TopologyError`` naming a missing link or a
        node of ``via`` that is not fabric."""
        if via is None or src == dst:
            return self.route(src, dst) if src != dst else ()
        nodes = (src, *via, dst)
        shown = " -> ".join(map(str, nodes))
        for node in via:
            if not isinstance(node, str) or node not in self.fabric:
                raise TopologyError(f"route {shown}: {node!r} is not a fabric node of "
                                    f"{self.name!r}; routes pass fabric only, ranks relay "
                                    "with explicit transfers")
        links = []
        for a, b in itertools.pairwise(nodes):
            index = self.link_id.get((a, b))
            if index is None:
                raise TopologyError(f"route {shown}: topology {self.name!r} has no link "
                                    f"{a} -> {b}")
            links.append(index)
        return tuple(links)

    def has_route(self, src: int, dst: int) -> bool:
        return src == dst or self._router.route_or_none(src, dst) is not None

    # ------------------------------------------------------------ host memory

    def is_host(self, node: object) -> bool:
        """Whether ``node`` is host memory (a CPU node): a route through it is staged,
        copied in, then out, as a host-staged copy or NCCL's shared-memory transport is."""
        return isinstance(node, str) and self.fabric.get(node) is NodeKind.CPU

    @cached_property
    def has_host(self) -> bool:
        """Whether any route could be staged through host memory here."""
        return NodeKind.CPU in self.fabric.values()

    def staged(self, via: tuple[str, ...] | None) -> bool:
        """Whether a pinned route through ``via`` is staged through host memory."""
        return via is not None and any(self.is_host(node) for node in via)

    def stages(self, src: int, dst: int, via: tuple[str, ...] | None) -> tuple[tuple[int, ...],
                                                                             ...]:
        """The links of the route ``src -> via... -> dst`` in the parts it moves in: cut
        after the first host-memory node it passes (one host buffer), else whole."""
        links = self.route_via(src, dst, via)
        if not self.staged(via):
            return (links,) if links else ()
        for cut, number in enumerate(links):
            end = self.links[number].dst
            if end in via and self.is_host(end):  # type: ignore[operator]
                return tuple(part for part in (links[:cut + 1], links[cut + 1:]) if part)
        return (links,)

    def all_routes(self, src: int, dst: int) -> list[tuple[int, ...]]:
        """Every route of the cheapest cost from ``src`` to ``dst`` (equal-cost multipath)."""
        return self._router.all_routes(src, dst)

    def route_alpha(self, src: int, dst: int) -> float:
        return float(sum(self.links[i].alpha for i in self.route(src, dst)))

    def route_bandwidth(self, src: int, dst: int) -> float:
        """Bottleneck bandwidth of the cheapest route (``local_bandwidth`` if src == dst)."""
        if src == dst:
            return self.local_bandwidth
        return float(min(self.links[i].bandwidth for i in self.route(src, dst)))

    def neighbors(self, rank: int) -> list[int]:
        """Ranks reachable from ``rank`` without passing through another rank."""
        return [other for other in self.ranks
                if other != rank and self._router.route_or_none(rank, other) is not None]

    def check_connected(self) -> None:
        """Raise ``TopologyError`` unless every rank can reach every other (through fabric
        and, where needed, by relaying through ranks); dead-end fabric is fine."""
        if self.num_ranks < 2:
            return
        index, size = self.node_index, len(self.nodes)
        ends = np.array([(index[lk.src], index[lk.dst]) for lk in self.links],
                        dtype=np.int64).reshape(-1, 2)
        graph = scipy.sparse.csr_matrix((np.ones(len(ends)), (ends[:, 0], ends[:, 1])),
                                        shape=(size, size))
        _, component = scipy.sparse.csgraph.connected_components(graph, directed=True,
                                                                 connection="strong")
        stranded = [rank for rank in self.ranks if component[rank] != component[0]]
        if stranded:
            raise TopologyError(
                f"topology {self.name!r} is disconnected: ranks {stranded[:8]} and rank 0 "
                "cannot reach each other both ways; add the missing links (or set duplex: "
                "true)")

    def summary(self) -> dict[str, object]:
        """Counts and totals for ``ccweave topo show``."""
        kinds: dict[str, int] = {}
        for kind in self.fabric.values():
            kinds[kind.value] = kinds.get(kind.value, 0) + 1
        return {"name": self.name, "ranks": self.num_ranks, "fabric": kinds,
                "links": len(self.links), "groups": {k: len(v) for k, v in self.groups.items()},
                "source": self.source}


def _merge_parallel(links: Iterable[Link]) -> tuple[Link, ...]:
    merged: dict[tuple[Node, Node], Link] = {}
    for link in links:
        key = (link.src, link.dst)
        if key in merged:
            old = merged[key]
            kind = old.kind if old.kind == link.kind else f"{old.kind}+{link.kind}"
            merged[key] = Link(link.src, link.dst, old.bandwidth + link.bandwidth,
                               max(old.alpha, link.alpha), kind)
        else:
            merged[key] = Link(link.src, link.dst, float(link.bandwidth), float(link.alpha),
                               link.kind)
    return tuple(merged.values())


class _Router:
    """Cheapest routes between ranks, computed per source with scipy's Dijkstra.

    Each rank is split into an *out* vertex (only leaving links) and an *in* vertex (only
    arriving links), so no path can pass through a third rank.
    """

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        n = topology.num_ranks
        total = len(topology.nodes)
        # vertex ids: rank out = rank, fabric = its node index, rank in = total + rank
        rows, cols, cost, ids = [], [], [], []
        index = topology.node_index
        for number, link in enumerate(topology.links):
            rows.append(index[link.src])
            dst = index[link.dst]
            cols.append(total + dst if topology.is_rank(link.dst) else dst)
            cost.append(link.alpha + ROUTE_REFERENCE_BYTES / link.bandwidth)
            ids.append(number)
        size = total + n
        self.size = size
        self.total = total
        self.matrix = scipy.sparse.csr_matrix((cost, (rows, cols)), shape=(size, size))
        self.edge = {(r, c): i for r, c, i in zip(rows, cols, ids)}
        self.cost = dict(zip(ids, cost))
        self._pred: dict[int, np.ndarray] = {}
        self._dist: dict[int, np.ndarray] = {}

    def _tree(self, src: int) -> tuple[np.ndarray, np.ndarray]:
        if src not in self._pred:
            dist, pred = scipy.sparse.csgraph.dijkstra(self.matrix, directed=True, indices=src,
                                                       return_predecessors=True)
            self._dist[src], self._pred[src] = dist, pred
        return self._dist[src], self._pred[src]

    def _check(self, src: int, dst: int) -> None:
        for rank in (src, dst):
            if not self.topology.is_rank(rank):
                raise TopologyError(f"topology {self.topology.name!r}: {rank!r} is not a rank "
                                    f"(0..{self.topology.num_ranks - 1})")

    def route_or_none(self, src: int, dst: int) -> tuple[int, ...] | None:
        self._check(src, dst)
        if src == dst:
            return ()
        dist, pred = self._tree(src)
        target = self.total + dst
        if not np.isfinite(dist[target]):
            return None
        path = []
        vertex = target
        while vertex != src:
            parent = int(pred[vertex])
            path.append(self.edge[(parent, vertex)])
            vertex = parent
        return tuple(reversed(path))

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        found = self.route_or_none(src, dst)
        if found is None:
            raise TopologyError(
                f"topology {self.topology.name!r}: no route from rank {src} to rank {dst} "
                "that avoids other ranks; a schedule must relay through ranks explicitly")
        return found

    def all_routes(self, src: int, dst: int) -> list[tuple[int, ...]]:
        best = self.route_or_none(src, dst)
        if not best:
            return [] if best is None else [()]
        import networkx as nx

        graph = nx.DiGraph()
        for (row, col), number in self.edge.items():
            graph.add_edge(row, col, cost=self.cost[number], id=number)
        target = self.total + dst
        routes = []
        for path in nx.all_shortest_paths(graph, src, target, weight="cost"):
            routes.append(tuple(graph.edges[a, b]["id"] for a, b in itertools.pairwise(path)))
        return routes
