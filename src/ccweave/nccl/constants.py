"""NCCL's published tuning constants, as NCCL 2.30.7 ships them.

Source: NVIDIA/nccl at commit 5067397c2676d5aed50042fc39e5c8ee96eb0027 (version 2.30.7,
``makefiles/version.mk``): ``src/graph/tuning.cc`` (latencies, bandwidth caps, tree
correction, NVLS efficiency), ``src/graph/search.cc`` (per-channel speeds the graph search
tries), ``src/graph/topo.h`` (NCCL's per-link figures), ``src/include/device.h`` and
``src/include/comm.h`` (threads, channel limits), ``src/transport/nvls.cc`` (NVLS
channels). Indices follow NCCL's: algorithms ``tree ring collnet_direct collnet_chain
nvls nvls_tree pat``, protocols ``ll ll128 simple``, GPU generations Volta, Ampere,
Hopper, Blackwell, scales 1 node / 2 nodes / 4+ nodes.
"""

from __future__ import annotations

NCCL_VERSION = "2.30.7"
NCCL_COMMIT = "5067397c2676d5aed50042fc39e5c8ee96eb0027"

ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
"""NCCL_ALGO_* in index order, spelled as the example tuner's CSV spells them."""
PROTOCOLS = ("ll", "ll128", "simple")
"""NCCL_PROTO_* in index order, spelled as the example tuner's CSV spells them."""
TREE, RING, COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT = range(7)
LL, LL128, SIMPLE = range(3)

FUNCTIONS = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
"""ncclFunc_t 0..4: the collectives NCCL's tuning model and tuner plugins know."""

VOLTA, AMPERE, HOPPER, BLACKWELL = range(4)
GENERATION_NAMES = ("Volta", "Ampere", "Hopper", "Blackwell")

BASE_LATENCIES = (  # us, [algorithm][protocol]
    (6.8, 14.0, 8.4), (6.6, 14.0, 8.4),  # tree, ring
    (0.0, 0.0, 0.0), (0.0, 0.0, 0.0),  # collnet direct, chain
    (0.0, 0.0, 0.0), (0.0, 0.0, 0.0),  # nvls, nvls tree
    (8.0, 8.0, 8.0),  # pat
)
HW_NVLINK, HW_PCI, HW_NET = range(3)
HW_LATENCIES = (  # us, [hardware][algorithm][protocol]
    ((0.6, 1.25, 4.0), (0.6, 1.9, 3.4), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 25), (0, 0, 25),
     (0, 0, 4.0)),  # NVLink
    ((1.0, 1.9, 4.0), (1.0, 2.5, 5.7), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 0), (0, 0, 0),
     (0, 0, 4.0)),  # PCI
    ((5.0, 8.5, 14), (2.7, 4.0, 14.0), (0, 0, 31), (0, 0, 30), (0, 0, 18), (0, 0, 20.9),
     (0, 0, 14)),  # network
)
LL_MAX_BWS = (  # GB/s, [generation (1 node) or CPU (more)][scale]
    (39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
PER_CH_MAX_RING_LL128_BWS = (
    (20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (40.0, 40.0, 40.0))
PER_CH_MAX_TREE_LL128_BWS = (
    (20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_MAX_TREE_BWS = (
    (26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
PER_CH_MAX_NVLS_TREE_BWS = (
    (26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)

TREE_CORRECTION = (  # [protocol][log2(bytes / 64)], 64 B .. 256 MB
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9,
     .9, .9),
)

NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}
"""Per network step on x86 (``getNetOverhead``); other CPUs 1.0."""

# --- graph search (search.cc): per-channel speeds tried, GB/s ------------------------------
SPEEDS_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0,
                4.0, 3.0, 2.4, 1.2, 0.24, 0.12)
SM90_SPEEDS_INTRA = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
SM90_SPEEDS_INTER = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                     3.0, 2.4, 1.2, 0.24, 0.12)
SM100_SPEEDS_INTRA = (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)
SM100_SPEEDS_INTER = (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                      15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
SPEED_DROP = 0.49
"""The search stops slowing channels down once the next speed is under this share of the
best found (``speedArray[i + 1] / graph->bwInter > .49``)."""

# --- path types (graph.h) and their names in graph XML (search.cc's kvDictLinkType) -------
PATH_LOC, PATH_NVL, PATH_NVB, PATH_C2C, PATH_PIX, PATH_PXB, PATH_P2C, PATH_PXN, PATH_PHB, \
    PATH_SYS, PATH_NET, PATH_DIS = range(12)
PATH_NAMES = {PATH_LOC: "LOC", PATH_NVL: "NVL", PATH_NVB: "NVB", PATH_PIX: "PIX",
              PATH_PXB: "PXB", PATH_P2C: "P2C", PATH_PXN: "PXN", PATH_PHB: "PHB",
              PATH_SYS: "SYS"}
"""The path types graph XML may name (``kvDictLinkType``); C2C has no name there."""

PATTERN_BALANCED_TREE, PATTERN_SPLIT_TREE, PATTERN_TREE, PATTERN_RING, PATTERN_NVLS = \
    1, 2, 3, 4, 5
GRAPH_RING, GRAPH_TREE, GRAPH_NVLS = 0, 1, 3
"""``ncclTopoGraph::id`` of the ring, tree and NVLS graphs (``src/init.cc``)."""
GRAPH_XML_VERSION = 1
"""``NCCL_GRAPH_XML_VERSION`` (``src/graph/xml.h``)."""

PCI_BW = 12.0
"""GB/s NCCL gives a PCIe Gen3 x16 link (``topo.h``)."""

# --- channels and threads ------------------------------------------------------------------
MAXCHANNELS = 64
RING_MAX_CHANNELS = MAXCHANNELS // 2
NVLS_MAX_ARITY = 32
NVLS_CHANNELS = {HOPPER: 16, BLACKWELL: 24}
"""NVLS channels on one node (``NVLS_NCHANNELS_SM90``, ``NVLS_NCHANNELS_SM100_NVL``);
Blackwell across nodes: 32."""
NVLS_CHANNELS_BLACKWELL_MULTI_NODE = 32
MAX_NTHREADS = 640
SIMPLE_MAX_NTHREADS = 512
LL_MAX_NTHREADS = 512
LL128_MAX_NTHREADS = 640
THREAD_THRESHOLDS = (8, 8, 64)
"""Bytes per thread before NCCL adds threads and channels, per protocol (``comm.h``);
ring LL's is multiplied by the number of ranks."""
