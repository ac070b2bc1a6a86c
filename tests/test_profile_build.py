"""Topologies from profiles: flat (direct, switch or mesh) and a base with measured figures;
the raw profile's JSON round trip."""

from __future__ import annotations

import pytest

from ccweave.errors import InputError
from ccweave.profile import Curve, Profile, flat, override
from ccweave.profile.build import warnings
from ccweave.profile.result import CopyFigure, PairFigure
from ccweave.topology import io as topology_io
from ccweave.topology import zoo

SIZES = [4096 * 2**k for k in range(12)]


def curve(alpha: float, bw: float) -> Curve:
    return Curve.of(SIZES, [alpha + s / bw for s in SIZES])


def profile(world: int, bw, alpha: float = 10e-6, copies=(), nodes=None) -> Profile:
    """``bw(a, b)`` gives each pair's bandwidth in bytes/s."""
    pairs = tuple(PairFigure(a, b, curve(alpha, bw(a, b)))
                  for a in range(world) for b in range(a + 1, world))
    return Profile(world, "gloo", nodes or (tuple(range(world)),), pairs, tuple(copies))


def test_two_ranks_get_one_direct_link_each_way():
    topo = flat(profile(2, lambda a, b: 1e8))
    assert topo.num_ranks == 2 and not topo.fabric
    assert topo.route_bandwidth(0, 1) == pytest.approx(1e8)
    assert topo.route_alpha(1, 0) == pytest.approx(10e-6)
    assert topo.groups["node"] == ((0, 1),)


def test_alike_pairs_share_a_switch_with_the_measured_route_cost():
    topo = flat(profile(4, lambda a, b: 5e9 * (1.05 if a == 0 else 1.0)))
    assert "switch" in topo.fabric
    assert topo.route_bandwidth(2, 3) == pytest.approx(5.125e9)  # the median pair
    assert topo.route_alpha(2, 3) == pytest.approx(10e-6)


def test_unlike_pairs_keep_their_own_figures():
    topo = flat(profile(3, lambda a, b: 2e9 if 2 in (a, b) else 8e9), name="lab")
    assert topo.name == "lab" and not topo.fabric
    assert topo.route_bandwidth(0, 1) == pytest.approx(8e9)
    assert topo.route_bandwidth(2, 0) == pytest.approx(2e9)


def test_flat_topology_is_a_file_synth_takes(tmp_path):
    path = tmp_path / "p.json"
    topology_io.write(flat(profile(4, lambda a, b: 1e9 + 1e8 * (a + b))), path)
    from ccweave.compare import build_verified

    sched = build_verified(topology_io.load(path), "allgather", "ring")
    assert sched.num_ranks == 4


def test_override_keeps_structure_and_finds_the_slow_rank():
    base = zoo.get("switch:4")  # 50 GiB/s per rank into one switch
    slow = override(base, profile(4, lambda a, b: 10e9 if 3 in (a, b) else 40e9))
    assert set(slow.fabric) == set(base.fabric) and len(slow.links) == len(base.links)
    assert slow.route_bandwidth(0, 1) == pytest.approx(40e9)
    assert slow.route_bandwidth(3, 1) == pytest.approx(10e9)
    assert slow.route_bandwidth(1, 3) == pytest.approx(10e9)
    assert slow.route_alpha(0, 1) == pytest.approx(10e-6)
    assert "measured" in slow.source


def test_override_touches_only_bottlenecks_of_measured_routes():
    base = zoo.get("dgx1")  # NVLink pairs, PCIe switches, two sockets
    nvlink = {(a, b) for a in range(8) for b in range(8) if zoo.DGX1_NVLINKS[a][b]}

    def measured(a, b):
        return 0.8 * base.route_bandwidth(a, b)

    result = override(base, profile(8, measured))
    for a in range(8):
        for b in range(8):
            if a != b and (a, b) in nvlink:
                assert result.route_bandwidth(a, b) == pytest.approx(measured(a, b))
    # 0 -> 5 has no NVLink: its PCIe/QPI route limits at PCIe3 16 GB/s, measured 12.8
    assert result.route_bandwidth(0, 5) == pytest.approx(12.8e9)


def test_override_refuses_a_base_of_another_size():
    with pytest.raises(InputError, match="has 8 ranks but the profile measured 4"):
        override(zoo.get("dgx1"), profile(4, lambda a, b: 1e9))


def test_copies_set_local_bandwidth_and_host_uplinks():
    copies = [CopyFigure(r, path, curve(5e-6, bw)) for r in range(8)
              for path, bw in (("h2d", 11e9), ("d2h", 12e9), ("d2d", 600e9))]
    copies.append(CopyFigure(0, "peer", curve(3e-6, 40e9), peer=1))
    measured = profile(8, lambda a, b: 20e9, copies=copies)
    assert flat(measured).local_bandwidth == pytest.approx(600e9)
    result = override(zoo.get("dgx1"), measured)
    into = next(lk for lk in result.links if (lk.src, lk.dst) == ("pcie0", 0))
    out = next(lk for lk in result.links if (lk.src, lk.dst) == (0, "pcie0"))
    assert into.bandwidth == pytest.approx(11e9) and out.bandwidth == pytest.approx(12e9)


def test_warnings_name_negative_alpha_and_poor_fits():
    odd = Profile(2, "gloo", ((0, 1),), (PairFigure(0, 1, Curve.of(
        SIZES[6:], [(s - 2**17) / 1e8 for s in SIZES[6:]])),))
    assert any("alpha" in w and "taken as 0" in w for w in warnings(odd))
    assert flat(odd).route_alpha(0, 1) == 0.0
    noisy = Profile(2, "gloo", ((0, 1),), (PairFigure(0, 1, Curve.of(
        [1, 2, 3, 4], [1.0, 5.0, 1.0, 6.0])),))
    assert any("R^2" in w for w in warnings(noisy))


def test_profile_round_trips_through_json(tmp_path):
    copies = [CopyFigure(0, "peer", curve(3e-6, 40e9), peer=1)]
    original = profile(3, lambda a, b: 1e9 * (a + b + 1), copies=copies)
    path = tmp_path / "raw.json"
    original.save(path)
    again = Profile.load(path)
    assert again.world_size == 3 and again.nodes == original.nodes
    assert again.pair(2, 1).curve.fit.bandwidth == pytest.approx(4e9)
    assert again.copies[0].label == "peer->1"
    path.write_text('{"format": "other"}')
    with pytest.raises(InputError, match="not a ccweave profile"):
        Profile.load(path)
