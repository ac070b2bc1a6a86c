"""A sketch in canonical labels, so that what the stages pick does not depend on rank
numbers.

Every stage breaks ties by labels somewhere: HiGHS returns one of several optimal routings
depending on its variables' order, the tree selection offers split trees by rank number,
the heuristics and the route search go through ranks in order. On a machine with
automorphisms, a sketch and its relabelled twin (the even GPUs of DGX-2's pairs relaying
instead of the odd) are the same problem, yet the stages used to answer them differently
(``sk1-dgx2-n2``: 553.8 against 550.7 us exported).

So the stages solve one representative of the sketch's class: among the renumberings of
local ranks (the same in every node) that are automorphisms of the machine and keep the
sketch's symmetry group, the one whose renumbered sketch has the least key; the schedule
found is renumbered back (:func:`relabel_schedule`). A sketch and any twin under such an
automorphism have the same representative, so the same schedule up to the renumbering.
Where the machine has too many such renumberings to list (a sketch without symmetry
offsets on DGX-2: 8! x 2^8), the sketch is solved as written, and the note says so.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from ccweave.collectives import Kind
from ccweave.schedule import Buffer, Schedule, Transfer
from ccweave.synth.taccl import logical
from ccweave.synth.taccl.sketch_model import Connections, Sketch
from ccweave.topology.model import Topology

MAX_AUTOMORPHISMS = 512
"""Most renumberings listed; beyond it the sketch is solved as written."""
MAX_VISITS = 200_000
"""Most partial renumberings the backtracking visits before it gives up the same way."""
_SAME = 1e-9
"""Relative tolerance when link figures are compared."""


@dataclass(frozen=True)
class Canonical:
    """The sketch the stages solve, the local renumbering ``local`` that took the given
    sketch to it (``local[i]`` is the new number of local rank ``i``), and a note."""

    sketch: Sketch
    local: tuple[int, ...]
    note: str

    @property
    def identity(self) -> bool:
        return self.local == tuple(range(len(self.local)))


def canonical(topology: Topology, sketch: Sketch) -> Canonical:
    """The representative of ``sketch``'s class under the machine's automorphisms that keep
    its symmetry (see the module docstring). A sketch that does not fit the machine is
    refused here as written (``InputError`` naming the user's field)."""
    logical.apply(topology, sketch)
    nodes = tuple(topology.groups.get("node", ())) or (tuple(topology.ranks),)
    size = len(nodes[0])
    identity = tuple(range(size))
    if any(len(node) != size for node in nodes):
        return Canonical(sketch, identity, "nodes of different sizes: solved as written")
    found = automorphisms(topology, nodes, _generators(topology.num_ranks, sketch))
    if found is None:
        return Canonical(sketch, identity, "the machine has too many renumberings that keep "
                         "the sketch's symmetry to list: solved as written")
    best = min(found, key=lambda local: _key(relabel_sketch(sketch, local)))
    chosen = relabel_sketch(sketch, best)
    return Canonical(chosen, best, f"solved in canonical labels (local rank i is "
                     f"{list(best)}[i]; {len(found)} renumberings keep the sketch's symmetry)")


def _generators(n: int, sketch: Sketch) -> list[tuple[int, ...]]:
    return [tuple((r // size) * size + (r % size + offset) % size for r in range(n))
            for offset, size in sketch.symmetry_offsets if size and n % size == 0]


def automorphisms(topology: Topology, nodes: tuple[tuple[int, ...], ...],
                  generators: list[tuple[int, ...]]) -> list[tuple[int, ...]] | None:
    """Every renumbering of local ranks, the same in each node, that maps the machine onto
    itself (every route onto a route of the same links' figures, links onto links) and
    commutes with each of ``generators``; ``None`` when there are more than
    :data:`MAX_AUTOMORPHISMS` or the search visits more than :data:`MAX_VISITS`."""
    size = len(nodes[0])
    local_of = {rank: i for node in nodes for i, rank in enumerate(node)}
    node_of = {rank: k for k, node in enumerate(nodes) for rank in node}
    pairs = [(a, b) for a in range(2) if a < len(nodes) for b in range(2) if b < len(nodes)]

    routes = {(u, v): topology.route(u, v) if topology.has_route(u, v) else None
              for u in topology.ranks for v in topology.ranks if u != v}
    classes: dict[tuple, int] = {}
    sig: dict[tuple[int, int], int] = {}
    for na, nb in pairs:
        for x in range(size):
            for y in range(size):
                u, v = nodes[na][x], nodes[nb][y]
                if u != v:
                    sig[(u, v)] = classes.setdefault(_figures(topology, u, v), len(classes))

    def image(perm: dict[int, int], rank: int) -> int | None:
        local = perm.get(local_of[rank])
        return None if local is None else nodes[node_of[rank]][local]

    found: list[tuple[int, ...]] = []
    visits = 0

    def consistent(perm: dict[int, int], new: int) -> bool:
        for old in perm:
            for na, nb in pairs:
                for x, y in ((new, old), (old, new)):
                    if x == y and na == nb:
                        continue
                    u, v = nodes[na][x], nodes[nb][y]
                    if sig[(u, v)] != sig[(nodes[na][perm[x]], nodes[nb][perm[y]])]:
                        return False
        for gen in generators:  # perm(gen(r)) == gen(perm(r)) where both are known
            for local in perm:
                for node in nodes:
                    rank = node[local]
                    left, right = image(perm, gen[rank]), image(perm, rank)
                    if left is not None and left != gen[right]:
                        return False
        return True

    def extend(perm: dict[int, int], used: set[int]) -> bool:
        nonlocal visits
        visits += 1
        if visits > MAX_VISITS or len(found) > MAX_AUTOMORPHISMS:
            return False
        if len(perm) == size:
            local = tuple(perm[i] for i in range(size))
            if _maps_links(topology, nodes, local, routes):
                found.append(local)
            return True
        new = len(perm)
        for target in range(size):
            if target in used:
                continue
            perm[new] = target
            used.add(target)
            ok = not consistent(perm, new) or extend(perm, used)
            del perm[new]
            used.discard(target)
            if not ok:
                return False
        return True

    if not extend({}, set()) or len(found) > MAX_AUTOMORPHISMS:
        return None
    return found


def _figures(topology: Topology, u: int, v: int) -> tuple:
    """A route's figures, rounded so that equal figures compare equal: hops, latency,
    bottleneck; ``()`` without a route."""
    if not topology.has_route(u, v):
        return ()
    links = [topology.links[i] for i in topology.route(u, v)]
    return (len(links), float(f"{sum(lk.alpha for lk in links):.9g}"),
            float(f"{min(lk.bandwidth for lk in links):.9g}"))


def _maps_links(topology: Topology, nodes: tuple[tuple[int, ...], ...],
                local: tuple[int, ...],
                routes: dict[tuple[int, int], tuple[int, ...] | None]) -> bool:
    """Whether renumbering by ``local`` in every node maps each rank pair's route onto the
    image pair's route link by link, links onto links one to one, with equal figures and
    fabric nodes onto fabric nodes of the same kind."""
    perm = global_permutation(nodes, local)
    link_map: dict[int, int] = {}
    node_map: dict[object, object] = {}
    for (u, v), here in routes.items():
        there = routes[(perm[u], perm[v])]
        if here is None or there is None:
            if here is not there:
                return False
            continue
        if len(here) != len(there):
            return False
        for i, j in zip(here, there, strict=True):
            if link_map.setdefault(i, j) != j:
                return False
    for i, j in link_map.items():
        a, b = topology.links[i], topology.links[j]
        if not (math.isclose(a.bandwidth, b.bandwidth, rel_tol=_SAME)
                and math.isclose(a.alpha, b.alpha, rel_tol=_SAME, abs_tol=1e-15)):
            return False
        for x, y in ((a.src, b.src), (a.dst, b.dst)):
            if node_map.setdefault(x, y) != y:
                return False
    if len(set(link_map.values())) != len(link_map) or \
            len(set(node_map.values())) != len(node_map):
        return False
    return all(isinstance(y, int) if isinstance(x, int) else
               topology.fabric.get(x) == topology.fabric.get(y) for x, y in node_map.items())


def global_permutation(nodes: tuple[tuple[int, ...], ...], local: tuple[int, ...]
                       ) -> tuple[int, ...]:
    """The rank permutation that renumbers local ranks by ``local`` in every node."""
    perm = [0] * sum(len(node) for node in nodes)
    for node in nodes:
        for i, rank in enumerate(node):
            perm[rank] = node[local[i]]
    return tuple(perm)


def relabel_sketch(sketch: Sketch, local: tuple[int, ...]) -> Sketch:
    """``sketch`` with local rank ``i`` renamed ``local[i]`` in every field that names one
    (lists sorted, so equal sketches compare equal)."""

    def ranks(values: tuple[int, ...] | None) -> tuple[int, ...] | None:
        return None if values is None else tuple(sorted(local[v] for v in values))

    def rank_map(pairs: tuple[tuple[int, tuple[int, ...]], ...]
                 ) -> tuple[tuple[int, tuple[int, ...]], ...]:
        return tuple(sorted((local[s], ranks(targets)) for s, targets in pairs))

    inter, intra = sketch.internode, sketch.intranode
    conn = inter.connections if isinstance(inter.connections, Connections) else \
        rank_map(inter.connections)
    return replace(sketch, intranode=replace(intra, switches=tuple(sorted(
        ranks(group) for group in intra.switches))), internode=replace(
        inter, connections=conn, senders=ranks(inter.senders),
        receivers=ranks(inter.receivers), carries=rank_map(inter.carries)))


def _key(sketch: Sketch) -> tuple:
    inter = sketch.internode
    conn = inter.connections
    return (conn.value if isinstance(conn, Connections) else "", ()
            if isinstance(conn, Connections) else conn, inter.senders or (),
            inter.receivers or (), inter.carries, sketch.intranode.switches)


def relabel_schedule(schedule: Schedule, perm: tuple[int, ...]) -> Schedule:
    """``schedule`` with rank ``r`` renamed ``perm[r]``: a buffer of a slot per chunk of
    the size buffer (allgather's output, alltoall's both, reduce-scatter's input) has its
    per-rank blocks moved with the ranks; per-rank buffers and scratch stay. A transfer
    whose slots cross a block boundary that the renaming breaks becomes one transfer per
    piece, each with the same dependencies (later ones wait for all the pieces)."""
    coll = schedule.collective
    c, total = coll.chunks_per_rank, coll.total_chunks

    def moves(buffer: Buffer) -> bool:
        return buffer is not Buffer.SCRATCH and coll.buffer_chunks(buffer) == total and \
            coll.kind is not Kind.ALLREDUCE and total != c

    def index(buffer: Buffer, i: int) -> int:
        return perm[i // c] * c + i % c if moves(buffer) else i

    pieces: list[list[tuple[int, int]]] = []  # per transfer: (offset, count) of each part
    for t in schedule.transfers:
        cuts = sorted({0, t.count} | {
            k for k in range(1, t.count) for buffer, i in
            ((t.src_buffer, t.src_index), (t.dst_buffer, t.dst_index))
            if index(buffer, i + k) != index(buffer, i + k - 1) + 1})
        pieces.append([(lo, hi - lo) for lo, hi in itertools.pairwise(cuts)])
    first = list(itertools.accumulate((len(p) for p in pieces), initial=0))
    out: list[Transfer] = []
    for n, t in enumerate(schedule.transfers):  # deps may name later transfers
        deps = tuple(sorted(first[d] + k for d in t.deps for k in range(len(pieces[d]))))
        for lo, count in pieces[n]:
            out.append(replace(t, src=perm[t.src], dst=perm[t.dst],
                               src_index=index(t.src_buffer, t.src_index + lo),
                               dst_index=index(t.dst_buffer, t.dst_index + lo),
                               count=count, deps=deps))
    return replace(schedule, transfers=tuple(out))
