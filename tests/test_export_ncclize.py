"""TACCL's ncclize channel policies as an export pass: one, match-topology (with
--scale-remote), max-concurrency; every schedule they give proves and exports."""

from __future__ import annotations

import itertools

import pytest

from ccweave.cli import main
from ccweave.collectives import Kind
from ccweave.errors import InputError
from ccweave.export import ncclize
from ccweave.export.msccl_xml import from_xml, to_xml
from ccweave.schedule import save, topological_order
from ccweave.synth.registry import synthesize
from ccweave.topology import zoo
from ccweave.transforms import refine
from ccweave.verify import verify


def pieces(machine: str, k: int, side_by_side: bool = False):
    """direct allgather on ``machine``, each transfer cut in ``k`` pieces: one after
    another on a connection, or (``side_by_side``) independent of each other."""
    schedule = synthesize(zoo.get(machine), Kind.ALLGATHER, "direct")
    return refine(schedule, k, channel_stride=1 if side_by_side else 0)


def by_connection(schedule):
    """Remote transfers per (src, dst), in dependency order."""
    found: dict[tuple[int, int], list[int]] = {}
    for index in topological_order(schedule.transfers):
        t = schedule.transfers[index]
        if not t.is_local:
            found.setdefault((t.src, t.dst), []).append(index)
    return found


def test_match_topology_takes_a_pairs_links_in_turn():
    """DGX-1: two NVLinks join 0 and 1 (two channels in turn), one joins 0 and 2."""
    topology = zoo.get("dgx1")
    schedule = pieces("dgx1", 4)
    matched = ncclize.apply(schedule, "match-topology", topology)
    verify(matched, topology)
    assert ncclize.lanes(topology, 0, 1) == 2 and ncclize.lanes(topology, 0, 2) == 1
    for (src, dst), members in by_connection(matched).items():
        expect = [k % ncclize.lanes(topology, src, dst) for k in range(len(members))]
        assert [matched.transfers[i].channel for i in members] == expect
    assert matched.metadata["channel_policy"] == "match-topology"


def test_scale_remote_multiplies_the_channels_between_nodes_only():
    topology = zoo.get("ndv2:2")
    schedule = pieces("ndv2:2", 4)
    scaled = ncclize.apply(schedule, "match-topology", topology, scale_remote=3)
    node = {r: r // 8 for r in range(16)}
    for (src, dst), members in by_connection(scaled).items():
        channels = {scaled.transfers[i].channel for i in members}
        if node[src] != node[dst]:
            assert channels == {0, 1, 2}  # four transfers, three channels in turn
        else:
            assert channels <= {0, 1}
    verify(scaled, topology)
    to_xml(scaled)


def test_max_concurrency_separates_a_connections_transfers_of_one_step():
    topology = zoo.get("dgx1")
    schedule = ncclize.apply(pieces("dgx1", 3, side_by_side=True), "one")
    spread = ncclize.apply(schedule, "max-concurrency")
    verify(spread, topology)
    for members in by_connection(spread).values():
        # direct: every transfer of a connection is at step 0, so they all run side by side
        assert sorted(spread.transfers[i].channel for i in members) == list(range(len(members)))
    chained = ncclize.apply(synthesize(zoo.get("ring:4"), Kind.ALLGATHER, "ring"),
                            "max-concurrency")
    # a ring's transfers on a connection follow each other: one channel does
    assert {t.channel for t in chained.transfers if not t.is_local} == {0}


def test_one_puts_every_remote_transfer_on_channel_zero():
    schedule = pieces("dgx1", 2, side_by_side=True)
    assert schedule.num_channels > 1
    one = ncclize.apply(schedule, "one")
    assert {t.channel for t in one.transfers if not t.is_local} == {0}
    assert from_xml(to_xml(one)).collective == one.collective


@pytest.mark.parametrize("policy, options, message", [
    ("as-scheduled", {"scale_remote": 2}, "--scale-remote goes with --channel-policy "
                                          "match-topology"),
    ("match-topology", {}, "needs the machine"),
    ("match-topology", {"scale_remote": 0}, "--scale-remote must be a positive integer"),
    ("bogus", {}, "--channel-policy 'bogus': choose one of"),
    ("match-topology", {"scale_remote": 40, "topology": "ndv2:2"}, "needs 40 channels; "
                                                                   "MSCCL has 32"),
])
def test_policies_refuse_what_they_cannot_do_in_one_line(policy, options, message):
    options = dict(options)
    name = options.pop("topology", None)
    schedule = pieces("ndv2:2", 40 if name else 1)
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        ncclize.apply(schedule, policy, zoo.get(name) if name else None, **options)


def test_export_cli_writes_each_policy(tmp_path, capsys):
    source = tmp_path / "ag.json"
    save(pieces("ndv2:2", 4), source)
    channels = {}
    for policy, extra in itertools.product(list(ncclize.ChannelPolicy), ([], ["3"])):
        if extra and policy is not ncclize.ChannelPolicy.MATCH_TOPOLOGY:
            continue
        out = tmp_path / f"{policy.value}{'-'.join(extra)}.xml"
        args = ["export", str(source), "-o", str(out), "--channel-policy", policy.value,
                "--topology", "ndv2:2"]
        assert main(args + (["--scale-remote", *extra] if extra else [])) == 0
        channels[out.stem] = from_xml(out.read_text()).num_channels
    assert channels["one"] == 1 and channels["match-topology3"] == 3
    assert channels["match-topology"] == 2  # two NVLinks join some pairs
    assert main(["export", str(source), "-o", str(tmp_path / "x.xml"), "--scale-remote",
                 "2"]) == 2
    assert "--scale-remote goes with --channel-policy match-topology" in \
        capsys.readouterr().err
