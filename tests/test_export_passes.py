"""The export passes one by one: count splitting, lowering, fusion, threadblocks,
dependencies, instances, runtimes' size limits, plans."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter

import pytest

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError
from ccweave.export import check_xml, export_plan, from_xml, passes, threadblocks, to_xml
from ccweave.export.dependencies import infer
from ccweave.export.fusion import forwards, fuse
from ccweave.export.lanes import Reach, deal
from ccweave.export.lowering import lower, split_counts, transfer_order
from ccweave.export.msccl_spec import (
    MAX_CHANNELS,
    MAX_COUNT,
    MAX_NODES,
    MAX_STEPS,
    MAX_TBS_PER_CHANNEL,
)
from ccweave.export.msccl_xml import CONFIG_NAME, OPEN_MAX_BYTES, SCRATCH_MAX_BYTES
from ccweave.export.passes import fewest_elements
from ccweave.export.threadblocks import assign
from ccweave.plan import Plan, PlanEntry
from ccweave.schedule import Schedule, ScheduleBuilder, Transfer
from ccweave.synth import synthesize
from ccweave.topology import zoo
from ccweave.verify import check

I, O, S = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


def _steps(text: str, gpu: int = 0) -> list[list[dict[str, str]]]:
    root = ET.fromstring(text)
    return [[dict(step.attrib) for step in tb.findall("step")]
            for tb in root.findall("gpu")[gpu].findall("tb")]


def _chain(count: int = 1, hops: int = 3, reduce: bool = False):
    """Broadcast of ``count`` chunks down the chain 0 -> 1 -> ... -> hops."""
    builder = ScheduleBuilder(Collective(Kind.BROADCAST, hops + 1, count))
    builder.copy(0, 0, (I, 0), (O, 0), (hops + 1) * count)
    for rank in range(hops):
        builder.copy(rank, rank + 1, (O, 0), (O, 0), (hops + 1) * count)
    return builder.build("chain")


def test_counts_of_72_or_more_are_split_and_stay_proven():
    sched = _chain(count=40)  # 160 chunks per hop
    split = split_counts(sched)
    assert max(t.count for t in split.transfers) < MAX_COUNT
    assert check(split).ok
    text = to_xml(sched)
    assert max(int(s["cnt"]) for tb in _steps(text, 1) for s in tb) < MAX_COUNT
    assert check(from_xml(text)).ok


def test_a_forwarded_copy_fuses_into_rcs():
    steps = _steps(to_xml(_chain()), gpu=1)
    assert [s["type"] for tb in steps for s in tb] == ["rcs"]
    assert steps[0][0]["dstbuf"] == "o" and steps[0][0]["dstoff"] == "0"


def test_rrs_only_when_the_reduced_value_is_overwritten_by_a_copy():
    """Ring allreduce: the partial sums forwarded in the reduce-scatter are overwritten by
    the allgather, so they need not be stored (rrs); the last one is stored (rrcs)."""
    topo = zoo.get("switch:4")
    text = to_xml(synthesize(topo, "allreduce", "ring"))
    types = [s["type"] for tb in _steps(text) for s in tb]
    assert types.count("rrs") == 2 and types.count("rrcs") == 1
    reduce_scatter = to_xml(synthesize(topo, "reducescatter", "ring"))
    types = [s["type"] for tb in _steps(reduce_scatter) for s in tb]
    assert "rrs" not in types  # nothing overwrites the partial sums: stored, forwarded


def test_lowering_anchors_a_dependency_on_another_rank_through_its_own_deps():
    """2 -> 3 waits on 0 -> 1, which touches neither rank 2 nor 3: MSCCL cannot say that,
    so the wait goes to what 0 -> 1 waited on that involves them."""
    builder = ScheduleBuilder(Collective(Kind.ALLGATHER, 4))
    first = builder.copy(2, 2, (I, 0), (O, 2))
    middle = builder.copy(0, 1, (I, 0), (O, 0), after=[first])
    builder.copy(2, 3, (I, 0), (O, 2), after=[middle])
    program = lower(builder.build("x"))
    send = program.send_of[2]
    assert program.anchors[send] == {program.recv_of[first]}


def test_threadblocks_have_one_send_and_one_recv_peer_per_channel():
    sched = synthesize(zoo.get("switch:8"), "allreduce", "direct")
    program = fuse(lower(sched))
    layout = assign(program)
    for blocks in layout.tbs:
        for tb in blocks:
            for i in tb.instrs:
                instr = program.instrs[i]
                assert instr.send_peer in (-1, tb.send) and instr.recv_peer in (-1, tb.recv)
                assert instr.channel == tb.chan
        sends = [(tb.send, tb.chan) for tb in blocks if tb.send >= 0]
        assert len(sends) == len(set(sends))


def test_many_peers_spread_over_channels():
    """40 ranks: a rank sends to 39 peers; MSCCL allows 32 threadblocks with a send peer
    per channel, so connections spread over two channels by peer distance."""
    sched = synthesize(zoo.get("switch:40"), "alltoall", "direct")
    root = ET.fromstring(to_xml(sched))
    assert root.get("nchannels") == "2"
    for gpu in root.findall("gpu"):
        for chan in ("0", "1"):
            peers = [tb for tb in gpu.findall("tb") if tb.get("chan") == chan
                     and tb.get("send") != "-1"]
            assert len(peers) <= MAX_TBS_PER_CHANNEL
    assert check(from_xml(ET.tostring(root, encoding="unicode"))).ok


def test_extra_dependencies_become_nops_and_targets_signal():
    """A local reduction of what two threadblocks received waits on both: one nop."""
    builder = ScheduleBuilder(Collective(Kind.REDUCE, 3))
    builder.copy(2, 0, (I, 0), (O, 0), 3)
    builder.copy(1, 0, (I, 0), (S, 0), 3)
    builder.reduce(0, 0, (S, 0), (O, 0), 3)
    builder.reduce(0, 0, (I, 0), (O, 0), 3)
    text = to_xml(builder.build("fan-in"))
    steps = _steps(text)
    local = next(tb for tb in steps if any(s["type"] == "re" for s in tb))
    assert [s["type"] for s in local] == ["nop", "re", "re"]
    assert local[0]["depid"] != local[1]["depid"] and local[2]["depid"] == "-1"
    waited = {(s["depid"], s["deps"]) for tb in steps for s in tb if s["depid"] != "-1"}
    for tb_id, step in waited:
        assert steps[int(tb_id)][int(step)]["hasdep"] == "1"
    assert check(from_xml(text)).ok


def test_back_to_back_reductions_with_different_counts_are_kept_apart():
    """The runtime fuses consecutive re steps into one destination with the first cnt."""
    builder = ScheduleBuilder(Collective(Kind.ALLREDUCE, 1, 4))
    builder.copy(0, 0, (I, 0), (S, 0), 4)
    builder.copy(0, 0, (I, 0), (O, 0), 4)
    builder.reduce(0, 0, (S, 0), (O, 0), 2)
    builder.reduce(0, 0, (S, 0), (O, 0), 1)
    program = fuse(lower(builder.build("x")))
    layout = assign(program)
    steps = [s for tb in infer(program, layout)[0] for s in tb]  # every threadblock
    codes = [(program.instrs[s.instr].code, s.hasdep) for s in steps if s.instr is not None]
    assert ("re", True) in codes


def test_instances_multiply_chunks_and_channels():
    sched = synthesize(zoo.get("switch:4"), "allgather", "ring")
    root = ET.fromstring(to_xml(sched, instances=3))
    assert root.get("nchunksperloop") == str(3 * sched.collective.total_chunks)
    assert root.get("nchannels") == str(3 * sched.num_channels)
    assert check(from_xml(ET.tostring(root, encoding="unicode"))).ok


@pytest.mark.parametrize(("runtime", "scratch", "high"),
                         [("msccl", False, OPEN_MAX_BYTES), ("msccl", True, SCRATCH_MAX_BYTES),
                          ("azure", False, 0), ("azure", True, 0)])
def test_open_size_ranges_as_each_runtime_reads_them(runtime, scratch, high):
    kind = "alltoall" if scratch else "allgather"
    sched = synthesize(zoo.get("switch:4"), kind, "ring")
    assert bool(sched.scratch_chunks) is scratch
    root = ET.fromstring(to_xml(sched, runtime=runtime))
    assert (root.get("minBytes"), root.get("maxBytes")) == ("0", str(high))
    assert (root.get("inplace"), root.get("outofplace")) == ("0", "1")


def test_collectives_a_runtime_lacks_are_custom_or_refused():
    sched = synthesize(zoo.get("switch:4"), "gather", "binomial", root=2)
    root = ET.fromstring(to_xml(sched))  # microsoft/msccl: a custom collective
    assert (root.get("coll"), root.get("collective"), root.get("root")) == \
        ("custom", "gather", "2")
    assert root.find("gpu").get("i_chunks") == root.get("nchunksperloop")
    back = from_xml(ET.tostring(root, encoding="unicode"))
    assert back.collective == sched.collective and check(back).ok
    assert ET.fromstring(to_xml(sched, runtime="azure")).get("coll") == "gather"
    rs = synthesize(zoo.get("switch:4"), "reducescatter", "ring")
    assert ET.fromstring(to_xml(rs)).get("coll") == "reduce_scatter"
    assert ET.fromstring(to_xml(rs, runtime="azure")).get("coll") == "reducescatter"


def test_sendrecv_keeps_root_and_peer():
    sched = synthesize(zoo.get("switch:4"), "sendrecv", "direct", root=1, peer=3)
    back = from_xml(to_xml(sched))
    assert (back.collective.root, back.collective.peer) == (1, 3) and check(back).ok


def test_bad_options_are_input_errors():
    sched = _chain()
    for options in ({"proto": "LL256"}, {"instances": 0}, {"runtime": "nccl"},
                    {"min_bytes": 10, "max_bytes": 10}):
        with pytest.raises(InputError):
            to_xml(sched, **options)


def _plan(entries: int) -> Plan:
    topo = zoo.get("switch:4")
    names = ["direct", "ring", "recursive-doubling", "direct", "ring"][:entries]
    bounds = [0, 2**16, 2**20, 2**24, 2**28][:entries]
    return Plan(tuple(PlanEntry(low, bounds[k + 1] if k + 1 < entries else None,
                                synthesize(topo, "allreduce", name))
                      for k, (low, name) in enumerate(zip(bounds, names))), "auto")


def test_a_plan_exports_one_xml_per_range_and_the_msccl_config(tmp_path):
    files = export_plan(_plan(3), tmp_path)
    assert [f.name for f in files] == ["auto_0.xml", "auto_1.xml", "auto_2.xml", CONFIG_NAME]
    config = ET.parse(files[-1]).getroot()
    loads = [(e.get("minbytes"), e.get("maxbytes"), e.get("proto")) for e in config]
    assert loads == [("0", str(2**16), "Simple"), (str(2**16), str(2**20), "Simple"),
                     (str(2**20), "-1", "Simple")]
    assert all(e.get("path") == str(f.resolve()) for e, f in zip(config, files))
    ranges = [(ET.parse(f).getroot().get("minBytes"), ET.parse(f).getroot().get("maxBytes"))
              for f in files[:-1]]
    assert ranges == [("0", str(2**16)), (str(2**16), str(2**20)),  # scratch: 1 GiB
                      (str(2**20), str(SCRATCH_MAX_BYTES))]
    for f in files[:-1]:
        assert check_xml(ET.parse(f), "msccl") == [] and check(from_xml(f.read_text())).ok


def test_a_plan_for_the_azure_executor_is_a_directory_of_algorithms(tmp_path):
    files = export_plan(_plan(5), tmp_path, runtime="azure")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f.name for f in files]
    highs = [ET.parse(f).getroot().get("maxBytes") for f in files]
    assert highs == [str(2**16 - 1), str(2**20 - 1), str(2**24 - 1), str(2**28 - 1), "0"]


def test_microsoft_msccl_loads_at_most_four_algorithms(tmp_path):
    with pytest.raises(InputError, match="at most 4 algorithms"):
        export_plan(_plan(5), tmp_path)


def _independent_allgather(chunks: int):
    """2-rank allgather whose ``chunks`` copies per rank and peer are independent."""
    builder = ScheduleBuilder(Collective(Kind.ALLGATHER, 2, chunks))
    for rank in range(2):
        for i in range(chunks):
            for dst in (rank, 1 - rank):
                builder.copy(rank, dst, (I, i), (O, rank * chunks + i))
    return builder.build("wide")


def test_a_schedule_no_lanes_can_fit_is_refused_after_one_attempt(monkeypatch):
    """Each GPU needs a step per local copy and per send: past the parser's 4096 elements
    whatever the lanes, so the export refuses without trying lanes (each attempt lowers
    the whole schedule; a dgx1 trees allreduce of 112,576 transfers took minutes)."""
    chunks = (MAX_NODES - 2) // 2
    sched = _independent_allgather(chunks)
    assert fewest_elements(sched) > MAX_NODES
    attempts = []
    real = passes._attempt
    monkeypatch.setattr(passes, "_attempt", lambda *a: attempts.append(a[4]) or real(*a))
    with pytest.raises(InputError, match="cannot export 'wide' for MSCCL"):
        to_xml(sched)
    assert attempts == [1]


def test_a_connection_gets_no_more_lanes_than_msccl_has_channels(monkeypatch):
    """266 independent sends to one peer: the lanes dealt to the connection are capped at
    MSCCL's 32 channels from the first attempt, so dealing stays linear in transfers."""
    caps = []
    real = passes.deal
    monkeypatch.setattr(passes, "deal", lambda *a: caps.append(a[4]) or real(*a))
    to_xml(_independent_allgather(MAX_STEPS + 10))
    assert caps and all(cap is not None and cap <= MAX_CHANNELS for cap in caps)


def _awaited_both_ways(ranks: int, lanes: int, channels: bool = True) -> Schedule:
    """Each rank sends ``lanes`` chunks at once to every other (each on a channel of its
    own, or all on channel 0 with ``channels=False``); what arrives is copied on locally
    (a step waits on each receive) and each sent slot is overwritten once sent (a step
    waits on each send): every peer threadblock is waited on."""
    per = (ranks - 1) * lanes
    rows: list[Transfer] = []
    for r in range(ranks):
        for k, p in enumerate(q for q in range(ranks) if q != r):
            back = [q for q in range(ranks) if q != p].index(r)
            for c in range(lanes):
                sent = len(rows)
                rows.append(Transfer(r, p, S, k * lanes + c, S, per + back * lanes + c,
                                     channel=c if channels else 0))
                rows.append(Transfer(p, p, S, per + back * lanes + c, O, back * lanes + c,
                                     deps=(sent,)))
                rows.append(Transfer(r, r, I, k * lanes + c, S, k * lanes + c,
                                     deps=(sent,)))
    return Schedule(Collective(Kind.ALLGATHER, ranks, per), tuple(rows), 2 * per)


def test_waited_on_threadblocks_past_what_a_wait_can_name_share_send_and_receive_peers():
    """3 peers x 2 directions x 24 channels = 144 threadblocks, all waited on, within
    MSCCL's 216 but past the 128 a wait can name: send and receive peers share
    threadblocks (72), as they do past 216, instead of the export being refused."""
    sched = _awaited_both_ways(4, 24)
    text = to_xml(sched)
    blocks = ET.fromstring(text).findall("gpu")[0].findall("tb")
    assert len(blocks) <= 128
    assert sum(tb.get("send") != "-1" and tb.get("recv") != "-1" for tb in blocks) == 72
    assert len(from_xml(text).transfers) == len(sched.transfers)


def test_lanes_held_for_a_limit_are_the_most_that_fit_and_say_which_limit():
    """5 peers, 28 chunks each way at once on one schedule channel: a lane each would
    need 140 threadblocks waited on (send and receive peers paired), past the 128 a
    wait can name. The lanes are held to the most that fit (found by bisection, not
    only by halving), and the lowering says which limit held them, which
    benchmarks/gpu_stacks.py prints (it read 'within MSCCL's limits' before)."""
    sched = split_counts(_awaited_both_ways(6, 28, channels=False))
    held = passes.run(sched)
    assert held.overflow == ""
    assert "a wait on threadblock 128 or later" in held.held_by
    assert passes._attempt(sched, *_dealing(sched), held.capped + 1, None).overflow
    assert passes.run(_chain(count=4)).held_by == ""


def _dealing(sched: Schedule):
    order = transfer_order(sched.transfers)
    return order, Reach(sched.transfers, order), forwards(sched, order)


def test_transfers_past_a_connections_lanes_are_dealt_round_them():
    """12 sends each way that may all run at once, 3 lanes a connection: each lane takes 4
    (one after another), not 10 piled on the first lane behind 1 each on the others
    (dgx-h100's flow alltoall read back 23x its unrouted time at 1 MB that way)."""
    sched = _independent_allgather(12)
    dealt = deal(sched, *_dealing(sched), 3)
    per_lane = Counter((t.src, t.channel) for t in dealt.schedule.transfers if not t.is_local)
    assert sorted(per_lane.values()) == [4] * 6


def test_local_steps_past_the_room_are_dealt_round_the_threadblocks():
    """12 local copies that may all run at once, room for 3 local threadblocks: each takes
    4 (one after another), not 10 piled on the first behind 1 each on the others."""
    builder = ScheduleBuilder(Collective(Kind.ALLGATHER, 1, 12))
    for i in range(12):
        builder.copy(0, 0, (I, i), (O, i))
    program = lower(builder.build("local"))
    order = transfer_order(program.schedule.transfers)
    local = [i for i in program.live() if program.instrs[i].send_peer < 0
             and program.instrs[i].recv_peer < 0]
    blocks = threadblocks._local_blocks(program, local, Reach(program.schedule.transfers,
                                                                order), 3)
    assert sorted(len(tb.instrs) for tb in blocks) == [4, 4, 4]
