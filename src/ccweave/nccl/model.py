"""NCCL's cost model and choice: what NCCL runs for a collective of a given size, and the
time its model predicts.

:func:`tune` is ``ncclTopoTuneModel`` (``src/graph/tuning.cc``): per collective,
algorithm and protocol a latency and a bandwidth from the machine's graphs and NCCL's
constants. :meth:`TuningModel.time` is ``ncclTopoGetAlgoTime``; :meth:`TuningModel.choose`
is ``topoGetAlgoInfo`` (``src/enqueue.cc``): the cheapest enabled (algorithm, protocol),
ties to the first in NCCL's order, and its channels (fewer for small messages).

Left out: CollNet (SHARP and other in-network reduction need a CollNet plugin), NVLS
across nodes without CollNet (NCCL disables it), user overrides (``NCCL_ALGO``,
``NCCL_PROTO``, ``NCCL_MIN/MAX_NCHANNELS``), fp8 and AVG special cases, and NCCL's float32
rounding (ccweave computes in float64).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ccweave.collectives import Kind
from ccweave.errors import NotApplicableError
from ccweave.nccl import constants as C
from ccweave.nccl.search import NcclGraph
from ccweave.nccl.system import NcclSystem

IGNORE = -1.0
"""``NCCL_ALGO_PROTO_IGNORE``: a cost-table entry NCCL will not run."""

KINDS = {Kind.BROADCAST: "broadcast", Kind.REDUCE: "reduce", Kind.ALLGATHER: "allgather",
         Kind.REDUCESCATTER: "reducescatter", Kind.ALLREDUCE: "allreduce"}
"""ccweave's collectives that NCCL's tuning model knows, by NCCL's name."""

Table = tuple[tuple[tuple[float, ...], ...], ...]
"""``[function][algorithm][protocol]``."""


def function(kind: Kind | str) -> int:
    """NCCL's ``ncclFunc_t`` of a collective; ``NotApplicableError`` for one NCCL does not
    tune (alltoall, gather, scatter are point-to-point in NCCL)."""
    if isinstance(kind, str) and kind in C.FUNCTIONS:
        return C.FUNCTIONS.index(kind)
    kind = Kind.parse(kind)
    if kind not in KINDS:
        raise NotApplicableError(f"{kind.value}: NCCL runs it as point-to-point sends, "
                                 "which its tuning model (and tuner plugins) do not choose")
    return C.FUNCTIONS.index(KINDS[kind])


@dataclass(frozen=True)
class Choice:
    """What NCCL runs for one call: algorithm, protocol, channels, and the model's time."""

    collective: str
    size_bytes: int
    algorithm: str
    protocol: str
    channels: int
    time_s: float

    @property
    def label(self) -> str:
        return f"{self.algorithm}/{self.protocol} x{self.channels}"


@dataclass(frozen=True)
class TuningModel:
    """NCCL's latencies (us) and bandwidths (GB/s, algorithm bandwidth) for a machine.

    ``enabled[f][a][p]``: whether NCCL puts the entry in its cost table at all (an entry
    that is enabled with bandwidth 0 costs -1: not run).
    """

    system: NcclSystem
    latencies: Table
    bandwidths: Table
    enabled: tuple[tuple[tuple[bool, ...], ...], ...]
    max_threads: tuple[tuple[int, ...], ...]
    thread_thresholds: tuple[tuple[int, ...], ...]
    source: str = field(default="NCCL's model", compare=False)

    def time_us(self, func: int, algo: int, proto: int, nbytes: int,
                pipe_ops: int = 1) -> float:
        """``ncclTopoGetAlgoTime``: microseconds, or -1 when the bandwidth is 0.
        ``pipe_ops`` aggregated calls pay a ring's latency each, other algorithms' once
        (NCCL: once per work batch of up to ``NCCL_MAX_DEV_WORK_BATCH_COLLS``)."""
        parts = self.line(func, algo, proto, nbytes)
        if parts is None:
            return IGNORE
        latency, bandwidth = parts
        count = pipe_ops if algo == C.RING else 1
        return latency * count + nbytes / (1000.0 * bandwidth)

    def line(self, func: int, algo: int, proto: int, nbytes: int
             ) -> tuple[float, float] | None:
        """The latency (us) and bandwidth (GB/s) NCCL's time uses at ``nbytes``: the tree
        correction and the ring's plateau applied; None when the bandwidth is 0. Both are
        constant between :meth:`breakpoints`."""
        bw = self.bandwidths[func][algo][proto]
        lat = self.latencies[func][algo][proto]
        if bw == 0:
            return None
        log_size = _log2i(nbytes >> 6)
        allreduce = C.FUNCTIONS[func] == "allreduce"
        if algo == C.TREE and allreduce and 0 <= log_size < 23:
            bw *= C.TREE_CORRECTION[proto][log_size]
        if (algo == C.NVLS_TREE and allreduce and 0 <= log_size < 24 and self.system.sm >= 100
                and self.system.cpu_arch == "x86"):
            bw *= C.TREE_CORRECTION[proto][log_size]
        system = self.system
        if (algo == C.RING and proto == C.SIMPLE and system.nodes > 1 and allreduce
                and nbytes // (system.channels * system.ranks) >= 64):
            lat *= 1.9 if system.sm < 80 else 1.4  # the ring's plateau
        return lat, bw

    def breakpoints(self) -> list[int]:
        """Sizes at which :meth:`line` may change: powers of two from 64 B (the tree
        correction) and the ring's plateau."""
        system = self.system
        points = {1 << k for k in range(6, 31)}
        points.add(64 * system.channels * system.ranks)
        return sorted(points)

    def cost_table(self, func: int, nbytes: int, pipe_ops: int = 1) -> Table:
        """``updateCollCostTable``: per algorithm and protocol the time in us, -1 where NCCL
        will not run it."""
        return tuple(tuple(self.time_us(func, a, p, nbytes, pipe_ops)
                           if self.enabled[func][a][p] else IGNORE
                           for p in range(len(C.PROTOCOLS)))
                     for a in range(len(C.ALGORITHMS)))

    def channels(self, algo: int, proto: int, nbytes: int) -> int:
        """``topoGetAlgoInfo``'s channels: NCCL's channels, one fewer while each would move
        less than its threads' share; NVLS its own count."""
        system = self.system
        if algo in (C.NVLS, C.NVLS_TREE):
            if system.nodes > 1 and algo == C.NVLS:
                return min(system.nvls_channels, system.channels)
            return system.nvls_channels
        per_channel = self.max_threads[algo][proto] * self.thread_thresholds[algo][proto]
        count = system.channels
        if per_channel <= 0:
            return count
        return max(1, min(count, nbytes // per_channel))

    def choose(self, kind: Kind | str, nbytes: int, pipe_ops: int = 1) -> Choice:
        """What NCCL runs for a ``kind`` of ``nbytes`` (nccl-tests' size: the whole buffer
        for allgather and reduce-scatter)."""
        func = function(kind)
        algo, proto, time = pick(self.cost_table(func, nbytes, pipe_ops))
        if algo < 0:
            raise NotApplicableError(f"{C.FUNCTIONS[func]} on {self.system.name}: no "
                                     "algorithm and protocol NCCL can run")
        return Choice(C.FUNCTIONS[func], nbytes, C.ALGORITHMS[algo], C.PROTOCOLS[proto],
                      self.channels(algo, proto, nbytes), time * 1e-6)

    def candidates(self, func: int) -> list[tuple[int, int]]:
        """The (algorithm, protocol) entries NCCL may run for ``func`` on this machine."""
        return [(a, p) for a in range(len(C.ALGORITHMS)) for p in range(len(C.PROTOCOLS))
                if self.enabled[func][a][p] and self.bandwidths[func][a][p] > 0]

    def with_tables(self, latencies: Table, bandwidths: Table, enabled, source: str
                    ) -> TuningModel:
        """The same machine with other figures (a model fitted to measurements)."""
        return replace(self, latencies=latencies, bandwidths=bandwidths, enabled=enabled,
                       source=source)


def pick(table: Table | Sequence[Sequence[float]]) -> tuple[int, int, float]:
    """``topoGetAlgoInfo``'s choice: the cheapest entry that is not -1, the first in
    (algorithm, protocol) order on ties; (-1, -1, inf) when there is none."""
    best = (-1, -1, math.inf)
    for a, row in enumerate(table):
        for p, cost in enumerate(row):
            if cost != IGNORE and 0.0 <= cost < best[2]:
                best = (a, p, cost)
    return best


def _log2i(n: int) -> int:
    """NCCL's ``log2i``: floor(log2(n)), -1 for 0."""
    return n.bit_length() - 1


def tune(system: NcclSystem) -> TuningModel:
    """``ncclTopoTuneModel`` for ``system``."""
    nodes, ranks = system.nodes, system.ranks
    gen = system.generation
    index2 = nodes - 1 if nodes <= 2 else 2
    index1 = gen if nodes == 1 else (1 if system.cpu_vendor == "amd" else 0)
    ll_max = C.LL_MAX_BWS[index1][index2]
    tree_max = C.PER_CH_MAX_TREE_BWS[gen][index2]
    ring_ll128_max = C.PER_CH_MAX_RING_LL128_BWS[gen][index2]
    tree_ll128_max = C.PER_CH_MAX_TREE_LL128_BWS[gen][index2]
    nvls_tree_max = C.PER_CH_MAX_NVLS_TREE_BWS[gen][index2]
    hw_lat = [[list(row) for row in hw] for hw in C.HW_LATENCIES]
    if system.cpu_arch == "power":  # favour trees over rings on POWER
        hw_lat[C.HW_PCI][C.TREE][C.SIMPLE] = hw_lat[C.HW_PCI][C.RING][C.SIMPLE]
    ppn = ranks / nodes
    graphs = _graphs(system)
    intra_hw = [C.HW_NVLINK if g is not None and g.type_intra == C.PATH_NVL else C.HW_PCI
                for g in graphs]
    hw = [h if nodes == 1 else C.HW_NET for h in intra_hw]
    algos, protos = len(C.ALGORITHMS), len(C.PROTOCOLS)
    lat = [[[0.0] * protos for _ in range(algos)] for _ in C.FUNCTIONS]
    bws = [[[0.0] * protos for _ in range(algos)] for _ in C.FUNCTIONS]
    for f, name in enumerate(C.FUNCTIONS):
        nsteps = 2 * (ranks - 1) if name == "allreduce" else \
            ranks - 1 if name in ("reducescatter", "allgather") else ranks
        for a in range(algos):
            graph = graphs[a]
            if graph is None or not _computed(name, a):
                continue
            for p in range(protos):
                if a in (C.NVLS, C.NVLS_TREE) and p != C.SIMPLE:
                    continue
                if name in ("reducescatter", "allgather") and a == C.PAT and (
                        p != C.SIMPLE or not _pat_enabled(system)):
                    continue
                bw = graph.bw_intra if nodes <= 2 else graph.bw_inter
                if a in (C.NVLS, C.NVLS_TREE):
                    if graph.channels < 2:
                        continue
                    intra = (graph.bw_intra * C.NVLS_EFFICIENCY[gen]
                             * (graph.channels - 1) / graph.channels)
                    intra *= 2.0 if name == "allreduce" else (ppn - 1) / ppn
                    inter = graph.bw_inter * (2 if nodes <= 2 and a == C.NVLS_TREE else 1)
                    bw = min(intra, inter, nvls_tree_max if a == C.NVLS_TREE else math.inf)
                bus = graph.channels * bw
                if a == C.RING and p == C.LL:
                    bus = min(ll_max, bus * .5)
                if a == C.RING and p == C.LL128:
                    bus = min(bus * 0.92, graph.channels * ring_ll128_max)
                if a == C.TREE and name == "allreduce":
                    bus = min(bus * .92, graph.channels * tree_max)
                if a == C.TREE and p == C.LL:
                    bus = min(bus * 1.0 / 3.8, ll_max)
                if a == C.TREE and p == C.LL128:
                    bus = min(bus * (7.0 / 9.0 if nodes == 1 else 120.0 / 128.0),
                              graph.channels * tree_ll128_max)
                if a == C.TREE and graph.pattern == C.PATTERN_TREE:
                    bus *= .85
                if a == C.PAT:
                    bus *= .75
                if not (a != C.RING and name in ("allgather", "reducescatter")):
                    ratio = ranks / nsteps if a in (C.RING, C.NVLS, C.NVLS_TREE) else .5
                    bus *= ratio
                bws[f][a][p] = bus
                lat[f][a][p] = _latency(system, name, a, p, nsteps, graph, hw_lat,
                                        intra_hw[a], hw[a], ppn)
    enabled = _enabled(system, graphs)
    for f in range(len(C.FUNCTIONS)):
        for a in range(algos):
            for p in range(protos):
                if not enabled[f][a][p]:
                    bws[f][a][p] = 0.0
    return TuningModel(system, _frozen(lat), _frozen(bws), _table_enabled(system),
                       _max_threads(system), _thresholds(system))


def _graphs(system: NcclSystem) -> list[NcclGraph | None]:
    """NCCL's graph per algorithm (``init.cc``): tree, ring, no CollNet, NVLS twice, PAT
    on the tree's graph."""
    return [system.tree, system.ring, None, None, system.nvls, system.nvls, system.tree]


def _computed(name: str, algo: int) -> bool:
    """The (function, algorithm) pairs ``ncclTopoTuneModel`` fills in."""
    if name in ("broadcast", "reduce"):
        return algo == C.RING
    if name in ("reducescatter", "allgather"):
        return algo in (C.PAT, C.RING, C.NVLS, C.COLLNET_DIRECT)
    return algo != C.PAT


def _pat_enabled(system: NcclSystem) -> bool:
    """``ncclPatEnable``: one GPU per node (and a host network, which ccweave assumes)."""
    return system.sm >= 60 and system.nodes == system.ranks


def _latency(system: NcclSystem, name: str, a: int, p: int, nsteps: int, graph: NcclGraph,
             hw_lat, intra_hw: int, hw: int, ppn: float) -> float:
    nodes, ranks = system.nodes, system.ranks
    latency = C.BASE_LATENCIES[a][p]
    intra = hw_lat[intra_hw][a][p]
    inter = (hw_lat[C.HW_NET][C.TREE][p] if ppn == 1 else hw_lat[C.HW_NET][a][p])
    inter += graph.latency_inter
    if p == C.SIMPLE:
        inter += graph.latency_inter  # the flush
    if a == C.RING:
        step = hw_lat[hw][a][p]
        if name in ("reduce", "broadcast"):
            if graph.same_channels:
                return latency + step
            if p == C.SIMPLE:
                step = hw_lat[hw][C.TREE][p]
            return latency + nsteps * step
        overhead = 0.0
        if nodes > 1:
            overhead = C.NET_OVERHEAD_US.get(system.cpu_vendor, 1.0) \
                if system.cpu_arch == "x86" else 1.0
            if p == C.SIMPLE:
                overhead *= 3
        intra = max(intra, overhead)
        inter_steps = 0 if nodes == 1 else 2 * (nodes - 1) if name == "allreduce" \
            else nodes - 1
        return latency + (nsteps - inter_steps) * intra + inter_steps * inter
    if a == C.TREE:
        if name == "allreduce":
            latency += 2 * ((ranks // nodes - 1) * intra + _log2i(nodes) * inter)
        return latency
    if a == C.NVLS:
        return intra + (inter if nodes > 1 else 0.0)
    if a == C.NVLS_TREE:
        return latency + intra + 2 * _log2i(nodes) * inter
    if a == C.PAT and name in ("allgather", "reducescatter"):
        return latency + _log2i(nodes) * (inter / 3.5) + ranks * 2.8
    return latency


def _ll128_enabled(system: NcclSystem, graph: NcclGraph) -> bool:
    """NCCL enables LL128 by default up to PXB paths (PXN from Hopper on) across nodes and
    over NVLink inside one."""
    limit = C.PATH_PXN if system.sm >= 90 else C.PATH_PXB
    return graph.type_inter <= limit and graph.type_intra <= C.PATH_NVB and system.sm >= 70


def _enabled(system: NcclSystem, graphs: Sequence[NcclGraph | None]):
    """``ncclTopoTuneModel``'s algorithm and protocol switches: [f][a][p]."""
    table = []
    for _ in C.FUNCTIONS:
        rows = []
        for a, graph in enumerate(graphs):
            algo_on = not (
                (system.nodes == 1 and a == C.NVLS_TREE)
                or a in (C.COLLNET_DIRECT, C.COLLNET_CHAIN)  # no CollNet plugin
                or (a == C.NVLS and system.nodes > 1))
            rows.append(tuple(
                algo_on and graph is not None
                and (p != C.LL128 or _ll128_enabled(system, graph))
                for p in range(len(C.PROTOCOLS))))
        table.append(tuple(rows))
    return tuple(table)


def _table_enabled(system: NcclSystem):
    """``updateCollCostTable``: which entries NCCL costs at all ([f][a][p]); the rest stay
    -1. CollNet needs a CollNet plugin; NVLS needs NVLS support (and more than 32 local
    ranks only for allreduce); NVLS across nodes needs CollNet."""
    table = []
    for name in C.FUNCTIONS:
        rows = []
        for a in range(len(C.ALGORITHMS)):
            on = True
            if a in (C.COLLNET_DIRECT, C.COLLNET_CHAIN):
                on = False
            if a in (C.NVLS, C.NVLS_TREE) and (
                    not system.nvls_support
                    or (name != "allreduce" and system.local_ranks > C.NVLS_MAX_ARITY)):
                on = False
            if a == C.NVLS and system.nodes > 1:
                on = False
            rows.append((on,) * len(C.PROTOCOLS))
        table.append(tuple(rows))
    return tuple(table)


def _max_threads(system: NcclSystem) -> tuple[tuple[int, ...], ...]:
    """``comm->maxThreads[a][p]`` (defaults; PAT and unused entries 0)."""
    threads = [[0] * len(C.PROTOCOLS) for _ in C.ALGORITHMS]
    ring = system.ring
    threads[C.RING][C.SIMPLE] = 256 if ring.bw_intra * ring.channels <= C.PCI_BW \
        else C.SIMPLE_MAX_NTHREADS
    threads[C.TREE][C.SIMPLE] = C.SIMPLE_MAX_NTHREADS
    for a in (C.COLLNET_DIRECT, C.COLLNET_CHAIN, C.NVLS, C.NVLS_TREE):
        threads[a][C.SIMPLE] = C.MAX_NTHREADS
    for a in (C.RING, C.TREE):
        threads[a][C.LL] = C.LL_MAX_NTHREADS
        threads[a][C.LL128] = C.LL128_MAX_NTHREADS
    return tuple(tuple(row) for row in threads)


def _thresholds(system: NcclSystem) -> tuple[tuple[int, ...], ...]:
    """``comm->threadThresholds[a][p]``: bytes per thread before more channels."""
    table = [list(C.THREAD_THRESHOLDS) for _ in C.ALGORITHMS]
    table[C.RING][C.LL] *= system.ranks
    table[C.COLLNET_DIRECT][C.SIMPLE] = table[C.COLLNET_CHAIN][C.SIMPLE] = 512
    return tuple(tuple(row) for row in table)


def _frozen(table: list) -> Table:
    return tuple(tuple(tuple(row) for row in func) for func in table)


def nccl_model(topology, gpu: str | None = None, graphs: str | None = None) -> TuningModel:
    """NCCL's tuning model on ``topology``: the graphs ccweave's model of NCCL's search
    finds, or NCCL's own from its dump ``graphs`` (``NCCL_GRAPH_DUMP_FILE``); ``gpu`` names
    the GPU generation where the topology does not say it."""
    from ccweave.nccl.graph_xml import read_graphs
    from ccweave.nccl.system import nccl_system

    system = nccl_system(topology, gpu)
    if graphs is not None:
        system = system.with_graphs(read_graphs(graphs), f"NCCL's graph dump {graphs}")
    return tune(system)
