"""The simulator: exact alpha-beta cases, max-min sharing, errors, and properties checked
on random topologies and schedules against a slow reference simulator."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError, TopologyError
from ccweave.schedule import Schedule, ScheduleBuilder, Transfer
from ccweave.simulate import SimResult, simulate
from ccweave.topology.model import Link, NodeKind, Topology
from tests.strategies import topology_and_schedule

GB = 1e9
US = 1e-6
SIZE = 2**20


def duplex(a, b, bandwidth, alpha=0.0) -> list[Link]:
    return [Link(a, b, bandwidth, alpha), Link(b, a, bandwidth, alpha)]


def star(ranks: int, bandwidth: float = 10 * GB, alpha: float = 0.0,
         down: dict[int, float] | None = None) -> Topology:
    """Ranks joined only through switch ``sw``; ``down`` overrides sw->rank bandwidths."""
    links = []
    for rank in range(ranks):
        links.append(Link(rank, "sw", bandwidth, alpha))
        links.append(Link("sw", rank, (down or {}).get(rank, bandwidth), alpha))
    return Topology("star", ranks, tuple(links), {"sw": NodeKind.SWITCH})


def independent(ranks: int, pairs: list[tuple[int, int]], counts: list[int] | None = None,
                chunks_per_rank: int = 4) -> Schedule:
    """Transfers with no deps: each writes its own output slot."""
    builder = ScheduleBuilder(Collective(Kind.ALLTOALL, ranks, chunks_per_rank))
    slot = 0
    for number, (src, dst) in enumerate(pairs):
        count = counts[number] if counts else 1
        builder.copy(src, dst, (Buffer.INPUT, slot), (Buffer.OUTPUT, slot), count)
        slot += count
    schedule = builder.build("independent")
    assert all(not t.deps for t in schedule.transfers)
    return schedule


def chunk_of(schedule: Schedule, size: float = SIZE) -> float:
    return schedule.collective.chunk_bytes(size)


# ----------------------------------------------------------------- exact cases


def test_one_transfer_takes_alpha_plus_bytes_over_bandwidth():
    topo = Topology("pair", 2, (Link(0, 1, 10 * GB, 2 * US),))
    schedule = independent(2, [(0, 1)])
    result = simulate(schedule, topo, SIZE)
    expected = 2 * US + chunk_of(schedule) / (10 * GB)
    assert result.time_s == pytest.approx(expected, rel=1e-12)
    assert result.ready[0] == 0 and result.start[0] == pytest.approx(2 * US)
    assert result.link_bytes[0] == pytest.approx(chunk_of(schedule))
    assert result.link_busy_s[0] == pytest.approx(chunk_of(schedule) / (10 * GB))
    assert result.algbw == pytest.approx(SIZE / expected)


def test_two_flows_sharing_a_link_each_take_twice_as_long():
    topo = Topology("pair", 2, (Link(0, 1, 10 * GB, 1 * US),))
    schedule = independent(2, [(0, 1), (0, 1)])
    result = simulate(schedule, topo, SIZE)
    bytes_ = chunk_of(schedule)
    np.testing.assert_allclose(result.finish, 1 * US + 2 * bytes_ / (10 * GB), rtol=1e-12)
    assert result.link_utilization[0] == pytest.approx(
        2 * bytes_ / (10 * GB * result.time_s))


def test_a_flow_through_a_switch_occupies_both_links():
    topo = star(3, alpha=0.5 * US)
    schedule = independent(3, [(0, 1)])
    result = simulate(schedule, topo, SIZE)
    bytes_ = chunk_of(schedule)
    assert result.time_s == pytest.approx(2 * 0.5 * US + bytes_ / (10 * GB), rel=1e-12)
    up, down = topo.link_id[(0, "sw")], topo.link_id[("sw", 1)]
    assert result.link_bytes[up] == result.link_bytes[down] == pytest.approx(bytes_)
    assert result.link_busy_s[up] == pytest.approx(bytes_ / (10 * GB))
    others = [i for i in range(len(topo.links)) if i not in (up, down)]
    assert not result.link_bytes[others].any() and not result.link_busy_s[others].any()
    assert [name for name, _ in result.busiest_links(2)] == ["0->sw", "sw->1"]


@pytest.mark.parametrize("pairs", [[(0, 1), (2, 1)], [(0, 1), (0, 2)]])
def test_flows_sharing_one_switch_link_split_it(pairs):
    topo = star(3)
    schedule = independent(3, pairs)
    result = simulate(schedule, topo, SIZE)
    np.testing.assert_allclose(result.finish, 2 * chunk_of(schedule) / (10 * GB), rtol=1e-12)


def test_max_min_gives_the_spare_of_a_flow_bottlenecked_elsewhere_to_the_other():
    # both leave through 0->sw (10 GB/s); 0->2 is held to 2.5 GB/s by sw->2, so 0->1 gets 7.5
    topo = star(3, down={2: 2.5 * GB})
    schedule = independent(3, [(0, 2), (0, 1)])
    result = simulate(schedule, topo, SIZE)
    bytes_ = chunk_of(schedule)
    assert result.finish[0] == pytest.approx(bytes_ / (2.5 * GB), rel=1e-12)
    assert result.finish[1] == pytest.approx(bytes_ / (7.5 * GB), rel=1e-12)


def test_a_flow_joining_late_halves_the_rate_of_the_one_running():
    # X: 2->0 (B), then Y: 0->1 after X (B); A: 0->1 independent (2B). A runs alone for
    # B/b, then shares with Y at b/2: both finish at 3B/b.
    topo = Topology("v", 3, (Link(0, 1, 10 * GB), Link(2, 0, 10 * GB)))
    builder = ScheduleBuilder(Collective(Kind.ALLTOALL, 3, 4))
    builder.copy(2, 0, (Buffer.INPUT, 0), (Buffer.OUTPUT, 0))
    builder.copy(0, 1, (Buffer.OUTPUT, 0), (Buffer.OUTPUT, 0))
    builder.copy(0, 1, (Buffer.INPUT, 4), (Buffer.OUTPUT, 4), count=2)
    schedule = builder.build("late")
    assert schedule.transfers[1].deps == (0,) and schedule.transfers[2].deps == ()
    result = simulate(schedule, topo, SIZE)
    unit = chunk_of(schedule) / (10 * GB)
    np.testing.assert_allclose(result.finish, [unit, 3 * unit, 3 * unit], rtol=1e-12)
    last = result.critical_path[-1]
    assert last.stretch == pytest.approx(unit, rel=1e-9)


def test_a_dependency_chain_adds_up():
    topo = Topology("line", 3, (*duplex(0, 1, 10 * GB, 1 * US), *duplex(1, 2, 5 * GB, 3 * US)))
    builder = ScheduleBuilder(Collective(Kind.ALLGATHER, 3))
    builder.copy(0, 1, (Buffer.INPUT, 0), (Buffer.OUTPUT, 0))
    builder.copy(1, 2, (Buffer.OUTPUT, 0), (Buffer.OUTPUT, 0))
    schedule = builder.build("chain")
    result = simulate(schedule, topo, SIZE)
    bytes_ = chunk_of(schedule)
    first = 1 * US + bytes_ / (10 * GB)
    assert result.time_s == pytest.approx(first + 3 * US + bytes_ / (5 * GB), rel=1e-12)
    assert [step.transfer for step in result.critical_path] == [0, 1]
    assert result.critical_path[1].ready == pytest.approx(first)
    assert all(step.stretch == pytest.approx(0, abs=1e-15) for step in result.critical_path)


def test_local_copies_use_local_bandwidth_shared_per_rank():
    links = tuple(duplex(0, 1, 10 * GB))
    topo = Topology("pair", 2, links, local_bandwidth=2 * GB)
    schedule = independent(2, [(0, 0), (0, 0), (1, 1)])
    result = simulate(schedule, topo, SIZE)
    bytes_ = chunk_of(schedule)
    np.testing.assert_allclose(result.finish, [2 * bytes_ / (2 * GB)] * 2 + [bytes_ / (2 * GB)],
                               rtol=1e-12)
    assert not result.link_bytes.any()


def ring(ranks: int, bandwidth: float, alpha: float) -> Topology:
    links = [lk for r in range(ranks) for lk in duplex(r, (r + 1) % ranks, bandwidth, alpha)]
    return Topology(f"ring:{ranks}", ranks, tuple(links))


def ring_allgather(ranks: int) -> Schedule:
    builder = ScheduleBuilder(Collective(Kind.ALLGATHER, ranks), in_place=True)
    for step in range(ranks - 1):
        for rank in range(ranks):
            chunk = (rank - step) % ranks
            builder.copy(rank, (rank + 1) % ranks, (Buffer.OUTPUT, chunk), (Buffer.OUTPUT, chunk))
    return builder.build("ring")


def test_ring_allgather_on_a_bidirectional_ring_matches_the_closed_form():
    ranks, bandwidth, alpha, size = 8, 25 * GB, 0.7 * US, 64 * SIZE
    result = simulate(ring_allgather(ranks), ring(ranks, bandwidth, alpha), size)
    expected = (ranks - 1) * (alpha + size / (ranks * bandwidth))
    assert result.time_s == pytest.approx(expected, rel=1e-12)
    assert result.busbw == pytest.approx(result.algbw * (ranks - 1) / ranks)
    assert len(result.critical_path) == ranks - 1
    # one direction of every duplex pair carried (N-1) chunks, the other none
    assert sorted(set(np.round(result.link_bytes / (size / ranks), 9))) == [0, ranks - 1]


def test_alltoall_through_one_switch_shares_every_port_evenly():
    ranks = 6
    pairs = [(s, d) for s in range(ranks) for d in range(ranks) if s != d]
    schedule = independent(ranks, pairs, chunks_per_rank=ranks)
    result = simulate(schedule, star(ranks, alpha=1 * US), SIZE)
    expected = 2 * US + (ranks - 1) * chunk_of(schedule) / (10 * GB)
    np.testing.assert_allclose(result.finish, expected, rtol=1e-12)
    np.testing.assert_allclose(result.link_utilization, result.link_busy_s / result.time_s)


def test_zero_bytes_and_zero_alpha_work():
    schedule = ring_allgather(4)
    lat = simulate(schedule, ring(4, 10 * GB, 1 * US), 0)
    assert lat.time_s == pytest.approx(3 * US)
    assert not lat.link_bytes.any() and not lat.link_busy_s.any()
    nothing = simulate(schedule, ring(4, 10 * GB, 0.0), 0)
    assert nothing.time_s == 0 and nothing.algbw == 0 and nothing.busbw == 0
    assert not nothing.link_utilization.any()
    free = simulate(schedule, ring(4, 10 * GB, 0.0), SIZE)
    assert free.time_s == pytest.approx(3 * SIZE / 4 / (10 * GB))


def test_an_empty_schedule_takes_no_time():
    empty = Schedule(Collective(Kind.ALLGATHER, 2), ())
    result = simulate(empty, ring(2, GB, US), SIZE)
    assert result.time_s == 0 and result.critical_path == () and len(result.finish) == 0


def test_rank_count_mismatch_is_a_topology_error():
    with pytest.raises(TopologyError, match=r"4 ranks.*has 3"):
        simulate(ring_allgather(4), ring(3, GB, US), SIZE)


def test_a_transfer_without_a_route_is_named():
    line = Topology("line", 3, (*duplex(0, 1, GB), *duplex(1, 2, GB)))
    schedule = independent(3, [(0, 1), (0, 2)])
    with pytest.raises(TopologyError, match=r"transfer 1 \(0 -> 2\).*relay"):
        simulate(schedule, line, SIZE)


def test_a_transfer_naming_no_rank_is_named():
    bad = Schedule(Collective(Kind.ALLGATHER, 2),
                   (Transfer(0, 5, Buffer.INPUT, 0, Buffer.OUTPUT, 0),))
    with pytest.raises(TopologyError, match="transfer 0"):
        simulate(bad, ring(2, GB, US), SIZE)


@pytest.mark.parametrize("deps", [[(1,), (0,)], [(), (7,)], [(), (-1,)]])
def test_cycles_and_dangling_deps_are_input_errors(deps):
    transfers = tuple(Transfer(0, 1, Buffer.INPUT, 0, Buffer.OUTPUT, i, deps=d)
                      for i, d in enumerate(deps))
    with pytest.raises(InputError, match="transfer"):
        simulate(Schedule(Collective(Kind.ALLGATHER, 2), transfers), ring(2, GB, US), SIZE)


def test_a_negative_count_is_an_input_error():
    bad = Schedule(Collective(Kind.ALLGATHER, 2),
                   (Transfer(0, 1, Buffer.INPUT, 0, Buffer.OUTPUT, 0, count=-1),))
    with pytest.raises(InputError, match="transfer 0 moves -1 chunks"):
        simulate(bad, ring(2, GB, US), SIZE)


@pytest.mark.parametrize("size", [-1, math.inf, math.nan, "1MB"])
def test_bad_sizes_are_input_errors(size):
    with pytest.raises(InputError, match="size_bytes"):
        simulate(ring_allgather(2), ring(2, GB, US), size)


def test_ring_allreduce_at_scale_matches_the_closed_form():
    ranks, bandwidth, alpha, size = 48, 50 * GB, 0.5 * US, 256 * SIZE
    builder = ScheduleBuilder(Collective(Kind.ALLREDUCE, ranks), in_place=True)
    for phase in (builder.reduce, builder.copy):
        shift = 0 if phase == builder.reduce else 1
        for step in range(ranks - 1):
            for rank in range(ranks):
                chunk = (rank + shift - step) % ranks
                phase(rank, (rank + 1) % ranks, (Buffer.OUTPUT, chunk), (Buffer.OUTPUT, chunk))
    result = simulate(builder.build("ring"), ring(ranks, bandwidth, alpha), size)
    expected = 2 * (ranks - 1) * (alpha + size / (ranks * bandwidth))
    assert result.time_s == pytest.approx(expected, rel=1e-12)
    assert "ring:48" in repr(result)


# ------------------------------------------------------------ random schedules


def ideal(schedule: Schedule, topo: Topology, size: float) -> np.ndarray:
    """Each transfer alone on an idle machine: route alpha + bytes / bottleneck."""
    chunk = chunk_of(schedule, size)
    return np.array([(0.0 if t.is_local else topo.route_alpha(t.src, t.dst))
                     + t.count * chunk / topo.route_bandwidth(t.src, t.dst)
                     for t in schedule.transfers])


def resources(topo: Topology, transfer: Transfer) -> tuple[int, ...]:
    if transfer.is_local:
        return (len(topo.links) + transfer.src,)
    return topo.route(transfer.src, transfer.dst)


def reference(schedule: Schedule, topo: Topology, size: float) -> np.ndarray:
    """Finish times by a slow, plain simulator: at every event, recompute max-min rates
    of every active flow from scratch by progressive filling, then jump to the next event."""
    transfers = schedule.transfers
    chunk = chunk_of(schedule, size)
    capacity = [*topo.bandwidths, *[topo.local_bandwidth] * topo.num_ranks]
    left = {i: t.count * chunk for i, t in enumerate(transfers)}
    start: dict[int, float] = {}
    finish: dict[int, float] = {}
    now = 0.0
    while len(finish) < len(transfers):
        changed = True
        while changed:  # settle everything that happens at `now`
            changed = False
            for i, t in enumerate(transfers):
                if i not in start and all(d in finish for d in t.deps):
                    ready = max((finish[d] for d in t.deps), default=0.0)
                    alpha = 0.0 if t.is_local else topo.route_alpha(t.src, t.dst)
                    start[i], changed = ready + alpha, True
                if i in start and i not in finish and start[i] <= now and left[i] <= 0:
                    finish[i], changed = now, True
        if len(finish) == len(transfers):
            break
        active = [i for i in start if i not in finish and start[i] <= now]
        rates = fair_rates({i: resources(topo, transfers[i]) for i in active}, capacity)
        pending = [start[i] for i in start if start[i] > now]
        ends = [now + left[i] / rates[i] for i in active]
        assert pending or ends, "reference simulator stuck"
        then = min(pending + ends)
        for i in active:
            left[i] = 0.0 if now + left[i] / rates[i] <= then else left[i] - rates[i] * (then - now)
        now = then
    return np.array([finish[i] for i in range(len(transfers))])


def fair_rates(routes: dict[int, tuple[int, ...]], capacity: list[float]) -> dict[int, float]:
    spare = list(capacity)
    rates: dict[int, float] = {}
    while len(rates) < len(routes):
        users: dict[int, list[int]] = {}
        for flow, links in routes.items():
            if flow not in rates:
                for link in links:
                    users.setdefault(link, []).append(flow)
        link = min(users, key=lambda k: spare[k] / len(users[k]))
        share = spare[link] / len(users[link])
        for flow in users[link]:
            rates[flow] = share
            for other in routes[flow]:
                spare[other] -= share
    return rates


def check_invariants(result: SimResult, schedule: Schedule, topo: Topology) -> None:
    rel = 1e-9
    alone = ideal(schedule, topo, result.size_bytes)
    assert result.time_s == pytest.approx(result.finish.max())
    assert np.all(result.finish - result.ready >= alone * (1 - rel) - 1e-18)
    assert np.all(result.finish >= result.start) and np.all(result.start >= result.ready)
    for index, transfer in enumerate(schedule.transfers):
        alpha = 0.0 if transfer.is_local else topo.route_alpha(transfer.src, transfer.dst)
        latest = max((result.finish[d] for d in transfer.deps), default=0.0)
        assert result.ready[index] == pytest.approx(latest, abs=1e-18)
        assert result.start[index] >= latest + alpha - 1e-15
    slack = 1 + rel
    assert np.all(result.link_bytes <= topo.bandwidths * result.time_s * slack + 1e-6)
    assert np.all(result.link_bytes <= topo.bandwidths * result.link_busy_s * slack + 1e-6)
    assert np.all(result.link_busy_s <= result.time_s * slack)
    path = result.critical_path
    assert path[-1].finish == result.time_s and path[0].ready == 0
    for before, after in pairwise(path):
        assert after.ready == before.finish
        assert before.transfer in schedule.transfers[after.transfer].deps
    assert all(step.stretch >= 0 for step in path)


@settings(max_examples=80, deadline=None)
@given(topology_and_schedule(), st.sampled_from([0, 1000, SIZE, 2**30]))
def test_random_schedules_keep_the_invariants(workload, size):
    topo, schedule = workload
    result = simulate(schedule, topo, size)
    check_invariants(result, schedule, topo)
    expected_bytes = np.zeros(len(topo.links))
    for transfer in schedule.transfers:
        if not transfer.is_local:
            route = list(topo.route(transfer.src, transfer.dst))
            expected_bytes[route] += transfer.count * chunk_of(schedule, size)
    np.testing.assert_allclose(result.link_bytes, expected_bytes, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(topology_and_schedule(), st.sampled_from([1000, SIZE, 2**30]))
def test_random_schedules_match_the_reference_simulator(workload, size):
    topo, schedule = workload
    result = simulate(schedule, topo, size)
    np.testing.assert_allclose(result.finish, reference(schedule, topo, size), rtol=1e-7,
                               atol=1e-15)


@settings(max_examples=60, deadline=None)
@given(topology_and_schedule(), st.integers(0, 2**24), st.floats(1.0, 64.0))
def test_time_is_monotone_in_size(workload, size, factor):
    topo, schedule = workload
    small = simulate(schedule, topo, size).time_s
    assert simulate(schedule, topo, size * factor).time_s >= small * (1 - 1e-9)


def test_the_benchmark_runs_and_reports_json():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "simulator.py"
    done = subprocess.run([sys.executable, str(script), "--ranks", "8", "--repeat", "1",
                           "--json"], capture_output=True, text=True, check=True, timeout=120)
    row = json.loads(done.stdout)
    assert row["transfers"] == 2 * 7 * 8 and row["transfers_per_s"] > 0
    assert row["simulated_time_s"] == pytest.approx(row["closed_form_s"], rel=1e-12)


def test_a_pinned_route_is_taken_instead_of_the_cheapest():
    """Mist: GPU0 -> GPU1 over the direct NVLink and, pinned, through the host at once; the
    host path stages its bytes in host memory (in, then out)."""
    from ccweave.topology import zoo
    from ccweave.verify import check

    mist = zoo.get("mist")
    builder = ScheduleBuilder(Collective(Kind.SENDRECV, 4, 1, root=0, peer=1))
    builder.add(0, 1, Buffer.INPUT, 0, Buffer.OUTPUT, 0, 2)
    builder.add(0, 1, Buffer.INPUT, 2, Buffer.OUTPUT, 2, 2, via=("cpu0",))
    both = builder.build("two paths")
    size = 2**30
    assert check(both, mist).ok
    alone = simulate(both, mist, size).time_s
    staging = mist.cost.staging_latency  # each copy into or out of host memory
    assert alone == pytest.approx(2 * (size / 2 / 75e9 + 0.7e-6 + staging), rel=1e-6)
    bad = ScheduleBuilder(Collective(Kind.SENDRECV, 4, 1, root=0, peer=1))
    bad.add(0, 1, Buffer.INPUT, 0, Buffer.OUTPUT, 0, 4, via=("cpu1",))
    problem = check(bad.build("bad"), mist).problems[0]
    assert problem.kind.value == "no_route" and "no link 0 -> cpu1" in problem.message
    with pytest.raises(TopologyError, match="no link 0 -> cpu1"):
        simulate(bad.build("bad"), mist, size)
