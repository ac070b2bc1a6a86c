"""Properties of taccl on random two-node machines (hypothesis): whatever the links, the
default sketches fit, every collective's schedule verifies, none beats the bound, and the
MSCCL XML it exports simulates exactly as the schedule scored."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ccweave.synth.taccl  # noqa: F401  (registers the strategy)
from ccweave.bounds import lower_bound
from ccweave.collectives import Kind
from ccweave.export.msccl_xml import from_xml, to_xml
from ccweave.simulate import simulate
from ccweave.synth.taccl.build import TacclOptions, synthesize_taccl
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.verify import verify

GBPS = 1e9


@st.composite
def two_node_machines(draw) -> Topology:
    """Two equal nodes: a ring of ranks plus random extra links inside (the same in both
    nodes or not), a NIC per node reached from some ranks directly or through a PCIe
    switch from all, and a network switch between the NICs."""
    per_node = draw(st.integers(2, 4))
    bandwidth = st.sampled_from([12.5, 25.0, 50.0, 100.0]).map(lambda b: b * GBPS)
    alpha = st.sampled_from([0.0, 0.3e-6, 0.7e-6, 2.6e-6])
    links: list[Link] = []
    fabric: dict[str, NodeKind] = {"net": NodeKind.SWITCH}

    def duplex(a, b, bw=None, al=None):
        bw = draw(bandwidth) if bw is None else bw
        al = draw(alpha) if al is None else al
        links.append(Link(a, b, bw, al))
        links.append(Link(b, a, bw, al))

    same = draw(st.booleans())
    extra = draw(st.lists(st.tuples(st.integers(0, per_node - 1), st.integers(0, per_node - 1)),
                          max_size=4))
    via_switch = draw(st.booleans())
    with_nic = draw(st.sets(st.integers(0, per_node - 1), min_size=1))
    figures = [draw(bandwidth) for _ in range(per_node + len(extra))]
    nodes = []
    for node in range(2):
        base = node * per_node
        nodes.append(tuple(range(base, base + per_node)))
        pick = (lambda i: figures[i]) if same else (lambda i: draw(bandwidth))
        for i in range(per_node if per_node > 2 else 1):
            duplex(base + i, base + (i + 1) % per_node, pick(i), 0.7e-6)
        for number, (a, b) in enumerate(extra):
            if a != b:
                duplex(base + a, base + b, pick(per_node + number), 0.7e-6)
        nic = f"n{node}.nic"
        fabric[nic] = NodeKind.NIC
        if via_switch:
            fabric[f"n{node}.pcie"] = NodeKind.PCIE
            for rank in nodes[-1]:
                duplex(rank, f"n{node}.pcie", 16 * GBPS, 0.5e-6)
            duplex(f"n{node}.pcie", nic, 16 * GBPS, 0.5e-6)
        else:
            for local in sorted(with_nic):
                duplex(base + local, nic, 16 * GBPS, 0.5e-6)
        duplex(nic, "net", 12.5 * GBPS, 0.8e-6)
    return Topology(f"random2x{per_node}", 2 * per_node, tuple(links), fabric,
                    {"node": tuple(nodes)})


@pytest.mark.parametrize("kind", [Kind.ALLGATHER, Kind.ALLTOALL, Kind.REDUCESCATTER,
                                  Kind.ALLREDUCE])
@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(machine=two_node_machines(), size=st.sampled_from([2**12, 2**20, 2**28]))
def test_random_two_node_machines(kind, machine, size):
    schedule = synthesize_taccl(machine, kind, 1,
                                TacclOptions(size=size, fallback=False, time_limit=5.0,
                                             contiguity_time_limit=0.5))
    verify(schedule, machine)
    time_s = simulate(schedule, machine, size).time_s
    assert time_s >= lower_bound(machine, kind, size).time_s * (1 - 1e-9)
    exported = simulate(from_xml(to_xml(schedule)), machine, size).time_s
    assert exported == pytest.approx(time_s, rel=1e-9)  # what ships is what was scored
