"""Path discovery and per-transfer routes: which paths each machine offers, and that a
transfer named onto another route is simulated and checked on it."""

from __future__ import annotations

import pytest

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError, TopologyError
from ccweave.multipath import routes
from ccweave.multipath.paths import direct_path, find_paths
from ccweave.schedule import ScheduleBuilder
from ccweave.simulate import simulate
from ccweave.topology import zoo

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


def two_halves(via):
    """Half of a 0 -> 1 sendrecv on the cheapest route, half on route ``via``."""
    builder = ScheduleBuilder(Collective(Kind.SENDRECV, 4, 2, 0, 1))
    builder.copy(0, 1, (Buffer.INPUT, 0), (Buffer.OUTPUT, 0), 4)
    second = builder.copy(0, 1, (Buffer.INPUT, 4), (Buffer.OUTPUT, 4), 4)
    return routes.with_vias(builder.build("halves"), {second: via})


def test_a_named_route_is_simulated_on_its_links():
    mist = zoo.get("mist")
    schedule = two_halves(("cpu0",))
    routes.check(schedule, mist)
    both = routes.simulate(schedule, mist, 64 * MB).time_s
    shared = simulate(schedule, mist, 64 * MB).time_s  # the core: both on the NVLink
    assert both == pytest.approx(32 * MB / 75e9 + 1.4e-6, rel=1e-6)
    assert shared > 1.9 * both
    assert routes.vias(schedule) == {1: ("cpu0",)}


def test_bad_routes_are_named():
    mist = zoo.get("mist")
    with pytest.raises(TopologyError, match="no link"):
        routes.check(two_halves(("cpu1",)), mist)
    with pytest.raises(TopologyError, match="not fabric"):
        routes.check(two_halves(("nowhere",)), mist)
    assert routes.route_links(mist, 0, 1, ()) == (mist.link_id[(0, 1)],)
