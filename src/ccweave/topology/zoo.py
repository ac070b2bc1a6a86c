"""Built-in machines: the literature's GPU servers and generic shapes.

Figures come from the vendors' published architecture figures and the papers that
measured the machines; where two sources differ, the one taken is named in the
machine's ``source``. ``NAME:K`` joins K copies of a server
through its NICs on one non-blocking network switch (``net``). Generic shapes
(``ring:N``, ``fully-connected:N``, ``switch:N``, ``mesh:AxB``, ``torus:AxB[xC]``,
``hypercube:D``) use TACOS' test figures: 50 GiB/s and 0.5 us per link.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from ccweave import limits
from ccweave.errors import LimitError, TopologyError
from ccweave.topology import host_memory
from ccweave.topology.cost import CostModel
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.units import GB_PER_S, US, shown

# --- link figures (GB/s per direction, microseconds) --------------------------------
NVLINK2_GBPS = 25.0  # one V100 NVLink2 brick
NVLINK_ALPHA_US = 0.7  # TE-CCL's DGX-1 model (TACCL profiled 0.3)
PCIE3_GBPS = 16.0  # PCIe 3.0 x16, as Cedar's figure
PCIE4_GBPS = 32.0  # PCIe 4.0 x16 (DGX A100 GPU <-> NIC)
PCIE5_GBPS = 64.0  # PCIe 5.0 x16 (DGX H100 GPU <-> NIC)
PCIE_ALPHA_US = 0.5
UPI2_GBPS = 32.0  # one UPI 2.0 link at 16 GT/s (Sapphire Rapids)
CPU_LINK_ALPHA_US = 0.5
NIC_ALPHA_US = 0.8  # NIC <-> switch; GPU-NIC-net-NIC-GPU totals 2.6 us, TACCL's IB alpha
STAGING_US = 10.0
"""Each copy into or out of host memory on a staged (host) path: launching an
asynchronous CUDA copy and ordering the next stage after it, a few microseconds of API
calls each (assumed; the multipath paper's per-chunk overhead term)."""
GPU_SERVER_COST = CostModel(staging_latency=STAGING_US * US,
                            source="staging latency assumed (CUDA copy launch and event)")
GENERIC_GBPS = 50 * 2**30 / 1e9  # TACOS: 50 GiB/s
GENERIC_ALPHA_US = 0.5

# DGX-1 / NDv2 hybrid cube mesh: NVLinks between GPU pairs (reference/topologies.md)
DGX1_NVLINKS = (
    (0, 2, 1, 1, 2, 0, 0, 0),
    (2, 0, 1, 2, 0, 1, 0, 0),
    (1, 1, 0, 2, 0, 0, 2, 0),
    (1, 2, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 2, 1, 1),
    (0, 1, 0, 0, 2, 0, 1, 2),
    (0, 0, 2, 0, 1, 1, 0, 2),
    (0, 0, 0, 1, 1, 2, 2, 0),
)


@dataclass
class _Parts:
    """Links, fabric and groups of one server, before it is joined to others."""

    gpus: int
    links: list[Link]
    fabric: dict[str, NodeKind]
    sockets: list[list[int]]
    nics: list[str]
    """NICs to attach to the network switch when the server is one of several."""
    nic_gbps: float
    source: str


def _duplex(links: list[Link], a, b, gbps: float, alpha_us: float, kind: str) -> None:
    links.append(Link(a, b, gbps * GB_PER_S, alpha_us * US, kind))
    links.append(Link(b, a, gbps * GB_PER_S, alpha_us * US, kind))


def _v100_hybrid_cube(nic_on_each_pcie_switch: bool, source: str) -> _Parts:
    """DGX-1 / NDv2: NVLink hybrid cube mesh; GPU pairs on PCIe switches; two sockets."""
    links: list[Link] = []
    fabric: dict[str, NodeKind] = {"cpu0": NodeKind.CPU, "cpu1": NodeKind.CPU}
    for a, b in itertools.combinations(range(8), 2):
        if DGX1_NVLINKS[a][b]:
            _duplex(links, a, b, DGX1_NVLINKS[a][b] * NVLINK2_GBPS, NVLINK_ALPHA_US, "nvlink")
    nics = []
    for pair in range(4):
        switch = f"pcie{pair}"
        fabric[switch] = NodeKind.PCIE
        for gpu in (2 * pair, 2 * pair + 1):
            _duplex(links, gpu, switch, PCIE3_GBPS, PCIE_ALPHA_US, "pcie")
        _duplex(links, switch, f"cpu{pair // 2}", PCIE3_GBPS, PCIE_ALPHA_US, "pcie")
        if nic_on_each_pcie_switch:
            fabric[f"nic{pair}"] = NodeKind.NIC
            _duplex(links, switch, f"nic{pair}", PCIE3_GBPS, PCIE_ALPHA_US, "pcie")
            nics.append(f"nic{pair}")
    _duplex(links, "cpu0", "cpu1", 20.8, CPU_LINK_ALPHA_US, "qpi")
    if not nic_on_each_pcie_switch:  # NDv2: one NIC for the node, on the host bridge
        fabric["nic0"] = NodeKind.NIC
        _duplex(links, "cpu0", "nic0", PCIE3_GBPS, PCIE_ALPHA_US, "pcie")
        nics.append("nic0")
    return _Parts(8, links, fabric, [[0, 1, 2, 3], [4, 5, 6, 7]], nics, 12.5, source)


def _dgx1() -> _Parts:
    return _v100_hybrid_cube(True, "DGX-1: NVLink2 25 GB/s x links per pair (hybrid cube mesh), "
                             "alpha 0.7 us (TE-CCL); PCIe3 16 GB/s; QPI 20.8 GB/s; 4 x 100 Gb/s "
                             "IB (12.5 GB/s) NICs, one per PCIe switch")


def _ndv2() -> _Parts:
    return _v100_hybrid_cube(False, "Azure NDv2: DGX-1 NVLink mesh, 25 GB/s per NVLink, alpha "
                             "0.7 us (TE-CCL); one 100 Gb/s IB NIC (12.5 GB/s) per node over "
                             "PCIe3; NIC path alpha 2.6 us in total (TACCL)")


def _switched(gpus: int, scale_up_gbps: float, alpha_us: float, nic_gbps: float,
              gpus_per_nic: int, gpu_nic_gbps: float, source: str) -> _Parts:
    """NVSwitch servers: every GPU into one switch; NICs shared by ``gpus_per_nic`` GPUs."""
    links: list[Link] = []
    fabric: dict[str, NodeKind] = {"nvswitch": NodeKind.SWITCH}
    for gpu in range(gpus):
        _duplex(links, gpu, "nvswitch", scale_up_gbps, alpha_us, "nvlink")
    nics = []
    for number in range(gpus // gpus_per_nic):
        nic = f"nic{number}"
        fabric[nic] = NodeKind.NIC
        nics.append(nic)
        members = range(number * gpus_per_nic, (number + 1) * gpus_per_nic)
        if gpus_per_nic == 1:
            _duplex(links, members[0], nic, gpu_nic_gbps, PCIE_ALPHA_US, "pcie")
        else:
            switch = f"pcie{number}"
            fabric[switch] = NodeKind.PCIE
            for gpu in members:
                _duplex(links, gpu, switch, gpu_nic_gbps, PCIE_ALPHA_US, "pcie")
            _duplex(links, switch, nic, gpu_nic_gbps, PCIE_ALPHA_US, "pcie")
    half = gpus // 2
    return _Parts(gpus, links, fabric, [list(range(half)), list(range(half, gpus))], nics,
                  nic_gbps, source)


def _dgx2() -> _Parts:
    return _switched(16, 125.0, 0.35, 12.5, 2, PCIE3_GBPS,
                     "DGX-2: 16 V100 on NVSwitch at 125 GB/s per GPU, alpha 0.35 us (TE-CCL); 8 x "
                     "100 Gb/s IB NICs (12.5 GB/s), one per GPU pair behind a PCIe3 switch")


def _dgx_a100() -> _Parts:
    return _switched(8, 300.0, 0.7, 25.0, 1, PCIE4_GBPS,
                     "DGX A100: NVSwitch, 12 NVLink3 = 300 GB/s per GPU; 8 x 200 Gb/s HDR NICs "
                     "(25 GB/s), one per GPU over PCIe4")


def _dgx_a100_4nic() -> _Parts:
    return _switched(8, 300.0, 0.7, 25.0, 2, PCIE4_GBPS,
                     "DGX A100 with 4 compute NICs: NVSwitch, 12 NVLink3 = 300 GB/s per GPU per "
                     "direction (600 GB/s bidirectional, NVIDIA's DGX A100 architecture: "
                     "https://developer.nvidia.com/blog/defining-ai-innovation-with-dgx-a100); "
                     "4 x 200 Gb/s HDR NICs (25 GB/s), one per PCIe4 switch shared by a GPU "
                     "pair, as in microsoft/msccl-tools#46 (three such nodes on one switch)")


def _dgx_h100() -> _Parts:
    """DGX H100 / HGX H100: NVSwitch; each GPU and its NIC behind one PCIe5 switch, four
    such switches per Sapphire Rapids socket, whose memory and UPI carry host paths."""
    links: list[Link] = []
    fabric = {"nvswitch": NodeKind.SWITCH, "cpu0": NodeKind.CPU, "cpu1": NodeKind.CPU}
    nics = [f"nic{gpu}" for gpu in range(8)]
    for gpu, nic in enumerate(nics):
        _duplex(links, gpu, "nvswitch", 450.0, NVLINK_ALPHA_US, "nvlink")
        switch = f"pcie{gpu}"
        fabric[switch], fabric[nic] = NodeKind.PCIE, NodeKind.NIC
        for end in (gpu, nic, f"cpu{gpu // 4}"):
            _duplex(links, switch, end, PCIE5_GBPS, PCIE_ALPHA_US, "pcie")
    _duplex(links, "cpu0", "cpu1", UPI2_GBPS, CPU_LINK_ALPHA_US, "upi")
    links, fabric, memory = host_memory.through_memory(
        links, fabric, {"cpu0": "intel-srp", "cpu1": "intel-srp"})
    return _Parts(8, links, fabric, [[0, 1, 2, 3], [4, 5, 6, 7]], nics, 50.0,
                  "DGX H100: NVSwitch, 18 NVLink4 = 450 GB/s per GPU; 8 x 400 Gb/s NICs "
                  "(50 GB/s); each GPU and its NIC on one PCIe5 switch (64 GB/s), four per "
                  "socket of two Xeon Platinum 8480C (NVIDIA DGX H100 User Guide; the PCI "
                  "tree Azure ships for ND H100 v5, Azure/msccl-executor-nccl "
                  f"src/test/ndv5/topo.xml); UPI 32 GB/s; {memory}")


def _mist() -> _Parts:
    """IBM AC922: per socket one POWER9 and two V100, all joined by 3-brick NVLink."""
    links: list[Link] = []
    fabric = {"cpu0": NodeKind.CPU, "cpu1": NodeKind.CPU, "nic0": NodeKind.NIC,
              "nic1": NodeKind.NIC}
    for socket in (0, 1):
        a, b, cpu = 2 * socket, 2 * socket + 1, f"cpu{socket}"
        _duplex(links, a, b, 3 * NVLINK2_GBPS, NVLINK_ALPHA_US, "nvlink")
        for gpu in (a, b):
            _duplex(links, gpu, cpu, 3 * NVLINK2_GBPS, NVLINK_ALPHA_US, "nvlink")
        _duplex(links, cpu, f"nic{socket}", PCIE3_GBPS, PCIE_ALPHA_US, "pcie")
    _duplex(links, "cpu0", "cpu1", 32.0, CPU_LINK_ALPHA_US, "xbus")
    return _Parts(4, links, fabric, [[0, 1], [2, 3]], ["nic0", "nic1"], 12.5,
                  "Mist (IBM AC922): 3 NVLink2 (75 GB/s) GPU-GPU in a socket and GPU-CPU; X-Bus "
                  "32 GB/s; one EDR IB NIC (12.5 GB/s) per socket (assumed, not in the reference)")


def _cedar() -> _Parts:
    """Dell C4140: 4 V100 fully connected by NVLink pairs; each GPU on PCIe3 to its socket."""
    links: list[Link] = []
    fabric = {"cpu0": NodeKind.CPU, "cpu1": NodeKind.CPU, "nic0": NodeKind.NIC}
    for a, b in itertools.combinations(range(4), 2):
        _duplex(links, a, b, 2 * NVLINK2_GBPS, NVLINK_ALPHA_US, "nvlink")
    for gpu in range(4):
        _duplex(links, gpu, f"cpu{gpu // 2}", PCIE3_GBPS, PCIE_ALPHA_US, "pcie")
    _duplex(links, "cpu0", "cpu1", 20.8, CPU_LINK_ALPHA_US, "upi")
    _duplex(links, "cpu0", "nic0", PCIE3_GBPS, PCIE_ALPHA_US, "pcie")
    return _Parts(4, links, fabric, [[0, 1], [2, 3]], ["nic0"], 12.5,
                  "Cedar (Dell C4140): 2 NVLink2 (50 GB/s) per GPU pair, all pairs; PCIe3 16 GB/s "
                  "GPU-CPU; UPI 20.8 GB/s; one 100 Gb/s NIC (12.5 GB/s, assumed) on socket 0")


SERVERS: dict[str, Callable[[], _Parts]] = {
    "dgx1": _dgx1,
    "ndv2": _ndv2,
    "dgx2": _dgx2,
    "dgx-a100": _dgx_a100,
    "dgx-a100-4nic": _dgx_a100_4nic,
    "dgx-h100": _dgx_h100,
    "mist": _mist,
    "cedar": _cedar,
}


def server(name: str, nodes: int = 1) -> Topology:
    """``nodes`` copies of server ``name``, joined through their NICs by one switch."""
    if name not in SERVERS:
        raise TopologyError(f"unknown machine {name!r}; the zoo has {', '.join(names())}")
    if nodes < 1:
        raise TopologyError(f"{name}:{nodes}: the number of nodes must be at least 1")
    parts = SERVERS[name]()
    limits.check_ranks(f"{name}:{nodes}", nodes * parts.gpus)
    title = name if nodes == 1 else f"{name}:{nodes}"
    if nodes == 1:  # one server: its NICs lead nowhere, leave them out
        fabric = {f: k for f, k in parts.fabric.items() if f not in parts.nics}
        links = [lk for lk in parts.links if lk.src not in parts.nics and lk.dst not in parts.nics]
        return Topology(title, parts.gpus, tuple(links), fabric,
                        {"node": (tuple(range(parts.gpus)),),
                         "socket": tuple(tuple(s) for s in parts.sockets)}, source=parts.source,
                        cost=GPU_SERVER_COST)
    links, fabric = [], {"net": NodeKind.SWITCH}
    for node in range(nodes):
        base = node * parts.gpus

        def rename(end, node=node, base=base):
            return end + base if isinstance(end, int) else f"n{node}.{end}"

        fabric.update({rename(f): k for f, k in parts.fabric.items()})
        links += [Link(rename(lk.src), rename(lk.dst), lk.bandwidth, lk.alpha, lk.kind)
                  for lk in parts.links]
        for nic in parts.nics:
            _duplex(links, rename(nic), "net", parts.nic_gbps, NIC_ALPHA_US, "net")
    g = parts.gpus
    groups = {"node": tuple(tuple(range(n * g, (n + 1) * g)) for n in range(nodes)),
              "socket": tuple(tuple(r + n * g for r in s) for n in range(nodes)
                              for s in parts.sockets)}
    return Topology(title, nodes * g, tuple(links), fabric, groups,
                    source=parts.source + f"; {nodes} nodes on one non-blocking switch",
                    cost=GPU_SERVER_COST)


# --- generic shapes ---------------------------------------------------------------------

def _generic_link(links: list[Link], a: int, b: int) -> None:
    _duplex(links, a, b, GENERIC_GBPS, GENERIC_ALPHA_US, "link")


GENERIC_SOURCE = "generic shape; TACOS' figures: 50 GiB/s and 0.5 us per link"


def ring(n: int) -> Topology:
    """``n`` ranks on a bidirectional ring."""
    _at_least(n, 2, f"ring:{n}")
    limits.check_ranks(f"ring:{n}", n)
    links: list[Link] = []
    for r in range(n if n > 2 else 1):
        _generic_link(links, r, (r + 1) % n)
    return Topology(f"ring:{n}", n, tuple(links), source=GENERIC_SOURCE)


def fully_connected(n: int) -> Topology:
    """Every pair of ``n`` ranks joined directly."""
    _at_least(n, 2, f"fully-connected:{n}")
    limits.check_ranks(f"fully-connected:{n}", n)
    limits.check(f"fully-connected:{n}", n * (n - 1), limits.MAX_LINKS, "directed links",
                 "model a smaller machine, or use switch:N")
    links: list[Link] = []
    for a, b in itertools.combinations(range(n), 2):
        _generic_link(links, a, b)
    return Topology(f"fully-connected:{n}", n, tuple(links), source=GENERIC_SOURCE)


def switch(n: int) -> Topology:
    """``n`` ranks on one non-blocking switch."""
    _at_least(n, 2, f"switch:{n}")
    limits.check_ranks(f"switch:{n}", n)
    links: list[Link] = []
    for r in range(n):
        _duplex(links, r, "switch", GENERIC_GBPS, GENERIC_ALPHA_US / 2, "link")
    return Topology(f"switch:{n}", n, tuple(links), {"switch": NodeKind.SWITCH},
                    source=GENERIC_SOURCE)


def grid(dims: tuple[int, ...], wrap: bool) -> Topology:
    """A mesh (``wrap=False``) or torus (``wrap=True``) with dimensions ``dims``."""
    name = ("torus:" if wrap else "mesh:") + "x".join(map(str, dims))
    for d in dims:
        _at_least(d, 2, name)
    limits.check_ranks(name, math.prod(dims))
    coords = list(itertools.product(*(range(d) for d in dims)))
    index = {c: i for i, c in enumerate(coords)}
    pairs = set()
    for c in coords:
        for axis, d in enumerate(dims):
            if c[axis] + 1 < d or (wrap and d > 2):
                other = list(c)
                other[axis] = (c[axis] + 1) % d
                pairs.add(tuple(sorted((index[c], index[tuple(other)]))))
    links: list[Link] = []
    for a, b in sorted(pairs):
        _generic_link(links, a, b)
    return Topology(name, len(coords), tuple(links), source=GENERIC_SOURCE)


def hypercube(dim: int) -> Topology:
    """``2**dim`` ranks; ranks differing in one bit are joined."""
    _at_least(dim, 1, f"hypercube:{dim}")
    if dim > limits.MAX_RANKS.bit_length():  # 2**dim would be huge: don't compute it
        raise LimitError(f"hypercube:{dim}: 2**{dim} ranks, over the limit of "
                         f"{limits.MAX_RANKS:,}; ccweave models machines of up to that many "
                         "ranks")
    n = 2**dim
    limits.check_ranks(f"hypercube:{dim}", n)
    links: list[Link] = []
    for r in range(n):
        for bit in range(dim):
            if r < r ^ (1 << bit):
                _generic_link(links, r, r ^ (1 << bit))
    return Topology(f"hypercube:{dim}", n, tuple(links), source=GENERIC_SOURCE)


def _at_least(value: int, low: int, name: str) -> None:
    if value < low:
        raise TopologyError(f"{name}: needs at least {low} there")


def _dims(text: str, name: str, count: tuple[int, ...]) -> tuple[int, ...]:
    if not re.fullmatch(r"\d+(x\d+)*", text) or text.count("x") + 1 not in count:
        base = name.split(":")[0]
        if count == (1,):
            raise TopologyError(f"{shown(name)}: expected a whole number after ':', "
                                f"e.g. {base}:8")
        shape = " or ".join("x".join("ABC"[:k]) for k in count)
        raise TopologyError(f"{shown(name)}: expected {shape} after ':', e.g. {base}:4x4")
    parts = text.split("x")
    if any(len(part.lstrip("0")) > limits.MAX_SPEC_DIGITS for part in parts):
        raise LimitError(f"{shown(name)}: a size of more than {limits.MAX_SPEC_DIGITS} "
                         f"digits, over the limit of {limits.MAX_RANKS:,} ranks")
    return tuple(int(part) for part in parts)


GENERIC = {
    "ring": lambda arg, name: ring(_dims(arg, name, (1,))[0]),
    "fully-connected": lambda arg, name: fully_connected(_dims(arg, name, (1,))[0]),
    "switch": lambda arg, name: switch(_dims(arg, name, (1,))[0]),
    "mesh": lambda arg, name: grid(_dims(arg, name, (2,)), wrap=False),
    "torus": lambda arg, name: grid(_dims(arg, name, (2, 3)), wrap=True),
    "hypercube": lambda arg, name: hypercube(_dims(arg, name, (1,))[0]),
}


def names() -> list[str]:
    """Zoo names as a user types them."""
    return [*SERVERS, "NAME:K", "ring:N", "fully-connected:N", "switch:N", "mesh:AxB",
            "torus:AxB[xC]", "hypercube:D"]


def is_zoo_name(text: str) -> bool:
    return text.split(":")[0] in SERVERS or text.split(":")[0] in GENERIC


def get(name: str) -> Topology:
    """A zoo machine by name: ``dgx1``, ``ndv2:4``, ``torus:4x4x4``, ``hypercube:5``..."""
    if not isinstance(name, str):
        raise TopologyError(f"zoo.get({name!r}): give a zoo name as a string, e.g. "
                            "'dgx1' or 'ndv2:2'")
    base, _, arg = name.strip().partition(":")
    if base in SERVERS:
        if arg and not re.fullmatch(r"\d+", arg):
            raise TopologyError(f"{shown(name)}: the node count after ':' must be an integer, "
                                f"e.g. {base}:2")
        return server(base, _dims(arg, name, (1,))[0] if arg else 1)
    if base in GENERIC:
        if not arg:
            raise TopologyError(f"{name}: say the size, e.g. {base}:8")
        return GENERIC[base](arg, name)
    raise TopologyError(f"unknown topology {shown(name)}: not a file and not in the zoo; the zoo "
                        f"has {', '.join(names())}")
