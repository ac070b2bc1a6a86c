"""NCCL's tuning model on ccweave's machines: tuning.cc's figures, NCCL's choice and channels,
NVLS and PAT only where the machine has them, and the graph search's channels."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.collectives import Kind
from ccweave.errors import NotApplicableError
from ccweave.nccl import constants as C
from ccweave.nccl import search
from ccweave.nccl.model import nccl_model, pick, tune
from ccweave.nccl.search import NcclGraph
from ccweave.nccl.system import NcclSystem, nccl_system
from ccweave.nccl.view import NodeView
from ccweave.topology import zoo
from ccweave.topology.model import Link, NodeKind, Topology
from tests.strategies import host_staged, topologies

AR = C.FUNCTIONS.index("allreduce")
BC = C.FUNCTIONS.index("broadcast")
AG = C.FUNCTIONS.index("allgather")


def a100_like(**changes) -> NcclSystem:
    """One node of 8 Ampere GPUs whose rings and trees are 12 channels of 20 GB/s."""
    graph = NcclGraph(C.PATTERN_RING, 12, 20.0, 20.0, C.PATH_NVL, C.PATH_PIX)
    tree = dataclasses.replace(graph, pattern=C.PATTERN_BALANCED_TREE)
    none = NcclGraph(C.PATTERN_NVLS, 0, 0.0, 0.0, C.PATH_NVL, C.PATH_PIX)
    system = NcclSystem("a100-like", 8, 1, 80, "a100", "amd", graph, tree, none, True)
    return dataclasses.replace(system, **changes)


def test_latencies_and_bandwidths_are_tuning_cc_s():
    """Worked by hand from src/graph/tuning.cc: ring Simple 8.4 + 14 x 3.4 us at 240 GB/s
    x 8/14; ring LL min(87.7, 240/2) x 8/14; tree Simple min(240 x .92, 12 x 24) x .5 at
    8.4 + 2 x 7 x 4.0 us; a broadcast ring one step."""
    model = tune(a100_like())
    ring, tree = C.RING, C.TREE
    assert model.latencies[AR][ring][C.SIMPLE] == pytest.approx(8.4 + 14 * 3.4)
    assert model.bandwidths[AR][ring][C.SIMPLE] == pytest.approx(240 * 8 / 14)
    assert model.bandwidths[AR][ring][C.LL] == pytest.approx(87.7 * 8 / 14)
    assert model.latencies[AR][ring][C.LL] == pytest.approx(6.6 + 14 * 0.6)
    assert model.bandwidths[AR][ring][C.LL128] == pytest.approx(240 * 0.92 * 8 / 14)
    assert model.bandwidths[AR][tree][C.SIMPLE] == pytest.approx(220.8 * .5)
    assert model.latencies[AR][tree][C.SIMPLE] == pytest.approx(8.4 + 2 * 7 * 4.0)
    assert model.latencies[BC][ring][C.SIMPLE] == pytest.approx(8.4 + 3.4)
    assert model.bandwidths[BC][tree][C.SIMPLE] == 0  # NCCL broadcasts on rings only


def test_time_applies_the_tree_correction_and_ignores_what_nccl_does_not_cost():
    model = tune(a100_like())
    size = 64 * 2**11  # log2(size / 64) = 11: factor .5 for Simple
    expected = model.latencies[AR][C.TREE][C.SIMPLE] + size / (
        1000 * model.bandwidths[AR][C.TREE][C.SIMPLE] * .5)
    assert model.time_us(AR, C.TREE, C.SIMPLE, size) == pytest.approx(expected)
    table = model.cost_table(BC, size)
    assert table[C.TREE][C.SIMPLE] == -1.0 and table[C.NVLS][C.SIMPLE] == -1.0


def test_choice_is_the_cheapest_first_in_nccl_order_with_nccl_s_channels():
    assert pick([[5.0, 3.0, 3.0], [3.0, -1.0, 9.0]]) == (0, 1, 3.0)
    model = tune(a100_like())
    small = model.choose(Kind.ALLREDUCE, 64 * 2**10)
    # ring LL: 512 threads x 8 bytes x 8 ranks per channel -> 64 KB keeps 2 channels
    assert (small.algorithm, small.protocol, small.channels) == ("ring", "ll", 2)
    big = model.choose("allreduce", 2**30)
    assert (big.algorithm, big.protocol, big.channels) == ("ring", "simple", 24)
    assert big.time_s == pytest.approx(model.time_us(AR, C.RING, C.SIMPLE, 2**30) * 1e-6)


def test_nvls_only_on_hopper_nvswitch_and_nvls_tree_only_across_nodes():
    h100 = tune(nccl_system(zoo.get("dgx-h100")))
    assert (C.NVLS, C.SIMPLE) in h100.candidates(AR)
    assert (C.NVLS_TREE, C.SIMPLE) not in h100.candidates(AR)
    assert h100.choose("allreduce", 16 * 2**20).algorithm == "nvls"
    for name in ("dgx-a100", "dgx1"):  # Ampere, Volta: no NVLS
        assert all(a not in (C.NVLS, C.NVLS_TREE)
                   for a, _ in tune(nccl_system(zoo.get(name))).candidates(AR))
    multi = tune(nccl_system(zoo.get("dgx-h100:2")))
    algos = {a for a, _ in multi.candidates(AR)}
    assert C.NVLS_TREE in algos and C.NVLS not in algos  # NVLS across nodes needs CollNet


def one_gpu_per_node(nodes: int) -> Topology:
    links, fabric = [], {"net": NodeKind.SWITCH}
    for rank in range(nodes):
        fabric[f"nic{rank}"] = NodeKind.NIC
        for a, b, kind in ((rank, f"nic{rank}", "pcie"), (f"nic{rank}", "net", "net")):
            links += [Link(a, b, 25e9, 1e-6, kind), Link(b, a, 25e9, 1e-6, kind)]
    return Topology("one-gpu-nodes", nodes, tuple(links), fabric,
                    {"node": tuple((r,) for r in range(nodes))})


def test_pat_only_with_one_gpu_per_node():
    pat = tune(nccl_system(one_gpu_per_node(4), "h100"))
    assert (C.PAT, C.SIMPLE) in pat.candidates(AG)
    assert (C.PAT, C.SIMPLE) not in pat.candidates(AR)  # PAT is AG and RS only
    assert all(a != C.PAT for a, _ in tune(nccl_system(zoo.get("dgx-a100:2"))).candidates(AG))


def test_the_search_fills_the_links_at_nccl_s_speeds():
    """DGX A100: 12 NVLinks x 20 GB/s (NCCL's figure) carry 6 rings of 40 GB/s, doubled to
    12 of 20 (ncclTopoDupChannels); NCCL then runs twice the fewer of rings and trees.
    Two nodes: one ring per NIC at 24 GB/s, NCCL's fastest speed under its 25 GB/s."""
    one = nccl_system(zoo.get("dgx-a100"))
    assert (one.ring.channels, one.ring.bw_intra) == (12, 20.0)
    assert one.channels == 24 and one.ring.type_intra == C.PATH_NVL
    two = nccl_system(zoo.get("dgx-a100:2"))
    assert (two.ring.channels, two.ring.bw_inter) == (8, 24.0) and two.nodes == 2
    assert len({nic for pair in two.ring.nics for nic in pair}) == 8  # every NIC used
    mist = nccl_system(zoo.get("mist"))  # no NVLink across sockets: SYS paths
    assert mist.ring.type_intra == C.PATH_SYS


def test_machines_without_a_known_gpu_or_collectives_nccl_does_not_tune_are_refused():
    with pytest.raises(NotApplicableError, match="--gpu"):
        nccl_model(zoo.get("ring:8"))
    assert nccl_model(zoo.get("ring:8"), gpu="a100").system.sm == 80
    with pytest.raises(NotApplicableError, match="point-to-point"):
        nccl_model(zoo.get("dgx1")).choose("alltoall", 2**20)
    with pytest.raises(NotApplicableError, match="up to 72"):
        nccl_model(zoo.get("hypercube:7"), gpu="a100")


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**40), st.sampled_from(C.FUNCTIONS))
def test_the_choice_is_always_one_nccl_costs(size, name):
    model = tune(a100_like())
    choice = model.choose(name, size)
    func = C.FUNCTIONS.index(name)
    pair = (C.ALGORITHMS.index(choice.algorithm), C.PROTOCOLS.index(choice.protocol))
    table = model.cost_table(func, size)
    assert pair in model.candidates(func)
    assert all(choice.time_s * 1e6 <= cost + 1e-9 for row in table for cost in row
               if cost >= 0)
    assert 1 <= choice.channels <= model.system.channels


def used_links(view: NodeView, graph: NcclGraph) -> dict[int, float]:
    """GB/s each link carries: every channel's speed on every link its hops cross."""
    load: dict[int, float] = {}
    for order in graph.orders:
        hops = list(itertools.pairwise(order))
        if graph.pattern == C.PATTERN_RING and len(order) > 1:
            hops.append((order[-1], order[0]))
        for a, b in hops:
            for link in view.gpu_paths[a, b].links:
                load[link] = load.get(link, 0.0) + graph.bw_intra
    return load


@settings(max_examples=25, deadline=None)
@given(st.one_of(topologies(2, 6), host_staged(2, 5)),
       st.sampled_from(["v100", "a100", "h100"]))
def test_the_search_s_channels_fit_the_links_on_random_machines(topology, gpu):
    system = nccl_system(topology, gpu)
    view = NodeView(topology, system.sm, system.cpu)
    for graph in (system.ring, system.tree):
        assert graph.channels == len(graph.orders) >= 1
        assert all(sorted(order) == list(range(topology.num_ranks))
                   for order in graph.orders)
        if graph.bw_intra > 0.1:  # not NCCL's fallback order
            for link, load in used_links(view, graph).items():
                assert load <= view.capacity[link] + 1e-6
    model = tune(system)
    for name in C.FUNCTIONS:
        choice = model.choose(name, 2**20)
        assert 1 <= choice.channels <= system.channels and choice.time_s > 0


def test_rings_are_cut_to_the_trees_channels_as_nccl_does():
    """One-way links: rings fit, trees (which need the way back) find none and fall back
    to NCCL's one channel; NCCL then runs rings on one channel too (init.cc)."""
    links = tuple(Link(r, (r + 1) % 4, 50e9, 1e-6, "nvlink") for r in range(4))
    topology = Topology("one-way", 4, links)
    view = NodeView(topology, 80, "amd")
    assert search.compute(view, C.PATTERN_RING).channels > 1
    system = nccl_system(topology, "a100")
    assert system.ring.channels == system.tree.channels == 1
    assert system.tree.bw_intra == 0.1 and system.channels == 2
