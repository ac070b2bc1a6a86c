"""``flow``: alltoall from a time-expanded multi-commodity flow LP (the TE-CCL idea:
Liu et al., "Rethinking Machine Learning Collective Communication as a Multi-Commodity
Flow Problem", SIGCOMM'24), on HiGHS.

Time is cut into ``E`` epochs of equal length ``tau``. Every source rank is a commodity;
in each epoch a link carries at most ``bandwidth * tau`` bytes of all commodities
together, flows cross fabric (switches, PCIe, NICs) within the epoch (cut-through), and
a rank forwards in epoch ``e`` only what it held when the epoch began (store and
forward: relays through ranks are explicit transfers through scratch). The LP finds the
shortest ``tau`` that delivers ``M/N`` bytes to every ordered pair; with enough epochs
``E * tau`` reaches the maximum concurrent flow bound (``bounds.alltoall_flow``).

The LP solution becomes a schedule: each commodity's flow is split into paths through
time, each pair's chunks are shared among its paths, every hop is one transfer (pinned
to its fabric route with ``via`` where that is not the pair's cheapest), and transfers
between one pair of ranks keep the epochs' order. The number of epochs (and chunks, from
the size) is chosen by simulating a few candidates at ``size`` bytes. Symmetric machines
(tori, NVSwitch boxes, identical nodes) are solved on their LP's equitable partition
(:func:`ccweave.lp.solve_symmetric`), which keeps a 64-rank torus to seconds.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError, NotApplicableError, SolverError
from ccweave.lp import LinearProgram, solve_symmetric
from ccweave.schedule import Op, Schedule, ScheduleBuilder
from ccweave.synth.layout import reject_options, require_kind, schedule_name
from ccweave.synth.registry import register
from ccweave.topology.model import Topology
from ccweave.units import parse_size

IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH

DEFAULT_SIZE = 2**30
"""Bytes the epochs and chunks are tuned for when no ``size`` is given."""

EXTRA_EPOCHS = 3
"""Epoch counts tried: from the fewest that reach every pair (the rank-hop diameter
``D``) up, until the LP's own time is within :data:`GOOD_ENOUGH` of the flow bound and
``EXTRA_EPOCHS`` more counts have been tried (more epochs let the LP spread relays and
the schedule pipeline them, fewer cost less latency)..."""

MAX_EXTRA_EPOCHS = 12
"""...and never beyond ``D + MAX_EXTRA_EPOCHS``."""

GOOD_ENOUGH = 0.01
"""Stop trying epoch counts once a schedule simulates within this fraction of the
lower bound."""

MIN_CHUNK_BYTES = 2**10
"""Chunks (the unit a pair's bytes are shared among its paths in) are at least this big
at the size tuned for..."""

MAX_CHUNKS = 64
"""...and a pair's block is cut into at most this many. More chunks cost no transfers (a
path moves its run of chunks in one transfer per hop), but each must hold an element
when the schedule runs."""

RELAY_COST = 1.0
"""Secondary LP cost per unit of flow entering a rank (a relay, or the final delivery)..."""

LINK_COST = 0.01
"""...and per unit on any link: among the fastest plans, the LP takes one with the fewest
relays and the shortest routes."""

SECONDARY_WEIGHT = 1e-4
"""Weight of the secondary costs against ``tau`` (per pair of ranks)."""

LINK_TRANSFERS = 8000
"""Under link sync, paths move in pieces as small as keep the schedule within about this
many transfers (equal pieces share a link as the LP planned; the dependencies grow with
the square of the transfers on a link)."""

FLOW_EPSILON = 1e-7
"""Flows below this share of a pair's block are solver noise."""


@dataclass(frozen=True)
class Hop:
    """One rank-to-rank step of a path: ``src`` to ``dst`` through fabric ``via`` in
    ``epoch``."""

    src: int
    dst: int
    via: tuple[str, ...]
    epoch: int


@dataclass(frozen=True)
class FlowPlan:
    """The LP's answer: per ordered pair ``(s, t)``, paths ``(share, hops)`` whose shares
    sum to one; ``time_per_byte`` is ``E * tau`` in seconds per byte of a pair's block."""

    epochs: int
    time_per_byte: float
    paths: dict[tuple[int, int], list[tuple[float, tuple[Hop, ...]]]]
    epoch_capacity: np.ndarray
    """Per link, the pair blocks it carries in one epoch (``bandwidth * tau``)."""
    variable_classes: int
    variables: int


# ------------------------------------------------------------------ topology facts


def rank_hops(topology: Topology) -> np.ndarray:
    """Fewest rank-to-rank routes (relays + 1) from each rank to each other one."""
    n = topology.num_ranks
    pairs = [(a, b) for a in topology.ranks for b in topology.ranks
             if a != b and topology.has_route(a, b)]
    rows, cols = zip(*pairs) if pairs else ((), ())
    graph = scipy.sparse.csr_array((np.ones(len(pairs)), (rows, cols)), shape=(n, n))
    return scipy.sparse.csgraph.shortest_path(graph, directed=True, unweighted=True)


def _diameter(topology: Topology, hops: np.ndarray) -> int:
    if not np.isfinite(hops).all():
        a, b = map(int, np.argwhere(~np.isfinite(hops))[0])
        raise NotApplicableError(
            f"strategy 'flow': rank {a} of {topology.name!r} cannot reach rank {b}, even "
            "relaying through ranks; add the missing links (or make them duplex)")
    return max(1, int(hops.max()))


# ------------------------------------------------------------------------- the LP


def solve_flow(topology: Topology, epochs: int) -> FlowPlan:
    """Solve the time-expanded alltoall LP with ``epochs`` epochs (see the module
    docstring); raises ``SolverError`` when no plan fits (fewer epochs than relays
    needed)."""
    n, links = topology.num_ranks, topology.links
    hops = rank_hops(topology)
    index = topology.node_index
    src = np.array([index[lk.src] for lk in links], dtype=np.int64)
    dst = np.array([index[lk.dst] for lk in links], dtype=np.int64)
    bandwidth = topology.bandwidths / topology.bandwidths.max()
    program, layout = _program(topology, epochs, hops, src, dst, bandwidth)
    x, classes = solve_symmetric(program)
    tau = float(x[layout.tau])
    flows = np.zeros((epochs, n, len(links)))
    flows[layout.f_epoch, layout.f_source, layout.f_link] = x[:layout.num_flows]
    stocks = x[layout.num_flows:layout.tau].reshape(epochs, n, n)
    paths = _decompose(topology, epochs, flows, stocks, src, dst)
    seconds_per_byte = epochs * tau / float(topology.bandwidths.max())
    return FlowPlan(epochs, seconds_per_byte, paths, bandwidth * tau, classes,
                    program.shape[1])


@dataclass(frozen=True)
class _Layout:
    """Where the variables sit: kept flows ``(epoch, source, link)`` first, then the
    stocks ``(epoch, source, rank)`` held after each epoch, then ``tau``."""

    f_epoch: np.ndarray
    f_source: np.ndarray
    f_link: np.ndarray
    num_flows: int
    tau: int


def _program(topology: Topology, epochs: int, hops: np.ndarray, src: np.ndarray,
             dst: np.ndarray, bandwidth: np.ndarray) -> tuple[LinearProgram, _Layout]:
    n, num_links = topology.num_ranks, len(src)
    num_nodes = len(topology.nodes)
    fabric = num_nodes - n
    e, s, link = (a.ravel() for a in np.meshgrid(np.arange(epochs), np.arange(n),
                                                  np.arange(num_links), indexing="ij"))
    origin = src[link]
    # a commodity never enters its own source, and leaves a rank only once it can be there
    reach = np.where(origin < n, hops[s, np.minimum(origin, n - 1)] <= e, True)
    keep = (dst[link] != s) & reach
    e, s, link = e[keep], s[keep], link[keep]
    num_flows = len(link)
    flow_col = np.arange(num_flows)
    num_stocks = epochs * n * n
    tau = num_flows + num_stocks

    def stock(ep, so, rank):
        return num_flows + (ep * n + so) * n + rank

    se, ss, sv = (a.ravel() for a in np.meshgrid(np.arange(epochs), np.arange(n),
                                                 np.arange(n), indexing="ij"))
    initial = np.where((ss == sv) & (se == 0), n - 1.0, 0.0)
    later = se > 0
    rows, cols, vals = [], [], []

    def add(r, c, v):
        rows.append(r)
        cols.append(np.broadcast_to(c, np.shape(r)))
        vals.append(np.broadcast_to(np.asarray(v, dtype=float), np.shape(r)))

    # conservation at ranks: stock(e) - stock(e-1) - in(e) + out(e) = initial
    conserve = (se * n + ss) * n + sv
    out_rank, in_rank = origin[keep] < n, dst[link] < n
    add((e * n + s)[out_rank] * n + src[link][out_rank], flow_col[out_rank], 1.0)
    add((e * n + s)[in_rank] * n + dst[link][in_rank], flow_col[in_rank], -1.0)
    add(conserve, stock(se, ss, sv), 1.0)
    add(conserve[later], stock(se[later] - 1, ss[later], sv[later]), -1.0)
    # store and forward: out(e) <= stock(e-1)
    forward = num_stocks + conserve
    add(num_stocks + ((e * n + s) * n + src[link])[out_rank], flow_col[out_rank], 1.0)
    add(forward[later], stock(se[later] - 1, ss[later], sv[later]), -1.0)
    # fabric conserves within the epoch
    base = 2 * num_stocks
    out_fab, in_fab = ~out_rank, ~in_rank
    add(base + (e * n + s)[out_fab] * fabric + src[link][out_fab] - n, flow_col[out_fab], 1.0)
    add(base + (e * n + s)[in_fab] * fabric + dst[link][in_fab] - n, flow_col[in_fab], -1.0)
    # capacity: all commodities on a link in an epoch <= bandwidth * tau
    capacity = base + epochs * n * fabric
    add(capacity + e * num_links + link, flow_col, 1.0)
    add(capacity + np.arange(epochs * num_links), tau, -np.tile(bandwidth, epochs))
    num_rows = capacity + epochs * num_links
    matrix = scipy.sparse.csr_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(num_rows, tau + 1))
    row_lower = np.concatenate([initial, np.full(num_stocks, -np.inf),
                                np.zeros(epochs * n * fabric),
                                np.full(epochs * num_links, -np.inf)])
    row_upper = np.concatenate([initial, initial, np.zeros(epochs * n * fabric),
                                np.zeros(epochs * num_links)])
    col_lower = np.zeros(tau + 1)
    col_upper = np.full(tau + 1, np.inf)
    final = stock(epochs - 1, ss[se == 0], sv[se == 0])
    delivered = np.where(ss[se == 0] == sv[se == 0], 0.0, 1.0)
    col_lower[final] = col_upper[final] = delivered
    cost = np.zeros(tau + 1)
    cost[tau] = 1.0
    secondary = LINK_COST + np.where(dst < n, RELAY_COST, 0.0)
    cost[:num_flows] = SECONDARY_WEIGHT / (n * n) * secondary[link]
    return (LinearProgram(cost, matrix, row_lower, row_upper, col_lower, col_upper),
            _Layout(e, s, link, num_flows, tau))


# ---------------------------------------------------------------- decomposition


def _decompose(topology: Topology, epochs: int, flows: np.ndarray, stocks: np.ndarray,
               src: np.ndarray, dst: np.ndarray
               ) -> dict[tuple[int, int], list[tuple[float, tuple[Hop, ...]]]]:
    """Each commodity's flow over (node, epoch) as paths from its source to each rank,
    widest edge first; a path's rank-to-rank steps become :class:`Hop`\\ s."""
    n, nodes = topology.num_ranks, topology.nodes
    from_rank = np.flatnonzero(src < n)
    leaving = scipy.sparse.csr_array((np.ones(len(from_rank)), (from_rank, src[from_rank])),
                                     shape=(len(src), n))  # link -> the rank it leaves
    paths: dict[tuple[int, int], list[tuple[float, tuple[Hop, ...]]]] = {}
    for s in range(n):
        graph = _Residual()
        edge = graph.edge
        for ep, link in zip(*np.nonzero(flows[:, s, :] > FLOW_EPSILON)):
            a, b = int(src[link]), int(dst[link])
            head = ("r", a, ep) if a < n else ("x", a, ep)
            tail = ("r", b, ep + 1) if b < n else ("x", b, ep)
            edge(head, tail, ("f", ep, link), float(flows[ep, s, link]))
        sent = flows[:, s, :] @ leaving
        for ep in range(epochs):
            for v in range(n):
                held = (n - 1.0 if v == s else 0.0) if ep == 0 else stocks[ep - 1, s, v]
                edge(("r", v, ep), ("r", v, ep + 1), ("w", ep, v), held - sent[ep, v])
        for t in range(n):
            if t != s:
                edge(("r", t, epochs), "sink", ("t", t), float(stocks[epochs - 1, s, t]))
        for share, walk in _paths(("r", s, 0), graph.out, graph.residual):
            t = walk[-1][0][1]
            paths.setdefault((s, t), []).append((share, _hops(walk, src, dst, nodes, n)))
    for s in range(n):
        for t in range(n):
            if s != t and (s, t) not in paths:
                raise SolverError(f"strategy 'flow': the LP solution carries nothing from "
                                  f"rank {s} to rank {t} (solver tolerance); try another "
                                  "epochs option")
    return paths


class _Residual:
    """A commodity's flow as a graph: edges out of each node, and what each still carries."""

    def __init__(self) -> None:
        self.out: dict[object, list[tuple[object, object]]] = {}
        self.residual: dict[object, float] = {}

    def edge(self, a: object, b: object, key: object, amount: float) -> None:
        if amount > FLOW_EPSILON:
            self.out.setdefault(a, []).append((b, key))
            self.residual[key] = amount


def _paths(start, out, residual):
    """Peel paths off a flow: follow the widest residual edge to the sink, subtract the
    path's bottleneck; a cycle met on the way (solver noise) is cancelled."""
    while True:
        node, walk, seen = start, [], {start: 0}
        while node != "sink":
            options = [(residual[key], b, key) for b, key in out.get(node, ())
                       if residual[key] > FLOW_EPSILON]
            if not options:
                return
            _, following, key = max(options, key=lambda o: o[0])
            walk.append((node, following, key))
            if following in seen:  # a cycle: cancel it and carry on from there
                cycle = walk[seen[following]:]
                least = min(residual[k] for _, _, k in cycle)
                for _, _, k in cycle:
                    residual[k] -= least
                del walk[seen[following]:]
                seen = {step[0]: i for i, step in enumerate(walk)}
                seen[following] = len(walk)
                node = following
                continue
            seen[following] = len(walk)
            node = following
        share = min(residual[key] for _, _, key in walk)
        for _, _, key in walk:
            residual[key] -= share
        yield share, walk


def _hops(walk, src: np.ndarray, dst: np.ndarray, nodes, n: int) -> tuple[Hop, ...]:
    hops, start, via = [], None, []
    for _, _, key in walk:
        if key[0] != "f":
            continue
        _, epoch, link = key
        a, b = int(src[link]), int(dst[link])
        if a < n:
            start, via = a, []
        if b < n:
            hops.append(Hop(start, b, tuple(via), int(epoch)))
        else:
            via.append(nodes[b])
    return tuple(hops)


# ----------------------------------------------------------------------- schedule


class Sync(str, enum.Enum):
    """How a schedule keeps the LP's epochs apart in time.

    ``pair``: transfers between two ranks (through the same fabric) wait for that pair's
    transfers of the epoch before, as a connection sends in order. ``link``: a transfer
    waits for every transfer of the epoch before on any link of its route, and moves in
    equal pieces, so links shared max-min fairly split as the LP planned (max-min fair
    sharing gives equal flows equal rates)."""

    PAIR = "pair"
    LINK = "link"


def flow_schedule(topology: Topology, plan: FlowPlan, chunks: int, sync: Sync = Sync.PAIR,
                  piece: int | None = None) -> Schedule:
    """The plan as an alltoall schedule with ``chunks`` chunks per pair block.

    Each pair's chunks are shared among its paths (:func:`_rounded`); a path moves its
    chunks hop by hop, in pieces of at most ``piece`` chunks (default: all at once), and
    relays hold them in scratch. ``sync`` orders the epochs (:class:`Sync`).
    """
    n, c = topology.num_ranks, chunks
    builder = ScheduleBuilder(Collective(Kind.ALLTOALL, n, c))
    for rank in topology.ranks:
        builder.copy(rank, rank, (IN, rank * c), (OUT, rank * c), c)
    routes: dict[tuple[int, int, tuple[str, ...]], tuple[str, ...] | None] = {}
    links: dict[tuple[int, int, tuple[str, ...]], tuple[int, ...]] = {}
    for hops in {hop for options in plan.paths.values() for _, path in options for hop in path}:
        key = (hops.src, hops.dst, hops.via)
        routes[key] = _pinned(topology, *key)
        links[key] = topology.route_via(*key)
    moves = []  # (hops, source slot, final slot, count)
    for (s, t), counts in _rounded(plan, c, links).items():
        first = 0
        for (_, hops), count in zip(plan.paths[s, t], counts):
            for length in _runs(count, piece or count):
                moves.append((hops, (IN, t * c + first), (OUT, s * c + first), length))
                first += length
    steps: list[list[tuple[int, int]]] = [[] for _ in range(plan.epochs)]
    for number, (hops, _, _, _) in enumerate(moves):
        for step, hop in enumerate(hops):
            steps[hop.epoch].append((number, step))
    scratch = [0] * n
    at = [slot for _, slot, _, _ in moves]
    order = _Order()
    for epoch in range(plan.epochs):
        for number, step in steps[epoch]:
            hops, _, final, count = moves[number]
            hop = hops[step]
            if step == len(hops) - 1:
                target = final
            else:
                target = (SCRATCH, scratch[hop.dst])
                scratch[hop.dst] += count
            key = (hop.src, hop.dst, hop.via)
            streams = [key] if sync is Sync.PAIR else links[key]
            index = builder.add(hop.src, hop.dst, *at[number], *target, count, Op.COPY, 0,
                                order.before(streams, epoch), routes[key])
            order.add(streams, epoch, index)
            at[number] = target
    return builder.build(
        schedule_name("flow", epochs=plan.epochs, chunks=c, sync=sync.value,
                      **({"piece": piece} if piece else {})),
        topology=topology.name, epochs=plan.epochs, sync=sync.value,
        flow_seconds_per_byte=plan.time_per_byte)


class _Order:
    """Per stream (a rank pair's route, or a link), the transfers of its latest epoch and
    of the epoch before: what a transfer of a later epoch must wait for."""

    def __init__(self) -> None:
        self._streams: dict[object, tuple[int, list[int], list[int]]] = {}

    def before(self, streams, epoch: int) -> list[int]:
        waits: list[int] = []
        for stream in streams:
            last, group, previous = self._streams.get(stream, (-1, [], []))
            waits += group if last < epoch else previous
        return waits

    def add(self, streams, epoch: int, index: int) -> None:
        for stream in streams:
            last, group, _ = self._streams.get(stream, (-1, [], []))
            if last < epoch:
                self._streams[stream] = (epoch, [index], group)
            else:
                group.append(index)


def _runs(count: int, piece: int) -> list[int]:
    """Lengths of near-equal consecutive runs of ``count`` chunks, none over ``piece``."""
    if count <= 0:
        return []
    parts = -(-count // max(1, piece))
    base, extra = divmod(count, parts)
    return [base + (k < extra) for k in range(parts)]


def _rounded(plan: FlowPlan, chunks: int,
             links: dict[tuple[int, int, tuple[str, ...]], tuple[int, ...]]
             ) -> dict[tuple[int, int], list[int]]:
    """Whole chunks per path: each path gets the floor of its share, then each pair's
    remaining chunks go, one by one, to the path (among those rounded down) whose
    busiest (epoch, link) stays least loaded. Rounding every pair alike would pile
    the remainders of a symmetric plan onto the same links."""
    load: dict[tuple[int, int], float] = {}
    capacity = plan.epoch_capacity
    footprint = {}
    result = {}
    pending = []
    for pair, options in sorted(plan.paths.items()):
        total = sum(share for share, _ in options)
        exact = [share / total * chunks for share, _ in options]
        whole = [math.floor(x) for x in exact]
        result[pair] = whole
        for number, (_, hops) in enumerate(options):
            footprint[pair, number] = [(hop.epoch, link) for hop in hops
                                       for link in links[hop.src, hop.dst, hop.via]]
            for spot in footprint[pair, number]:
                load[spot] = load.get(spot, 0.0) + whole[number] / chunks
        pending.append((pair, [x - w for x, w in zip(exact, whole)], chunks - sum(whole)))
    for pair, remainders, missing in pending:
        open_paths = [k for k, r in enumerate(remainders) if r > 0] or list(range(len(remainders)))
        for _ in range(missing):
            best = min(open_paths, key=lambda k, pair=pair, remainders=remainders: (
                max((load.get(spot, 0.0) + 1 / chunks) / capacity[spot[1]]
                    for spot in footprint[pair, k]), -remainders[k]))
            open_paths.remove(best)
            result[pair][best] += 1
            for spot in footprint[pair, best]:
                load[spot] = load.get(spot, 0.0) + 1 / chunks
    return result


def _pinned(topology: Topology, a: int, b: int, via: tuple[str, ...]) -> tuple[str, ...] | None:
    """``via`` when the hop leaves the pair's cheapest route, else ``None`` (unpinned)."""
    if topology.has_route(a, b) and topology.route_via(a, b, via) == topology.route(a, b):
        return None
    return via


def _variants(plan: FlowPlan, chunks: int, whole: bool) -> list[tuple[int, Sync, int | None]]:
    """Schedules to try for one plan, as (chunks, sync, piece): pair order with whole
    transfers; with ``whole`` and several chunks, also each pair's block on its main path
    alone (fewer, larger transfers win at small sizes); with several epochs, link order in
    the smallest pieces that keep the schedule within :data:`LINK_TRANSFERS`."""
    variants: list[tuple[int, Sync, int | None]] = [(chunks, Sync.PAIR, None)]
    if whole and chunks > 1:
        variants.append((1, Sync.PAIR, None))
    if plan.epochs > 1 and chunks > 1:
        hops = sum(len(path) for options in plan.paths.values() for _, path in options)
        chunk_hops = chunks * sum(len(path) * share for options in plan.paths.values()
                                  for share, path in options)
        piece = max(1, math.ceil(chunk_hops / max(1, LINK_TRANSFERS - hops)))
        if piece < chunks:
            variants.append((chunks, Sync.LINK, piece))
    return variants


def chunks_for_size(topology: Topology, size: float) -> int:
    """Chunks per pair block at ``size`` bytes: blocks cut into pieces of at least
    :data:`MIN_CHUNK_BYTES`, at most :data:`MAX_CHUNKS` of them."""
    block = size / topology.num_ranks**2
    return int(min(MAX_CHUNKS, max(1, block // MIN_CHUNK_BYTES)))


# ----------------------------------------------------------------------- strategy


def staged_view(topology: Topology) -> Topology | None:
    """``topology`` as the LP should see host memory, or None where it has no CPU node:
    every link into or out of a CPU at half its bandwidth. The simulator stages a route
    through host memory as a host-staged copy does, copied in, then out, one after the
    other, so those bytes cross the host's links in about twice the time the
    cut-through LP plans. Planned cut-through, cedar's alltoall sent a tenth of its
    bytes through host memory and came out 1.97x its bound (NVLinks alone: 1.104);
    planned on this view, 1.052."""
    if not topology.has_host:
        return None
    return replace(topology, links=tuple(
        replace(link, bandwidth=link.bandwidth / 2)
        if topology.is_host(link.src) or topology.is_host(link.dst) else link
        for link in topology.links))


def _options(options: dict[str, object]) -> tuple[float, int | None]:
    reject_options(options, "flow", ("size", "epochs"))
    size = options.get("size", DEFAULT_SIZE)
    if isinstance(size, str):
        size = parse_size(size)
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0:
        raise InputError(f"strategy 'flow': size must be a positive number of bytes, "
                         f"got {size!r}")
    epochs = options.get("epochs")
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int)
                               or epochs < 1):
        raise InputError(f"strategy 'flow': epochs must be a positive integer, got {epochs!r}")
    return float(size), epochs


@register("flow", {Kind.ALLTOALL},
          "time-expanded multi-commodity flow LP (TE-CCL's idea, HiGHS): relays through "
          "ranks, fabric routes pinned; epochs tuned at option size", classic=False,
          slow=True, sized=True, auto=True)
def build_flow(topology: Topology, kind: Kind, *, root: int = 0, chunks: int | None = None,
               **options: object) -> Schedule:
    """Alltoall from the time-expanded flow LP.

    Options: ``size`` (bytes to tune for, default 1 GiB), ``epochs`` (default: the
    fastest in simulation from the rank-hop diameter up, see :data:`EXTRA_EPOCHS`).
    ``chunks`` (chunks per pair block) defaults to :func:`chunks_for_size`; each plan is
    also tried with one chunk and with link sync (:func:`_variants`). On a topology with
    host memory, each epoch count's LP is also solved on its :func:`staged_view`; the
    schedule that simulates fastest ships.
    """
    from ccweave.bounds import lower_bound
    from ccweave.simulate import simulate

    require_kind(kind, {Kind.ALLTOALL}, "flow")
    size, epochs = _options(dict(options))
    if topology.num_ranks < 2:
        raise NotApplicableError("strategy 'flow' needs at least two ranks")
    diameter = _diameter(topology, rank_hops(topology))
    if epochs is not None and epochs < diameter:
        raise InputError(f"strategy 'flow': epochs={epochs} is fewer than the {diameter} "
                         f"rank-to-rank hops some pair of {topology.name!r} needs; give "
                         f"epochs >= {diameter}")
    c = chunks or chunks_for_size(topology, size)
    bound = lower_bound(topology, Kind.ALLTOALL, size)
    target = bound.time_s * (1 + GOOD_ENOUGH)
    flow_time = bound.bandwidth_s / size * topology.num_ranks  # per byte of a pair block
    best: tuple[float, Schedule] | None = None
    failures = []
    tight = 0
    views = [view for view in (topology, staged_view(topology)) if view is not None]
    for count in [epochs] if epochs else range(diameter, diameter + MAX_EXTRA_EPOCHS + 1):
        plans = []
        for view in views:
            try:
                plans.append(solve_flow(view, count))
            except SolverError as error:
                seen = "" if view is topology else " (host memory at half bandwidth)"
                failures.append(f"epochs={count}{seen}: {error}")
        for plan in plans:
            for chunk_count, sync, piece in _variants(plan, c, chunks is None):
                schedule = flow_schedule(topology, plan, chunk_count, sync, piece)
                seconds = simulate(schedule, topology, size).time_s
                if best is None or seconds < best[0]:
                    best = (seconds, schedule.with_name(
                        schedule.name, variable_classes=plan.variable_classes,
                        variables=plan.variables))
        tight += any(plan.time_per_byte <= flow_time * (1 + GOOD_ENOUGH) for plan in plans)
        if (best is not None and best[0] <= target) or tight > EXTRA_EPOCHS:
            break
    if best is None:
        raise SolverError("strategy 'flow': " + "; ".join(failures))
    return best[1]

