"""Path discovery: which paths each machine offers, and hops that pin their route where it
is not the pair's cheapest."""

from __future__ import annotations

import pytest

from ccweave.errors import InputError, TopologyError
from ccweave.multipath import plan_p2p
from ccweave.multipath.paths import direct_path, find_paths, hop
from ccweave.simulate import simulate
from ccweave.topology import zoo
from ccweave.verify import verify

MB = 2**20


def described(machine: str, src: int, dst: int, **options) -> list[str]:
    return [p.describe() for p in find_paths(zoo.get(machine), src, dst, **options)]


def test_mist_offers_the_direct_nvlink_and_host_memory():
    """Relays through the other socket cross every link the host path does, so they go."""
    assert described("mist", 0, 1) == ["0 -> 1", "0 -> cpu0 -> 1"]


def test_cedar_offers_peer_relays_and_the_pcie_host_path():
    paths = described("cedar", 0, 1)
    assert paths[0] == "0 -> 1"
    assert {"0 -> [2] -> 1", "0 -> [3] -> 1", "0 -> cpu0 -> 1"} <= set(paths)


def test_kinds_and_relay_limit():
    topology = zoo.get("cedar")
    paths = find_paths(topology, 0, 1, max_relays=0)
    assert [p.kind for p in paths] == ["direct", "fabric"]
    direct = paths[0]
    assert direct.is_direct and direct.relays == () and direct.bandwidth == 50e9
    relay = next(p for p in find_paths(topology, 0, 1) if p.kind == "relay")
    assert len(relay.hops) == 2 and relay.src == 0 and relay.dst == 1


@pytest.mark.parametrize("machine", ["fully-connected:2", "switch:4", "ring:2"])
def test_one_route_machines_have_one_path(machine):
    assert described(machine, 0, 1) == [direct_path(zoo.get(machine), 0, 1).describe()]


def test_unrouted_pair_is_reached_through_relays_only():
    paths = find_paths(zoo.get("ring:4"), 0, 2)
    assert direct_path(zoo.get("ring:4"), 0, 2) is None
    assert {p.describe() for p in paths} == {"0 -> [1] -> 2", "0 -> [3] -> 2"}


def test_bad_ranks_are_refused():
    with pytest.raises(InputError, match="not a rank"):
        find_paths(zoo.get("mist"), 0, 9)
    with pytest.raises(InputError, match="two different"):
        find_paths(zoo.get("mist"), 1, 1)


def test_hops_pin_only_routes_that_are_not_the_cheapest():
    mist = zoo.get("mist")
    host = hop(mist, 0, 1, ("cpu0",))
    assert host.via == ("cpu0",) and host.bandwidth == 75e9
    assert host.links == (mist.link_id[(0, "cpu0")], mist.link_id[("cpu0", 1)])
    assert hop(mist, 0, 1, ()).via is None  # the direct link is the cheapest route
    assert hop(mist, 0, 1).links == mist.route(0, 1)
    with pytest.raises(TopologyError, match="no link"):
        hop(mist, 0, 1, ("cpu1",))


def test_a_host_staged_stripe_pins_its_route():
    """The planner's Mist schedule: part on the NVLink, part through host memory in
    pipelined pieces, each piece copied into host memory then out (staged); the pieces
    name their route, and both paths finish together."""
    mist = zoo.get("mist")
    plan = plan_p2p(mist, 0, 1, 64 * MB)
    schedule = plan.to_schedule()
    vias = [t.via for t in schedule.transfers]
    assert vias[0] is None and set(vias[1:]) == {("cpu0",)} and len(vias) > 2
    assert all(not t.deps for t in schedule.transfers)  # the stages order the pieces
    verify(schedule, mist)
    result = simulate(schedule, mist, 64 * MB)
    direct, host = plan.paths
    assert result.time_s == pytest.approx(plan.time_s)
    # the host path's pieces pipeline: far faster than its bytes copied in, then out
    assert result.time_s < 2 * host.share * 64 * MB / 75e9
    assert result.time_s == pytest.approx(direct.share * 64 * MB / 75e9, rel=0.03)
