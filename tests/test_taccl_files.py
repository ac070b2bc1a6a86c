"""TACCL's own files, as a TACCL user brings them: its sketch files and its profiled
topologies (tests/fixtures/taccl, copied unchanged from microsoft/taccl), read unchanged
beside ccweave's own formats; every shipped sketch synthesizes and verifies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ccweave.synth.taccl  # noqa: F401  (registers the strategy)
from ccweave.cli import main
from ccweave.collectives import Kind
from ccweave.errors import InputError, TopologyError
from ccweave.schedule import load
from ccweave.synth.taccl import logical, profile, sketch
from ccweave.synth.taccl.build import TacclOptions, synthesize_taccl
from ccweave.synth.taccl.sketch import Connections, Hyperedge, Intranode
from ccweave.topology import io, zoo
from ccweave.verify import verify

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "taccl"
SKETCHES = sorted((FIXTURES / "sketch").glob("*.json"))
QUICK = {"time_limit": 20.0, "routing_time_limit": 2.0, "contiguity_time_limit": 0.5,
         "fallback": False}
PROFILES = {  # file: (chunk size its betas are for, factor its figures were scaled by)
    "topo-ndv2-1MB.json": (2**20, 1.0), "topo-ndv2-32KB.json": (2**15, 10.0),
    "topo-ndv2-1KB.json": (2**10, 100.0), "topo-dgx2-1MB.json": (2**20, 1.0),
    "topo-dgx2-1KB.json": (2**10, 100.0)}


def machine_for(path: Path) -> str:
    """The zoo machine a TACCL sketch file is written for (its family and nnodes)."""
    nodes = json.loads(path.read_text())["nnodes"]
    family = "dgx2" if "dgx2" in path.stem else "ndv2"
    return family if nodes == 1 else f"{family}:{nodes}"


def test_the_fixtures_are_taccls_eleven_sketches_and_five_profiles():
    assert len(SKETCHES) == 11
    assert sorted(p.name for p in (FIXTURES / "topo").glob("*.json")) == sorted(PROFILES)
    assert (FIXTURES / "LICENSE").read_text().startswith("    MIT License")


@pytest.mark.parametrize("path", SKETCHES, ids=lambda p: p.stem)
def test_every_taccl_sketch_reads_unchanged_and_fits_its_machine(path):
    s = sketch.load(path)
    lg = logical.apply(zoo.get(machine_for(path)), s)
    assert s.nodes == json.loads(path.read_text())["nnodes"]
    assert s.input_chunkup == json.loads(path.read_text())["hyperparameters"]["input_chunkup"]
    assert lg.edges and len(lg.symmetry) >= 1


def test_taccl_fields_become_the_same_sketch_as_ccweaves_own():
    s = sketch.load(FIXTURES / "sketch" / "sk1-dgx2-n2.json")
    assert s.intranode.strategy is Intranode.SWITCH
    assert s.intranode.hyperedge is Hyperedge.UC_MIN
    assert s.intranode.switches == (tuple(range(16)),)
    assert s.internode.connections == tuple((2 * i + 1, (2 * i,)) for i in range(8))
    assert s.internode.carries == tuple((2 * i + 1, (2 * i, 2 * i + 1)) for i in range(8))
    assert s.internode.enforce_ordering
    assert s.symmetry_offsets == ((2, 16), (16, 32)) and s.input_chunkup == 2
    assert sketch.from_dict(s.to_dict(), "again.json").to_dict() == s.to_dict()
    ndv2 = sketch.load(FIXTURES / "sketch" / "sk2-ndv2-n2.json")
    assert ndv2.intranode.strategy is Intranode.NONE
    assert ndv2.internode.connections is Connections.FULLY_CONNECTED
    applied = logical.apply(zoo.get("ndv2:2"), ndv2)
    assert applied.sketch.intranode.strategy is Intranode.LINKS  # NVLink mesh: its links


def test_taccl_none_on_a_switch_machine_is_the_switch():
    s = sketch.from_dict({"nnodes": 1, "intranode_sketch": {"strategy": "none"},
                          "hyperparameters": {"input_chunkup": 1}}, "n.json")
    assert logical.apply(zoo.get("dgx2"), s).sketch.intranode.strategy is Intranode.SWITCH


NONE = {"intranode_sketch": {"strategy": "none"}}


@pytest.mark.parametrize(("data", "text"), [
    ({**NONE, "nnodes": 2}, "nnodes is 2 but there is no internode_sketch"),
    ({"intranode_sketch": {"strategy": "minmax", "switches": [[0, 1]]}},
     "intranode_sketch.switches goes with strategy 'switch'"),
    ({"intranode_sketch": {"strategy": "ring"}}, "intranode_sketch.strategy is 'ring'"),
    ({"intranode_sketch": {"strategy": "none", "switches": [[0, 1]]}},
     "intranode_sketch.switches goes with strategy 'switch'"),
    ({"intranode_sketch": {"strategy": "switch", "switches": [[0, 1], [1, 2]]}},
     "intranode_sketch.switches[1]"),
    ({"intranode_sketch": {"strategy": "switch", "switches": [[0, 1]],
                           "switch_hyperedge_strategy": ["uc-min", "uc-max"]}},
     "mixes policies"),
    ({"nnodes": 1}, "intranode_sketch is missing"),
    ({"nnodes": 1, "intranode_sketch": {"strategy": []}},  # found by tests/test_fuzz_readers
     "intranode_sketch.strategy is []; TACCL's are 'none', 'switch', 'minmax' and "
     "'maxmin'"),
    ({**NONE, "hyperparameters": {"input_chunkup": 0}}, "hyperparameters.input_chunkup"),
    ({**NONE, "hyperparameters": {"heuristic": 4}},
     "unknown field 'hyperparameters.heuristic'"),
    ({**NONE, "nnodes": 2, "internode_sketch": {"strategy": "relay"}},
     "internode_sketch.internode_conn is missing"),
    ({**NONE, "nnodes": 2, "internode_sketch": {"internode_conn": "direct-map",
                                                "enforce_ordering": True}},
     "enforce_ordering needs gpus_to_sender_rev_map"),
    ({**NONE, "nnodes": 2, "internode_sketch": {"internode_conn": {"a": [0]}}},
     "internode_sketch.internode_conn key 'a'"),
    ({**NONE, "symmetry": []}, "unknown field 'symmetry'"),
])
def test_bad_taccl_fields_are_named(data, text):
    with pytest.raises(InputError, match=r"my\.json") as error:
        sketch.from_dict(data, "my.json")
    assert text in str(error.value)


def test_a_sketch_for_another_node_count_is_refused_by_name():
    s = sketch.load(FIXTURES / "sketch" / "sk1-ndv2-n2.json")
    with pytest.raises(InputError, match=r"for 2 node.*nnodes.*'ndv2:4' has 4"):
        logical.apply(zoo.get("ndv2:4"), s)


@pytest.mark.parametrize("path", SKETCHES, ids=lambda p: p.stem)
def test_every_taccl_sketch_synthesizes_and_verifies(path):
    topology = zoo.get(machine_for(path))
    kind = Kind.ALLGATHER
    schedule = synthesize_taccl(topology, kind, None, TacclOptions(
        size=2**20 * topology.num_ranks, sketch=str(path), **QUICK))
    verify(schedule, topology)
    assert path.stem in schedule.name


# -------------------------------------------------------------------------- profiles


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_gives_the_links_taccl_measured(name):
    chunk, scale = PROFILES[name]
    p = profile.load(FIXTURES / "topo" / name, chunk, scale)
    assert p.alpha == pytest.approx(0.3e-6)
    assert p.remote_alpha == pytest.approx(2.6e-6)
    assert p.remote_bandwidth == pytest.approx(10e9, rel=0.01)  # 105 us per MB
    if "ndv2" in name:
        assert p.gpus_per_node == 8 and p.nics_per_node == 1
        assert p.node_bandwidths == pytest.approx((45.6e9, 22.8e9), rel=0.01)


def test_a_profile_recosts_the_machine():
    p = profile.load(FIXTURES / "topo" / "topo-ndv2-1MB.json")
    ndv2 = profile.apply(p, zoo.get("ndv2:2"))
    speeds = sorted({lk.bandwidth for lk in ndv2.links if lk.kind == "nvlink"})
    assert speeds == pytest.approx([2**20 / 46e-6, 2**20 / 23e-6])
    route = ndv2.route(0, 8)
    assert sum(ndv2.links[i].alpha for i in route) == pytest.approx(2.6e-6)
    assert min(ndv2.links[i].bandwidth for i in route) == pytest.approx(2**20 / 105e-6)
    dgx2 = profile.apply(profile.load(FIXTURES / "topo" / "topo-dgx2-1MB.json"),
                         zoo.get("dgx2:2"))
    port = dgx2.link(0, "n0.nvswitch")
    assert port.bandwidth == pytest.approx(2**20 / 8e-6) and port.alpha == pytest.approx(0.15e-6)


def test_a_profile_of_another_machine_is_refused_by_name():
    p = profile.load(FIXTURES / "topo" / "topo-ndv2-1MB.json")
    with pytest.raises(InputError, match="gpus_per_node is 8 but 'dgx2:2' has \\[16\\]"):
        profile.apply(p, zoo.get("dgx2:2"))
    dgx = profile.load(FIXTURES / "topo" / "topo-dgx2-1MB.json")
    with pytest.raises(InputError, match="node_betas_list has 1 link class"):
        profile.apply(replace_gpus(dgx, 8), zoo.get("ndv2:2"))


def replace_gpus(p, gpus):
    from dataclasses import replace

    return replace(p, gpus_per_node=gpus, nics_per_node=1)


@pytest.mark.parametrize(("data", "text"), [
    ({"gpus_per_node": 8, "alpha": 1, "node_betas_list": []}, "node_betas_list"),
    ({"gpus_per_node": 0, "alpha": 1, "node_betas_list": [1]}, "gpus_per_node"),
    ({"gpus_per_node": 8, "alpha": -1, "node_betas_list": [1]}, "alpha must be"),
    ({"gpus_per_node": 8, "alpha": 1, "node_betas_list": [1], "remote_alpha": 1},
     "remote_alpha and remote_beta together"),
    ({"gpus_per_node": 8, "alpha": 1, "node_betas_list": [1], "links": []}, "'custom'"),
    ({"gpus_per_node": 8, "alpha": 1, "node_betas_list": [1], "beta": 3}, "unknown field"),
    ({"gpus_per_node": 8, "alpha": 1, "node_betas_list": [1], "remote_alpha": 1,
      "remote_beta": 1, "remote_invbw": float("inf")}, "remote_invbw must be"),
    ({"gpus_per_node": 8, "alpha": 1, "node_betas_list": [1],
      "node_invbws_list": [1, float("nan")]}, "node_invbws_list must be"),
    ({"gpus_per_node": 8, "alpha": 1, "node_betas_list": [1], "node_invbws_list": "x"},
     "node_invbws_list must be"),
    ({"gpus_per_node": 8, "alpha": 1, "node_betas_list": [1e-300]},
     "node_betas_list[0] gives"),
    ({"gpus_per_node": 8, "alpha": 1, "node_betas_list": [1], "remote_alpha": 1,
      "remote_beta": 1e300}, "remote_beta gives"),
    ({"gpus_per_node": 8, "alpha": 1e300, "node_betas_list": [1]}, "alpha is 1e+300 us"),
])
def test_bad_profiles_are_named(data, text):
    with pytest.raises(InputError, match=r"p\.json") as error:
        profile.from_dict(data, "p.json")
    assert text in str(error.value)


def test_a_profile_given_as_the_topology_says_how_to_use_it():
    with pytest.raises(TopologyError, match=r"TACCL profiled topology.*--profile"):
        io.load(FIXTURES / "topo" / "topo-ndv2-1MB.json")


# ------------------------------------------------------------------------------ CLI


def test_cli_takes_taccls_files(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sk1-dgx2-n2.json").write_text(
        (FIXTURES / "sketch" / "sk1-dgx2-n2.json").read_text())
    code = main(["synth", "dgx2:2", "allgather", "--strategy", "taccl", "--sketch",
                 "sk1-dgx2-n2.json", "--time-limit", "30", "-o", "ag.json"])
    assert code == 0
    assert "verified" in capsys.readouterr().out
    assert load(tmp_path / "ag.json").collective.kind is Kind.ALLGATHER
    code = main(["synth", "ndv2:2", "allgather", "--strategy", "taccl", "--sketch",
                 str(FIXTURES / "sketch" / "sk1-ndv2-n2.json"), "--profile",
                 str(FIXTURES / "topo" / "topo-ndv2-1MB.json"), "--size", "16MB",
                 "--time-limit", "30", "--option", "fallback=false", "-o", "p.json"])
    assert code == 0
    assert load(tmp_path / "p.json").metadata["profiled_topology"] == \
        "ndv2:2+NDv2_1MB"
    assert main(["topo", "show", str(FIXTURES / "topo" / "topo-ndv2-1MB.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--profile" in err


def test_hostile_taccl_files_are_one_line(tmp_path, capsys):
    """A sketch nested 100,000 deep was a RecursionError traceback; a profile holding
    ``"remote_invbw": Infinity`` was accepted and synthesized. Both are refused at the
    reader, naming the file (and the field)."""
    deep = tmp_path / "deep.json"
    deep.write_text('{"intranode_sketch": ' + "[" * 100_000 + "]" * 100_000 + "}")
    infinite = tmp_path / "inf.json"
    infinite.write_text((FIXTURES / "topo" / "topo-ndv2-1MB.json").read_text().replace(
        '"remote_invbw": 107', '"remote_invbw": Infinity'))
    sketch_file = FIXTURES / "sketch" / "sk1-ndv2-n2.json"
    for flags, named in ((["--sketch", str(deep)], "deep.json: arrays or objects nested"),
                         (["--sketch", str(sketch_file), "--profile", str(infinite)],
                          "inf.json: field 'remote_invbw' is Infinity")):
        code = main(["synth", "ndv2:2", "allgather", "--strategy", "taccl", *flags,
                     "-o", str(tmp_path / "s.json")])
        err = capsys.readouterr().err
        assert code == 2 and named in err and err.count("\n") == 1, err


@pytest.mark.parametrize(("stem", "change", "taccl_key", "ours"), [
    ("sk1-dgx2-n2", {"internode_sketch": {"internode_conn": {"1": [99]}}},
     "internode_sketch.internode_conn names local rank 99", "internode.connections"),
    ("sk1-dgx2-n2", {"internode_sketch": {"gpus_to_sender_rev_map": {"1": [0, 1]}}},
     "internode_sketch.gpus_to_sender_rev_map gives no sender for the data of local rank 2",
     "internode.carries"),
    ("sk1-dgx2-n2", {"internode_sketch": {"gpus_to_sender_rev_map": {"0": [0, 1]}}},
     "internode_sketch.gpus_to_sender_rev_map lists local rank 0", "internode.carries"),
    ("sk1-dgx2-n2", {"intranode_sketch": {"switches": [[0, 1, 2, 3, 4, 5, 6, 7]]},
                     "symmetry_offsets": [[16, 32]]},
     "intranode_sketch.strategy 'switch' leaves rank 0 unable to reach rank 8",
     "intranode.strategy"),
    ("sk2-ndv2-n2", {"internode_sketch": {"internode_conn": {"0": [8]}}},
     "internode_sketch.internode_conn names local rank 8", "internode.connections"),
])
def test_refusals_of_mutated_taccl_sketches_name_taccls_keys(tmp_path, stem, change,
                                                              taccl_key, ours):
    """A TACCL user wrote TACCL's keys: a refusal names them, not ccweave's fields."""
    data = json.loads((FIXTURES / "sketch" / f"{stem}.json").read_text())
    for key, value in change.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) else value
    path = tmp_path / f"{stem}-mutated.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as refused:
        logical.apply(zoo.get(machine_for(FIXTURES / "sketch" / f"{stem}.json")),
                      sketch.load(path))
    message = str(refused.value)
    assert taccl_key in message and ours not in message
    assert message.startswith(str(path)) and "\n" not in message


def test_a_profile_is_read_once_so_a_pipe_can_give_it(monkeypatch):
    """``--profile <(cat topo-ndv2-1MB.json)`` (a pipe, a FIFO) is read once: the taccl
    strategy read the file again to compare with the classic schedules, and that second
    open of a FIFO waited for a writer for ever."""
    from ccweave.synth.taccl.build import build_taccl

    reads: list[object] = []
    real = profile.read_json

    def read_json(path, *args, **kwargs):
        reads.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(profile, "read_json", read_json)
    build_taccl(zoo.get("ndv2"), Kind.ALLGATHER, chunks=1, sketch="one-node",
                profile=str(FIXTURES / "topo" / "topo-ndv2-1MB.json"),
                time_limit=5.0, routing_time_limit=1.0, contiguity_time_limit=0.2)
    assert len(reads) == 1
