"""The machine facts NCCL's tuning model reads, for a ccweave topology.

:func:`nccl_system` gives the GPU generation, the host CPU, the number of nodes and ranks,
and the ring, tree and NVLS graphs NCCL's search would find (:mod:`ccweave.nccl.search`),
or those NCCL itself found where its dump (``NCCL_GRAPH_DUMP_FILE``) is given.

The GPU generation is known for the zoo's GPU servers (DGX-1, NDv2, DGX-2, Mist, Cedar:
V100; DGX A100: A100; DGX H100: H100) and is given with ``gpu`` (``--gpu``) for any other
machine; the host CPU is the one that usually comes with that GPU
(:data:`ccweave.topology.link_table.GPU_GENERATIONS`; Mist's is IBM POWER9).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ccweave.errors import InputError, NotApplicableError, printable
from ccweave.nccl import constants as C
from ccweave.nccl import search
from ccweave.nccl.search import NcclGraph
from ccweave.nccl.view import NodeView
from ccweave.topology import link_table, zoo
from ccweave.topology.model import Topology

ZOO_GPUS = {"dgx1": "v100", "ndv2": "v100", "dgx2": "v100", "mist": "v100", "cedar": "v100",
            "dgx-a100": "a100", "dgx-h100": "h100"}
"""The GPUs of the zoo's servers (docs/topology-format.md)."""
ZOO_CPUS = {"mist": "power"}
"""Zoo servers whose host CPU is not their GPU generation's usual one."""
MAX_NODE_GPUS = 72
"""The most GPUs one node (one NVLink domain: NVL72) may have for the search model."""


@dataclass(frozen=True)
class NcclSystem:
    """What NCCL's tuning model (``ncclTopoTuneModel``) reads about a communicator.

    ``graphs_from``: how the graphs were found (ccweave's model of NCCL's search, or an
    NCCL graph dump named by its path).
    """

    name: str
    ranks: int
    nodes: int
    sm: int
    gpu: str
    cpu: str
    """Host CPU family, a key of ``link_table.CPU_LINK_GBPS`` (``intel-skl``, ``amd``...)."""
    ring: NcclGraph
    tree: NcclGraph
    nvls: NcclGraph
    nvswitch: bool
    graphs_from: str = "ccweave's model of NCCL's graph search"

    @property
    def generation(self) -> int:
        """NCCL's compute-capability index: Volta, Ampere, Hopper, Blackwell."""
        return (C.BLACKWELL if self.sm >= 100 else C.HOPPER if self.sm >= 90
                else C.AMPERE if self.sm >= 80 else C.VOLTA)

    @property
    def cpu_arch(self) -> str:
        return "power" if self.cpu == "power" else "arm" if self.cpu == "arm" else "x86"

    @property
    def cpu_vendor(self) -> str:
        return "amd" if self.cpu == "amd" else "intel" if self.cpu.startswith("intel") \
            else "other"

    @property
    def local_ranks(self) -> int:
        return self.ranks // self.nodes

    @property
    def channels(self) -> int:
        """``comm->nChannels``: twice the ring's (and tree's) channels (``ncclTopoPostset``),
        four times on Hopper and newer across nodes when rings run faster than 45 GB/s
        and fewer than 16 would be."""
        base = min(self.ring.channels, self.tree.channels)
        count = min(C.MAXCHANNELS, 2 * base)
        if self.sm >= 90 and self.nodes > 1 and self.ring.bw_intra > 45.0 and count < 16:
            count = min(C.MAXCHANNELS, 2 * count)
        return count

    @property
    def nvls_support(self) -> bool:
        """NVLS needs an NVSwitch, Hopper or newer, and an NVLS graph of 2+ channels."""
        return self.nvswitch and self.sm >= 90 and self.nvls.channels >= 2

    @property
    def nvls_channels(self) -> int:
        if self.sm >= 100:
            return C.NVLS_CHANNELS_BLACKWELL_MULTI_NODE if self.nodes > 1 \
                else C.NVLS_CHANNELS[C.BLACKWELL]
        return C.NVLS_CHANNELS[C.HOPPER]

    def with_graphs(self, graphs: dict[int, NcclGraph], source: str) -> NcclSystem:
        """The same machine with NCCL's own graphs (by graph id: 0 ring, 1 tree, 3 NVLS);
        a dump that names a GPU this machine lacks is another machine's, and refused (it
        was taken as this one's without a word)."""
        for graph_id, graph in sorted(graphs.items()):
            for channel, order in enumerate(graph.orders):
                stranger = next((rank for rank in order
                                 if not 0 <= rank < self.ranks), None)
                if stranger is not None:
                    raise InputError(f"{printable(source)}: graph {graph_id}, channel "
                                     f"{channel} names GPU rank {stranger}, but the machine "
                                     f"has ranks 0..{self.ranks - 1}; give the dump of the "
                                     "machine the topology describes")
        ring, tree = _fewer(graphs.get(C.GRAPH_RING, self.ring),
                            graphs.get(C.GRAPH_TREE, self.tree))
        return replace(self, ring=ring, tree=tree, nvls=graphs.get(C.GRAPH_NVLS, self.nvls),
                       graphs_from=source)


def _fewer(ring: NcclGraph, tree: NcclGraph) -> tuple[NcclGraph, NcclGraph]:
    """Rings and trees cut to the fewer channels of the two, as ``initTransportsRank``
    does before tuning (``src/init.cc``)."""
    count = min(ring.channels, tree.channels)
    return (replace(ring, channels=count, orders=ring.orders[:count]),
            replace(tree, channels=count, orders=tree.orders[:count]))


def gpu_of(topology: Topology, gpu: str | None = None) -> link_table.GpuGeneration:
    """The GPU generation of ``topology``: ``gpu`` when given, else the zoo server's."""
    if gpu is not None:
        return link_table.generation(gpu)
    base = topology.name.split(":")[0]
    if base in ZOO_GPUS and zoo.is_zoo_name(topology.name) and _is_zoo(topology):
        return link_table.GPU_GENERATIONS[ZOO_GPUS[base]]
    raise NotApplicableError(
        f"{topology.name}: the GPU generation is unknown, so NCCL's model cannot be applied;"
        f" say it with --gpu ({', '.join(link_table.GPU_GENERATIONS)})")


def _is_zoo(topology: Topology) -> bool:
    """``topology`` is the zoo machine its name says, not a file that took the name."""
    try:
        built = zoo.get(topology.name)
    except Exception:  # a name the zoo cannot build
        return False
    return built.num_ranks == topology.num_ranks and built.links == topology.links


def nccl_system(topology: Topology, gpu: str | None = None) -> NcclSystem:
    """NCCL's view of ``topology``: its nodes, GPU generation and graphs.

    Raises ``NotApplicableError`` for a machine whose GPU generation is unknown (say it
    with ``gpu``) or that has a single rank.
    """
    generation = gpu_of(topology, gpu)
    if topology.num_ranks < 2:
        raise NotApplicableError(f"{topology.name}: one rank; NCCL has nothing to tune")
    per_node = len(topology.groups["node"][0]) if "node" in topology.groups \
        else topology.num_ranks
    if per_node > MAX_NODE_GPUS:
        raise NotApplicableError(
            f"{topology.name}: {per_node} GPUs in one node; ccweave models NCCL's search on "
            f"nodes of up to {MAX_NODE_GPUS} (an NVL72 domain): give the topology node "
            "groups (groups.node)")
    base = topology.name.split(":")[0]
    cpu = ZOO_CPUS.get(base, generation.cpu) if gpu is None else generation.cpu
    view = NodeView(topology, generation.sm, cpu)
    ring = search.compute(view, C.PATTERN_RING, 1, C.RING_MAX_CHANNELS)
    tree = search.compute(view, C.PATTERN_BALANCED_TREE, ring.channels, ring.channels)
    nvls = search.compute(view, C.PATTERN_NVLS)
    ring, tree = _fewer(ring, tree)
    return NcclSystem(topology.name, topology.num_ranks, view.nodes, generation.sm,
                      generation.name, cpu, ring, tree, nvls, view.nvswitch is not None)
