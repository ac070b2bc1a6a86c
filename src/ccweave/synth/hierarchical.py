"""The hierarchical strategy: rings inside each node, rings across nodes between ranks
with the same local index (NCCL's and Horovod's two-level allreduce).

allreduce: reduce-scatter inside every node (local rank ``l`` ends with its node's sum of
block ``l``), allreduce of block ``l`` across the nodes among the local ranks ``l`` (a ring
reduce-scatter then allgather, each NIC carrying only its block), allgather inside every
node. reduce-scatter is the first two steps (intra-node reduce-scatter of the column of
blocks that end on local rank ``l``, then an inter-node reduce-scatter); allgather is the
mirror (inter-node allgather while each rank's own block goes round its node, then an
intra-node allgather of what came in). Every chunk is a pipeline piece, so the levels
overlap.
"""

from __future__ import annotations

from collections.abc import Sequence

from ccweave.collectives import Collective, Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.schedule import Schedule
from ccweave.synth.layout import chunks_for, reject_options, require_kind, schedule_name
from ccweave.synth.registry import register
from ccweave.synth.ring import (
    OUT,
    SPLIT_TOLERANCE,
    Chains,
    Lane,
    Slot,
    channel_lanes,
    split_time,
)
from ccweave.synth.rings import Ring, find_rings
from ccweave.topology.model import Topology

KINDS = frozenset({Kind.ALLREDUCE, Kind.ALLGATHER, Kind.REDUCESCATTER})


def node_groups(topology: Topology) -> list[tuple[int, ...]]:
    """The topology's nodes; ``NotApplicableError`` unless there are several of one size."""
    nodes = list(topology.groups.get("node", ()))
    if len(nodes) < 2:
        raise NotApplicableError(
            f"strategy 'hierarchical' needs several nodes (groups['node']); "
            f"{topology.name!r} has {len(nodes) or 'no'} node group(s) (try ring)")
    if len({len(node) for node in nodes}) != 1:
        raise NotApplicableError(
            f"strategy 'hierarchical' needs nodes of one size; {topology.name!r} has nodes "
            f"of {sorted({len(node) for node in nodes})} ranks (try ring)")
    return nodes


def node_rings(topology: Topology, nodes: Sequence[Sequence[int]],
               channels: int | None) -> list[list[Ring]]:
    """Rings inside each node; a node shaped like the first reuses its rings renamed."""
    first = find_rings(topology, channels, ranks=nodes[0])
    result = [first]
    for node in nodes[1:]:
        rename = dict(zip(nodes[0], node))
        renamed = [Ring(tuple(rename[r] for r in ring.order), ring.bandwidth)
                   for ring in first]
        alike = all(_same_hops(topology, ring, twin) for ring, twin in zip(first, renamed))
        result.append(renamed if alike else find_rings(topology, channels, ranks=node))
    return result


def _same_hops(topology: Topology, ring: Ring, twin: Ring) -> bool:
    """Whether ``twin``'s hops are routed and as fast as ``ring``'s."""
    for (a, b), (c, d) in zip(ring.hops, twin.hops):
        if not topology.has_route(c, d) or \
                topology.route_bandwidth(a, b) != topology.route_bandwidth(c, d):
            return False
    return True


PIECES = 16
"""Default chunks per rank are at least this many: each chunk is a piece of the pipeline
from level to level (intra-node, inter-node, intra-node)."""


def default_chunks(*bandwidths: Sequence[float], limit: int = 64) -> int:
    """The fewest chunks per rank, at least :data:`PIECES`, that split the data within
    tolerance over every ring set."""
    for chunks in range(PIECES, limit + 1):
        if all(split_time(chunks, bws) <= SPLIT_TOLERANCE / sum(bws) for bws in bandwidths):
            return chunks
    return PIECES


# --------------------------------------------------------------- collectives


class _Plan:
    """The hierarchy: nodes, their rings, and the rings across each column of local ranks."""

    def __init__(self, nodes: list[tuple[int, ...]], intra: list[list[Ring]],
                 inter: list[list[Ring]], chunks: int) -> None:
        self.nodes = nodes
        self.g, self.k = len(nodes[0]), len(nodes)
        self.c = chunks
        self.intra = [channel_lanes(rings, chunks, 0) for rings in intra]
        first = max(len(lanes) for lanes in self.intra)
        self.inter = [channel_lanes(rings, chunks, first) for rings in inter]

    def column(self, local: int) -> list[int]:
        return [node[local] for node in self.nodes]


def _pieces(lanes: list[Lane]):
    """(ring, piece, channel, step): every chunk index of a lane is its own piece, so the
    levels pipeline; ``step`` staggers a lane's pieces (wavefront order)."""
    for ring, span, channel in lanes:
        for step, piece in enumerate(span):
            yield ring, piece, channel, step


def _allreduce(ch: Chains, plan: _Plan) -> None:
    """Block ``l`` (``k*c`` chunks) ends on local rank ``l``; its piece ``p`` is the ``k``
    chunks ``l*k*c + p*k + n``, and chunk ``n`` of a piece ends on node ``n``."""
    c, k = plan.c, plan.k

    def piece(local: int, p: int) -> list[int]:
        return [(local * c + p) * k + n for n in range(k)]

    for node, lanes in zip(plan.nodes, plan.intra):  # intra-node reduce-scatter
        for ring, p, channel, step in _pieces(lanes):
            for local, d in enumerate(node):
                ch.reduce_chain(ring.ending_at(d), piece(local, p), _output, channel, step)
    ch.flush()
    sums = []
    for local in range(plan.g):  # inter-node allreduce among the local ranks l
        for ring, p, channel, step in _pieces(plan.inter[local]):
            for n, owner in enumerate(plan.column(local)):
                xs = piece(local, p)[n:n + 1]
                ch.reduce_chain(ring.ending_at(owner), xs, _output, channel, step)
                ch.settle(owner, xs, _output, channel, step + len(ring))
                sums.append((ring, owner, xs, channel, step))
    ch.flush()
    for ring, owner, xs, channel, step in sums:
        ch.copy_chain(ring.starting_at(owner), xs, _output, channel, step)
    ch.flush()
    for node, lanes in zip(plan.nodes, plan.intra):  # intra-node allgather
        for ring, p, channel, step in _pieces(lanes):
            for local, d in enumerate(node):
                ch.copy_chain(ring.starting_at(d), piece(local, p), _output, channel, step)


def _reduce_scatter(ch: Chains, plan: _Plan) -> None:
    """Local rank ``l`` first sums, over its node, the chunks that end on column ``l``."""
    c = plan.c

    def acc(rank: int, x: int) -> Slot:
        own = rank * c <= x < (rank + 1) * c
        return (OUT, x - rank * c) if own else ch.scratch(rank, x)

    for node, lanes in zip(plan.nodes, plan.intra):
        for ring, j, channel, step in _pieces(lanes):
            for local, d in enumerate(node):
                xs = [r * c + j for r in plan.column(local)]
                ch.reduce_chain(ring.ending_at(d), xs, acc, channel, step)
    ch.flush()
    for local in range(plan.g):
        for ring, j, channel, step in _pieces(plan.inter[local]):
            for owner in plan.column(local):
                xs = [owner * c + j]
                ch.reduce_chain(ring.ending_at(owner), xs, acc, channel, step)
                ch.settle(owner, xs, acc, channel, step + len(ring))


def _allgather(ch: Chains, plan: _Plan) -> None:
    """The column of local ranks ``l`` gathers its blocks while each rank's own block goes
    round its node; then what came from other nodes goes round the node too."""
    c = plan.c
    for local in range(plan.g):
        for ring, j, channel, step in _pieces(plan.inter[local]):
            for owner in plan.column(local):
                ch.copy_chain(ring.starting_at(owner), [owner * c + j], _output, channel, step)
                ch.settle(owner, [owner * c + j], _output, channel, step + 1)
    for node, lanes in zip(plan.nodes, plan.intra):
        for ring, j, channel, step in _pieces(lanes):
            for d in node:
                ch.copy_chain(ring.starting_at(d), [d * c + j], _output, channel, step)
    ch.flush()
    for node, lanes in zip(plan.nodes, plan.intra):
        for ring, j, channel, step in _pieces(lanes):
            for local, d in enumerate(node):
                xs = [r * c + j for r in plan.column(local) if r != d]
                ch.copy_chain(ring.starting_at(d), xs, _output, channel, step)


def _output(rank: int, x: int) -> Slot:
    return OUT, x


BUILDERS = {Kind.ALLREDUCE: _allreduce, Kind.REDUCESCATTER: _reduce_scatter,
            Kind.ALLGATHER: _allgather}


# ------------------------------------------------------------------ strategy


@register("hierarchical", KINDS,
          "two-level rings: intra-node reduce-scatter, inter-node allreduce among equal "
          "local ranks, intra-node allgather (needs several nodes of one size)")
def build_hierarchical(topology: Topology, kind: Kind, *, root: int = 0,
                       chunks: int | None = None, channels: int | None = None,
                       **options: object) -> Schedule:
    """Hierarchical schedule of ``kind`` (allreduce, allgather or reduce-scatter).

    Parameters
    ----------
    topology: a machine with ``groups["node"]`` of several nodes of one size.
    chunks: chunks per rank; default: the fewest that split the data between the rings
        in proportion to their bandwidth.
    channels: at most this many rings inside a node (default: all the search keeps).

    Raises ``NotApplicableError`` on one node, nodes of different sizes, or no ring.
    """
    require_kind(kind, BUILDERS, "hierarchical")
    reject_options(options, "hierarchical", ["channels"])
    if channels is not None and (isinstance(channels, bool) or not isinstance(channels, int)
                                 or channels < 1):
        raise InputError(f"hierarchical: channels must be a positive integer, "
                         f"got {channels!r}")
    nodes = node_groups(topology)
    intra = node_rings(topology, nodes, channels)
    columns = [[node[local] for node in nodes] for local in range(len(nodes[0]))]
    inter = [find_rings(topology, ranks=column) for column in columns]
    c = chunks_for(chunks, default_chunks([r.bandwidth for r in intra[0]],
                                          [r.bandwidth for r in inter[0]]))
    plan = _Plan(nodes, intra, inter, c)
    coll = Collective(kind, topology.num_ranks, c, root)
    ch = Chains(coll)
    BUILDERS[kind](ch, plan)
    channels_used = max(len(lanes) for lanes in plan.intra)
    return ch.build(schedule_name("hierarchical", channels=channels_used, chunks=c),
                    topology=topology.name,
                    intra_rings=[list(ring.order) for ring, _, _ in plan.intra[0]],
                    inter_rings=[list(ring.order) for ring, _, _ in plan.inter[0]],
                    nodes=len(nodes))
