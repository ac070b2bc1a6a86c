"""NCCL's graph search (``ncclTopoCompute``, ``src/graph/search.cc``), as ccweave models it:
how many channels of a pattern (ring, tree, NVLS) fit on one node, at which speed.

A channel is one ring (a cycle over the node's GPUs; across nodes a path entering from a
NIC and leaving to one), one tree chain (a path over the GPUs; across nodes entered and
left through one NIC) or one NVLS head. Every channel takes the speed from every link its
paths cross, as ``followPath`` does. The search follows NCCL's outline:

1. Start at the fastest speed of NCCL's list for the GPU generation (``speedArray``) that
   is no faster than the widest path and that ``minChannels`` channels can carry.
2. At each speed find channels one after another (replaying the previous channel first,
   then GPU order, then a depth-first search, widest hops first), with path types allowed
   from the best up (NVL, PIX, PXB, PHB, SYS) until some channel is found; keep the graph
   with the most channels x speed. Stop when the channels carry all a GPU can send, when
   ``maxChannels`` are found, or when the next speed is under 0.49 of the best one's.
3. Double the channels at half speed when the speed is 25 GB/s or more (except Hopper and
   newer below 50 GB/s over more than 4 channels: ``ncclTopoDupChannels``), then (rings)
   raise the speed while the same number of channels still fits.

What ccweave leaves out: NCCL's timeouts, its search over which NIC pairs with which GPU
beyond "the best reachable one" (``crossNic`` is allowed), PXN and NVB paths through
another GPU, and CollNet. Where NCCL's own answer is at hand (``NCCL_GRAPH_DUMP_FILE``),
:func:`ccweave.nccl.graph_xml.read_graphs` takes it instead.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ccweave.nccl import constants as C
from ccweave.nccl.view import NodeView, Path

TYPES = (C.PATH_NVL, C.PATH_PIX, C.PATH_PXB, C.PATH_PHB, C.PATH_SYS)
"""Path types the search allows, best first."""

BUDGET = 4000
"""Depth-first steps one channel's search may take (NCCL has timeouts likewise)."""

EPSILON = 1e-6


@dataclass(frozen=True)
class NcclGraph:
    """What the search found for one pattern: ``ncclTopoGraph``'s fields.

    ``orders``: per channel, the node's GPUs (the first node's ranks) in channel order.
    ``nics``: per channel (several nodes), the NICs it enters and leaves through.
    """

    pattern: int
    channels: int
    bw_intra: float
    bw_inter: float
    type_intra: int
    type_inter: int
    latency_inter: float = 0.0
    same_channels: bool = True
    orders: tuple[tuple[int, ...], ...] = ()
    nics: tuple[tuple[str, str], ...] = ()

    @property
    def total_bw(self) -> float:
        return self.channels * self.bw_intra


def speeds(sm: int, inter: bool) -> tuple[float, ...]:
    """NCCL's per-channel speeds for a GPU generation, intra- or inter-node."""
    if sm >= 100:
        return C.SM100_SPEEDS_INTER if inter else C.SM100_SPEEDS_INTRA
    if sm >= 90:
        return C.SM90_SPEEDS_INTER if inter else C.SM90_SPEEDS_INTRA
    return C.SPEEDS_INTER if inter else C.SPEEDS_INTRA


def compute(view: NodeView, pattern: int, min_channels: int = 1,
            max_channels: int = C.RING_MAX_CHANNELS) -> NcclGraph:
    """The graph NCCL's search finds for ``pattern`` on ``view``'s node."""
    if pattern == C.PATTERN_NVLS:
        return _nvls(view)
    inter = view.nodes > 1
    array = speeds(view.sm, inter)
    total = view.total_bw
    index = 0
    while index < len(array) - 1 and (array[index] > view.max_bw
                                      or array[index] * min_channels > total):
        index += 1
    best: NcclGraph | None = None
    while True:
        speed = array[index]
        found = _at_speed(view, pattern, speed, max_channels,
                          None if best is None else best.type_intra)
        if found is not None and found.channels >= min_channels and (
                best is None or found.total_bw > best.total_bw + EPSILON):
            best = found
        if best is not None and (best.channels >= max_channels
                                 or best.channels * best.bw_inter >= total - EPSILON):
            break
        if index == len(array) - 1 or (best is not None
                                       and array[index + 1] / best.bw_inter <= C.SPEED_DROP):
            break
        index += 1
    if best is None:
        return _fallback(view, pattern)
    best = duplicate(best, view.sm, max_channels)
    if pattern == C.PATTERN_RING:
        best = _faster(view, best, array)
    return best


def _at_speed(view: NodeView, pattern: int, speed: float, max_channels: int,
              worst_type: int | None) -> NcclGraph | None:
    """The most channels at ``speed``, with the best path types that find any."""
    for allowed in TYPES:
        if worst_type is not None and allowed > worst_type:
            break
        found = _Channels(view, pattern, speed, allowed).find(max_channels)
        if found:
            return _graph(view, pattern, speed, found)
    return None


def _graph(view: NodeView, pattern: int, speed: float, found: list[_Channel]) -> NcclGraph:
    gpu_types = [p.type for channel in found for p in channel.hops]
    net_types = [p.type for channel in found for p in channel.ends if channel.nics]
    orders = tuple(channel.order for channel in found)
    return NcclGraph(pattern, len(found), speed, speed,
                     max(gpu_types, default=C.PATH_LOC), max(net_types, default=C.PATH_PIX),
                     same_channels=len(set(orders)) == 1, orders=orders,
                     nics=tuple(channel.nics for channel in found if channel.nics))


def _hops(order: Sequence[int], pattern: int, nodes: int) -> list[tuple[int, int]]:
    """The GPU-to-GPU hops of a channel: a cycle for a one-node ring, else a path."""
    pairs = list(itertools.pairwise(order))
    if pattern == C.PATTERN_RING and nodes == 1 and len(order) > 1:
        pairs.append((order[-1], order[0]))
    return pairs


@dataclass(frozen=True)
class _Channel:
    order: tuple[int, ...]
    hops: tuple[Path, ...]
    """GPU-to-GPU paths, the loop back of a one-node ring included."""
    ends: tuple[Path, ...] = ()
    """Network paths into and out of the node (several nodes)."""
    nics: tuple[str, str] | None = None


class _Channels:
    """Channels found one after another at one speed, each taking it from its links."""

    def __init__(self, view: NodeView, pattern: int, speed: float, allowed: int) -> None:
        self.view = view
        self.ring = pattern == C.PATTERN_RING
        self.speed = speed
        self.residual = view.capacity.copy()
        self.multi = view.nodes > 1
        gpus = view.gpus
        self.next: dict[int, list[int]] = {
            a: [b for b in gpus if (a, b) in view.gpu_paths
                and view.gpu_paths[a, b].type <= allowed
                and (self.ring or ((b, a) in view.gpu_paths
                     and view.gpu_paths[b, a].type <= allowed))]
            for a in gpus}
        self.allowed = allowed

    def find(self, limit: int) -> list[_Channel]:
        found: list[_Channel] = []
        previous: tuple[int, ...] | None = None
        while len(found) < limit:
            channel = self._one(previous)
            if channel is None:
                break
            found.append(channel)
            previous = channel.order
        return found

    # ---------------------------------------------------------------- one channel

    def _fits(self, path: Path) -> bool:
        return all(self.residual[i] >= self.speed - EPSILON for i in path.links)

    def _take(self, path: Path, sign: float = 1.0) -> None:
        for i in path.links:
            self.residual[i] -= sign * self.speed

    def _one(self, previous: tuple[int, ...] | None) -> _Channel | None:
        gpus = self.view.gpus
        for order in (previous, tuple(gpus)):
            if order is not None:
                channel = self._whole(order)
                if channel is not None:
                    return channel
        if not self.multi:
            for start in gpus:
                order = self._dfs(start, None)
                if order is not None:
                    channel = self._close(order)
                    if channel is not None:
                        return channel
                    self._give(order)
            return None
        for entry, first in self._entries():
            self._take(self.view.net_paths[entry, first])
            for last, exit_nic in self._exits(entry, first):
                back = self.view.net_paths[last, exit_nic]
                if not self._fits(back):
                    continue
                self._take(back)
                order = self._dfs(first, last if self.ring else None)
                if order is not None:
                    hops = tuple(self._hop_paths(order))
                    return _Channel(order, hops,
                                    (self.view.net_paths[entry, first], back),
                                    (entry, exit_nic))
                self._take(back, -1.0)
            self._take(self.view.net_paths[entry, first], -1.0)
        return None

    def _entries(self) -> list[tuple[str, int]]:
        """(NIC, GPU) pairs a channel may enter the node by, best first."""
        paths = self.view.net_paths
        pairs = [(n, g) for n in self.view.nics for g in self.view.gpus
                 if (n, g) in paths and self._fits(paths[n, g])]
        pairs.sort(key=lambda pair: (paths[pair].type, -self._width(paths[pair])))
        return pairs

    def _exits(self, entry: str, first: int) -> list[tuple[int, str]]:
        """(GPU, NIC) pairs a channel that entered at ``first`` may leave by, best first:
        a ring leaves from another GPU, through the NIC it came in by if it can; a tree
        goes back out from the GPU it came in at."""
        paths = self.view.net_paths
        single = len(self.view.gpus) == 1
        pairs = [(g, n) for g in self.view.gpus for n in self.view.nics
                 if (g, n) in paths and (g == first if not self.ring or single
                                         else g != first)]
        pairs.sort(key=lambda pair: (pair[1] != entry, paths[pair].type,
                                     -self._width(paths[pair])))
        return pairs

    def _width(self, path: Path) -> float:
        return float(min(self.residual[i] for i in path.links)) if path.links else math.inf

    def _hop_paths(self, order: Sequence[int]) -> list[Path]:
        return [self.view.gpu_paths[a, b] for a, b in itertools.pairwise(order)]

    def _give(self, order: Sequence[int]) -> None:
        for path in self._hop_paths(order):
            self._take(path, -1.0)

    def _close(self, order: tuple[int, ...]) -> _Channel | None:
        """Close a one-node channel whose hops are taken: the loop back of a ring."""
        hops = tuple(self._hop_paths(order))
        if not self.ring or len(order) == 1:
            return _Channel(order, hops)
        path = self.view.gpu_paths.get((order[-1], order[0]))
        if path is None or path.type > self.allowed or not self._fits(path):
            return None
        self._take(path)
        return _Channel(order, (*hops, path))

    def _whole(self, order: tuple[int, ...]) -> _Channel | None:
        """``order`` as a channel, if every hop and its ends fit."""
        taken = []
        for a, b in itertools.pairwise(order):
            path = self.view.gpu_paths.get((a, b))
            if path is None or b not in self.next[a] or not self._fits(path):
                break
            self._take(path)
            taken.append(path)
        else:
            if not self.multi:
                channel = self._close(order)
                if channel is not None:
                    return channel
            else:
                last = order[-1] if self.ring else order[0]
                for entry, first in self._entries():
                    if first != order[0]:
                        continue
                    into = self.view.net_paths[entry, first]
                    self._take(into)
                    for gpu, exit_nic in self._exits(entry, first):
                        back = self.view.net_paths[gpu, exit_nic]
                        if gpu == last and self._fits(back):
                            self._take(back)
                            return _Channel(order, tuple(taken), (into, back),
                                            (entry, exit_nic))
                    self._take(into, -1.0)
        for path in taken:
            self._take(path, -1.0)
        return None

    def _dfs(self, start: int, end: int | None) -> tuple[int, ...] | None:
        """A path over every GPU from ``start`` (to ``end``) whose hops fit; its hops are
        taken. None when there is none within the budget."""
        gpus = self.view.gpus
        if end is not None and end == start and len(gpus) > 1:
            return None
        order = [start]
        taken: list[Path] = []
        stack = [self._candidates(start, {start}, end, 1)]
        steps = 0
        while stack and steps < BUDGET:
            steps += 1
            if len(order) == len(gpus):
                return tuple(order)
            if stack[-1]:
                nxt = stack[-1].pop()
                path = self.view.gpu_paths[order[-1], nxt]
                if self._fits(path):
                    self._take(path)
                    taken.append(path)
                    order.append(nxt)
                    stack.append(self._candidates(nxt, set(order), end, len(order)))
                continue
            stack.pop()
            if taken:
                self._take(taken.pop(), -1.0)
            order.pop()
        for path in taken:
            self._take(path, -1.0)
        return None

    def _candidates(self, at: int, visited: set[int], end: int | None,
                    depth: int) -> list[int]:
        """Next GPUs, best last (the stack pops from the end): lowest path type, then
        most residual bandwidth, then GPU order; ``end`` only as the last."""
        last = depth + 1 == len(self.view.gpus)
        options = [b for b in self.next[at] if b not in visited
                   and (end is None or (b == end) == last)]
        paths = self.view.gpu_paths
        options.sort(key=lambda b: (paths[at, b].type, -self._width(paths[at, b]), b),
                     reverse=True)
        return options


def duplicate(graph: NcclGraph, sm: int, max_channels: int) -> NcclGraph:
    """``ncclTopoDupChannels``: twice the channels at half the speed, where NCCL does so."""
    if graph.bw_intra < 25.0 or (sm > 80 and graph.bw_intra < 50.0 and graph.channels > 4):
        return graph
    doubled = min(graph.channels * 2, max_channels)
    if doubled == graph.channels:
        return graph
    factor = math.ceil(doubled / graph.channels)
    orders = (graph.orders * 2)[:doubled]
    nics = (graph.nics * 2)[:doubled] if graph.nics else ()
    return NcclGraph(graph.pattern, doubled, graph.bw_intra / factor, graph.bw_inter / factor,
                     graph.type_intra, graph.type_inter, graph.latency_inter,
                     graph.same_channels, orders, nics)


def _faster(view: NodeView, graph: NcclGraph, array: Sequence[float]) -> NcclGraph:
    """Rings, search's second pass: a faster speed with as many channels, while one fits."""
    for speed in sorted((s for s in array if s > graph.bw_inter), reverse=False):
        found = _Channels(view, graph.pattern, speed, graph.type_intra).find(graph.channels)
        if len(found) < graph.channels:
            break
        graph = _graph(view, graph.pattern, speed, found)
    return graph


def _nvls(view: NodeView) -> NcclGraph:
    """NVLS: one channel per GPU as head (``ncclTopoSearchTryNvls``): each channel takes the
    speed from every GPU's NVSwitch link both ways, twice from its head's."""
    switch = view.nvswitch
    gpus = view.gpus
    channels = min(C.NVLS_MAX_ARITY, len(gpus))
    if switch is None or view.sm < 90 or len(gpus) < 2:
        return NcclGraph(C.PATTERN_NVLS, 0, 0.0, 0.0, C.PATH_NVL, C.PATH_PIX)
    topo = view.topology
    widths = [view.capacity[topo.link_id[g, switch]] for g in gpus] + \
             [view.capacity[topo.link_id[switch, g]] for g in gpus]
    per_gpu = (channels - 1) + 2  # a share for each other head, two for its own
    array = speeds(view.sm, False)
    fitting = [s for s in array if s * per_gpu <= min(widths) + EPSILON
               and s * channels <= view.total_bw + EPSILON]
    if not fitting:
        return NcclGraph(C.PATTERN_NVLS, 0, 0.0, 0.0, C.PATH_NVL, C.PATH_PIX)
    speed = max(fitting)
    inter = speed
    if view.nodes > 1:
        ports = [view.net_paths[g, n].bandwidth for g in gpus for n in view.nics
                 if (g, n) in view.net_paths]
        wide = max(ports, default=0.0)
        inter = max((s for s in speeds(view.sm, True) if s <= wide + EPSILON
                     and s < 2 * speed), default=0.0)
    orders = tuple((g,) for g in gpus[:channels])
    return NcclGraph(C.PATTERN_NVLS, channels, speed, inter, C.PATH_NVL, C.PATH_PIX,
                     same_channels=False, orders=orders)


def _fallback(view: NodeView, pattern: int) -> NcclGraph:
    """No channel at any speed: NCCL's simple order at 0.1 GB/s over ``SYS`` paths."""
    return NcclGraph(pattern, 1, 0.1, 0.1 if view.nodes > 1 else 0.0, C.PATH_SYS,
                     C.PATH_SYS if view.nodes > 1 else C.PATH_DIS, same_channels=True,
                     orders=(tuple(view.gpus),))

