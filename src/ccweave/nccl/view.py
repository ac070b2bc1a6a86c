"""What NCCL sees of one node of a ccweave topology: its link figures and path types.

NCCL's graph search (``src/graph/search.cc``) works on its own per-link figures
(``src/graph/topo.h``: 20 GB/s per V100 or A100 NVLink, 20.6 per H100 NVLink, 12 GB/s
per PCIe Gen3 x16), not on peak figures. ccweave's topologies carry peak figures
(:mod:`ccweave.topology.link_table`); each link is scaled by NCCL's figure over the peak
one of its kind: an NVLink by ``SMxx_NVLINK_BW`` over its peak per link, a PCIe link by
12/16, a CPU socket link by NCCL's figure for the host CPU over the peak one; NIC ports
and links of other kinds keep their figure (a link of no known kind counts as NVLink).

A path's type is NCCL's (``graph.h``): ``NVL`` over NVLink only (through an NVSwitch
too), ``PIX`` through at most one PCIe switch, ``PXB`` through several, ``PHB`` through
one CPU, ``SYS`` across CPUs. Paths never pass another GPU (NCCL's ``NVB``/``PXN`` paths
relay through a GPU; ccweave's routes do not).

Every node is taken to be like the first (``groups["node"]``; the whole machine when
there are none): NCCL searches each node alike.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from functools import cached_property

import networkx as nx
import numpy as np

from ccweave.nccl import constants as C
from ccweave.topology import link_table
from ccweave.topology.model import NodeKind, Topology
from ccweave.units import GB_PER_S

_CPU_LINK_KINDS = ("qpi", "upi", "xbus", "xgmi", "smp", "sys")
"""Link kinds between CPU sockets, as the zoo and the importers name them."""
_OTHER_KINDS = ("pcie", "net", "c2c", "memory")
"""Link kinds that are not NVLink and not between sockets (``memory``: an import's host
memory, :mod:`ccweave.topology.host_memory`)."""


@dataclass(frozen=True)
class Path:
    """A route as NCCL sees it: the topology's link indices, its type and bottleneck."""

    links: tuple[int, ...]
    type: int
    bandwidth: float
    """GB/s, NCCL's figure of the slowest link."""


@dataclass(frozen=True, eq=False)
class NodeView:
    """One node of ``topology`` in NCCL's figures.

    Parameters
    ----------
    topology: the machine.
    sm: the GPUs' compute capability (70, 80, 90, 100).
    cpu: the host CPU family, a key of ``link_table.CPU_LINK_GBPS``.
    """

    topology: Topology
    sm: int
    cpu: str

    @cached_property
    def gpus(self) -> tuple[int, ...]:
        """The first node's ranks (``groups["node"]``; every rank without node groups)."""
        if "node" in self.topology.groups:
            return tuple(self.topology.groups["node"][0])
        return tuple(self.topology.ranks)

    @cached_property
    def nodes(self) -> int:
        return len(self.topology.groups.get("node", ((),)))

    @cached_property
    def _members(self) -> frozenset:
        """The node's ranks and the fabric reachable from them without leaving through a
        NIC or passing another node's rank."""
        topo = self.topology
        out: dict[object, list[object]] = {}
        for link in topo.links:
            out.setdefault(link.src, []).append(link.dst)
        seen = set(self.gpus)
        queue = deque(self.gpus)
        while queue:
            node = queue.popleft()
            if not topo.is_rank(node) and topo.kind(node) is NodeKind.NIC:
                continue
            for nxt in out.get(node, ()):
                if nxt in seen or topo.is_rank(nxt):
                    continue
                seen.add(nxt)
                queue.append(nxt)
        return frozenset(seen)

    @cached_property
    def nics(self) -> tuple[str, ...]:
        """The node's NICs that lead off the node (to the network)."""
        topo = self.topology
        return tuple(n for n in topo.fabric if n in self._members
                     and topo.kind(n) is NodeKind.NIC
                     and any(lk.src == n and lk.dst not in self._members for lk in topo.links))

    @cached_property
    def capacity(self) -> np.ndarray:
        """Per link of the topology, NCCL's figure in GB/s."""
        return np.array([self._nccl_gbps(i) for i in range(len(self.topology.links))])

    def _nccl_gbps(self, index: int) -> float:
        link = self.topology.links[index]
        gbps = link.bandwidth / GB_PER_S
        kind = link.kind.lower()
        if "nvlink" in kind:
            return gbps / link_table.nvlink_gbps(self.sm) * _nccl_nvlink_gbps(self.sm)
        if "pcie" in kind:
            return gbps * C.PCI_BW / link_table.pcie_gbps(3)
        if any(k in kind for k in _CPU_LINK_KINDS) or self._joins_cpus(link.src, link.dst):
            nccl = link_table.NCCL_CPU_LINK_GBPS.get(self.cpu)
            peak = link_table.CPU_LINK_GBPS.get(self.cpu)
            return gbps * nccl / peak if nccl and peak else gbps
        return gbps

    def _joins_cpus(self, a: object, b: object) -> bool:
        topo = self.topology
        return all(not topo.is_rank(n) and topo.kind(n) is NodeKind.CPU for n in (a, b))

    def is_nvlink(self, index: int) -> bool:
        """A link NCCL counts as NVLink: NVLink, or a link of no known kind."""
        kind = self.topology.links[index].kind.lower()
        return "nvlink" in kind or not any(k in kind for k in (*_OTHER_KINDS,
                                                               *_CPU_LINK_KINDS))

    # ---------------------------------------------------------------- paths

    def path_type(self, links: tuple[int, ...]) -> int:
        """NCCL's type of a route through ``links``."""
        topo = self.topology
        if all(self.is_nvlink(i) for i in links):
            return C.PATH_NVL
        passed = [topo.links[i].src for i in links[1:]]
        cpus = sum(1 for n in passed if not topo.is_rank(n) and topo.kind(n) is NodeKind.CPU)
        switches = sum(1 for n in passed
                       if not topo.is_rank(n) and topo.kind(n) is NodeKind.PCIE)
        if cpus >= 2:
            return C.PATH_SYS
        if cpus == 1:
            return C.PATH_PHB
        return C.PATH_PXB if switches > 1 else C.PATH_PIX

    def _path(self, links: tuple[int, ...]) -> Path:
        return Path(links, self.path_type(links),
                    float(min(self.capacity[i] for i in links)) if links else np.inf)

    @cached_property
    def gpu_paths(self) -> dict[tuple[int, int], Path]:
        """The topology's route between every two GPUs of the node that have one."""
        paths = {}
        for a in self.gpus:
            for b in self.gpus:
                if a != b and self.topology.has_route(a, b):
                    paths[a, b] = self._path(self.topology.route(a, b))
        return paths

    @cached_property
    def _graph(self) -> nx.DiGraph:
        graph = nx.DiGraph()
        for index, link in enumerate(self.topology.links):
            if link.src in self._members and link.dst in self._members:
                graph.add_edge(link.src, link.dst, index=index,
                               cost=1.0 / max(self.capacity[index], 1e-9))
        return graph

    def _route(self, src: object, dst: object) -> tuple[int, ...] | None:
        """The widest-first route from ``src`` to ``dst`` inside the node, passing no rank."""
        graph = self._graph.subgraph(
            [n for n in self._graph if not self.topology.is_rank(n) or n in (src, dst)])
        try:
            nodes = nx.shortest_path(graph, src, dst, weight="cost")
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            return None
        return tuple(graph.edges[a, b]["index"] for a, b in itertools.pairwise(nodes))

    def _port(self, nic: str, outward: bool) -> int:
        """The link from ``nic`` to the network (``outward``) or back."""
        for index, link in enumerate(self.topology.links):
            if outward and link.src == nic and link.dst not in self._members:
                return index
            if not outward and link.dst == nic and link.src not in self._members:
                return index
        raise AssertionError(f"{nic} has no network port")

    @cached_property
    def net_paths(self) -> dict[tuple[object, object], Path]:
        """``(nic, gpu)``: network -> NIC -> GPU; ``(gpu, nic)``: GPU -> NIC -> network."""
        paths: dict[tuple[object, object], Path] = {}
        for nic in self.nics:
            for gpu in self.gpus:
                inward, outward = self._route(nic, gpu), self._route(gpu, nic)
                if inward is not None:
                    links = (self._port(nic, False), *inward)
                    paths[nic, gpu] = Path(links, self.path_type(inward),
                                           float(min(self.capacity[i] for i in links)))
                if outward is not None:
                    links = (*outward, self._port(nic, True))
                    paths[gpu, nic] = Path(links, self.path_type(outward),
                                           float(min(self.capacity[i] for i in links)))
        return paths

    # ------------------------------------------------------------ NCCL figures

    @cached_property
    def max_bw(self) -> float:
        """NCCL's ``system->maxBw``: the widest GPU-to-GPU path (one node) or GPU-to-NIC
        path (several)."""
        if self.nodes > 1:
            paths = [p.bandwidth for (a, _), p in self.net_paths.items() if a in self.gpus]
        else:
            paths = [p.bandwidth for p in self.gpu_paths.values()]
        return max(paths, default=0.0)

    @cached_property
    def total_bw(self) -> float:
        """NCCL's ``system->totalBw``: the most a GPU sends, its NVLinks summed or its PCIe
        link."""
        best = 0.0
        for gpu in self.gpus:
            nvlink = pci = 0.0
            for index, link in enumerate(self.topology.links):
                if link.src != gpu:
                    continue
                if self.is_nvlink(index):
                    nvlink += self.capacity[index]
                else:
                    pci = max(pci, self.capacity[index])
            best = max(best, nvlink, pci)
        return best

    @cached_property
    def nvswitch(self) -> str | None:
        """The NVSwitch every GPU of the node reaches over one NVLink link, if any."""
        topo = self.topology
        for name in topo.fabric:
            if name in self._members and topo.kind(name) is NodeKind.SWITCH and all(
                    topo.link(g, name) is not None and topo.link(name, g) is not None
                    and self.is_nvlink(topo.link_id[g, name]) for g in self.gpus):
                return name
        return None


def _nccl_nvlink_gbps(sm: int) -> float:
    """NCCL's figure for one NVLink of a GPU of compute capability ``sm``."""
    table = link_table.NCCL_NVLINK_GBPS
    return table[max((low for low in table if sm >= low), default=min(table))]
