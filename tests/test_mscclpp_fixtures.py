"""The 11 execution plans of MSCCL++'s own tests, read unchanged: each proven to implement
its collective, or refused with the reason; and the checks that refuse a plan, each shown
to fire on a fixture edited to break it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccweave.errors import InputError
from ccweave.export import mscclpp
from ccweave.schedule import Schedule
from tests.strategies import mutated

PLANS = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "mscclpp" / "plans"
needs_plans = pytest.mark.skipif(not PLANS.is_dir(), reason=f"{PLANS} is missing (the MSCCL++ "
                                 "fixtures live in ../shared)")

PROVEN = {
    "allreduce.json": "allreduce on 2 ranks, 8 chunk(s) per rank",
    "allreduce_packet.json": "allreduce on 2 ranks, 2 chunk(s) per rank",
    "reduce.json": "allreduce on 2 ranks, 2 chunk(s) per rank",
    "reduce_nvls.json": "allreduce on 2 ranks, 1 chunk(s) per rank",
    "reduce_nvls_pipeline.json": "allreduce on 2 ranks, 2 chunk(s) per rank",
    "reduce_pack.json": "allreduce on 2 ranks, 1 chunk(s) per rank",
    "reduce_pack_tbg.json": "allreduce on 2 ranks, 2 chunk(s) per rank",
    "transfer_pack.json": "allgather on 2 ranks, 1 chunk(s) per rank",
    "transfer_pack_tbg.json": "allgather on 2 ranks, 2 chunk(s) per rank",
}


def _load(name: str) -> dict:
    return json.loads((PLANS / name).read_text())


@needs_plans
def test_eleven_plans_are_there():
    assert len(list(PLANS.glob("*.json"))) == 11


@needs_plans
@pytest.mark.parametrize("name", sorted(PROVEN))
def test_plan_is_proven(name):
    verdict = mscclpp.judge(mscclpp.read(PLANS / name))
    assert verdict.ok, verdict.message
    assert verdict.message == f"proven: {PROVEN[name]}"


@needs_plans
def test_pipeline_plan_is_refused_where_the_loader_reads_a_missing_key():
    """test/execution-files/allreduce_pipeline.json names its switch channel's buffer
    ``buff``; parseChannels reads ``buffer_type``."""
    with pytest.raises(InputError, match=r"allreduce_pipeline.json: gpus\[0\].channels\[0\]: a "
                                         "switch channel without 'buffer_type'"):
        mscclpp.read(PLANS / "allreduce_pipeline.json")


@needs_plans
def test_thread_block_group_plan_races():
    """reduce_tbg.json: a group's two threadblocks each wait only on their own channel, but
    a group splits every operation's range in two: rank 0's ``get`` reads the half of rank
    1's scratch chunk 1 that rank 1's *other* threadblock copied."""
    verdict = mscclpp.judge(mscclpp.read(PLANS / "reduce_tbg.json"))
    assert not verdict.ok and verdict.computes is None
    assert "gpu 0 threadblock 0 ops[7] get (group part 1 of 2)" in verdict.message
    assert "reads scratch chunk 1 (part 1 of 2) of rank 1" in verdict.message
    assert "gpu 1 threadblock 1 ops[0] copy (group part 2 of 2)" in verdict.message


# ---------------------------------------------------------------- each check, made to fire


@needs_plans
def test_a_signal_nobody_waits_for_is_refused():
    plan = _load("reduce.json")
    ops = plan["gpus"][1]["threadblocks"][0]["ops"]
    del ops[max(k for k, op in enumerate(ops) if op["name"] == "wait")]
    with pytest.raises(InputError, match=r"signals 2 time\(s\) per call but its peer waits 1 "
                                         r"time\(s\): the next call starts with 1 stale signal"):
        mscclpp.from_data(plan, "edited")


@needs_plans
def test_a_write_the_peer_does_not_wait_for_is_refused():
    """Without the nop before rank 0's last signal, its ``res`` (which writes rank 1's
    input) is not ordered before that signal: rank 1 may return while it is in flight."""
    plan = _load("reduce.json")
    ops = plan["gpus"][0]["threadblocks"][0]["ops"]
    last_signal = max(k for k, op in enumerate(ops) if op["name"] == "signal")
    assert ops[last_signal - 1]["name"] == "nop"
    del ops[last_signal - 1]
    with pytest.raises(InputError, match=r"ops\[9\] res: writes rank 1's input buffer, and "
                                         "nothing orders that before rank 1's call returns"):
        mscclpp.from_data(plan, "edited")


@needs_plans
def test_a_packet_read_nothing_writes_is_refused():
    plan = _load("transfer_pack.json")
    upkt = plan["gpus"][0]["threadblocks"][1]["ops"][0]
    upkt["src_buff"][0]["index"] = 0  # rank 0 waits for packets no peer sends there
    with pytest.raises(InputError, match="waits for packets in rank 0's scratch packet slot 0, "
                                         "which nothing writes in the call"):
        mscclpp.from_data(plan, "edited")


@needs_plans
def test_what_a_plan_computes_when_it_is_not_its_collective():
    """allreduce.json with rank 1 reducing only into itself (``rre`` for ``rres``): rank 1
    ends with the sum of everything, rank 0 with half of it: a reduce to rank 1."""
    plan = _load("allreduce.json")
    for tb in plan["gpus"][1]["threadblocks"]:
        for op in tb["ops"]:
            if op["name"] == "rres":
                op["name"], op["dst_buff"] = "rre", op["dst_buff"][:1]
    verdict = mscclpp.judge(mscclpp.from_data(plan, "edited"))
    assert not verdict.ok
    assert verdict.message.startswith("not a allreduce: it computes reduce on 2 ranks, 8 "
                                      "chunk(s) per rank, root 1")


@needs_plans
def test_an_unknown_operation_is_refused_as_the_loader_refuses_it():
    plan = _load("reduce.json")
    plan["gpus"][0]["threadblocks"][0]["ops"][0]["name"] = "memcpy"
    with pytest.raises(InputError, match=r"gpus\[0\].threadblocks\[0\].ops\[0\].name: 'memcpy' "
                                         "is not an operation MSCCL\\+\\+'s loader knows"):
        mscclpp.from_data(plan, "edited")


@needs_plans
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_plans_read_or_are_refused(data):
    """Edited anywhere (values replaced by hostile ones, keys or entries dropped or
    repeated), a fixture reads to a schedule or is refused with InputError, nothing else."""
    name = data.draw(st.sampled_from(sorted(PROVEN)))
    plan = data.draw(mutated(copy.deepcopy(_load(name))))
    try:
        sched = mscclpp.from_data(plan, "fuzzed")
    except InputError:
        return
    assert isinstance(sched, Schedule)
    mscclpp.judge(sched)
