"""Tree strategies: NCCL's double binary tree and MPI's binomial tree.

``double-binary-tree`` builds two complementary binary trees (a rank that is a leaf in
one is interior in the other, NCCL's ``ncclGetDtree``: the second tree mirrors the
first, or shifts it by one for an odd count), each carrying half the data in pipelined
chunks: a tree edge sends chunk ``k+1`` after chunk ``k``, so chunk ``k``'s broadcast
overlaps chunk ``k+1``'s reduction. Ranks follow :func:`topology_order`, so in-order
subtrees stay inside nodes and sockets; where a node's links are uneven (DGX-1) the
order within nodes is searched so tree edges ride the fast links (:func:`tree_order`).

``binomial`` is MPI's (MPICH's) binomial tree over ranks relative to the root, moving
whole blocks: latency-optimal, ``ceil(log2 N)`` steps.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, cached_property

import numpy as np

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError
from ccweave.schedule import Schedule, ScheduleBuilder
from ccweave.synth.layout import (
    chunks_for,
    node_blocks,
    pipeline_chunks,
    reject_options,
    require_kind,
    require_routes,
    route_bandwidths,
    runs,
    schedule_name,
    topology_order,
)
from ccweave.synth.registry import register
from ccweave.topology.model import Topology

IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH

TREE_KINDS = frozenset({Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE})
BINOMIAL_KINDS = frozenset({Kind.BROADCAST, Kind.REDUCE, Kind.GATHER, Kind.SCATTER})
CHUNKS_PER_TREE = 8
"""Default pipeline depth: at least this many chunks go down each of the two trees."""


@dataclass(frozen=True)
class Tree:
    """A rooted tree over ranks: ``parent[rank]`` (``None`` at the root)."""

    parent: dict[int, int | None]

    @cached_property
    def root(self) -> int:
        return next(rank for rank, up in self.parent.items() if up is None)

    @cached_property
    def children(self) -> dict[int, tuple[int, ...]]:
        kids: dict[int, list[int]] = {rank: [] for rank in self.parent}
        for rank, up in self.parent.items():
            if up is not None:
                kids[up].append(rank)
        return {rank: tuple(sorted(k)) for rank, k in kids.items()}

    def top_down(self) -> list[int]:
        """Ranks in breadth-first order from the root (parents before children)."""
        order = [self.root]
        for rank in order:
            order.extend(self.children[rank])
        return order

    def edges(self) -> list[tuple[int, int]]:
        """(parent, child) pairs."""
        return [(up, rank) for rank, up in self.parent.items() if up is not None]


# ----------------------------------------------------------- double binary tree

def btree_parent(position: int, n: int) -> int | None:
    """Parent of ``position`` in NCCL's binary tree over ``0..n-1`` (``ncclGetBtree``):
    position 0 is the root with one child; odd positions are leaves."""
    if position == 0:
        return None
    bit = position & -position
    up = (position ^ bit) | (bit << 1)
    return up if up < n else position ^ bit


def btree(sequence: Sequence[int]) -> Tree:
    """NCCL's binary tree with position ``p`` held by rank ``sequence[p]``."""
    n = len(sequence)
    return Tree({sequence[p]: (None if (up := btree_parent(p, n)) is None else sequence[up])
                 for p in range(n)})


def complement_index(m: int) -> list[int]:
    """Where the second tree takes each position from: mirrored for an even count,
    shifted by one for an odd count (NCCL's ``ncclGetDtree``)."""
    if m % 2 == 0:
        return list(reversed(range(m)))
    return [*range(1, m), 0][:m]


def _complement(sequence: Sequence[int]) -> list[int]:
    return [sequence[i] for i in complement_index(len(sequence))]


def double_binary_tree(order: Sequence[int], root: int | None = None) -> tuple[Tree, Tree]:
    """Two complementary binary trees over ``order``.

    Unrooted (``root=None``, for allreduce) it is NCCL's pair; rooted, both trees hang
    from ``root`` (one child each) and the other ranks form the complementary pair.
    """
    if root is None:
        return btree(order), btree(_complement(order))
    others = [rank for rank in order if rank != root]
    return btree([root, *others]), btree([root, *_complement(others)])


SEARCH_LIMIT = 8
"""Rank orders are searched exhaustively over node-local permutations up to this many
ranks per node (8! = 40320 candidates, scored at once with numpy)."""
ORDERS = ("auto", "topology", "rank")


@cache
def _permutations(g: int) -> np.ndarray:
    return np.array(list(itertools.permutations(range(g))), dtype=np.intp)


def _tree_positions(candidates: np.ndarray, root: int | None) -> list[np.ndarray]:
    """For each candidate order (rows), the ranks at the positions of the two trees."""
    if root is None:
        return [candidates, candidates[:, complement_index(candidates.shape[1])]]
    count = candidates.shape[0]
    others = candidates[candidates != root].reshape(count, -1)
    top = np.full((count, 1), root)
    return [np.hstack([top, others]),
            np.hstack([top, others[:, complement_index(others.shape[1])]])]


def tree_order(topology: Topology, root: int | None = None, order: str = "auto") -> list[int]:
    """The rank order the double binary tree is laid over.

    ``topology``: :func:`topology_order` (nodes, then sockets); ``rank``: ``0..N-1``;
    ``auto``: where a node's ranks are joined unevenly (DGX-1's hybrid cube mesh, a
    host-staged path) and a node holds at most :data:`SEARCH_LIMIT` ranks, the
    permutation of each node's ranks (the same in every node) whose tree edges have
    routes, then the fastest slowest intra-node edge, then the least summed ``1/bw``.
    """
    if order not in ORDERS:
        raise InputError(f"double-binary-tree: order {order!r} is not one of "
                         + ", ".join(ORDERS))
    if order == "rank":
        return list(topology.ranks)
    base = topology_order(topology)
    blocks = node_blocks(topology, base)
    g = len(blocks[0])
    if order == "topology" or g > SEARCH_LIMIT or any(len(b) != g for b in blocks):
        return base
    bandwidth = route_bandwidths(topology)
    inside = np.zeros_like(bandwidth, dtype=bool)
    for block in blocks:
        inside[np.ix_(block, block)] = True
    np.fill_diagonal(inside, False)
    if len(set(bandwidth[inside].tolist())) <= 1:
        return base  # every order is as good
    perms = _permutations(g)
    keys = [_score(np.hstack([np.asarray(block)[part] for block in blocks]), root, bandwidth,
                   inside) for part in np.array_split(perms, max(1, len(perms) // 4096))]
    routed, slowest, cost = (np.concatenate(column) for column in zip(*keys))
    best = perms[np.lexsort((cost, -slowest, ~routed))[0]]
    return [rank for block in blocks for rank in np.asarray(block)[best].tolist()]


def _score(candidates: np.ndarray, root: int | None, bandwidth: np.ndarray,
           inside: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per candidate order: whether every tree edge is routed both ways, the slowest
    intra-node edge, and the summed ``1/bw`` of all edges (quantised so ties stay ties)."""
    n = candidates.shape[1]
    child = np.arange(1, n)
    parent = np.array([btree_parent(p, n) for p in child], dtype=np.intp)
    ends = [(seq[:, child], seq[:, parent]) for seq in _tree_positions(candidates, root)]
    a = np.hstack([e[0] for e in ends])
    b = np.hstack([e[1] for e in ends])
    width = np.minimum(bandwidth[a, b], bandwidth[b, a])
    routed = (width > 0).all(axis=1)
    slowest = np.where(inside[a, b], width, np.inf).min(axis=1)
    unit = 1 / bandwidth[np.isfinite(bandwidth)].max()
    with np.errstate(divide="ignore"):
        cost = np.round((1 / width).sum(axis=1) / unit, 6)
    return routed, slowest, cost


class _Edges:
    """Chains the chunks sent over each tree edge: a FIFO pipeline, as NCCL's."""

    def __init__(self) -> None:
        self.last: dict[tuple[int, int, int], int] = {}

    def after(self, tree: int, src: int, dst: int) -> tuple[int, ...]:
        index = self.last.get((tree, src, dst))
        return () if index is None else (index,)

    def sent(self, tree: int, src: int, dst: int, index: int) -> None:
        self.last[(tree, src, dst)] = index


def _reduce_up(b: ScheduleBuilder, tree: Tree, number: int, k: int, edges: _Edges) -> None:
    """Sum chunk ``k`` of every input towards the root: each interior rank copies its own
    input into its accumulator, adds what its children sent into scratch, sends it up."""
    coll = b.collective
    total = coll.total_chunks
    recv_base = total if coll.kind is Kind.REDUCE else 0  # REDUCE keeps partial sums at 0..T

    def acc(rank: int) -> tuple[Buffer, int]:
        if coll.kind is Kind.ALLREDUCE or rank == tree.root:
            return OUT, k
        return SCRATCH, k

    for rank in reversed(tree.top_down()):
        kids = tree.children[rank]
        if kids:
            b.copy(rank, rank, (IN, k), acc(rank))
            for j, kid in enumerate(kids):
                slot = (SCRATCH, recv_base + j * total + k)
                src = acc(kid) if tree.children[kid] else (IN, k)
                index = b.copy(kid, rank, src, slot, channel=number,
                               after=edges.after(number, kid, rank))
                edges.sent(number, kid, rank, index)
                b.reduce(rank, rank, slot, acc(rank), channel=number)
        elif rank == tree.root:  # a one-rank tree
            b.copy(rank, rank, (IN, k), acc(rank))


def _broadcast_down(b: ScheduleBuilder, tree: Tree, number: int, k: int, edges: _Edges,
                    source: tuple[Buffer, int]) -> None:
    """Send chunk ``k`` from the root's ``source`` slot into every rank's output."""
    for rank in tree.top_down():
        src = source if rank == tree.root else (OUT, k)
        for kid in tree.children[rank]:
            index = b.copy(rank, kid, src, (OUT, k), channel=number,
                           after=edges.after(number, rank, kid))
            edges.sent(number, rank, kid, index)


def _tree_chunks(total: int) -> list[range]:
    """Chunk ranges of the two trees: the first half and the second half."""
    half = (total + 1) // 2
    return [range(0, half), range(half, total)]


@register("double-binary-tree", TREE_KINDS,
          "NCCL's double binary tree: two complementary binary trees each carry half the "
          "data, pipelined in chunks (allreduce: reduce up, broadcast down)")
def build_double_binary_tree(topology: Topology, kind: Kind, *, root: int = 0,
                             chunks: int | None = None, **options: object) -> Schedule:
    """Double-binary-tree schedule of ``kind`` (allreduce, broadcast, reduce).

    ``chunks`` (per rank) defaults to enough for :data:`CHUNKS_PER_TREE` pipeline
    steps per tree; option ``order`` (``auto``, ``topology``, ``rank``) picks the rank
    order the trees are laid over (:func:`tree_order`). Raises ``NotApplicableError``
    when a tree edge has no route.
    """
    require_kind(kind, TREE_KINDS, "double-binary-tree")
    reject_options(options, "double-binary-tree", ["order"])
    order = str(options.get("order", "auto"))
    n = topology.num_ranks
    c = chunks_for(chunks, pipeline_chunks(n, CHUNKS_PER_TREE, parts=2))
    coll = Collective(kind, n, c, root)
    top = None if kind is Kind.ALLREDUCE else coll.root
    trees = double_binary_tree(tree_order(topology, top, order), top)
    edges = {edge for tree in trees for edge in tree.edges()}
    if kind is not Kind.BROADCAST:
        require_routes(topology, sorted((kid, up) for up, kid in edges), "double-binary-tree")
    if kind is not Kind.REDUCE:
        require_routes(topology, sorted(edges), "double-binary-tree")
    b = ScheduleBuilder(coll)
    fifo = _Edges()
    for number, (tree, part) in enumerate(zip(trees, _tree_chunks(coll.total_chunks))):
        for k in part:
            if kind is Kind.BROADCAST:
                b.copy(tree.root, tree.root, (IN, k), (OUT, k), channel=number)
                _broadcast_down(b, tree, number, k, fifo, (IN, k))
            else:
                _reduce_up(b, tree, number, k, fifo)
                if kind is Kind.ALLREDUCE:
                    _broadcast_down(b, tree, number, k, fifo, (OUT, k))
    shown = None if order == "auto" else order
    return b.build(schedule_name("double-binary-tree", chunks=c, order=shown),
                   topology=topology.name,
                   trees=[[t.parent[r] for r in range(n)] for t in trees])


# ------------------------------------------------------------------- binomial

def _lowbit(v: int, n: int) -> int:
    """The span of relative rank ``v``'s subtree bound (``v``'s lowest set bit; ``n``'s
    next power of two for the root)."""
    if v:
        return v & -v
    span = 1
    while span < n:
        span <<= 1
    return span


def binomial_children(v: int, n: int) -> list[int]:
    """Children of relative rank ``v`` in MPI's binomial tree, largest subtree first."""
    kids, mask = [], _lowbit(v, n) >> 1
    while mask:
        if v + mask < n:
            kids.append(v + mask)
        mask >>= 1
    return kids


def subtree_size(v: int, n: int) -> int:
    """Ranks in relative rank ``v``'s binomial subtree (``v .. v+size-1``)."""
    return min(_lowbit(v, n), n - v)


class _Binomial:
    """MPI's binomial tree of one collective, over ranks relative to its root."""

    def __init__(self, b: ScheduleBuilder) -> None:
        self.b = b
        self.coll = b.collective
        self.n, self.c = self.coll.num_ranks, self.coll.chunks_per_rank
        self.root = self.coll.root
        self.last_send: dict[int, int] = {}

    def rank(self, v: int) -> int:
        return (v + self.root) % self.n

    def send(self, v: int, w: int, src: tuple[Buffer, int], dst: tuple[Buffer, int],
             count: int, reduce: bool = False) -> int:
        """A transfer from relative ``v`` to relative ``w``; a rank's sends go one at a
        time, largest subtree first, as MPI's blocking sends."""
        after = () if v not in self.last_send else (self.last_send[v],)
        add = self.b.reduce if reduce else self.b.copy
        index = add(self.rank(v), self.rank(w), src, dst, count, after=after)
        if not reduce:
            self.last_send[v] = index
        return index

    def blocks(self, v: int, first: int, count: int) -> list[tuple[int, int, int]]:
        """Runs ``(relative offset, absolute offset, count)`` of the chunks of relative
        ranks ``first .. first+count-1`` (contiguous relative, maybe wrapped absolute)."""
        c = self.c
        pairs = [((u - v) * c + i, self.rank(u) * c + i)
                 for u in range(first, first + count) for i in range(c)]
        return runs(pairs)

    # ------------------------------------------------------------ collectives

    def broadcast(self) -> None:
        total = self.coll.total_chunks
        self.b.copy(self.root, self.root, (IN, 0), (OUT, 0), total)
        for v in range(self.n):
            src = (IN, 0) if v == 0 else (OUT, 0)
            for w in binomial_children(v, self.n):
                self.send(v, w, src, (OUT, 0), total)

    def reduce(self) -> None:
        """Children reduce straight into their parent's accumulator, one after another
        (smallest subtree first), as MPICH's receive-and-reduce loop."""
        total = self.coll.total_chunks

        def acc(v: int) -> tuple[Buffer, int]:
            return (OUT, 0) if v == 0 else (SCRATCH, 0)

        for v in reversed(range(self.n)):
            kids = binomial_children(v, self.n)
            if kids:
                self.b.copy(self.rank(v), self.rank(v), (IN, 0), acc(v), total)
            for w in reversed(kids):
                src = acc(w) if binomial_children(w, self.n) else (IN, 0)
                self.send(w, v, src, acc(v), total, reduce=True)
        if self.n == 1:
            self.b.copy(self.root, self.root, (IN, 0), (OUT, 0), total)

    def gather(self) -> None:
        """Each rank collects its subtree's blocks in scratch (relative order) and sends
        them up in one piece; the root places them at their absolute offsets."""
        c = self.c
        self.b.copy(self.root, self.root, (IN, 0), (OUT, self.root * c), c)
        for v in reversed(range(1, self.n)):
            if binomial_children(v, self.n):
                self.b.copy(self.rank(v), self.rank(v), (IN, 0), (SCRATCH, 0), c)
        for v in reversed(range(self.n)):
            for w in reversed(binomial_children(v, self.n)):
                size = subtree_size(w, self.n)
                src = SCRATCH if size > 1 else IN
                if v == 0:
                    for rel, absolute, count in self.blocks(w, w, size):
                        self.send(w, v, (src, rel), (OUT, absolute), count)
                else:
                    self.send(w, v, (src, 0), (SCRATCH, (w - v) * c), size * c)

    def scatter(self) -> None:
        """The root sends each child its subtree's blocks; each rank keeps its own and
        passes the rest on."""
        c = self.c
        self.b.copy(self.root, self.root, (IN, self.root * c), (OUT, 0), c)
        for v in range(self.n):
            for w in binomial_children(v, self.n):
                size = subtree_size(w, self.n)
                dst = SCRATCH if size > 1 else OUT
                if v == 0:
                    for rel, absolute, count in self.blocks(w, w, size):
                        self.send(v, w, (IN, absolute), (dst, rel), count)
                else:
                    self.send(v, w, (SCRATCH, (w - v) * c), (dst, 0), size * c)
            if v and subtree_size(v, self.n) > 1:
                self.b.copy(self.rank(v), self.rank(v), (SCRATCH, 0), (OUT, 0), c)


@register("binomial", BINOMIAL_KINDS,
          "MPI's binomial tree over ranks relative to the root: ceil(log2 N) steps, "
          "whole blocks per step (latency-optimal)")
def build_binomial(topology: Topology, kind: Kind, *, root: int = 0, chunks: int | None = None,
                   **options: object) -> Schedule:
    """Binomial-tree schedule of ``kind`` (broadcast, reduce, gather, scatter).

    Raises ``NotApplicableError`` when a tree edge has no route.
    """
    require_kind(kind, BINOMIAL_KINDS, "binomial")
    reject_options(options, "binomial")
    c = chunks_for(chunks)
    n = topology.num_ranks
    coll = Collective(kind, n, c, root)
    edges = [((v + coll.root) % n, (w + coll.root) % n)
             for v in range(n) for w in binomial_children(v, n)]
    if kind in (Kind.REDUCE, Kind.GATHER):
        edges = [(kid, up) for up, kid in edges]
    require_routes(topology, edges, "binomial")
    b = ScheduleBuilder(coll)
    getattr(_Binomial(b), kind.value)()
    return b.build(schedule_name("binomial", chunks=c), topology=topology.name)
