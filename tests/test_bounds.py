"""Lower bounds: brute force over every vertex set as the oracle, and analytic cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.optimize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccweave.bounds import (
    Bound,
    allgather_cut,
    allgather_delivery,
    allreduce_partition,
    alltoall_flow,
    broadcast_flow,
    check_ranks_connected,
    gather_cut,
    latency_bound,
    lower_bound,
    lower_bounds,
    reduce_flow,
    reducescatter_cut,
    reducescatter_delivery,
    scatter_cut,
)
from ccweave.collectives import Kind
from ccweave.errors import InputError, TopologyError
from ccweave.topology.model import Link, NodeKind, Topology
from tests.strategies import topologies

GB = 1e9
M = 2**30
REL = 1e-6
SETTINGS = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

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


# ------------------------------------------------------------------ builders


def duplex(a, b, gbps: float, alpha: float = 0.0) -> list[Link]:
    return [Link(a, b, gbps * GB, alpha), Link(b, a, gbps * GB, alpha)]


def ring(n: int, gbps: float) -> Topology:
    links = [lk for r in range(n) for lk in duplex(r, (r + 1) % n, gbps)]
    return Topology(f"ring{n}", n, tuple(links))


def chain(gbps: list[float], alphas: list[float] | None = None) -> Topology:
    alphas = alphas or [0.0] * len(gbps)
    links = [lk for r, (b, a) in enumerate(zip(gbps, alphas)) for lk in duplex(r, r + 1, b, a)]
    return Topology("chain", len(gbps) + 1, tuple(links))


def star(n: int, gbps: float) -> Topology:
    links = [lk for r in range(n) for lk in duplex(r, "sw", gbps)]
    return Topology(f"switch{n}", n, tuple(links), {"sw": NodeKind.SWITCH})


def cluster(nodes: int, gpus: int, local: float, nic: float, pcie: float | None = None
            ) -> Topology:
    """``nodes`` NVSwitch boxes, a NIC per GPU (over PCIe when ``pcie``), one net switch."""
    links, fabric = [], {"net": NodeKind.SWITCH}
    for node in range(nodes):
        fabric[f"nvs{node}"] = NodeKind.SWITCH
        for g in range(gpus):
            rank = node * gpus + g
            links += duplex(rank, f"nvs{node}", local)
            if pcie is None:
                links += duplex(rank, "net", nic)
            else:
                fabric[f"nic{rank}"] = NodeKind.NIC
                links += duplex(rank, f"nic{rank}", pcie) + duplex(f"nic{rank}", "net", nic)
    groups = {"node": tuple(tuple(range(k * gpus, (k + 1) * gpus)) for k in range(nodes))}
    return Topology(f"cluster{nodes}x{gpus}", nodes * gpus, tuple(links), fabric, groups)


@st.composite
def clusters(draw) -> Topology:
    """Symmetric multi-node machines (twin ranks, NIC chains to fold), <= 11 vertices."""
    nodes, gpus = draw(st.sampled_from([(2, 2), (2, 3), (3, 2)]))
    bw = st.sampled_from([5.0, 25.0, 100.0, 300.0])
    pcie = draw(st.one_of(st.none(), bw)) if nodes * gpus <= 4 else None
    return cluster(nodes, gpus, draw(bw), draw(bw), pcie)


# ------------------------------------------------------------- brute force


def vertex_sets(topology: Topology) -> tuple[np.ndarray, np.ndarray]:
    """Every vertex set as a boolean row, with the bandwidth leaving it."""
    index = topology.node_index
    masks = np.array(list(itertools.product([False, True], repeat=len(topology.nodes))))
    src = np.array([index[lk.src] for lk in topology.links])
    dst = np.array([index[lk.dst] for lk in topology.links])
    leaving = (masks[:, src] & ~masks[:, dst]) @ topology.bandwidths
    return masks, leaving


def brute_cut(topology: Topology, sink: int | None = None) -> float:
    """Seconds per byte of the worst set holding a rank and leaving a rank (or ``sink``) out."""
    n = topology.num_ranks
    masks, leaving = vertex_sets(topology)
    ranks = masks[:, :n].sum(axis=1)
    valid = (ranks >= 1) & (ranks < n)
    if sink is not None:
        valid &= ~masks[:, sink]
    return float((ranks[valid] / leaving[valid]).max()) / n


def brute_broadcast(topology: Topology, root: int) -> float:
    """1 / min over v of the min cut between root and v."""
    masks, leaving = vertex_sets(topology)
    valid = masks[:, root] & ~masks[:, :topology.num_ranks].all(axis=1)
    return 1.0 / float(leaving[valid].min())


def brute_alltoall_cut(topology: Topology) -> float:
    n = topology.num_ranks
    masks, leaving = vertex_sets(topology)
    k = masks[:, :n].sum(axis=1)
    valid = (k >= 1) & (k < n)
    return float((k[valid] * (n - k[valid]) / leaving[valid]).max()) / n


def pairwise_alltoall_lp(topology: Topology) -> float:
    """Seconds per byte from an independent LP: one commodity per ordered pair."""
    n, index = topology.num_ranks, topology.node_index
    v, e = len(topology.nodes), len(topology.links)
    pairs = [(s, t) for s in range(n) for t in range(n) if s != t]
    a_eq, b_eq = [], []
    for p, (s, t) in enumerate(pairs):
        for node in range(v):
            if node == s:
                continue
            row = np.zeros(len(pairs) * e + 1)
            for j, lk in enumerate(topology.links):
                row[p * e + j] += (index[lk.dst] == node) - (index[lk.src] == node)
            row[-1] = -1.0 if node == t else 0.0
            a_eq.append(row)
            b_eq.append(0.0)
    a_ub = np.zeros((e, len(pairs) * e + 1))
    for p in range(len(pairs)):
        a_ub[np.arange(e), p * e + np.arange(e)] = 1.0
    cost = np.zeros(len(pairs) * e + 1)
    cost[-1] = -1.0
    result = scipy.optimize.linprog(cost, A_ub=a_ub, b_ub=topology.bandwidths / GB,
                                    A_eq=np.array(a_eq), b_eq=b_eq, method="highs")
    assert result.status == 0
    return 1.0 / (n * result.x[-1] * GB)


# -------------------------------------------------------- max-flow vs oracle


@SETTINGS
@given(topologies(max_ranks=7))
def test_allgather_and_reducescatter_cuts_equal_brute_force(topology):
    assert allgather_cut(topology)[0] == pytest.approx(brute_cut(topology), rel=REL)
    backwards = topology.reversed()
    assert reducescatter_cut(topology)[0] == pytest.approx(brute_cut(backwards), rel=REL)


@SETTINGS
@given(clusters())
def test_cuts_on_symmetric_clusters_equal_brute_force(topology):
    assert allgather_cut(topology)[0] == pytest.approx(brute_cut(topology), rel=REL)
    assert broadcast_flow(topology, 1)[0] == pytest.approx(brute_broadcast(topology, 1),
                                                           rel=REL)


@SETTINGS
@given(topologies(max_ranks=7), st.data())
def test_rooted_bounds_equal_brute_force(topology, data):
    root = data.draw(st.integers(0, topology.num_ranks - 1))
    backwards = topology.reversed()
    assert gather_cut(topology, root)[0] == pytest.approx(brute_cut(topology, root), rel=REL)
    assert scatter_cut(topology, root)[0] == pytest.approx(brute_cut(backwards, root), rel=REL)
    assert broadcast_flow(topology, root)[0] == pytest.approx(brute_broadcast(topology, root),
                                                              rel=REL)
    assert reduce_flow(topology, root)[0] == pytest.approx(brute_broadcast(backwards, root),
                                                           rel=REL)


@SETTINGS
@given(topologies(max_ranks=7))
def test_witness_is_a_real_cut_with_the_bound_ratio(topology):
    per_byte, witness = allgather_cut(topology)
    n = topology.num_ranks
    inside = sum(1 for node in witness if topology.is_rank(node))
    leaving = sum(lk.bandwidth for lk in topology.links
                  if lk.src in witness and lk.dst not in witness)
    assert 1 <= inside < n
    assert per_byte == pytest.approx(inside / leaving / n, rel=1e-12)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(max_ranks=4, max_extra_links=4))
def test_alltoall_lp_matches_pairwise_lp_and_beats_every_cut(topology):
    per_byte, method, _ = alltoall_flow(topology)
    assert method == "alltoall LP"
    assert per_byte == pytest.approx(pairwise_alltoall_lp(topology), rel=1e-6)
    assert per_byte >= brute_alltoall_cut(topology) * (1 - 1e-7)
    cut, cut_method, witness = alltoall_flow(topology, lp_limit=0)
    assert cut_method == "alltoall cut" and witness
    assert cut <= per_byte * (1 + 1e-7)


# ------------------------------------------------------------- analytic cases


def test_ring_allgather_is_seven_eighths_over_both_directions():
    b = 25 * GB
    bound = lower_bound(ring(8, 25), Kind.ALLGATHER, M)
    assert bound.bandwidth_s == pytest.approx(M / 8 * 7 / (2 * b), rel=1e-9)
    assert bound.method == "allgather cut"
    assert bound.rs_ag_s is None


def test_fully_connected_allgather():
    n, b = 5, 40 * GB
    links = [lk for a, c in itertools.combinations(range(n), 2) for lk in duplex(a, c, 40)]
    bound = lower_bound(Topology("fc5", n, tuple(links)), "allgather", M)
    assert bound.time_s == pytest.approx(M / n / b, rel=1e-9)


def test_switch_allgather_and_alltoall():
    n, b = 8, 50 * GB
    topology = star(n, 50)
    assert lower_bound(topology, "allgather", M).time_s == pytest.approx(
        M / n * (n - 1) / b, rel=1e-9)
    alltoall = lower_bound(topology, "alltoall", M)
    assert alltoall.method == "alltoall LP"
    assert alltoall.time_s == pytest.approx((n - 1) * M / (n * b), rel=1e-6)


def test_dgx1_hybrid_cube_mesh_allgather_is_171_gbps():
    links = [Link(a, c, count * 25 * GB) for a, row in enumerate(DGX1_NVLINKS)
             for c, count in enumerate(row) if count]
    bound = lower_bound(Topology("dgx1-nvlink", 8, tuple(links)), "allgather", M)
    assert bound.algbw / GB == pytest.approx(171.43, abs=0.01)
    assert bound.busbw / GB == pytest.approx(150.0, rel=1e-9)


def test_nic_cluster_matches_the_switched_node_formula():
    # busbw <= (N-1) / max((N-1)/(B_l+B_n), (N-g)/(g*B_n)), with NICs as fabric chains
    nodes, g, local, nic = 4, 2, 300 * GB, 25 * GB
    n = nodes * g
    topology = cluster(nodes, g, 300, 25, pcie=32)
    bound = lower_bound(topology, "allgather", M)
    expected = (n - 1) / max((n - 1) / (local + nic), (n - g) / (g * nic))
    assert bound.busbw == pytest.approx(expected, rel=1e-9)
    left_out = set(range(n)) - {node for node in bound.witness if topology.is_rank(node)}
    assert left_out in [set(part) for part in topology.groups["node"]]  # one whole node


def test_broadcast_and_reduce_on_a_chain():
    topology = chain([50, 25, 100])
    for root in range(4):
        assert lower_bound(topology, "broadcast", M, root).bandwidth_s == pytest.approx(
            M / (25 * GB), rel=1e-9)
        assert lower_bound(topology, "reduce", M, root).bandwidth_s == pytest.approx(
            M / (25 * GB), rel=1e-9)
    assert broadcast_flow(topology, 0)[1] == frozenset({0, 1})


def test_gather_on_a_chain_crosses_the_slow_link():
    # into root 0: ranks 2 and 3 (2 * M/4) cross the 25 GB/s link, 3 * M/4 the 50 one
    topology = chain([50, 25, 100])
    assert lower_bound(topology, "gather", M, 0).time_s == pytest.approx(
        max(2 * M / 4 / (25 * GB), 3 * M / 4 / (50 * GB)), rel=1e-9)


def test_alltoall_lp_on_ring_and_chain():
    b = 10 * GB
    assert lower_bound(ring(6, 10), "alltoall", M).time_s == pytest.approx(
        0.75 * M / b, rel=1e-6)  # 9 M of hop-bytes over 12 links
    assert lower_bound(chain([10, 10]), "alltoall", M).time_s == pytest.approx(
        2 * M / (3 * b), rel=1e-6)


def test_allreduce_bound_is_proven_and_rs_ag_is_only_a_reference():
    links = [Link(0, 1, 10 * GB), Link(1, 2, 10 * GB), Link(2, 0, 10 * GB),
             Link(1, 0, 30 * GB), Link(2, 1, 30 * GB), Link(0, 2, 30 * GB)]
    topology = Topology("skew", 3, tuple(links))
    rs, ag = reducescatter_cut(topology)[0], allgather_cut(topology)[0]
    bound = lower_bound(topology, "allreduce", M)
    assert bound.rs_ag_s == pytest.approx((rs + ag) * M)
    assert bound.bandwidth_s >= max(rs, ag) * M
    # every rank's result needs M bytes in and every rank's input M bytes out: the
    # slowest single direction of a rank's ports (40 GB/s each here) ...
    assert bound.bandwidth_s >= M / (40 * GB) * (1 - 1e-12)
    # ... and 2(m-1) = 4 messages per element over 120 GB/s leaving the three ranks
    assert bound.bandwidth_s >= 4 * M / (120 * GB) * (1 - 1e-12)
    assert bound.time_s <= bound.rs_ag_s * (1 + 1e-12)


def test_slow_port_switch_allreduce_needs_M_through_the_slow_port():
    """The issue's example: 4 ranks on a switch, rank 0's port 10 GB/s, the others 25."""
    links = [lk for r, gbps in enumerate([10, 25, 25, 25]) for lk in duplex(r, "sw", gbps, 1e-6)]
    topology = Topology("slowport", 4, tuple(links), {"sw": NodeKind.SWITCH})
    bound = lower_bound(topology, "allreduce", 2**30)
    assert bound.time_s >= 2**30 / (10 * GB)  # 107.37 ms: all of M into rank 0
    assert bound.time_s == pytest.approx(2**30 / (10 * GB) + 1e-6)  # + the port link alpha
    assert bound.witness is not None and bound.method.startswith("allreduce min cut")
    assert bound.rs_ag_s == pytest.approx(2 * 0.75 * 2**30 / (10 * GB) + 4e-6, rel=1e-3)


@SETTINGS
@given(topologies(max_ranks=6))
def test_allreduce_partition_bound_is_at_most_rs_plus_ag_on_symmetric_rings(topology):
    """On every topology the partition bound is a real one: for one part per rank its
    crossing bandwidth is at most the ranks' own port bandwidth."""
    per_byte, method = allreduce_partition(topology)
    n = topology.num_ranks
    ports = sum(lk.bandwidth for lk in topology.links if topology.is_rank(lk.src))
    assert per_byte >= 2 * (n - 1) / ports * (1 - 1e-12)
    assert "parts" in method


def test_allreduce_bound_equals_rs_plus_ag_where_that_is_optimal():
    """Homogeneous switch and ring: ring allreduce reaches RS + AG, and the partition
    bound proves nothing faster exists."""
    for topology in (star(8, 50), ring(8, 25)):
        bound = lower_bound(topology, "allreduce", M)
        assert bound.bandwidth_s == pytest.approx(bound.rs_ag_s, rel=1e-9)
        assert bound.method.startswith("allreduce messages")


def test_cut_alpha_adds_to_the_bandwidth_term():
    # one 10 GB/s link with 5 us: no byte arrives before 5 us, then M streams
    topology = chain([10], alphas=[5e-6])
    bound = lower_bound(topology, "broadcast", 2**20)
    assert bound.cut_s == pytest.approx(2**20 / (10 * GB) + 5e-6)
    assert bound.time_s == bound.cut_s
    assert bound.bandwidth_s == pytest.approx(2**20 / (10 * GB))


def test_latency_bound_on_a_chain():
    topology = chain([10, 10, 10], alphas=[1e-6, 2e-6, 3e-6])
    assert latency_bound(topology, "allgather") == pytest.approx(6e-6)
    assert latency_bound(topology, "broadcast", root=1) == pytest.approx(5e-6)
    assert latency_bound(topology, "reduce", root=0) == pytest.approx(6e-6)
    assert latency_bound(topology, "gather", root=2) == pytest.approx(3e-6)
    tiny = lower_bound(topology, "allreduce", 8)
    assert tiny.time_s == tiny.latency_s == pytest.approx(6e-6)
    assert tiny.method.startswith("latency")


def test_zero_alpha_links_count_as_links():
    topology = chain([10, 10], alphas=[0.0, 2e-6])
    assert latency_bound(topology, "alltoall") == pytest.approx(2e-6)


# ---------------------------------------------------------- API behaviour


def test_bandwidth_scales_with_size_and_is_cached():
    topology = cluster(2, 2, 300, 25, pcie=32)
    bounds = lower_bounds(topology, "allgather", [2**20, 2**30])
    assert all(isinstance(b, Bound) for b in bounds)
    assert bounds[1].bandwidth_s == pytest.approx(bounds[0].bandwidth_s * 2**10)
    assert allgather_cut(topology) is allgather_cut(topology)
    assert lower_bound(topology, "allgather", 0).time_s == 0.0


def test_single_rank_needs_no_time():
    bound = lower_bound(Topology("one", 1, ()), "allreduce", M)
    assert bound.time_s == 0.0


def test_disconnected_topology_names_the_ranks():
    links = [*duplex(0, 1, 10), Link(1, 2, 10 * GB)]
    with pytest.raises(TopologyError, match=r"rank\(s\) \[2\] cannot reach rank 0"):
        lower_bound(Topology("split", 3, tuple(links)), "allgather", M)
    links = [*duplex(0, 1, 10), Link(3, 2, 10 * GB), Link(2, 3, 10 * GB)]
    with pytest.raises(TopologyError, match=r"rank 0 cannot reach rank\(s\) \[2, 3\]"):
        allgather_cut(Topology("halves", 4, tuple(links)))


def test_dead_end_fabric_is_not_a_disconnection():
    links = [*duplex(0, 1, 10), Link(0, "nic", 10 * GB)]
    topology = Topology("deadend", 2, tuple(links), {"nic": NodeKind.NIC})
    check_ranks_connected(topology)
    assert lower_bound(topology, "allgather", M).time_s == pytest.approx(M / 2 / (10 * GB))


def test_bad_inputs():
    topology = ring(4, 10)
    with pytest.raises(InputError, match="root 7"):
        lower_bound(topology, "broadcast", M, root=7)
    with pytest.raises(InputError, match="size"):
        lower_bound(topology, "allgather", -1)
    with pytest.raises(InputError, match="unknown collective"):
        lower_bound(topology, "allscatter", M)


def test_sendrecv_bound_is_the_pair_max_flow() -> None:
    from ccweave.topology import zoo

    mist = lower_bound(zoo.get("mist"), Kind.SENDRECV, 2**30, root=0, peer=1)
    # direct NVLink + the host path, 75 GB/s each; nothing arrives before 0.7 us
    assert 2**30 / mist.bandwidth_s == pytest.approx(150e9)
    assert mist.latency_s == pytest.approx(0.7e-6)
    assert mist.time_s == pytest.approx(mist.bandwidth_s + 0.7e-6)
    cedar = lower_bound(zoo.get("cedar"), Kind.SENDRECV, 2**30, root=0, peer=1)
    assert 2**30 / cedar.bandwidth_s == pytest.approx(50e9 + 2 * 50e9 + 16e9)  # 2 peers, PCIe
    with pytest.raises(InputError, match="other than the sender"):
        lower_bound(zoo.get("mist"), Kind.SENDRECV, 1, root=1, peer=1)


def socket(ports: list[float], pcie: float, memory: float) -> Topology:
    """Ranks on a switch, each with PCIe up into a socket's memory and down out of it,
    the memory behind one write and one read link (as ``ccweave.topology.host_memory``
    models a socket)."""
    links = [lk for r, gbps in enumerate(ports) for lk in duplex(r, "sw", gbps)]
    for r in range(len(ports)):
        links += [Link(r, "cpu.write", pcie * GB), Link("cpu.read", r, pcie * GB)]
    links += [Link("cpu.write", "cpu", memory * GB, 0.0, "memory"),
              Link("cpu", "cpu.read", memory * GB, 0.0, "memory")]
    fabric = {"sw": NodeKind.SWITCH, "cpu": NodeKind.CPU, "cpu.write": NodeKind.PCIE,
              "cpu.read": NodeKind.PCIE}
    return Topology(f"socket{len(ports)}", len(ports), tuple(links), fabric)


def test_delivery_bound_counts_each_rank_s_copy_through_a_shared_memory_link():
    """Four ranks share 50 GB/s of memory reads beside their 100 GB/s ports: each must
    receive 3/4 M, all of it over 4 x 100 + 50 GB/s, where the cut bound lets every rank
    draw its 32 GB/s of PCIe at once (a byte copied behind the cut)."""
    topology = socket([100] * 4, pcie=32, memory=50)
    cut = allgather_cut(topology)[0] * M
    assert cut == pytest.approx(0.75 * M / (132 * GB), rel=REL)
    bound = lower_bound(topology, "allgather", M)
    assert bound.bandwidth_s == pytest.approx(4 * 0.75 * M / (450 * GB), rel=REL)
    assert bound.method.startswith("delivery") and bound.bandwidth_s > cut
    rs = lower_bound(topology, "reducescatter", M)
    assert rs.bandwidth_s == pytest.approx(bound.bandwidth_s, rel=REL)
    per_byte, _ = allgather_delivery(topology)
    assert per_byte == pytest.approx(4 / (450 * GB), rel=REL)


def test_delivery_bound_is_the_rank_ports_where_fabric_has_room():
    """A switch as fast as its ports copies nothing anyone needs: the delivery bound is
    each rank's own port, never above the cut bound."""
    topology = Topology("sw", 4, tuple(lk for r in range(4) for lk in duplex(r, "sw", 25)),
                        {"sw": NodeKind.SWITCH})
    per_byte, _ = allgather_delivery(topology)
    assert per_byte == pytest.approx(1 / (25 * GB), rel=REL)
    per_byte, _ = reducescatter_delivery(topology)
    assert per_byte == pytest.approx(1 / (25 * GB), rel=REL)


@SETTINGS
@given(topologies(max_ranks=6))
def test_delivery_bound_is_at_least_each_rank_s_port(topology):
    n = topology.num_ranks
    into = np.zeros(n)
    for link in topology.links:
        if topology.is_rank(link.dst):
            into[link.dst] += link.bandwidth
    per_byte, _ = allgather_delivery(topology)
    assert per_byte >= 1 / into.min() * (1 - 1e-9)
