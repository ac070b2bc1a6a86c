"""Lower bounds on the time of a collective on a topology: proofs, never estimates.

Fabric nodes are plain vertices: they forward, never reduce. Every bandwidth term is
``seconds per byte`` of the size buffer (nccl-tests' ``size``), computed once per
topology and cached, so bounds over many sizes cost one computation. Every cut-based
figure is the exact ratio of a real vertex set (the *witness*), so it is a valid bound
even where integer max-flow scaling makes the search itself approximate.

- allgather: ``(M/N) * max_S |S ∩ ranks| / B_out(S)`` over sets S holding a rank and
  leaving a rank out, found exactly by Dinkelbach iteration on max-flows.
- reduce-scatter: the same on the reversed graph (``B_in``).
- allreduce: the largest of the allgather and reduce-scatter cuts, ``M / min cut`` (every
  rank's result depends on every other rank's input: ``M`` bytes must cross every cut
  that splits the ranks, both ways) and the message-count bound of a rank partition
  (``2(m-1)`` messages per element among ``m`` parts, no coding). RS + AG, what
  reduce-scatter then allgather reaches at best, is *not* a bound: ``rs_ag_s``.
- broadcast / reduce: ``M / min_v maxflow(root, v)`` (reversed for reduce).
- gather / scatter: each non-root rank's ``M/N`` into / out of the root (a single-sink cut).
- alltoall: ``M/N`` per ordered pair; the maximum concurrent flow LP (HiGHS, certified by
  its duals) when small enough, otherwise a cut bound over rank and group cuts.
- latency: the longest alpha-weighted shortest path a required chunk must cross; and no
  byte crosses a cut before the smallest alpha of its links has passed (a transfer
  streams only after its route's latency), so a cut's bound is its bytes over its
  bandwidth *plus* that alpha.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from ccweave.collectives import Collective, Kind
from ccweave.errors import InputError, SolverError, TopologyError
from ccweave.topology.model import Node, Topology

ALLTOALL_LP_LIMIT = 200_000
"""Largest LP (ranks x links, after folding fabric chains) solved for the alltoall bound;
bigger topologies get the cut bound."""

_FLOW_TOTAL = 2**30
"""Integer capacity budget of one max-flow: scipy's ``maximum_flow`` counts in int32."""

_RELATIVE_STEP = 1e-12
"""A Dinkelbach step must raise the ratio by more than this (guards float ties)."""


# ------------------------------------------------------------------------- result


@dataclass(frozen=True)
class Bound:
    """A proven lower bound on the time of one collective of ``size_bytes`` on a topology.

    Parameters
    ----------
    time_s: the bound, ``max(cut_s, latency_s)``: no schedule on this topology's model
        (the simulator's) is faster.
    bandwidth_s: the largest pure bandwidth term (bytes over a cut's bandwidth; scales
        linearly with size).
    cut_s: the largest ``bytes / bandwidth + alpha`` over the cuts tried: the bandwidth
        term of a cut plus the smallest latency of its links.
    latency_s: the longest alpha path a required chunk must cross.
    method: which bound gave ``time_s``.
    witness: the binding cut's vertex set S (ranks and fabric names) when there is one:
        the data of its ranks must leave S (reduce-scatter, reduce, scatter: must enter S).
    kind, size_bytes, num_ranks: what was bounded.
    rs_ag_s: allreduce only: the reduce-scatter bound plus the allgather bound, what
        reduce-scatter then allgather can reach at best. *Not* a bound on allreduce
        (pipelined trees beat it on uneven machines); a reference for RS+AG schedules.
    """

    time_s: float
    bandwidth_s: float
    cut_s: float
    latency_s: float
    method: str
    witness: frozenset[Node] | None
    kind: Kind
    size_bytes: float
    num_ranks: int
    rs_ag_s: float | None = None

    @property
    def algbw(self) -> float:
        """``size / time`` in bytes/second (``inf`` for a zero bound)."""
        return self.size_bytes / self.time_s if self.time_s > 0 else math.inf

    @property
    def busbw(self) -> float:
        """``algbw`` times nccl-tests' bus-bandwidth factor for this collective."""
        return self.algbw * Collective(self.kind, self.num_ranks).busbw_factor

    def ratio(self, time_s: float) -> float:
        """``time / bound``: how far a measured or simulated time is from the bound."""
        return time_s / self.time_s if self.time_s > 0 else math.inf


@dataclass(frozen=True)
class _Cut:
    """One proven bound of the form ``per_byte * size + alpha`` (seconds)."""

    per_byte: float
    alpha: float
    method: str
    witness: frozenset[Node] | None = None


# --------------------------------------------------------------------- public API


def lower_bound(topology: Topology, kind: Kind | str, size_bytes: float, root: int = 0, *,
                peer: int | None = None,
                alltoall_lp_limit: int = ALLTOALL_LP_LIMIT) -> Bound:
    """A proven lower bound on the time of collective ``kind`` of ``size_bytes``.

    Parameters
    ----------
    topology : the machine; every rank must reach every other (relaying through ranks).
    kind : the collective (``Kind`` or its name).
    size_bytes : nccl-tests' size: output of allgather/gather, input of
        reduce-scatter/scatter/alltoall, the buffer of allreduce/broadcast/reduce.
    root : the root of broadcast, reduce, gather and scatter; the sender of sendrecv.
    peer : the receiver of sendrecv (default ``root + 1``).
    alltoall_lp_limit : largest alltoall LP (ranks x links) to solve before falling back
        to the cut bound.

    Returns
    -------
    Bound
        ``time_s`` and its bandwidth and latency terms, the method and the witness cut
        (allreduce: also ``rs_ag_s``, the RS + AG reference, which is not a bound).

    Raises
    ------
    TopologyError
        If some rank cannot reach another.
    InputError
        For a negative size or a root that is not a rank.
    """
    kind = Kind.parse(kind)
    size = _checked_size(size_bytes)
    root = _checked_root(topology, kind, root)
    if kind is Kind.SENDRECV:
        peer = _checked_peer(topology, root, peer)
        cuts = _cached(topology, ("sendrecv", root, peer),
                       lambda: _pair_cuts(topology, root, peer))
        latency = float(_alpha_distances(topology)[root, peer]) if size > 0 else 0.0
    else:
        cuts = _cuts(topology, kind, root, alltoall_lp_limit)
        latency = latency_bound(topology, kind, root) if size > 0 else 0.0
    bandwidth = max((cut.per_byte for cut in cuts), default=0.0) * size
    binding, cut_s = None, 0.0
    if cuts:
        values = [cut.per_byte * size + (cut.alpha if size > 0 else 0.0) for cut in cuts]
        top = max(values)  # name the first cut that reaches it (the headline one on ties)
        binding = cuts[next(i for i, value in enumerate(values) if value >= top * (1 - 1e-9))]
        cut_s = top if size > 0 else 0.0
    method = binding.method if binding is not None else "single rank"
    if latency > cut_s:
        method = f"latency: longest alpha path (bandwidth: {method})"
    rs_ag = None
    if kind is Kind.ALLREDUCE:
        rs_ag = (lower_bound(topology, Kind.REDUCESCATTER, size).time_s
                 + lower_bound(topology, Kind.ALLGATHER, size).time_s)
    return Bound(time_s=max(cut_s, latency), bandwidth_s=bandwidth, cut_s=cut_s,
                 latency_s=latency, method=method,
                 witness=binding.witness if binding is not None else None, kind=kind,
                 size_bytes=size, num_ranks=topology.num_ranks, rs_ag_s=rs_ag)


def lower_bounds(topology: Topology, kind: Kind | str, sizes: Iterable[float], root: int = 0,
                 *, alltoall_lp_limit: int = ALLTOALL_LP_LIMIT) -> list[Bound]:
    """:func:`lower_bound` for each of ``sizes``; the expensive part runs once."""
    return [lower_bound(topology, kind, size, root, alltoall_lp_limit=alltoall_lp_limit)
            for size in sizes]


def allgather_cut(topology: Topology) -> tuple[float, frozenset[Node]]:
    """The exact allgather cut bound.

    Returns
    -------
    (seconds per byte of output, witness)
        The bound is ``seconds_per_byte * M``; the witness S is the worst vertex set,
        ``|S ∩ ranks| * (M/N)`` bytes must leave it.
    """
    return _cached(topology, ("cut", "out"), lambda: _allgather_cut(_graph(topology)))


def reducescatter_cut(topology: Topology) -> tuple[float, frozenset[Node]]:
    """The exact reduce-scatter cut bound (the allgather bound of the reversed graph).

    Returns
    -------
    (seconds per byte of input, witness)
        The witness S is the set whose *incoming* bandwidth is the bottleneck.
    """
    return _cached(topology, ("cut", "in"),
                   lambda: _allgather_cut(_graph(topology).reversed()))


def allgather_delivery(topology: Topology) -> tuple[float, frozenset[Node] | None]:
    """The delivery bound: fabric forwards but cannot copy, so every rank's copy of a
    byte crosses the fabric on its own.

    A rank receives what it lacks over transfers from ranks; each passes fabric only
    (switches, PCIe, host memory), which copies nothing. So for any set X of fabric nodes
    and of ranks' *receiving* sides (a rank's sends leave from outside X, even a rank
    whose receiving side is in X), the ranks K received in X take in all their bytes over
    the links into X. Where the cut bound lets a byte cross a cut once and be copied
    behind it, this one charges each copy: the GPUs below a socket that share its memory
    link, or a PCIe switch. Found exactly by Dinkelbach on max-flows over the graph with
    every rank split into a sender and a receiver.

    Returns
    -------
    (seconds per byte each rank receives, X)
        Times what each rank must receive (allgather: ``(N-1)/N`` of the output) it
        bounds the time. X names the fabric and the ranks of the binding cut; ``None``
        where the delivery LP's lengths proved more than any cut (:func:`_delivery`).
    """
    return _cached(topology, ("delivery", "in"), lambda: _delivery(topology, into=True))


def reducescatter_delivery(topology: Topology) -> tuple[float, frozenset[Node] | None]:
    """:func:`allgather_delivery` turned around: what the ranks of K must *send* (a
    partial sum leaves its rank once per transfer, and fabric cannot reduce) crosses the
    links out of X, which holds their sending sides and fabric.

    Returns
    -------
    (seconds per byte each rank sends, X or ``None``)
    """
    return _cached(topology, ("delivery", "out"), lambda: _delivery(topology, into=False))


def gather_cut(topology: Topology, root: int = 0) -> tuple[float, frozenset[Node]]:
    """Every non-root rank's ``M/N`` must reach ``root``: the worst set without the root.

    Returns
    -------
    (seconds per byte of output, witness)
    """
    root = _checked_root(topology, Kind.GATHER, root)
    return _cached(topology, ("gather", "out", root),
                   lambda: _single_sink_cut(_graph(topology), root))


def scatter_cut(topology: Topology, root: int = 0) -> tuple[float, frozenset[Node]]:
    """Every non-root rank's ``M/N`` must leave ``root`` (gather on the reversed graph).

    Returns
    -------
    (seconds per byte of input, witness)
        The witness S (without the root) is the set whose incoming bandwidth binds.
    """
    root = _checked_root(topology, Kind.SCATTER, root)
    return _cached(topology, ("gather", "in", root),
                   lambda: _single_sink_cut(_graph(topology).reversed(), root))


def broadcast_flow(topology: Topology, root: int = 0) -> tuple[float, frozenset[Node]]:
    """``1 / min_v maxflow(root, v)``: every rank must receive all ``M`` bytes from the root.

    Returns
    -------
    (seconds per byte, witness)
        The witness is the min cut's source side (it holds the root).
    """
    root = _checked_root(topology, Kind.BROADCAST, root)
    return _cached(topology, ("flow", "out", root),
                   lambda: _min_root_flow(_graph(topology), root))


def reduce_flow(topology: Topology, root: int = 0) -> tuple[float, frozenset[Node]]:
    """``1 / min_v maxflow(v, root)``: every rank's contribution to all ``M`` bytes.

    Returns
    -------
    (seconds per byte, witness)
        The witness holds the root; its incoming bandwidth binds.
    """
    root = _checked_root(topology, Kind.REDUCE, root)
    return _cached(topology, ("flow", "in", root),
                   lambda: _min_root_flow(_graph(topology).reversed(), root))


def alltoall_flow(topology: Topology, lp_limit: int = ALLTOALL_LP_LIMIT
                  ) -> tuple[float, str, frozenset[Node] | None]:
    """The alltoall bound with ``M/N`` bytes per ordered pair of ranks.

    The maximum concurrent multicommodity flow (one commodity per source rank) as an LP
    solved by HiGHS when ranks x links <= ``lp_limit``; otherwise the worst of the rank and
    group cuts (a weaker bound).

    Returns
    -------
    (seconds per byte of input, method, witness)
        ``method`` is ``"alltoall LP"`` or ``"alltoall cut"``; the witness (cut only) is the
        worst set.
    """
    graph = _graph(topology)
    use_lp = graph.num_ranks * len(graph.bw) <= lp_limit
    key = ("alltoall", "lp" if use_lp else "cut")
    return _cached(topology, key, lambda: _alltoall_lp(graph) if use_lp
                   else _alltoall_cuts(graph))


def latency_bound(topology: Topology, kind: Kind | str, root: int = 0) -> float:
    """The longest alpha-weighted shortest path a required chunk must cross, in seconds.

    Pairs of ranks for allgather, reduce-scatter, allreduce and alltoall (every rank's
    data must reach, or be reduced into, every other); root to ranks for broadcast and
    scatter; ranks to root for reduce and gather. Paths may pass through ranks.
    """
    kind = Kind.parse(kind)
    root = _checked_root(topology, kind, root)
    dist = _alpha_distances(topology)
    if topology.num_ranks == 1:
        return 0.0
    if kind in (Kind.BROADCAST, Kind.SCATTER):
        return float(dist[root].max())
    if kind in (Kind.REDUCE, Kind.GATHER):
        return float(dist[:, root].max())
    return float(dist.max())


def check_ranks_connected(topology: Topology) -> None:
    """Raise ``TopologyError`` naming the ranks unless every rank reaches every other.

    Unlike ``Topology.check_connected`` this ignores fabric nodes that lead nowhere.
    """
    _cached(topology, "connected", lambda: _check_connected(topology))


def allreduce_partition(topology: Topology) -> tuple[float, str]:
    """The message-count bound of allreduce over a partition of the ranks.

    With partial sums moved as they are (no network coding: every ccweave, NCCL and MPI
    schedule), every element of an allreduce among ``m`` parts needs at least ``2(m-1)``
    messages between parts (one-way gossip needs ``2m-2`` calls, Harary & Schwenk 1974,
    and a partial sum tells no more than all its sender knows). Each crosses a link
    leaving its sender's part, so ``2(m-1) M <= T * sum_i B_out(P_i)`` (and the same with
    ``B_in``). Tried partitions: one part per rank, and each kind of the topology's
    groups; fabric nodes join a part or stay outside all, whichever crosses less.

    Returns
    -------
    (seconds per byte, method)
    """
    return _cached(topology, "partition", lambda: _partition_bound(topology))


# -------------------------------------------------------------------- dispatching


def _cuts(topology: Topology, kind: Kind, root: int, lp_limit: int) -> tuple[_Cut, ...]:
    """Every proven ``per_byte * size + alpha`` bound tried for ``kind`` (cached)."""
    check_ranks_connected(topology)
    if topology.num_ranks == 1:
        return ()
    key = ("cuts", kind, root, lp_limit if kind is Kind.ALLTOALL else None)
    return _cached(topology, key, lambda: _compute_cuts(topology, kind, root, lp_limit))


def _compute_cuts(topology: Topology, kind: Kind, root: int, lp_limit: int
                  ) -> tuple[_Cut, ...]:
    n = topology.num_ranks
    ports = _Ports(topology)

    def witness(method: str, per_byte: float, found: frozenset[Node], into: bool) -> _Cut:
        return _Cut(per_byte, ports.cut_alpha(found, into), method, found)

    cuts: list[_Cut] = []
    if kind in (Kind.ALLGATHER, Kind.ALLREDUCE):
        cuts.append(witness("allgather cut", *allgather_cut(topology), into=False))
    if kind in (Kind.REDUCESCATTER, Kind.ALLREDUCE):
        cuts.append(witness("reduce-scatter cut", *reducescatter_cut(topology), into=True))
    if kind is Kind.ALLGATHER:  # a rank's shard leaves it; the others' enter it
        cuts += ports.ranks(out=1 / n, into=(n - 1) / n, method="allgather rank ports")
    elif kind is Kind.REDUCESCATTER:
        cuts += ports.ranks(out=(n - 1) / n, into=1 / n, method="reduce-scatter rank ports")
    elif kind is Kind.ALLREDUCE:
        cuts.append(witness("allreduce min cut (M crosses every rank cut both ways)",
                            *broadcast_flow(topology, 0), into=False))
        cuts.append(witness("allreduce min cut (M crosses every rank cut both ways)",
                            *reduce_flow(topology, 0), into=True))
        per_byte, method = allreduce_partition(topology)
        cuts.append(_Cut(per_byte, 0.0, method))
        cuts += ports.ranks(out=1.0, into=1.0, method="allreduce rank ports")
    elif kind is Kind.ALLTOALL:
        per_byte, method, found = alltoall_flow(topology, lp_limit)
        cuts.append(_Cut(per_byte, 0.0, method) if found is None
                    else witness(method, per_byte, found, into=False))
        cuts += ports.ranks(out=(n - 1) / n, into=(n - 1) / n, method="alltoall rank ports")
    elif kind in (Kind.BROADCAST, Kind.REDUCE):
        flow = broadcast_flow if kind is Kind.BROADCAST else reduce_flow
        into = kind is Kind.REDUCE
        cuts.append(witness(f"{kind.value} max-flow", *flow(topology, root), into=into))
        others = [r for r in topology.ranks if r != root]
        cuts += ports.ranks(out=1.0, into=0.0, method=f"{kind.value} rank ports",
                            only=[root] if kind is Kind.BROADCAST else others)
        cuts += ports.ranks(out=0.0, into=1.0, method=f"{kind.value} rank ports",
                            only=others if kind is Kind.BROADCAST else [root])
    elif kind in (Kind.GATHER, Kind.SCATTER):
        into = kind is Kind.SCATTER
        cut = gather_cut if kind is Kind.GATHER else scatter_cut
        cuts.append(witness(f"{kind.value} cut", *cut(topology, root), into=into))
        others = [r for r in topology.ranks if r != root]
        if kind is Kind.GATHER:
            cuts += ports.ranks(out=1 / n, into=0.0, method="gather rank ports", only=others)
            cuts += ports.ranks(out=0.0, into=(n - 1) / n, method="gather rank ports",
                                only=[root])
        else:
            cuts += ports.ranks(out=0.0, into=1 / n, method="scatter rank ports", only=others)
            cuts += ports.ranks(out=(n - 1) / n, into=0.0, method="scatter rank ports",
                                only=[root])
    # fabric cannot copy: each rank's bytes in (out) cross the fabric on their own (last:
    # on a tie the cuts above name the bound)
    deliver = {Kind.ALLGATHER: ((n - 1) / n, 0.0), Kind.REDUCESCATTER: (0.0, (n - 1) / n),
               Kind.ALLREDUCE: (1.0, 1.0)}.get(kind, (0.0, 0.0))
    for share, into, bound in ((deliver[0], True, allgather_delivery),
                               (deliver[1], False, reducescatter_delivery)):
        if share > 0:
            per_byte, found = bound(topology)
            cuts.append(_Cut(share * per_byte, 0.0 if found is None
                             else _delivery_alpha(topology, found, into),
                             f"delivery {'LP' if found is None else 'cut'} (fabric cannot "
                             f"copy: each rank's bytes {'in' if into else 'out'} cross it "
                             "on their own)", found))
    return tuple(cuts)


class _Ports:
    """Bandwidth and smallest alpha of every node's out- and in-links, and of a cut's."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        n = topology.num_ranks
        self.out_bw, self.in_bw = np.zeros(n), np.zeros(n)
        self.out_alpha, self.in_alpha = np.full(n, math.inf), np.full(n, math.inf)
        for link in topology.links:
            if topology.is_rank(link.src):
                self.out_bw[link.src] += link.bandwidth
                self.out_alpha[link.src] = min(self.out_alpha[link.src], link.alpha)
            if topology.is_rank(link.dst):
                self.in_bw[link.dst] += link.bandwidth
                self.in_alpha[link.dst] = min(self.in_alpha[link.dst], link.alpha)

    def cut_alpha(self, inside: frozenset[Node], into: bool) -> float:
        """The smallest alpha of the links leaving ``inside`` (entering it if ``into``):
        nothing crosses the cut before that much time has passed."""
        alphas = [lk.alpha for lk in self.topology.links
                  if (lk.dst in inside) != (lk.src in inside) and (lk.dst in inside) == into]
        return min(alphas, default=0.0)

    def ranks(self, out: float, into: float, method: str,
              only: Sequence[int] | None = None) -> list[_Cut]:
        """Per rank: ``out`` (``into``) bytes per byte of the size must leave (enter) it."""
        cuts = []
        for rank in (self.topology.ranks if only is None else only):
            for share, bw, alpha in ((out, self.out_bw[rank], self.out_alpha[rank]),
                                     (into, self.in_bw[rank], self.in_alpha[rank])):
                if share > 0 and bw > 0:
                    cuts.append(_Cut(share / bw, float(alpha), method))
        return cuts


def _checked_size(size_bytes: float) -> float:
    if not (isinstance(size_bytes, (int, float, np.integer, np.floating))
            and math.isfinite(size_bytes) and size_bytes >= 0):
        raise InputError(f"bound: size must be a number of bytes >= 0, got {size_bytes!r}")
    return float(size_bytes)


def _checked_peer(topology: Topology, root: int, peer: int | None) -> int:
    peer = (root + 1) % topology.num_ranks if peer is None else peer
    if not topology.is_rank(peer) or peer == root:
        raise InputError(f"bound for sendrecv on {topology.name!r}: peer {peer!r} must be a "
                         f"rank other than the sender {root}")
    return int(peer)


def _pair_cuts(topology: Topology, src: int, dst: int) -> tuple[_Cut, ...]:
    """``M / maxflow(src, dst)``: every byte must cross the pair's minimum cut."""
    check_ranks_connected(topology)
    per_byte, found = _min_root_flow(_graph(topology), src, sinks=[dst])
    ports = _Ports(topology)
    return (_Cut(per_byte, ports.cut_alpha(found, into=False), "sendrecv max-flow", found),
            *ports.ranks(out=1.0, into=0.0, method="sendrecv ports", only=[src]),
            *ports.ranks(out=0.0, into=1.0, method="sendrecv ports", only=[dst]))


def _checked_root(topology: Topology, kind: Kind, root: int) -> int:
    if not kind.is_rooted:
        return 0
    if not topology.is_rank(root):
        raise InputError(f"bound for {kind.value} on {topology.name!r}: root {root!r} is not "
                         f"a rank (0..{topology.num_ranks - 1})")
    return int(root)


_CACHE: weakref.WeakKeyDictionary[Topology, dict[Any, Any]] = weakref.WeakKeyDictionary()


def _cached(topology: Topology, key: Any, compute: Callable[[], Any]) -> Any:
    """Per-topology memo of the size-independent parts (dropped with the topology)."""
    memo = _CACHE.setdefault(topology, {})
    if key not in memo:
        memo[key] = compute()
    return memo[key]


# -------------------------------------------------------------------- the graph


@dataclass(frozen=True)
class _Graph:
    """A topology as arrays, with fabric chains folded away (exact for cuts and flows).

    A fabric node with at most two neighbours is removed: ``a -> f -> b`` becomes
    ``a -> b`` with the smaller bandwidth, a dead end disappears. Vertex ``i < N`` is rank
    ``i``; ``keep`` maps vertices to ids in ``nodes`` (the topology's nodes).
    """

    num_ranks: int
    nodes: tuple[Node, ...]
    keep: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    bw: np.ndarray
    folded: tuple[tuple[int, tuple[tuple[int, float, float], ...]], ...]
    """Removed fabric ids in order, with (neighbour id, bw into f, bw out of f)."""
    link_src: np.ndarray
    link_dst: np.ndarray
    link_bw: np.ndarray
    groups: tuple[tuple[int, ...], ...]

    @property
    def num_vertices(self) -> int:
        return len(self.keep)

    def reversed(self) -> _Graph:
        """Every link turned around (reduce-scatter, reduce and scatter by duality)."""
        folded = tuple((f, tuple((x, out, into) for x, into, out in near))
                       for f, near in self.folded)
        return _Graph(self.num_ranks, self.nodes, self.keep, self.dst, self.src, self.bw,
                      folded, self.link_dst, self.link_src, self.link_bw, self.groups)

    def out_bandwidth(self, mask: np.ndarray) -> float:
        """Bandwidth of the folded links leaving vertex set ``mask``."""
        return float(self.bw[mask[self.src] & ~mask[self.dst]].sum())

    def ratio(self, mask: np.ndarray) -> float:
        """``|S ∩ ranks| / B_out(S)`` on the folded graph."""
        leaving = self.out_bandwidth(mask)
        ranks = int(mask[:self.num_ranks].sum())
        return ranks / leaving if leaving > 0 else math.inf

    def unfold(self, mask: np.ndarray) -> np.ndarray:
        """A set of folded vertices as a set of topology nodes, each folded fabric node
        on its cheaper side, so the topology's cut equals the folded one."""
        full = np.zeros(len(self.nodes), dtype=bool)
        full[self.keep] = mask
        for fabric, near in reversed(self.folded):
            outside_cost = sum(into for x, into, _ in near if full[x])
            inside_cost = sum(out for x, _, out in near if not full[x])
            full[fabric] = inside_cost < outside_cost
        return full

    def exact_ratio(self, full: np.ndarray) -> float:
        """``|S ∩ ranks| / B_out(S)`` on the topology's own links."""
        leaving = float(self.link_bw[full[self.link_src] & ~full[self.link_dst]].sum())
        ranks = int(full[:self.num_ranks].sum())
        return ranks / leaving if leaving > 0 else math.inf

    def exact_out_bandwidth(self, full: np.ndarray) -> float:
        return float(self.link_bw[full[self.link_src] & ~full[self.link_dst]].sum())

    def witness(self, full: np.ndarray) -> frozenset[Node]:
        return frozenset(self.nodes[i] for i in np.flatnonzero(full))


def _graph(topology: Topology) -> _Graph:
    check_ranks_connected(topology)
    return _cached(topology, "graph", lambda: _fold(topology))


def _fold(topology: Topology) -> _Graph:
    """Build the folded graph of ``topology`` (see :class:`_Graph`)."""
    n, index = topology.num_ranks, topology.node_index
    total = len(topology.nodes)
    out: list[dict[int, float]] = [{} for _ in range(total)]
    into: list[dict[int, float]] = [{} for _ in range(total)]
    for link in topology.links:
        a, b = index[link.src], index[link.dst]
        out[a][b] = into[b][a] = link.bandwidth
    alive = np.ones(total, dtype=bool)
    folded = []
    work = list(range(total - 1, n - 1, -1))
    while work:
        f = work.pop()
        near = set(out[f]) | set(into[f])
        if not alive[f] or len(near) > 2:
            continue
        record = tuple((x, into[f].get(x, 0.0), out[f].get(x, 0.0)) for x in sorted(near))
        for x in near:
            out[x].pop(f, None)
            into[x].pop(f, None)
        if len(record) == 2:
            (a, a_in, a_out), (b, b_in, b_out) = record
            _add_link(out, into, a, b, min(a_in, b_out))
            _add_link(out, into, b, a, min(b_in, a_out))
        out[f].clear()
        into[f].clear()
        alive[f] = False
        folded.append((f, record))
        work.extend(x for x in near if x >= n and alive[x])
    keep = np.flatnonzero(alive)
    position = np.full(total, -1)
    position[keep] = np.arange(len(keep))
    triples = [(position[a], position[b], bw) for a in keep for b, bw in out[a].items()]
    src, dst, bw = (np.array(column) for column in zip(*triples)) if triples else \
        (np.zeros(0, int), np.zeros(0, int), np.zeros(0))
    links = topology.links
    return _Graph(
        num_ranks=n, nodes=topology.nodes, keep=keep,
        src=src.astype(np.int64), dst=dst.astype(np.int64), bw=bw.astype(float),
        folded=tuple(folded),
        link_src=np.array([index[lk.src] for lk in links], dtype=np.int64),
        link_dst=np.array([index[lk.dst] for lk in links], dtype=np.int64),
        link_bw=topology.bandwidths.copy(),
        groups=tuple(part for parts in topology.groups.values() for part in parts))


def _add_link(out: list[dict[int, float]], into: list[dict[int, float]], a: int, b: int,
              bandwidth: float) -> None:
    if bandwidth > 0:
        out[a][b] = into[b][a] = out[a].get(b, 0.0) + bandwidth


def _twin_classes(graph: _Graph) -> list[list[int]]:
    """Ranks that swapping with each other is an automorphism of the folded graph.

    Within a class every transposition is an automorphism, so cuts and flows that
    single out one rank of a class are equal for all of them.
    """
    n = graph.num_ranks
    out: list[dict[int, float]] = [{} for _ in range(n)]
    into: list[dict[int, float]] = [{} for _ in range(n)]
    for a, b, bw in zip(graph.src.tolist(), graph.dst.tolist(), graph.bw.tolist()):
        if a < n:
            out[a][b] = bw
        if b < n:
            into[b][a] = bw
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first: dict[tuple[frozenset, frozenset], int] = {}
    for rank in range(n):  # twins not linked to each other: equal neighbourhoods
        key = (frozenset(out[rank].items()), frozenset(into[rank].items()))
        parent[find(rank)] = find(first.setdefault(key, rank))
    shape = [(sorted(out[r].values()), sorted(into[r].values())) for r in range(n)]
    for a in range(n):  # twins linked to each other: equal once the mutual link is removed
        for b, bw in out[a].items():
            if a < b < n and into[a].get(b) == bw and shape[a] == shape[b] \
                    and find(a) != find(b) and _linked_twins(out, into, a, b):
                parent[find(a)] = find(b)
    classes: dict[int, list[int]] = {}
    for rank in range(n):
        classes.setdefault(find(rank), []).append(rank)
    return list(classes.values())


def _linked_twins(out: list[dict[int, float]], into: list[dict[int, float]], a: int,
                  b: int) -> bool:
    def without(links: dict[int, float], other: int) -> dict[int, float]:
        return {x: bw for x, bw in links.items() if x != other}

    return without(out[a], b) == without(out[b], a) and \
        without(into[a], b) == without(into[b], a)


# ------------------------------------------------------------------ max-flow nets


class _FlowNet:
    """The folded links plus a super source joined to every rank, as one int32 CSR matrix
    whose capacities are rewritten in place between max-flows."""

    def __init__(self, graph: _Graph, with_source: bool) -> None:
        n, v = graph.num_ranks, graph.num_vertices
        self.source = v
        rows = graph.src
        cols = graph.dst
        if with_source:
            rows = np.concatenate([rows, np.full(n, v)])
            cols = np.concatenate([cols, np.arange(n)])
        size = v + 1
        self.order = np.lexsort((cols, rows))
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=size))])
        self.matrix = scipy.sparse.csr_array(
            (np.zeros(len(rows), dtype=np.int32), cols[self.order].astype(np.int32),
             indptr.astype(np.int32)), shape=(size, size))

    def set_capacities(self, capacities: np.ndarray) -> None:
        """Capacities in link order (then the source's edges), already integers."""
        self.matrix.data[:] = capacities[self.order]

    def max_flow(self, source: int, sink: int) -> Any:
        return scipy.sparse.csgraph.maximum_flow(self.matrix, source, sink)

    def source_side(self, result: Any, source: int) -> np.ndarray:
        """The vertices the residual graph reaches from ``source`` (a minimum cut)."""
        residual = (self.matrix - result.flow).tocsr()
        residual.data = (residual.data > 0).astype(np.int8)
        residual.eliminate_zeros()
        reached = scipy.sparse.csgraph.breadth_first_order(
            residual, source, directed=True, return_predecessors=False)
        side = np.zeros(self.matrix.shape[0], dtype=bool)
        side[reached] = True
        return side[:self.source]


# ----------------------------------------------------------------------- cut ratio


def _allgather_cut(graph: _Graph) -> tuple[float, frozenset[Node]]:
    outside = np.ones(graph.num_ranks, dtype=bool)
    ratio, witness = _max_ratio(graph, outside)
    return ratio / graph.num_ranks, witness


def _single_sink_cut(graph: _Graph, root: int) -> tuple[float, frozenset[Node]]:
    outside = np.zeros(graph.num_ranks, dtype=bool)
    outside[root] = True
    ratio, witness = _max_ratio(graph, outside)
    return ratio / graph.num_ranks, witness


def _max_ratio(graph: _Graph, outside: np.ndarray) -> tuple[float, frozenset[Node]]:
    """``max |S ∩ ranks| / B_out(S)`` over vertex sets S that hold a rank and leave out a
    rank of ``outside``, with its set (ratio of the topology's own links).

    Dinkelbach on ``lam``: for a sink ``t``, the network source -> rank (1), link
    (``lam * bandwidth``), sink ``t`` has a cut below N exactly when a set without ``t``
    beats ``lam``; its source side is the next set. Sinks are checked one by one, each
    until it has no such cut: ``lam`` only grows, so a sink cleared stays cleared. One
    sink per class of twin ranks suffices. Capacities are scaled to integers and rounded
    up, so every set found truly beats ``lam``; the search stops within about
    ``links / 2**30`` of the optimum (relative), and the figure returned is always the
    exact ratio of a real set.
    """
    n = graph.num_ranks
    if n == 1:
        return 0.0, frozenset()
    lam, best = _warm_start(graph, outside)
    scale = _FLOW_TOTAL // (n + 1)
    net = _FlowNet(graph, with_source=True)
    source_caps = np.full(n, scale, dtype=np.int64)
    built = None
    for sink in _sink_order(graph, outside, best):
        while True:
            if built != lam:
                with np.errstate(over="ignore"):  # a link 1e12 times the slowest: inf, clipped
                    caps = np.minimum(np.ceil(lam * graph.bw * scale), n * scale + 1)
                net.set_capacities(np.concatenate([caps.astype(np.int64), source_caps]))
                built = lam
            result = net.max_flow(net.source, sink)
            if result.flow_value >= n * scale:
                break
            side = net.source_side(result, net.source)
            ratio = graph.ratio(side)
            if not ratio > lam * (1 + _RELATIVE_STEP):
                break
            lam, best = ratio, side
    full = graph.unfold(best)
    return graph.exact_ratio(full), graph.witness(full)


def _delivery(topology: Topology, into: bool) -> tuple[float, frozenset[Node] | None]:
    """See :func:`allgather_delivery` (``into``) and :func:`reducescatter_delivery`.

    The split graph: vertex ``r`` is rank r's receiving side, ``V + r`` its sending side,
    fabric keeps its index; a link from rank a leaves ``V + a``, a link into rank b enters
    ``b`` (every link turned around when not ``into``). Weak duality proves the figure:
    with any link lengths ``l >= 0``, the bytes a rank r receives travel from other
    ranks, each at least ``d_l(r)`` (the shortest route from another rank's sending side
    to r's receiving side) long, so ``sum_r bytes_r d_l(r) <= T sum_e bw_e l_e``
    (:func:`_delivery_bound`). Lengths tried: the duals of the concurrent delivery LP
    (every rank receives the same from any other rank; HiGHS) where it is at most
    :data:`ALLTOALL_LP_LIMIT` variables, and the links into the worst set X of the
    single-commodity relaxation (Dinkelbach on max-flows, a real cut), whose ranks' own
    links count only towards the others."""
    n, index = topology.num_ranks, topology.node_index
    v = len(topology.nodes)
    if n == 1:
        return 0.0, frozenset()
    tails = np.array([index[lk.src] for lk in topology.links], dtype=np.int64)
    heads = np.array([index[lk.dst] for lk in topology.links], dtype=np.int64)
    if not into:
        tails, heads = heads, tails
    tails = np.where(tails < n, tails + v, tails)  # links leave a rank's sending side
    bw = topology.bandwidths.astype(float)
    inside = _delivery_cut(n, v, tails, heads, bw)
    value = _delivery_bound(n, v, tails, heads, bw, inside[heads] & ~inside[tails])
    witness: frozenset[Node] | None = frozenset(
        topology.nodes[i] for i in np.flatnonzero(inside[:v]))
    if n * len(bw) <= ALLTOALL_LP_LIMIT:
        try:
            lengths = _delivery_lp(n, v, tails, heads, bw)
        except SolverError:  # the LP only tightens: the cut stands without it
            lengths = np.zeros(len(bw))
        for cut in (0.0, 1e-9, 1e-6, 1e-3):
            found = _delivery_bound(n, v, tails, heads, bw,
                                    np.where(lengths > cut * lengths.max(), lengths, 0.0))
            if found > value * (1 + _RELATIVE_STEP):
                value, witness = found, None
    return value, witness


def _delivery_bound(n: int, v: int, tails: np.ndarray, heads: np.ndarray, bw: np.ndarray,
                    lengths: np.ndarray) -> float:
    """``sum_r d_l(r) / sum_e bw_e l_e`` (seconds per byte each rank receives), ``d_l(r)``
    the shortest route by ``lengths`` from another rank's sending side to r's receiving
    side in the split graph (see :func:`_delivery`); 0 where no link has a length."""
    lengths = np.asarray(lengths, dtype=float)
    volume = float(bw @ lengths)
    if not volume > 0:
        return 0.0
    size = v + n  # explicit zeros stay links
    matrix = scipy.sparse.csr_array((lengths, (tails, heads)), shape=(size, size))
    dist = scipy.sparse.csgraph.dijkstra(matrix, directed=True,
                                         indices=v + np.arange(n))[:, :n]
    np.fill_diagonal(dist, np.inf)
    nearest = dist.min(axis=0)
    if not np.isfinite(nearest).all():
        return 0.0
    return float(nearest.sum()) / volume


def _delivery_cut(n: int, v: int, tails: np.ndarray, heads: np.ndarray,
                  bw: np.ndarray) -> np.ndarray:
    """The set X (a mask over the split graph's vertices) with the most ranks' receiving
    sides per bandwidth into it, by Dinkelbach on ``beta`` (bandwidth per rank): with a
    super source feeding every sending side and every receiving side feeding the sink by
    ``beta``, a cut below ``N * beta`` is an X whose ranks K have ``B_in(X) < beta |K|``;
    its sink side is the next X. Capacities are rounded up to integers; the set found is
    a real one whatever the rounding."""
    size = v + n + 2
    source, sink = size - 2, size - 1

    def ratio(inside: np.ndarray) -> float:
        ranks = int(inside[:n].sum())
        entering = float(bw[~inside[tails] & inside[heads]].sum())
        return ranks / entering if ranks and entering > 0 else 0.0

    received = np.bincount(heads, weights=bw, minlength=size)[:n]
    best = np.zeros(size, dtype=bool)
    best[int(received.argmin())] = True
    value = ratio(best)
    rows = np.concatenate([tails, np.full(n, source), np.arange(n)])
    cols = np.concatenate([heads, v + np.arange(n), np.full(n, sink)])
    for _ in range(64):
        beta = 1.0 / value  # every K so far needs at least this much per rank
        scale = _FLOW_TOTAL / (float(bw.sum()) + 2 * n * beta)
        caps = np.concatenate([np.ceil(bw * scale), np.full(n, _FLOW_TOTAL),
                               np.full(n, math.floor(beta * scale))]).astype(np.int64)
        matrix = scipy.sparse.csr_array((caps.astype(np.int32), (rows, cols)),
                                        shape=(size, size))
        matrix.sum_duplicates()
        result = scipy.sparse.csgraph.maximum_flow(matrix, source, sink)
        residual = (matrix - result.flow).tocsr()
        residual.data = (residual.data > 0).astype(np.int8)
        residual.eliminate_zeros()
        reached = scipy.sparse.csgraph.breadth_first_order(
            residual, source, directed=True, return_predecessors=False)
        inside = np.ones(size, dtype=bool)
        inside[reached] = False
        found = ratio(inside)
        if inside[v:v + n].any() or not found > value * (1 + _RELATIVE_STEP):
            break
        best, value = inside, found
    return best[:v + n]


def _delivery_lp(n: int, v: int, tails: np.ndarray, heads: np.ndarray,
                 bw: np.ndarray) -> np.ndarray:
    """Link lengths from the concurrent delivery LP: commodity ``t`` flows from any
    other rank's sending side (free supply) through fabric into ``t``'s receiving side at
    rate ``theta`` at least; links carry at most their bandwidth; maximise ``theta``. Its
    capacity duals (their sizes) are the lengths :func:`_delivery_bound` certifies."""
    e = len(bw)
    unit = float(bw.max())
    commodity = np.repeat(np.arange(n), e)
    link = np.tile(np.arange(e), n)
    head, tail = heads[link], tails[link]
    used = ((head >= n) | (head == commodity)) & (tail != v + commodity)
    commodity, link, head, tail = commodity[used], link[used], head[used], tail[used]
    columns = np.arange(len(link))
    theta = len(link)
    fabric = tail < v  # tails inside the fabric conserve; sending sides supply freely
    rows = np.concatenate([commodity * v + head, (commodity * v + tail)[fabric],
                           n * v + link, np.arange(n) * (v + 1)])
    cols = np.concatenate([columns, columns[fabric], columns, np.full(n, theta)])
    vals = np.concatenate([np.ones(len(link)), -np.ones(int(fabric.sum())),
                           np.ones(len(link)), -np.ones(n)])
    matrix = scipy.sparse.csc_array(scipy.sparse.csr_array(
        (vals, (rows, cols)), shape=(n * v + e, theta + 1)))
    # rows: a commodity's fabric vertex conserves (0), its rank receives theta (>= 0),
    # other ranks' receiving sides take none of it (no variable enters them), links cap
    conserve = np.zeros(n * v)
    upper = np.concatenate([conserve, bw / unit])
    lower = np.concatenate([conserve, np.full(e, -np.inf)])
    upper[np.arange(n) * (v + 1)] = np.inf
    cost = np.zeros(theta + 1)
    cost[theta] = -1.0
    return np.abs(_solve_lp(cost, matrix, lower, upper)[-e:])


def _delivery_alpha(topology: Topology, found: frozenset[Node], into: bool) -> float:
    """The smallest alpha of the links a delivery cut counts: into ``found`` (out of it if
    not ``into``), a rank's own links included (its other side is outside)."""
    alphas = [lk.alpha for lk in topology.links
              if (lk.dst in found and (lk.src not in found or topology.is_rank(lk.src))
                  if into else
                  lk.src in found and (lk.dst not in found or topology.is_rank(lk.dst)))]
    return min(alphas, default=0.0)


def _sink_order(graph: _Graph, outside: np.ndarray, best: np.ndarray) -> list[int]:
    """One sink of ``outside`` per twin class; those outside the best set first."""
    sinks = []
    for members in _twin_classes(graph):
        allowed = [r for r in members if outside[r]]
        if allowed:
            sinks.append(min(allowed, key=lambda r: bool(best[r])))
    return sorted(sinks, key=lambda r: bool(best[r]))


def _warm_start(graph: _Graph, outside: np.ndarray) -> tuple[float, np.ndarray]:
    """The best of cheap sets: each rank alone, all but one rank, each group and its
    complement (fabric placed greedily)."""
    n, v = graph.num_ranks, graph.num_vertices
    out_bw = np.bincount(graph.src, weights=graph.bw, minlength=v)[:n]
    in_bw = np.bincount(graph.dst, weights=graph.bw, minlength=v)[:n]
    best_ratio, best = -1.0, np.zeros(v, dtype=bool)
    alone = np.where(outside.sum() - outside > 0, 1 / out_bw, -1.0)
    others = np.where(outside, (n - 1) / in_bw, -1.0)
    if alone.max() > best_ratio:
        best_ratio = float(alone.max())
        best = np.zeros(v, dtype=bool)
        best[int(alone.argmax())] = True
    if others.max() > best_ratio:
        best_ratio = float(others.max())
        best = np.ones(v, dtype=bool)
        best[int(others.argmax())] = False
    for ranks in _group_sets(graph):
        if not ranks.any() or not (outside & ~ranks).any():
            continue
        mask = _best_fabric(graph, ranks)
        ratio = graph.ratio(mask)
        if ratio > best_ratio:
            best_ratio, best = ratio, mask
    return best_ratio, best


def _group_sets(graph: _Graph) -> list[np.ndarray]:
    """Rank masks of every group and of its complement."""
    sets = []
    for part in graph.groups:
        mask = np.zeros(graph.num_ranks, dtype=bool)
        mask[list(part)] = True
        sets += [mask, ~mask]
    return sets


def _best_fabric(graph: _Graph, ranks: np.ndarray, rounds: int = 6) -> np.ndarray:
    """Holding the rank set fixed, place fabric nodes to make ``B_out`` small: a fabric
    node joins S when the bandwidth S sends it exceeds what it would send out of S."""
    n, v = graph.num_ranks, graph.num_vertices
    mask = np.zeros(v, dtype=bool)
    mask[:n] = ranks
    best, best_out = mask.copy(), graph.out_bandwidth(mask)
    for _ in range(rounds):
        gained = np.bincount(graph.dst, weights=graph.bw * mask[graph.src], minlength=v)
        lost = np.bincount(graph.src, weights=graph.bw * ~mask[graph.dst], minlength=v)
        new = mask.copy()
        new[n:] = lost[n:] < gained[n:]
        if np.array_equal(new, mask):
            break
        mask = new
        leaving = graph.out_bandwidth(mask)
        if leaving < best_out:
            best, best_out = mask.copy(), leaving
    return best


# ------------------------------------------------------------- allreduce partitions


def _partition_bound(topology: Topology) -> tuple[float, str]:
    """See :func:`allreduce_partition`: the best of the tried partitions, both directions."""
    graph = _graph(topology)
    n = graph.num_ranks
    partitions = [("rank", np.arange(n))]
    for kind, parts in topology.groups.items():
        labels = np.empty(n, dtype=np.int64)
        for number, part in enumerate(parts):
            labels[list(part)] = number
        if len(parts) > 1:
            partitions.append((kind, labels))
    best, method = 0.0, "allreduce partition"
    for name, labels in partitions:
        m = int(labels.max()) + 1
        for forward in (True, False):
            crossing = _partition_crossing(graph if forward else graph.reversed(), labels)
            if crossing > 0 and 2 * (m - 1) / crossing > best:
                best = 2 * (m - 1) / crossing
                method = (f"allreduce messages: 2(m-1) per element across {m} parts "
                          f"(one per {name})")
    return best, method


def _partition_crossing(graph: _Graph, labels: np.ndarray, rounds: int = 8) -> float:
    """``sum_i B_out(P_i)`` for the rank parts ``labels``, each fabric node placed (in a
    part or outside all, ``-1``) by local search to make it small."""
    n, v = graph.num_ranks, graph.num_vertices
    label = np.full(v, -1, dtype=np.int64)
    label[:n] = labels

    def crossing(lab: np.ndarray) -> float:
        a, b = lab[graph.src], lab[graph.dst]
        return float(graph.bw[(a >= 0) & (a != b)].sum())

    total = crossing(label)
    for _ in range(rounds):
        improved = False
        for fabric in range(n, v):
            near = np.concatenate([label[graph.dst[graph.src == fabric]],
                                   label[graph.src[graph.dst == fabric]]])
            for option in {-1, *near.tolist()} - {int(label[fabric])}:
                trial = label.copy()
                trial[fabric] = option
                value = crossing(trial)
                if value < total * (1 - 1e-12):
                    label, total, improved = trial, value, True
        if not improved:
            break
    return total


# ------------------------------------------------------------------ rooted flows


def _min_root_flow(graph: _Graph, root: int, sinks: list[int] | None = None
                   ) -> tuple[float, frozenset[Node]]:
    """``1 / min_v maxflow(root, v)`` over ranks ``v`` (or over ``sinks``) with the min cut's
    source side.

    Capacities are scaled to integers (rounded up; clipped at the root's out-bandwidth,
    which no flow exceeds); the figure is the exact bandwidth of the cut found, a real
    cut, so ``1 / figure`` is a valid bound.
    """
    if graph.num_ranks == 1:
        return 0.0, frozenset()
    root_out = float(graph.bw[graph.src == root].sum())
    scale = _FLOW_TOTAL / root_out
    net = _FlowNet(graph, with_source=False)
    net.set_capacities(np.minimum(np.ceil(graph.bw * scale), _FLOW_TOTAL).astype(np.int64))
    best_int, best_bw, best = math.inf, math.inf, np.zeros(len(graph.nodes), dtype=bool)
    if sinks is None:
        sinks = [min(r for r in members if r != root) for members in _twin_classes(graph)
                 if members != [root]]
    for sink in sinks:
        result = net.max_flow(root, sink)
        if result.flow_value <= best_int:
            best_int = result.flow_value
            full = graph.unfold(net.source_side(result, root))
            cut = graph.exact_out_bandwidth(full)
            if cut < best_bw:
                best_bw, best = cut, full
    return 1.0 / best_bw, graph.witness(best)


# ---------------------------------------------------------------------- alltoall


def _alltoall_lp(graph: _Graph) -> tuple[float, str, None]:
    """Maximum concurrent flow, one commodity per source rank, solved by HiGHS.

    Variables: the flow of commodity ``s`` on each link not entering ``s``, and ``theta``,
    the rate every ordered pair gets. Each rank ``v != s`` keeps ``theta`` of commodity
    ``s``; fabric nodes conserve; links carry at most their bandwidth. The figure returned
    is not the solver's objective but the weak-duality bound of its capacity duals used as
    link lengths (see :func:`_length_bound`): valid whatever the solver's tolerances.
    """
    n, v, e = graph.num_ranks, graph.num_vertices, len(graph.bw)
    if n == 1:
        return 0.0, "alltoall LP", None
    unit = float(graph.bw.max())
    source = np.repeat(np.arange(n), e)
    link = np.tile(np.arange(e), n)
    used = graph.dst[link] != source
    source, link = source[used], link[used]
    columns = np.arange(len(link))
    leaves = graph.src[link] != source
    pair_s, pair_t = np.nonzero(~np.eye(n, dtype=bool))
    theta = len(link)
    rows = np.concatenate([source * v + graph.dst[link], (source * v + graph.src[link])[leaves],
                           n * v + link, pair_s * v + pair_t])
    cols = np.concatenate([columns, columns[leaves], columns, np.full(len(pair_s), theta)])
    vals = np.concatenate([np.ones(len(link)), -np.ones(int(leaves.sum())), np.ones(len(link)),
                           -np.ones(len(pair_s))])
    kept = np.setdiff1d(np.arange(n * v + e), np.arange(n) * (v + 1))  # no (s, s) rows
    matrix = scipy.sparse.csr_array((vals, (rows, cols)), shape=(n * v + e, theta + 1))
    matrix = scipy.sparse.csc_array(matrix[kept])
    upper = np.concatenate([np.zeros(len(kept) - e), graph.bw / unit])
    lower = np.concatenate([np.zeros(len(kept) - e), np.full(e, -np.inf)])
    cost = np.zeros(theta + 1)
    cost[theta] = -1.0
    lengths = np.abs(_solve_lp(cost, matrix, lower, upper)[-e:])
    if not lengths.any():
        raise SolverError("alltoall bound: HiGHS returned no capacity duals; pass "
                          "alltoall_lp_limit=0 to use the cut bound")
    # interior-point duals carry noise on slack links: dropping tiny lengths tightens
    best = max(_length_bound(graph, np.where(lengths > cut * lengths.max(), lengths, 0.0))
               for cut in (0.0, 1e-9, 1e-6, 1e-3))
    return best, "alltoall LP", None


def _solve_lp(cost: np.ndarray, matrix: scipy.sparse.csc_array, lower: np.ndarray,
              upper: np.ndarray) -> np.ndarray:
    """Minimise ``cost @ x`` over ``x >= 0``, ``lower <= matrix @ x <= upper`` with HiGHS'
    interior point method (no crossover: only the duals are used); returns row duals."""
    import highspy

    from ccweave.solvers import quiet_highs

    highs = quiet_highs()
    highs.setOptionValue("solver", "ipm")
    highs.setOptionValue("run_crossover", "off")
    highs.setOptionValue("ipm_optimality_tolerance", 1e-10)
    lp = highspy.HighsLp()
    lp.num_row_, lp.num_col_ = matrix.shape
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(matrix.shape[1])
    lp.col_upper_ = np.full(matrix.shape[1], highspy.kHighsInf)
    lp.row_lower_ = np.where(np.isfinite(lower), lower, -highspy.kHighsInf)
    lp.row_upper_ = upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_row_, lp.a_matrix_.num_col_ = matrix.shape
    lp.a_matrix_.start_ = matrix.indptr
    lp.a_matrix_.index_ = matrix.indices
    lp.a_matrix_.value_ = matrix.data
    highs.passModel(lp)
    highs.run()
    solution = highs.getSolution()
    if not solution.dual_valid:  # any duals certify a bound; an exact optimum is not needed
        status = highs.modelStatusToString(highs.getModelStatus())
        raise SolverError(f"alltoall bound: HiGHS found no duals for the concurrent-flow LP "
                          f"({status}); pass alltoall_lp_limit=0 to use the cut bound")
    return np.asarray(solution.row_dual, dtype=float)


def _length_bound(graph: _Graph, lengths: np.ndarray) -> float:
    """Weak duality for alltoall: with any link lengths ``l >= 0``, the traffic-weighted
    length ``(M/N) * sum_{s != t} dist_l(s, t)`` cannot exceed ``T * sum_e bw_e l_e``.

    Returns the seconds per byte this gives (the LP optimum for optimal duals).
    """
    n, v = graph.num_ranks, graph.num_vertices
    matrix = scipy.sparse.csr_array((lengths, (graph.src, graph.dst)), shape=(v, v))
    dist = scipy.sparse.csgraph.dijkstra(matrix, directed=True, indices=np.arange(n))[:, :n]
    volume = float(graph.bw @ lengths)
    return float(dist.sum()) / (n * volume)


def _alltoall_cuts(graph: _Graph) -> tuple[float, str, frozenset[Node]]:
    """The worst of the cuts around each rank, each group and their complements:
    ``k (N - k)`` pairs of ``M/N`` bytes each must leave a set holding ``k`` ranks."""
    n, v = graph.num_ranks, graph.num_vertices
    if n == 1:
        return 0.0, "alltoall cut", frozenset()
    out_bw = np.bincount(graph.src, weights=graph.bw, minlength=v)[:n]
    in_bw = np.bincount(graph.dst, weights=graph.bw, minlength=v)[:n]
    demand = n - 1
    best_value, best = -1.0, np.zeros(v, dtype=bool)
    if (demand / out_bw).max() >= (demand / in_bw).max():
        best_value = float((demand / out_bw).max())
        best[int(out_bw.argmin())] = True
    else:
        best_value = float((demand / in_bw).max())
        best[:] = True
        best[int(in_bw.argmin())] = False
    for ranks in _group_sets(graph):
        k = int(ranks.sum())
        if 0 < k < n:
            mask = _best_fabric(graph, ranks)
            value = k * (n - k) / graph.out_bandwidth(mask)
            if value > best_value:
                best_value, best = value, mask
    full = graph.unfold(best)
    k = int(full[:n].sum())
    per_byte = k * (n - k) / graph.exact_out_bandwidth(full) / n
    return per_byte, "alltoall cut", graph.witness(full)


# ----------------------------------------------------------------------- latency


def _node_matrix(topology: Topology, weights: np.ndarray) -> scipy.sparse.csr_array:
    """The topology's links as a node-by-node matrix (explicit zeros stay links)."""
    index, size = topology.node_index, len(topology.nodes)
    rows = [index[lk.src] for lk in topology.links]
    cols = [index[lk.dst] for lk in topology.links]
    return scipy.sparse.csr_array((weights, (rows, cols)), shape=(size, size))


def _check_connected(topology: Topology) -> bool:
    """Ranks reach each other exactly when they share a strongly connected component."""
    n = topology.num_ranks
    matrix = _node_matrix(topology, np.ones(len(topology.links)))
    _, labels = scipy.sparse.csgraph.connected_components(matrix, directed=True,
                                                          connection="strong")
    if (labels[:n] == labels[0]).all():
        return True
    ahead = scipy.sparse.csgraph.breadth_first_order(matrix, 0, directed=True,
                                                     return_predecessors=False)
    unreached = sorted(set(range(n)) - set(ahead.tolist()))
    if unreached:
        where = f"rank 0 cannot reach rank(s) {unreached[:8]}"
    else:
        behind = scipy.sparse.csgraph.breadth_first_order(matrix.T.tocsr(), 0, directed=True,
                                                          return_predecessors=False)
        where = f"rank(s) {sorted(set(range(n)) - set(behind.tolist()))[:8]} cannot reach rank 0"
    raise TopologyError(f"topology {topology.name!r} is disconnected: {where}, even relaying "
                        "through ranks; add the missing links (or make them duplex)")


def _alpha_distances(topology: Topology) -> np.ndarray:
    """Rank-to-rank shortest paths by alpha, through ranks and fabric."""
    check_ranks_connected(topology)
    return _cached(topology, "alpha", lambda: scipy.sparse.csgraph.dijkstra(
        _node_matrix(topology, topology.alphas), directed=True,
        indices=np.arange(topology.num_ranks))[:, :topology.num_ranks])
