"""Sketch files and their fit to a topology: every bad field is named in the error."""

from __future__ import annotations

import json

import pytest

from ccweave.collectives import Kind
from ccweave.errors import InputError
from ccweave.synth.taccl import logical, sketch
from ccweave.synth.taccl.sketch import Connections, Hyperedge, Intranode
from ccweave.synth.taccl.sketch_defaults import default_sketches
from ccweave.topology import zoo
from tests.test_taccl_stages import two_node_toy

NDV2 = {"intranode": {"strategy": "links"},
        "internode": {"strategy": "relay", "connections": "direct-map", "senders": [0]},
        "symmetry_offsets": [[8, 16]], "input_chunkup": 2}


def parse(data: dict) -> sketch.Sketch:
    return sketch.from_dict(data, "my.json")


def test_reads_every_field():
    s = parse({"name": "n", "description": "d",
               "intranode": {"strategy": "switch", "hyperedge": "uc-min",
                             "switches": [[0, 1], [2, 3]]},
               "internode": {"connections": {"1": [0], "3": [2]}, "carries": {"1": [0, 1],
                                                                             "3": [2, 3]}},
               "symmetry_offsets": [[2, 4], [4, 8]], "input_chunkup": 3})
    assert s.intranode.strategy is Intranode.SWITCH
    assert s.intranode.hyperedge is Hyperedge.UC_MIN
    assert s.intranode.switches == ((0, 1), (2, 3))
    assert s.internode.connections == ((1, (0,)), (3, (2,)))
    assert s.internode.carries == ((1, (0, 1)), (3, (2, 3)))
    assert s.symmetry_offsets == ((2, 4), (4, 8))
    assert s.input_chunkup == 3
    assert sketch.from_dict(s.to_dict()).to_dict() == s.to_dict()


def test_defaults_and_file(tmp_path):
    path = tmp_path / "sk.json"
    path.write_text(json.dumps(NDV2))
    s = sketch.load(path)
    assert s.name == "sk" and s.source == str(path)
    assert s.internode.connections is Connections.DIRECT_MAP
    assert s.internode.senders == (0,)
    empty = parse({})
    assert empty.intranode.strategy is Intranode.LINKS and empty.input_chunkup == 1


@pytest.mark.parametrize(("data", "field"), [
    ([1, 2], "a sketch is a JSON object"),
    ({"intranodes": {}}, "unknown field 'intranodes'"),
    ({"intranode": {"strategy": "mesh"}}, "intranode.strategy"),
    ({"intranode": {"strategy": "links", "hyperedge": "uc-max"}}, "intranode.hyperedge"),
    ({"intranode": {"strategy": "switch", "hyperedge": "uc-most"}}, "intranode.hyperedge"),
    ({"intranode": {"strategy": "switch", "switches": [[0]]}}, "intranode.switches[0]"),
    ({"intranode": {"strategy": "switch", "switches": [[0, 1], [1, 2]]}},
     "intranode.switches[1]"),
    ({"intranode": {"speed": 1}}, "unknown field 'intranode.speed'"),
    ({"internode": {"strategy": "ring"}}, "internode.strategy"),
    ({"internode": {"connections": "all"}}, "internode.connections"),
    ({"internode": {"connections": 3}}, "internode.connections"),
    ({"internode": {"connections": {"x": [0]}}}, "internode.connections key 'x'"),
    ({"internode": {"connections": {"0": [0, 0]}}}, "internode.connections['0']"),
    ({"internode": {"connections": {}}}, "internode.connections is an empty map"),
    ({"internode": {"connections": {"0": [1]}, "senders": [0]}}, "internode.senders"),
    ({"internode": {"senders": [-1]}}, "internode.senders"),
    ({"internode": {"carries": [0]}}, "internode.carries"),
    ({"symmetry_offsets": [8, 16]}, "symmetry_offsets[0]"),
    ({"symmetry_offsets": [[16, 16]]}, "symmetry_offsets[0]"),
    ({"input_chunkup": 0}, "input_chunkup"),
    ({"input_chunkup": 1.5}, "input_chunkup"),
    ({"name": 3}, "name must be a string"),
])
def test_bad_fields_are_named(data, field):
    with pytest.raises(InputError, match=r"my\.json") as error:
        parse(data)
    assert field in str(error.value)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(InputError, match=r"none\.json: no such file \(give a sketch file"):
        sketch.load(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(InputError, match=r"bad\.json: not valid JSON"):
        sketch.load(bad)


# ------------------------------------------------------------------ fit to a topology


def apply(name: str, data: dict):
    return logical.apply(zoo.get(name), parse(data))


@pytest.mark.parametrize(("name", "data", "field"), [
    ("ndv2:2", {"internode": {"senders": [9]}}, "internode.senders names local rank 9"),
    ("ndv2:2", {"internode": {"connections": {"0": [8]}}}, "internode.connections names"),
    ("ndv2:2", {"internode": {"connections": "direct-map", "receivers": [1]}},
     "internode.receivers"),
    ("dgx2:2", {"intranode": {"strategy": "links"}}, "intranode.strategy 'links'"),
    ("ndv2:2", {"intranode": {"strategy": "switch"}}, "intranode.strategy 'switch'"),
    ("dgx2:2", {"intranode": {"strategy": "switch", "switches": [[0, 1, 16]]}},
     "intranode.switches names local rank 16"),
    ("ndv2:2", {"internode": {"connections": {"0": [0]}, "carries": {"0": [0, 1]}}},
     "internode.carries gives no sender for the data of local rank 2"),
    ("ndv2:2", {"internode": {"connections": {"0": [0]}, "carries": {"1": [0]}}},
     "internode.carries lists local rank 1"),
    ("ndv2:2", {"symmetry_offsets": [[1, 8]]}, "symmetry_offsets[0] = [1, 8]"),
    ("ndv2:2", {"symmetry_offsets": [[8, 12]]}, "does not divide"),
    ("ndv2:2", {"symmetry_offsets": [[4, 16]]}, "symmetry_offsets[0] = [4, 16]"),
    ("dgx2:2", {"intranode": {"strategy": "switch"}, "internode": {"senders": [0]},
                "symmetry_offsets": [[1, 16]]}, "symmetry_offsets[0] = [1, 16]"),
])
def test_sketch_that_does_not_fit_names_the_part(name, data, field):
    with pytest.raises(InputError, match=r"my\.json") as error:
        apply(name, data)
    assert field in str(error.value)


def test_relay_edges_follow_the_map():
    lg = apply("ndv2:2", NDV2)
    internode = [(e.src, e.dst) for e in lg.edges if e.internode]
    assert sorted(internode) == [(0, 8), (8, 0)]
    assert all(len(e.route) == 1 for e in lg.edges if not e.internode)  # NVLinks only
    assert lg.nic_sharing == {"n0.nic0": (0,), "n1.nic0": (8,)}
    assert len(lg.symmetry) == 2


def test_switch_sketch_and_nic_sharing_on_dgx2():
    pairs = {str(s): [s - 1] for s in range(1, 16, 2)}
    carries = {str(s): [s - 1, s] for s in range(1, 16, 2)}
    lg = apply("dgx2:2", {"intranode": {"strategy": "switch", "hyperedge": "uc-min"},
                          "internode": {"connections": pairs, "carries": carries},
                          "symmetry_offsets": [[2, 16], [16, 32]]})
    intra = [e for e in lg.edges if not e.internode]
    assert len(intra) == 2 * 16 * 15 and all(e.switch == f"n{e.src // 16}.nvswitch"
                                             for e in intra)
    assert (1, 16) in [(e.src, e.dst) for e in lg.edges if e.internode]
    assert lg.may_carry(1, 0) and not lg.may_carry(1, 2)
    assert lg.nic_sharing["n0.nic0"] == (1,)  # one relay per GPU pair's NIC


def test_one_node_sketch_needs_no_internode_part():
    lg = logical.apply(zoo.get("dgx2"), parse({"intranode": {"strategy": "switch"},
                                               "internode": {"senders": [0]}}))
    assert not any(e.internode for e in lg.edges)


def test_symmetry_group_is_closed_and_free():
    lg = apply("dgx2:2", {"intranode": {"strategy": "switch"},
                          "symmetry_offsets": [[2, 16], [16, 32]]})
    assert len(lg.symmetry) == 16
    for g in lg.symmetry[1:]:
        assert all(g[r] != r for r in range(32))


def test_fixed_point_symmetry_is_refused():
    toy = two_node_toy()
    with pytest.raises(InputError, match="keeps rank"):
        logical.apply(toy, parse({"intranode": {"strategy": "routes"},
                                  "symmetry_offsets": [[1, 4], [1, 2]]}))


@pytest.mark.parametrize("name", ["ndv2:2", "dgx2:2", "ndv2:4", "dgx-a100:2", "ndv2:10",
                                  "dgx1", "switch:4", "ring:4", "cedar", "mist"])
@pytest.mark.parametrize("kind", [Kind.ALLGATHER, Kind.ALLTOALL])
def test_default_sketches_fit_the_zoo(name, kind):
    topology = zoo.get(name)
    for s in default_sketches(topology, kind):
        logical.apply(topology, s)


def test_default_sketch_relays_once_per_nic():
    names = [s.name for s in default_sketches(zoo.get("ndv2:2"))]
    assert names == ["default-relay-per-nic(ndv2:2)", "default-relay-all(ndv2:2)"]
    first = default_sketches(zoo.get("dgx2:2"))[0]
    assert first.internode.senders == tuple(range(0, 16, 2))  # one per GPU pair's NIC
    assert (2, 16) in first.symmetry_offsets


def test_shipped_sketches_fit_their_machines():
    from pathlib import Path

    folder = Path(__file__).resolve().parent.parent / "examples" / "sketches"
    machines = {"ndv2-2": "ndv2:2", "ndv2-4": "ndv2:4", "ndv2-10": "ndv2:10",
                "dgx2-2": "dgx2:2", "dgx2-2-alltoall": "dgx2:2", "dgx-a100-2": "dgx-a100:2",
                "one-node-switch": "dgx2"}
    found = sorted(p.stem for p in folder.glob("*.json"))
    assert set(machines) <= set(found)
    for stem, machine in machines.items():
        logical.apply(zoo.get(machine), sketch.load(folder / f"{stem}.json"))


def test_a_default_sketch_is_taken_by_its_name():
    """``sketch=relay-per-nic`` (e.g. ``ccweave bench ... --option taccl:sketch=...``) is
    that default sketch, not a file; a name the machine has none of says which it has."""
    from pathlib import Path

    from ccweave.synth.taccl.build import TacclOptions, synthesize_taccl
    from ccweave.topology import io

    shared = Path(__file__).resolve().parent.parent / "examples" / "topologies"
    topology = io.load(str(shared / "shared-nic-2x4.json"))
    schedule = synthesize_taccl(topology, Kind.ALLTOALL, 1, TacclOptions(
        size=2**20, sketch="relay-per-nic", fallback=False, time_limit=20.0,
        routing_time_limit=2.0, contiguity_time_limit=0.5))
    assert schedule.metadata["taccl"]["sketch"] == "default-relay-per-nic(shared-nic-2x4)"
    crossing = {(t.src, t.dst) for t in schedule.transfers
                if topology.group_of("node", t.src) != topology.group_of("node", t.dst)}
    assert crossing == {(0, 4), (4, 0)}  # one relay a NIC, to its namesake
    with pytest.raises(InputError, match=r"sketch=one-node: 'shared-nic-2x4' has no default "
                                         r"one-node sketch for alltoall; its default sketches "
                                         r"are fully-connected, relay-per-nic"):
        synthesize_taccl(topology, Kind.ALLTOALL, 1, TacclOptions(sketch="one-node"))
