"""The documented link figures importers use (docs/profiling.md has the table).

NCCL's topology dump and ``nvidia-smi topo -m`` say *what* is connected (NVLink count and
GPU generation, PCIe generation and width, NIC speed, CPU vendor); this table says *how
fast*: peak per-direction bandwidth in GB/s (1e9 bytes) as the zoo uses it, and the zoo's
alphas. NCCL's own model uses lower "effective" figures (``src/graph/topo.h``); they are
listed beside ours for comparison, not used. A profile (``ccweave profile --base``)
replaces these figures with measured ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from ccweave.errors import InputError
from ccweave.topology import zoo
from ccweave.topology.model import Link, Topology
from ccweave.topology.replicate import replicate
from ccweave.units import GB_PER_S, US

# --- NVLink: GB/s per link per direction, by CUDA compute capability (sm) -------------
NVLINK_GBPS_BY_SM: tuple[tuple[int, float, str], ...] = (
    # (lowest sm, GB/s per link, generation); the highest matching row wins
    (60, 20.0, "NVLink1 (P100)"),
    (70, 25.0, "NVLink2 (V100)"),
    (80, 25.0, "NVLink3 (A100)"),
    (86, 14.0625, "NVLink3 x4 (GA10x)"),
    (87, 25.0, "NVLink3"),
    (90, 25.0, "NVLink4 (H100)"),
    (100, 50.0, "NVLink5 (B200)"),
)
NCCL_NVLINK_GBPS = {60: 18.0, 70: 20.0, 80: 20.0, 86: 12.0, 90: 20.6, 100: 40.1}
"""NCCL's effective per-link figures (SMxx_NVLINK_BW), for comparison only."""

# --- PCIe: GB/s per lane per direction (nominal, rounded as the zoo's 16/32/64 at x16) -
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 1.0, 4: 2.0, 5: 4.0, 6: 8.0}
PCIE_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
NCCL_PCIE_X16_GBPS = {3: 12.0, 4: 24.0, 5: 48.0}
"""NCCL's figure: width x (speed in 100 Mb/s per lane) / 80, i.e. 12 GB/s for Gen3 x16."""

# --- CPU socket interconnect: one link, GB/s per direction ------------------------------
CPU_LINK_GBPS = {
    "intel-bdw": 19.2,  # QPI 9.6 GT/s (Broadwell and older)
    "intel-skl": 20.8,  # UPI 10.4 GT/s (Skylake / Cascade Lake; reference: Cedar's UPI)
    "intel-srp": zoo.UPI2_GBPS,  # UPI 2.0 16 GT/s (Sapphire Rapids)
    "intel-erp": 40.0,  # UPI 2.0 20 GT/s (Emerald Rapids and newer)
    "amd": 32.0,  # one xGMI x16 link at 16 GT/s
    "power": 32.0,  # POWER9 X-Bus (reference: Mist)
    "arm": 6.0,  # no public figure; NCCL's ARM_BW
    "zhaoxin": 6.0,  # NCCL's ZPI_BW
    "other": 20.8,
}
NCCL_CPU_LINK_GBPS = {"intel-bdw": 6.0, "intel-skl": 10.0, "intel-srp": 22.0,
                      "intel-erp": 40.0, "amd": 16.0, "power": 32.0, "arm": 6.0,
                      "zhaoxin": 6.0}

# --- GPU generations as nvidia-smi users name them --------------------------------------


@dataclass(frozen=True)
class GpuGeneration:
    """What ``nvidia-smi topo -m`` does not say about a GPU, by product generation."""

    name: str
    sm: int
    max_nvlinks: int
    """NVLinks per GPU: more NV# in a row than this means an NVSwitch."""
    pcie_gen: int
    nic_gbits: float
    """The NIC that usually comes with it (Gb/s), for multi-node machines."""
    cpu: str
    """The usual host CPU, a key of ``CPU_LINK_GBPS``."""


GPU_GENERATIONS = {g.name: g for g in (
    GpuGeneration("p100", 60, 4, 3, 100, "intel-bdw"),
    GpuGeneration("v100", 70, 6, 3, 100, "intel-skl"),
    GpuGeneration("a100", 80, 12, 4, 200, "amd"),
    GpuGeneration("h100", 90, 18, 5, 400, "intel-srp"),
    GpuGeneration("b200", 100, 18, 5, 400, "intel-erp"),
)}

# --- alphas (microseconds), the zoo's ------------------------------------------------------
NVLINK_ALPHA_US = zoo.NVLINK_ALPHA_US
PCIE_ALPHA_US = zoo.PCIE_ALPHA_US
CPU_LINK_ALPHA_US = zoo.CPU_LINK_ALPHA_US
NIC_ALPHA_US = zoo.NIC_ALPHA_US
C2C_ALPHA_US = zoo.PCIE_ALPHA_US
DEFAULT_NET_MBPS = 10_000
"""NCCL's figure for a NIC that reports no speed (``speed="-1"``)."""


def generation(name: str) -> GpuGeneration:
    """A GPU generation by name (``v100``, ``a100``, ``h100``...)."""
    key = name.strip().lower()
    if key not in GPU_GENERATIONS:
        raise InputError(f"--gpu {name!r}: choose one of {', '.join(GPU_GENERATIONS)}")
    return GPU_GENERATIONS[key]


def nvlink_gbps(sm: int) -> float:
    """GB/s per NVLink per direction for a GPU of compute capability ``sm`` (e.g. 80)."""
    figure = NVLINK_GBPS_BY_SM[0][1]
    for low, gbps, _ in NVLINK_GBPS_BY_SM:
        if sm >= low:
            figure = gbps
    return figure


def pcie_gbps(gen: int, width: int = 16) -> float:
    """GB/s per direction of a PCIe link of generation ``gen`` and ``width`` lanes."""
    if gen not in PCIE_GBPS_PER_LANE:
        raise InputError(f"PCIe generation {gen}: known generations are 1..6")
    return PCIE_GBPS_PER_LANE[gen] * (width if width > 0 else 16)


def pcie_gen(link_speed: str) -> int | None:
    """The PCIe generation of a sysfs ``link_speed`` (``"16.0 GT/s PCIe"`` -> 4), or None."""
    text = link_speed.strip().split(" ")[0] if link_speed else ""
    try:
        rate = float(text)
    except ValueError:
        return None
    return PCIE_GEN_BY_GTS.get(rate)


def net_gbps(mbps: float) -> float:
    """GB/s of a NIC port whose speed is ``mbps`` megabits per second (NCCL's ``speed``)."""
    return (mbps if mbps > 0 else DEFAULT_NET_MBPS) / 8000.0


def cpu_family(arch: str, vendor: str = "", family: int = 0, model: int = 0) -> str:
    """Key of ``CPU_LINK_GBPS`` for NCCL's ``arch``/``vendor``/``familyid``/``modelid``."""
    arch = arch.lower()
    if arch.startswith("ppc"):
        return "power"
    if arch.startswith(("arm", "aarch")):
        return "arm"
    if vendor == "AuthenticAMD":
        return "amd"
    if vendor == "GenuineIntel":
        if family == 6 and model >= 0xCF:
            return "intel-erp"
        if family == 6 and model >= 0x8F:
            return "intel-srp"
        if family == 6 and model >= 0x55:
            return "intel-skl"
        return "intel-bdw"
    if vendor.strip() in ("CentaurHauls", "Shanghai"):
        return "zhaoxin"
    return "other"


# --- building links from the figures ------------------------------------------------------


def duplex(a, b, gbps: float, alpha_us: float, kind: str) -> list[Link]:
    """Both directions of one link."""
    return [Link(a, b, gbps * GB_PER_S, alpha_us * US, kind),
            Link(b, a, gbps * GB_PER_S, alpha_us * US, kind)]


def join_nodes(server: Topology, nics: dict[str, float], nodes: int,
               name: str | None = None, fabric: str = "switch", nic_source: str = ""
               ) -> Topology:
    """``nodes`` copies of a one-node ``server``, its NICs (name -> GB/s) on one
    non-blocking switch ``net`` as the zoo's ``NAME:K`` (or rail-optimized: ``fabric``
    ``rails``; see :mod:`ccweave.topology.replicate`); node ``k``'s fabric gets the
    prefix ``n{k}.`` and its ranks ``+ k * server.num_ranks``."""
    return replicate(server, nics, nodes, fabric, name, nic_source)


def full_mesh(nodes: Iterable[str], gbps: float, kind: str) -> list[Link]:
    """Every pair of ``nodes`` joined both ways (CPU sockets of one host)."""
    links: list[Link] = []
    for a, b in itertools.combinations(list(nodes), 2):
        links += duplex(a, b, gbps, CPU_LINK_ALPHA_US, kind)
    return links
