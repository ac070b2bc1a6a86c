"""A sketch applied to a topology: the logical topology the solver stages work on.

Its edges are the rank-to-rank sends the sketch allows, each with the physical route
the simulator and the hardware will use (so loads land on the real NVLink, switch
port and NIC links); its symmetry is the group the ``symmetry_offsets`` generate.
Everything a sketch can get wrong for a topology (a local rank out of range, a node
its links cannot hold together, a symmetry the machine does not have) is an
``InputError`` here, naming the part of the sketch.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from functools import cached_property

from ccweave.errors import InputError
from ccweave.synth.taccl.sketch_model import Connections, Intranode, Sketch
from ccweave.topology.model import NodeKind, Topology

MAX_SYMMETRY_GROUP = 4096
"""Largest symmetry group accepted (elements), so a runaway offset list fails fast."""

_SAME = 1e-9
"""Relative tolerance when a symmetry compares link figures."""


@dataclass(frozen=True, slots=True)
class Edge:
    """One allowed send ``src -> dst``: its physical route, latency and bottleneck."""

    src: int
    dst: int
    route: tuple[int, ...]
    alpha: float
    bandwidth: float
    internode: bool
    switch: str | None = None
    """The switch the route crosses, for the hyperedge policy (intranode switch edges)."""

    def seconds(self, chunk_bytes: float) -> float:
        """Idle-machine time of one chunk over this edge: latency plus streaming."""
        return self.alpha + chunk_bytes / self.bandwidth


@dataclass(frozen=True, eq=False)
class LogicalTopology:
    """The sends a sketch allows on a topology, with their routes and symmetry.

    Parameters
    ----------
    topology, sketch: what was applied to what.
    nodes: the node groups (one group of every rank when the topology has none).
    edges: the allowed sends.
    symmetry: rank permutations of the symmetry group, identity first.
    carriers: ``(sender, source)`` pairs: ``sender`` may take ``source``'s chunks out of
        their node. ``None``: any sender carries any chunk.
    nic_sharing: NIC -> the senders whose internode sends leave through it.
    """

    topology: Topology
    sketch: Sketch
    nodes: tuple[tuple[int, ...], ...]
    edges: tuple[Edge, ...]
    symmetry: tuple[tuple[int, ...], ...]
    carriers: frozenset[tuple[int, int]] | None = None
    nic_sharing: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def num_ranks(self) -> int:
        return self.topology.num_ranks

    @cached_property
    def node_of(self) -> tuple[int, ...]:
        owner = [0] * self.num_ranks
        for number, node in enumerate(self.nodes):
            for rank in node:
                owner[rank] = number
        return tuple(owner)

    @cached_property
    def edge_id(self) -> dict[tuple[int, int], int]:
        return {(e.src, e.dst): i for i, e in enumerate(self.edges)}

    @cached_property
    def out_edges(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in range(self.num_ranks)]
        for i, e in enumerate(self.edges):
            out[e.src].append(i)
        return tuple(tuple(x) for x in out)

    @cached_property
    def in_edges(self) -> tuple[tuple[int, ...], ...]:
        into: list[list[int]] = [[] for _ in range(self.num_ranks)]
        for i, e in enumerate(self.edges):
            into[e.dst].append(i)
        return tuple(tuple(x) for x in into)

    def may_carry(self, sender: int, source: int) -> bool:
        """Whether ``sender`` may take chunks that started at ``source`` out of its node."""
        return self.carriers is None or (sender, source) in self.carriers

    def edge_image(self, permutation: tuple[int, ...], edge: int) -> int:
        """The edge a symmetry permutation maps ``edge`` to."""
        e = self.edges[edge]
        return self.edge_id[(permutation[e.src], permutation[e.dst])]

    def describe(self) -> dict[str, object]:
        """Facts for a schedule's metadata: edge counts and NIC sharing."""
        return {"sketch": self.sketch.name,
                "intranode_edges": sum(not e.internode for e in self.edges),
                "internode_edges": sum(e.internode for e in self.edges),
                "symmetry_group": len(self.symmetry),
                "nic_sharing": {nic: list(s) for nic, s in self.nic_sharing.items()}}


def apply(topology: Topology, sketch: Sketch) -> LogicalTopology:
    """The logical topology of ``sketch`` on ``topology``.

    Raises ``InputError`` naming the sketch field when the sketch does not fit the
    machine (local ranks out of range, a node its intranode strategy leaves
    disconnected, a node no relay reaches, a symmetry the machine lacks).
    """
    nodes = tuple(topology.groups.get("node", ())) or (tuple(topology.ranks),)
    source = sketch.source
    if sketch.nodes is not None and sketch.nodes != len(nodes):
        raise InputError(f"{source}: the sketch is for {sketch.nodes} node(s) (nnodes) but "
                         f"{topology.name!r} has {len(nodes)}; use a sketch written for "
                         f"{len(nodes)} node(s) or a machine with {sketch.nodes}")
    if sketch.intranode.strategy is Intranode.NONE:
        sketch = _resolve_none(topology, sketch, nodes)
    edges = _intranode_edges(topology, sketch, nodes)
    if len(nodes) > 1:
        edges += _internode_edges(topology, sketch, nodes)
    carriers = _carriers(sketch, nodes) if len(nodes) > 1 else None
    symmetry = _symmetry_group(topology, sketch, edges, nodes, carriers)
    logical = LogicalTopology(topology, sketch, nodes, tuple(edges), symmetry, carriers,
                              _nic_sharing(topology, edges))
    _check_reachable(logical, source)
    return logical


# ----------------------------------------------------------------------- intranode


def _intranode_edges(topology: Topology, sketch: Sketch,
                     nodes: tuple[tuple[int, ...], ...]) -> list[Edge]:
    intra = sketch.intranode
    edges = []
    for node_number, node in enumerate(nodes):
        switch_group = {}
        for number, group in enumerate(intra.switches):
            for local in group:
                if local >= len(node):
                    raise InputError(
                        f"{sketch.source}: {sketch.field('intranode.switches')} names local "
                        f"rank {local}, but "
                        f"node {node_number} of {topology.name!r} has {len(node)} ranks "
                        f"(0..{len(node) - 1})")
                switch_group[local] = number
        for a, u in enumerate(node):
            for b, v in enumerate(node):
                if u == v or not topology.has_route(u, v):
                    continue
                route = topology.route(u, v)
                switch = _switch_on(topology, route)
                if intra.strategy is Intranode.LINKS and len(route) != 1:
                    continue
                if intra.strategy is Intranode.SWITCH:
                    if switch is None:
                        continue
                    if intra.switches and (a not in switch_group or b not in switch_group
                                           or switch_group[a] != switch_group[b]):
                        continue
                edges.append(_edge(topology, u, v, route, False,
                                   switch if intra.strategy is Intranode.SWITCH else None))
    return edges


def _resolve_none(topology: Topology, sketch: Sketch,
                  nodes: tuple[tuple[int, ...], ...]) -> Sketch:
    """TACCL's ``none``: the first of direct links, the switch, every route that holds each
    node together."""
    for strategy in (Intranode.LINKS, Intranode.SWITCH, Intranode.ROUTES):
        trial = replace(sketch, intranode=replace(sketch.intranode, strategy=strategy))
        adjacency: dict[int, list[int]] = {}
        for e in _intranode_edges(topology, trial, nodes):
            adjacency.setdefault(e.src, []).append(e.dst)
        if all(set(node) <= _reach_map(adjacency, u) for node in nodes for u in node):
            return trial
    return replace(sketch, intranode=replace(sketch.intranode, strategy=Intranode.ROUTES))


def _reach_map(adjacency: dict[int, list[int]], start: int) -> set[int]:
    seen = {start}
    stack = [start]
    while stack:
        for v in adjacency.get(stack.pop(), ()):
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return seen


def _switch_on(topology: Topology, route: tuple[int, ...]) -> str | None:
    for link in route[:-1]:
        end = topology.links[link].dst
        if topology.kind(end) is NodeKind.SWITCH:
            return str(end)
    return None


def _edge(topology: Topology, u: int, v: int, route: tuple[int, ...], internode: bool,
          switch: str | None = None) -> Edge:
    """The send ``u -> v`` over ``route``: its links' alpha plus a measured machine's
    per-message latency (``cost_model``, as the simulator charges every remote transfer),
    which is what TACCL's profiler would have measured as alpha and what merging saves."""
    links = [topology.links[i] for i in route]
    return Edge(u, v, route,
                float(sum(lk.alpha for lk in links)) + topology.cost.message_latency,
                float(min(lk.bandwidth for lk in links)), internode, switch)


# ----------------------------------------------------------------------- internode


def _local_pairs(sketch: Sketch, size: int) -> list[tuple[int, int]]:
    """(sender, receiver) local-rank pairs of the internode map, checked against ``size``."""
    inter, source = sketch.internode, sketch.source
    everyone = tuple(range(size))
    conn = inter.connections
    if conn is Connections.DIRECT_MAP:
        if inter.receivers is not None:
            raise InputError(f"{source}: internode.receivers does not go with 'direct-map' "
                             "(local rank i always receives from local rank i); list the "
                             "ranks in internode.senders")  # ccweave's format only
        senders = inter.senders if inter.senders is not None else everyone
        pairs = [(s, s) for s in senders]
        field_name = sketch.field("internode.senders")
    elif conn is Connections.FULLY_CONNECTED:
        senders = inter.senders if inter.senders is not None else everyone
        receivers = inter.receivers if inter.receivers is not None else senders
        pairs = [(s, r) for s in senders for r in receivers]
        field_name = sketch.field("internode.senders/receivers")
    else:
        pairs = [(s, r) for s, targets in conn for r in targets]
        field_name = sketch.field("internode.connections")
    for s, r in pairs:
        if max(s, r) >= size:
            raise InputError(f"{source}: {field_name} names local rank {max(s, r)}, but the "
                             f"nodes have {size} ranks (0..{size - 1})")
    return pairs


def _internode_edges(topology: Topology, sketch: Sketch,
                     nodes: tuple[tuple[int, ...], ...]) -> list[Edge]:
    sizes = {len(node) for node in nodes}
    if len(sizes) != 1:
        raise InputError(f"{sketch.source}: internode relays name local ranks, so every node "
                         f"needs the same number of ranks; {topology.name!r} has nodes of "
                         f"{sorted(sizes)}")
    pairs = _local_pairs(sketch, sizes.pop())
    edges = []
    for a, node_a in enumerate(nodes):
        for b, node_b in enumerate(nodes):
            if a == b:
                continue
            for s, r in pairs:
                u, v = node_a[s], node_b[r]
                if not topology.has_route(u, v):
                    raise InputError(
                        f"{sketch.source}: {sketch.field('internode.connections')} sends local "
                        f"rank {s} of node "
                        f"{a} (rank {u}) to local rank {r} of node {b} (rank {v}), but "
                        f"{topology.name!r} has no route between them; pick ranks with a NIC")
                edges.append(_edge(topology, u, v, topology.route(u, v), True))
    return edges


def _carriers(sketch: Sketch, nodes: tuple[tuple[int, ...], ...]
              ) -> frozenset[tuple[int, int]] | None:
    inter, source = sketch.internode, sketch.source
    if not inter.carries:
        return None
    carries = sketch.field("internode.carries")
    size = len(nodes[0])
    senders = {s for s, _ in _local_pairs(sketch, size)}
    carried: set[int] = set()
    for sender, locals_ in inter.carries:
        if sender not in senders:
            raise InputError(f"{source}: {carries} lists local rank {sender}, which "
                             f"does not send across nodes (senders: {sorted(senders)})")
        for local in locals_:
            if local >= size:
                raise InputError(f"{source}: {carries}[{str(sender)!r}] names local "
                                 f"rank {local}; the nodes have {size} ranks")
        carried.update(locals_)
    missing = sorted(set(range(size)) - carried)
    if missing:
        raise InputError(f"{source}: {carries} gives no sender for the data of local "
                         f"rank {missing[0]}; list it under one of the senders "
                         f"{sorted(senders)}")
    return frozenset((node[sender], node[local]) for node in nodes
                     for sender, locals_ in inter.carries for local in locals_)


def _nic_sharing(topology: Topology, edges: list[Edge]) -> dict[str, tuple[int, ...]]:
    sharing: dict[str, set[int]] = {}
    for e in edges:
        if not e.internode:
            continue
        for link in e.route:
            end = topology.links[link].dst
            if topology.kind(end) is NodeKind.NIC:
                sharing.setdefault(str(end), set()).add(e.src)
                break
    return {nic: tuple(sorted(s)) for nic, s in sorted(sharing.items())}


# ------------------------------------------------------------------------ symmetry


def _rotation(n: int, offset: int, size: int) -> tuple[int, ...]:
    return tuple((r // size) * size + (r % size + offset) % size for r in range(n))


def _symmetry_group(topology: Topology, sketch: Sketch, edges: list[Edge],
                    nodes: tuple[tuple[int, ...], ...],
                    carriers: frozenset[tuple[int, int]] | None) -> tuple[tuple[int, ...], ...]:
    n = topology.num_ranks
    identity = tuple(range(n))
    if not sketch.symmetry_offsets:
        return (identity,)
    by_pair = {(e.src, e.dst): e for e in edges}
    node_of = {rank: number for number, node in enumerate(nodes) for rank in node}
    generators = []
    for i, (offset, size) in enumerate(sketch.symmetry_offsets):
        where = f"{sketch.source}: symmetry_offsets[{i}] = [{offset}, {size}]"
        if n % size:
            raise InputError(f"{where}: group_size {size} does not divide the {n} ranks of "
                             f"{topology.name!r}")
        perm = _rotation(n, offset, size)
        for e in edges:
            image = by_pair.get((perm[e.src], perm[e.dst]))
            if image is None or image.internode != e.internode:
                raise InputError(f"{where}: maps the allowed send {e.src}->{e.dst} to "
                                 f"{perm[e.src]}->{perm[e.dst]}, which the sketch does not "
                                 f"allow; {topology.name!r} lacks this symmetry (drop or "
                                 "change the offset)")
            if not (math.isclose(image.bandwidth, e.bandwidth, rel_tol=_SAME)
                    and math.isclose(image.alpha, e.alpha, rel_tol=_SAME, abs_tol=1e-15)):
                raise InputError(f"{where}: maps {e.src}->{e.dst} ({e.bandwidth / 1e9:g} GB/s) "
                                 f"to {perm[e.src]}->{perm[e.dst]} ({image.bandwidth / 1e9:g} "
                                 "GB/s, or another latency); the machine is not symmetric "
                                 "under this offset")
        for node in nodes:
            if len({node_of[perm[r]] for r in node}) != 1:
                raise InputError(f"{where}: splits node {node_of[node[0]]} across nodes; "
                                 "offsets must move whole nodes or stay inside them")
        if carriers is not None and any((perm[s], perm[r]) not in carriers
                                        for s, r in carriers):
            raise InputError(f"{where}: does not preserve "
                             f"{sketch.field('internode.carries')}")
        generators.append(perm)
    group = {identity}
    frontier = deque([identity])
    while frontier:
        g = frontier.popleft()
        for gen in generators:
            h = tuple(gen[g[r]] for r in range(n))
            if h not in group:
                if len(group) >= MAX_SYMMETRY_GROUP:
                    raise InputError(f"{sketch.source}: symmetry_offsets generate more than "
                                     f"{MAX_SYMMETRY_GROUP} symmetries; use fewer offsets")
                group.add(h)
                frontier.append(h)
    for g in group:
        fixed = [r for r in range(n) if g[r] == r]
        if fixed and g != identity:
            raise InputError(f"{sketch.source}: symmetry_offsets combine into a symmetry that "
                             f"keeps rank {fixed[0]} in place while moving others; use offsets "
                             "whose combinations move every rank (e.g. [8, 16] on two nodes)")
    return (identity, *sorted(group - {identity}))


# ---------------------------------------------------------------------- reachability


def _check_reachable(logical: LogicalTopology, source: str) -> None:
    """Every rank must reach every rank: inside a node over intranode edges, and from
    each node to each other over one relay (a sender that carries the data)."""
    strategy = logical.sketch.intranode.strategy.value
    intra: list[list[int]] = [[] for _ in range(logical.num_ranks)]
    for e in logical.edges:
        if not e.internode:
            intra[e.src].append(e.dst)
    for number, node in enumerate(logical.nodes):
        for u in node:
            seen = _reach(intra, u)
            missing = [v for v in node if v not in seen]
            if missing:
                hint = "'routes' or 'switch'" if strategy == "links" else "'routes'"
                field = logical.sketch.field("intranode.strategy")
                if logical.sketch.taccl_keys:  # TACCL's none takes any route that holds
                    strategy, hint = ("switch", "'none'") if strategy == "switch" \
                        else ("none", "'switch'")
                raise InputError(
                    f"{source}: {field} {strategy!r} leaves rank {u} unable to reach "
                    f"rank {missing[0]} inside node {number} of {logical.topology.name!r}; use "
                    f"{field} {hint}")
    if len(logical.nodes) == 1:
        return
    outgoing: dict[tuple[int, int], list[int]] = {}
    for e in logical.edges:
        if e.internode:
            outgoing.setdefault((e.src, logical.node_of[e.dst]), []).append(e.dst)
    for a, node in enumerate(logical.nodes):
        for s in node:
            for b in range(len(logical.nodes)):
                if b != a and not any((x, b) in outgoing and logical.may_carry(x, s)
                                      for x in node):
                    part = logical.sketch.field("internode.carries" if logical.carriers
                                                is not None else "internode.connections")
                    raise InputError(f"{source}: {part} lets no rank of node {a} carry the "
                                     f"data of rank {s} to node {b}; add a sender for it")


def _reach(adjacency: list[list[int]], start: int) -> set[int]:
    seen = {start}
    stack = [start]
    while stack:
        u = stack.pop()
        for v in adjacency[u]:
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return seen
