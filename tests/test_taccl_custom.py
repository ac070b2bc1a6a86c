"""TACCL's ``custom`` profiled topologies (links, betas and invbws matrices, indexed
[destination][source], as TACCL's INPUT_GUIDE.md documents them) read unchanged as
machines, one node or K of them (``FILE:K``), and synthesized for with TACCL's sketches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ccweave.synth.taccl  # noqa: F401  (registers the strategy)
from ccweave.cli import main
from ccweave.collectives import Kind
from ccweave.errors import InputError, TopologyError
from ccweave.synth.taccl import profile
from ccweave.synth.taccl.build import TacclOptions, synthesize_taccl
from ccweave.topology import io
from ccweave.topology.model import NodeKind
from ccweave.verify import verify

CUSTOM = Path(__file__).resolve().parent / "fixtures" / "taccl_custom" / "topo-custom-4gpu.json"
QUICK = {"time_limit": 20.0, "routing_time_limit": 2.0, "contiguity_time_limit": 0.5,
         "fallback": False}


def test_a_custom_profile_is_its_node_link_for_link():
    data = json.loads(CUSTOM.read_text())
    topology = io.load(str(CUSTOM))
    assert topology.num_ranks == 4 and topology.groups["node"] == ((0, 1, 2, 3),)
    joined = {(lk.src, lk.dst) for lk in topology.links}
    for d, row in enumerate(data["links"]):
        for s, count in enumerate(row):
            assert ((s, d) in joined) == bool(count)
            if count:  # [destination][source]; beta is one link's time for a 1 MB chunk
                link = topology.link(s, d)
                assert link.bandwidth == pytest.approx(count * 2**20 / (data["betas"][d][s]
                                                                        * 1e-6))
                assert link.alpha == pytest.approx(0.3e-6)
    assert not any(kind is NodeKind.NIC for kind in topology.fabric.values())


def test_k_nodes_share_their_nics_and_cross_at_the_remote_figures():
    topology = io.load(f"{CUSTOM}:2")
    assert topology.num_ranks == 8 and len(topology.groups["node"]) == 2
    route = topology.route(0, 4)
    assert sum(topology.links[i].alpha for i in route) == pytest.approx(2.6e-6)
    assert min(topology.links[i].bandwidth for i in route) == pytest.approx(2**20 / 106e-6)
    assert sum(kind is NodeKind.NIC for kind in topology.fabric.values()) == 2


def test_taccl_synthesizes_on_a_custom_machine_with_a_taccl_sketch(tmp_path):
    sketch = tmp_path / "sk-custom-n2.json"
    sketch.write_text(json.dumps({
        "nnodes": 2, "intranode_sketch": {"strategy": "none"},
        "internode_sketch": {"strategy": "relay", "internode_conn": {"0": [0]}},
        "symmetry_offsets": [[4, 8]], "hyperparameters": {"input_chunkup": 1}}))
    topology = io.load(f"{CUSTOM}:2")
    schedule = synthesize_taccl(topology, Kind.ALLGATHER, None,
                                TacclOptions(size=8 * 2**20, sketch=str(sketch), **QUICK))
    verify(schedule, topology)
    out = tmp_path / "ag.json"
    assert main(["synth", f"{CUSTOM}:2", "allgather", "--strategy", "taccl", "--sketch",
                 str(sketch), "--time-limit", "20", "--option", "fallback=false", "-o",
                 str(out)]) == 0
    assert main(["verify", str(out), "--topology", f"{CUSTOM}:2"]) == 0


@pytest.mark.parametrize("change, message", [
    ({"links": [[0, 1], [1, 0]]}, "links must be a 4 x 4 matrix"),
    ({"betas": [[0, 23, 46, 0], [0, 0, 0, 46], [46, 0, 0, 23], [0, 46, 23, 0]]},
     r"betas\[1\]\[0\] is 0.0 but links\[1\]\[0\] joins GPU 0 to GPU 1"),
    ({"links": [[0, 1.5, 1, 0], [2, 0, 0, 1], [1, 0, 0, 2], [0, 1, 2, 0]]},
     r"links\[0\]\[1\] must be a whole number"),
    ({"nics_per_node": 9}, "nics_per_node must be an integer from 1 to gpus_per_node"),
    ({"remote_beta": None}, "remote_beta must be a positive number"),
    ({"links_typo": 1}, "unknown field 'links_typo' in a TACCL custom profile"),
    ({"alpha": -1}, "alpha must be a number >= 0"),
])
def test_bad_custom_profiles_are_one_line_naming_taccls_field(tmp_path, change, message):
    data = {**json.loads(CUSTOM.read_text()), **change}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TopologyError, match=message):
        io.load(f"{path}:2")


def test_a_custom_profile_given_as_costs_says_it_is_a_machine():
    with pytest.raises(InputError, match="is a machine of its own"):
        profile.load(CUSTOM)
