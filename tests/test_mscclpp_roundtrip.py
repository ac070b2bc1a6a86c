"""Schedules exported as MSCCL++ plans and read back: proven again, the same transfers, and
the same simulated time (benchmarks/gpu_stacks.py prints the whole table)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccweave.errors import InputError
from ccweave.export import mscclpp
from ccweave.export.mscclpp_write import ExportOptions, choose_protocol
from ccweave.schedule import Op
from ccweave.simulate import simulate
from ccweave.synth import synthesize
from ccweave.topology import zoo
from ccweave.verify import check
from tests.strategies import host_staged, topology_and_schedule

SIZES = (2**20, 256 * 2**20)


def _back(schedule, topology, **options):
    plan = mscclpp.to_plan(schedule, topology, ExportOptions(inplace=schedule.in_place,
                                                             **options))
    return plan, mscclpp.from_data(json.loads(json.dumps(plan)), "round-trip")


def _ratios(back, schedule, topology):
    return [simulate(back, topology, s).time_s / simulate(schedule, topology, s).time_s
            for s in SIZES]


def _moves(schedule) -> Counter:
    return Counter((t.src, t.dst, t.src_buffer, t.src_index, t.dst_buffer, t.dst_index,
                    t.count, t.op) for t in schedule.transfers)


@pytest.mark.parametrize(("machine", "kind", "strategy"), [
    ("dgx-a100", "allreduce", "ring"),  # memory channels: put, rre
    ("dgx-a100", "alltoall", "flow"),
    ("dgx-a100", "reducescatter", "trees"),
    ("dgx1", "allgather", "ring"),
])
def test_inside_a_node_the_plan_is_the_schedule(machine, kind, strategy):
    topo = zoo.get(machine)
    sched = synthesize(topo, kind, strategy)
    plan, back = _back(sched, topo)
    assert plan["protocol"] == "Simple"  # an open size range
    assert check(back, topo).ok
    assert _moves(back) == _moves(sched)
    assert _ratios(back, sched, topo) == pytest.approx([1.0, 1.0], rel=1e-9)


def test_across_nodes_a_reduction_lands_in_scratch_within_two_percent():
    """Port channels put only: a reduction from another node lands in the receiver's
    scratch (pwsf) and is added there (re): one more local pass, but the put need not wait
    until the receiver is done with its slot; within 2% either way."""
    topo = zoo.get("ndv2:2")
    sched = synthesize(topo, "allreduce", "ring")
    plan, back = _back(sched, topo)
    ops = _count(plan)
    assert ops["pwsf"] and ops["rre"] and ops["put"] and ops["re"]
    assert check(back, topo).ok
    assert len(back.transfers) > len(sched.transfers)
    assert all(abs(r - 1) <= 0.02 for r in _ratios(back, sched, topo))


def _count(plan) -> Counter:
    return Counter(op["name"] for gpu in plan["gpus"] for tb in gpu["threadblocks"]
                   for op in tb["ops"])


def test_ll_packets_across_nodes():
    """LL: packets into the receiver's scratch (ppkt, or cpkt + rppkt through a port
    channel), unpacked or reduced there: their flags order what reads them, so only the
    orderings the schedule adds beside its data (the ring's order on each link) wait for a
    signal, and no control threadblock guards the next call (each uses its half of a
    doubled scratch)."""
    topo = zoo.get("ndv2:2")
    sched = synthesize(topo, "allreduce", "ring")
    plan, back = _back(sched, topo, protocol="LL")
    simple, _ = _back(sched, topo, protocol="Simple")
    names = _count(plan)
    assert {"ppkt", "cpkt", "rppkt", "upkt", "repkt"} <= set(names)
    assert not names["barrier"] and names["wait"] < _count(simple)["wait"] / 2
    assert plan["use_double_scratch_buffer"]
    assert check(back, topo).ok


def test_ll_where_it_pays():
    """LL for a range that ends where latency rules, Simple past it and for open ranges."""
    topo = zoo.get("dgx-a100")
    sched = synthesize(topo, "allreduce", "ring")
    assert choose_protocol(sched, topo, 4096) == "LL"
    assert choose_protocol(sched, topo, 2**30) == "Simple"
    assert choose_protocol(sched, topo, None) == "Simple"


def test_too_many_threadblocks_shares_them_and_still_proves():
    topo = zoo.get("dgx-a100")
    sched = synthesize(topo, "allreduce", "trees")
    plan, back = _back(sched, topo, max_threadblocks=4)
    assert max(len(g["threadblocks"]) for g in plan["gpus"]) <= 4
    assert check(back, topo).ok
    assert _moves(back) == _moves(sched)


def test_rooted_collectives_are_refused():
    topo = zoo.get("switch:4")
    with pytest.raises(InputError, match="broadcast has no MSCCL\\+\\+ plan: a plan names no "
                                         "root"):
        mscclpp.to_plan(synthesize(topo, "broadcast", "ring"), topo)


def test_allreduce_goes_in_place_and_drops_its_self_copies():
    topo = zoo.get("switch:4")
    sched = synthesize(topo, "allreduce", "ring")
    assert not sched.in_place
    plan = mscclpp.to_plan(sched, topo)
    back = mscclpp.from_data(plan, "in-place")
    assert plan["inplace"] and back.in_place and check(back, topo).ok
    copies = [t for t in sched.transfers if t.is_local and t.op is Op.COPY]
    assert copies and len(back.transfers) == len(sched.transfers) - len(copies)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=topology_and_schedule(), protocol=st.sampled_from(["Simple", "LL"]))
def test_random_schedules_keep_their_meaning(case, protocol):
    """Random transfers on random machines (proven or not): read back, the plan proves
    exactly when the schedule does; Simple keeps every transfer and the time."""
    topo, sched = case
    _, back = _back(sched, topo, protocol=protocol)
    assert check(back).ok == check(sched).ok
    if protocol == "Simple":
        assert _moves(back) == _moves(sched)
        assert simulate(back, topo, 2**20).time_s == pytest.approx(
            simulate(sched, topo, 2**20).time_s, rel=1e-9)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=host_staged(max_ranks=5), kind=st.sampled_from(["allreduce", "allgather"]))
def test_host_staged_pairs_use_port_channels(topo, kind):
    """Ranks whose route passes a CPU cannot load each other's memory: port channels, and
    the plan still proves."""
    sched = synthesize(topo, kind, "ring")
    _, back = _back(replace(sched, transfers=tuple(replace(t, via=None)
                                                   for t in sched.transfers)), topo)
    assert check(back, topo).ok


def test_a_rank_with_many_peers_gets_more_control_threadblocks():
    """An alltoall across two 8-GPU nodes: rank 0 shakes hands with 15 peers, 8 of them
    through port channels, and waits for pwsf signals from more: past 16 channels of a
    type, a second control threadblock takes the rest (MAX_CHANNEL)."""
    topo = zoo.get("ndv2:2")
    sched = synthesize(topo, "alltoall", "flow")
    plan, back = _back(sched, topo)
    controls = [tb for tb in plan["gpus"][0]["threadblocks"]
                if tb["ops"][0]["name"] in ("rlxsignal", "barrier")
                and not any(op["name"] in ("put", "pwsf", "rre", "re", "copy")
                            for op in tb["ops"])]
    assert len(controls) >= 2
    assert all(len(c["channel_ids"]) <= 16 for tb in plan["gpus"][0]["threadblocks"]
               for c in tb["channels"])
    assert check(back, topo).ok
    assert _ratios(back, sched, topo) == pytest.approx([1.0, 1.0], rel=1e-9)
