"""The ``flow`` strategy: alltoall from the time-expanded multi-commodity flow LP.

Every schedule it emits is proven by the verifier and never beats the lower bound; at
1 GiB it sits near the maximum concurrent flow bound where the classic strategies are
far from it (relays through ranks, fabric routes beside the direct links)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from ccweave.bounds import lower_bound
from ccweave.collectives import Buffer, Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.simulate import simulate
from ccweave.synth import synthesize
from ccweave.synth.flow import chunks_for_size, rank_hops, solve_flow, staged_view
from ccweave.topology import zoo
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.verify import verify
from tests.strategies import topologies

GB = 2**30


def _ratio(topo: Topology, size: int, **options) -> float:
    schedule = synthesize(topo, "alltoall", "flow", size=size, **options)
    verify(schedule, topo)
    return simulate(schedule, topo, size).time_s / lower_bound(topo, "alltoall", size).time_s


@pytest.mark.parametrize("machine", ["dgx1", "mesh:3x3", "torus:3x3", "ndv2:2"])
def test_flow_reaches_the_alltoall_flow_bound_at_1GB(machine):
    """dgx1's best classic alltoall is 1.99x its bound: half its pairs have no NVLink."""
    ratio = _ratio(zoo.get(machine), GB)
    assert 1.0 - 1e-9 <= ratio <= 1.03


def test_cedars_host_routes_carry_what_staging_lets_them():
    """The bound lets cedar's GPUs reach each other through the CPUs as if cut-through;
    the model stages those routes in host memory (copied in, then out). Planned
    cut-through, flow sent a tenth of the bytes that way (1.97x the bound) and shipped
    the NVLinks alone (1.104); planned with the host's links at half their bandwidth, it
    sends what staging lets them carry: within 1.06 of the bound."""
    topo = zoo.get("cedar")
    schedule = synthesize(topo, "alltoall", "flow", size=GB)
    verify(schedule, topo)
    assert any(t.via and any(topo.kind(node) is NodeKind.CPU for node in t.via)
               for t in schedule.transfers)
    assert 1.0 <= _ratio(topo, GB) <= 1.06


def test_the_staged_view_halves_the_links_of_host_memory_only():
    topo = zoo.get("cedar")
    view = staged_view(topo)
    for link, seen in zip(topo.links, view.links):
        host = any(isinstance(node, str) and topo.kind(node) is NodeKind.CPU
                   for node in (link.src, link.dst))
        assert seen.bandwidth == link.bandwidth / (2 if host else 1)
    assert staged_view(zoo.get("dgx-a100")) is None  # no host memory in its fabric


def test_flow_beats_every_classic_strategy_on_dgx1():
    topo = zoo.get("dgx1")
    flow = synthesize(topo, "alltoall", "flow", size=GB)
    others = [synthesize(topo, "alltoall", name) for name in ("ring", "direct", "pairwise")]
    assert simulate(flow, topo, GB).time_s < 0.6 * min(simulate(s, topo, GB).time_s
                                                        for s in others)


def test_relays_are_explicit_transfers_through_scratch():
    """On a mesh most pairs have no route: data stops in a relay rank's scratch."""
    topo = zoo.get("mesh:3x3")
    schedule = synthesize(topo, "alltoall", "flow", size=GB)
    relayed = [t for t in schedule.transfers if t.dst_buffer is Buffer.SCRATCH]
    assert relayed and schedule.scratch_chunks > 0
    assert all(topo.has_route(t.src, t.dst) for t in schedule.transfers)
    verify(schedule, topo)


def test_fabric_routes_beside_the_direct_link_are_pinned():
    """dgx2's GPU pairs also reach each other through their PCIe switch: the LP uses
    both, and the transfers on the PCIe route say so with ``via``."""
    topo = zoo.get("dgx2")
    schedule = synthesize(topo, "alltoall", "flow", size=GB)
    pinned = {t.via for t in schedule.transfers if t.via is not None}
    assert any(via and via[0].startswith("pcie") for via in pinned)
    verify(schedule, topo)


def test_more_epochs_never_raise_the_lp_time():
    topo = zoo.get("mesh:3x3")
    times = [solve_flow(topo, epochs).time_per_byte for epochs in (4, 5, 6)]
    assert times[0] >= times[1] - 1e-12 >= times[2] - 2e-12


def test_the_lp_time_is_never_below_the_flow_bound():
    for machine in ("dgx1", "mesh:3x3", "cedar"):
        topo = zoo.get(machine)
        per_byte = lower_bound(topo, "alltoall", topo.num_ranks).bandwidth_s
        for epochs in (int(rank_hops(topo).max()), int(rank_hops(topo).max()) + 2):
            assert solve_flow(topo, epochs).time_per_byte >= per_byte * (1 - 1e-6)


def test_symmetric_machines_solve_a_smaller_lp():
    plan = solve_flow(zoo.get("torus:4x4"), 4)
    assert plan.variable_classes * 20 < plan.variables


@settings(max_examples=25, deadline=None)
@given(topologies(max_ranks=6))
def test_flow_verifies_and_respects_the_bound_on_random_topologies(topo):
    for size in (2**16, GB):
        ratio = _ratio(topo, size)
        assert ratio >= 1.0 - 1e-9
    assert ratio <= 1.25  # at 1 GiB; benchmarks/synthesis_flow.py prints the figures


def test_chunks_follow_the_size():
    topo = zoo.get("dgx1")
    assert chunks_for_size(topo, 2**16) == 1
    assert chunks_for_size(topo, GB) == 64
    small = synthesize(topo, "alltoall", "flow", size=2**16)
    assert small.collective.chunks_per_rank == 1
    verify(small, topo)


def test_options_are_checked():
    topo = zoo.get("mesh:3x3")
    with pytest.raises(InputError, match="epochs=2 is fewer than the 4"):
        synthesize(topo, "alltoall", "flow", epochs=2)
    with pytest.raises(InputError, match="size must be"):
        synthesize(topo, "alltoall", "flow", size=-1)
    with pytest.raises(InputError, match=r"has no option .depth."):
        synthesize(topo, "alltoall", "flow", depth=3)
    with pytest.raises(NotApplicableError):
        synthesize(topo, Kind.ALLGATHER, "flow")


def test_one_way_links_that_strand_a_rank_are_refused():
    topo = Topology("oneway", 3, (Link(0, 1, 1e9), Link(1, 2, 1e9), Link(2, 1, 1e9)))
    with pytest.raises(NotApplicableError, match="cannot reach"):
        synthesize(topo, "alltoall", "flow")


def test_compare_lists_a_failed_solve_as_refused_and_shows_the_rest(monkeypatch):
    from ccweave import compare as compare_module
    from ccweave.errors import SolverError
    from ccweave.synth import flow

    def no_optimum(topology, epochs):
        raise SolverError("HiGHS found no optimum of a 10 x 10 LP: Time limit reached")

    monkeypatch.setattr(flow, "solve_flow", no_optimum)
    result = compare_module.compare(zoo.get("dgx1"), "alltoall", [GB], ["direct", "flow"])
    assert [s.strategy for s in result.skipped] == ["flow"]
    assert "Time limit reached" in result.skipped[0].reason
    assert {r.strategy for r in result.results} == {"direct"}
