"""The JSON topology format: the issue's example loads; bad files name the field."""

from __future__ import annotations

import json

import pytest

from ccweave.errors import TopologyError
from ccweave.topology import io, zoo

EXAMPLE = {"name": "quad", "ranks": 4, "fabric": {"sw0": "switch"},
           "links": [{"src": r, "dst": "sw0", "bw_GBps": 25, "alpha_us": 0.7, "duplex": True}
                     for r in range(4)],
           "groups": {"node": [[0, 1, 2, 3]]}}


def test_issue_example_loads(tmp_path):
    path = tmp_path / "quad.json"
    path.write_text(json.dumps(EXAMPLE))
    topo = io.load(path)
    assert topo.num_ranks == 4 and len(topo.links) == 8
    assert topo.link(0, "sw0").bandwidth == 25e9
    assert topo.link("sw0", 0).alpha == pytest.approx(0.7e-6)
    assert topo.groups["node"] == ((0, 1, 2, 3),)


@pytest.mark.parametrize("name", ["dgx1", "ndv2:2", "mist", "torus:3x3"])
def test_round_trip_is_identical(tmp_path, name):
    topo = zoo.get(name)
    path = tmp_path / "t.json"
    io.write(topo, path)
    back = io.load(path)
    assert back.links == topo.links
    assert back.fabric == topo.fabric and back.groups == topo.groups


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.pop("ranks"), "'ranks' must be a positive integer"),
    (lambda d: d.update(ranks="four"), "'ranks' must be a positive integer"),
    (lambda d: d.update(fabric={"sw0": "hub"}), r"fabric\['sw0'\] = 'hub'"),
    (lambda d: d["links"][1].pop("bw_GBps"), r"links\[1\]: missing field 'bw_GBps'"),
    (lambda d: d["links"][2].update(bw_GBps="fast"), r"links\[2\]: field 'bw_GBps' must be"),
    (lambda d: d["links"][0].update(dst="sw9"), "unknown node 'sw9'"),
    (lambda d: d["links"][0].update(speed=3), r"links\[0\]: unknown field"),
    (lambda d: d.update(groups={"node": [[0, 1]]}), "in no group"),
    (lambda d: d.update(extra=1), "unknown field"),
])
def test_bad_files_name_the_field(tmp_path, change, message):
    data = json.loads(json.dumps(EXAMPLE))
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TopologyError, match=message):
        io.load(path)


def test_malformed_json_names_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"ranks": 4,\n "links": [}')
    with pytest.raises(TopologyError, match=r"not valid JSON.*line 2"):
        io.load(path)


def test_disconnected_file_is_refused(tmp_path):
    data = json.loads(json.dumps(EXAMPLE))
    data["links"] = data["links"][:3]
    path = tmp_path / "split.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TopologyError, match="disconnected"):
        io.load(path)


@pytest.mark.parametrize("name", ["dgx1", "ndv2:2", "mist", "torus:3x3"])
def test_topo_show_json_loads_back(tmp_path, capsys, name):
    """What ``ccweave topo show --json`` prints is a topology file: saved, it loads as the
    same machine and shows the same again."""
    from ccweave.cli import main

    assert main(["topo", "show", name, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    path = tmp_path / "shown.json"
    path.write_text(json.dumps(shown))
    back, topo = io.load(path), zoo.get(name)
    assert back.links == topo.links and back.fabric == topo.fabric
    assert back.groups == topo.groups and back.name == topo.name
    assert shown["summary"]["links"] == len(topo.links)
    assert main(["topo", "show", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == shown


def test_a_file_of_another_format_is_named(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({**EXAMPLE, "format": "ccweave-profile/1"}))
    with pytest.raises(TopologyError, match="is not a topology"):
        io.load(path)
