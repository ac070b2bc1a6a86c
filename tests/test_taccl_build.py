"""The taccl strategy end to end: every collective it builds verifies, options and
errors, the time limit, the classic fallback, progress, and the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

import ccweave.synth.taccl  # noqa: F401  (registers the strategy)
from ccweave.cli import main
from ccweave.collectives import Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.schedule import load
from ccweave.simulate import simulate
from ccweave.synth.registry import get_strategy, synthesize
from ccweave.synth.taccl.build import TacclOptions, self_reverse, synthesize_taccl
from ccweave.synth.taccl.progress import Progress
from ccweave.topology import zoo
from ccweave.verify import verify
from tests.test_taccl_stages import two_node_toy

SKETCHES = Path(__file__).resolve().parent.parent / "examples" / "sketches"
QUICK = {"time_limit": 10.0, "contiguity_time_limit": 1.0}
KINDS = [Kind.ALLGATHER, Kind.ALLTOALL, Kind.REDUCESCATTER, Kind.ALLREDUCE]


def build(topology, kind, size=2**20, chunks=1, **options):
    return synthesize_taccl(topology, kind, chunks,
                            TacclOptions(size=size, fallback=False, **{**QUICK, **options}))


@pytest.mark.parametrize("name", ["switch:4", "ring:4", "toy"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_collective_verifies_on_small_machines(name, kind):
    topology = two_node_toy() if name == "toy" else zoo.get(name)
    for size in (2**12, 2**26):
        schedule = build(topology, kind, size)
        verify(schedule, topology)
        assert schedule.collective.kind is kind
        assert simulate(schedule, topology, size).time_s > 0


@pytest.mark.parametrize("kind", KINDS)
def test_ndv2_pair_under_a_short_time_limit(kind):
    topology = zoo.get("ndv2:2")
    schedule = build(topology, kind, 2**24, chunks=2, time_limit=5.0)
    verify(schedule, topology)


def test_taccl_beats_the_ring_where_the_nic_is_the_bottleneck():
    topology = zoo.get("ndv2:2")
    size = 256 * 2**20
    sketch = str(SKETCHES / "ndv2-2.json")
    schedule = build(topology, Kind.ALLGATHER, size, chunks=None, sketch=sketch)
    ring = synthesize(topology, Kind.ALLGATHER, "ring")
    ours = simulate(schedule, topology, size).time_s
    assert simulate(ring, topology, size).time_s / ours >= 1.5
    from ccweave.bounds import lower_bound

    assert ours / lower_bound(topology, Kind.ALLGATHER, size).time_s <= 1.25


def test_shipped_sketches_synthesize_what_they_say():
    for stem, machine, kind in (("dgx2-2", "dgx2:2", Kind.ALLGATHER),
                                ("dgx2-2-alltoall", "dgx2:2", Kind.ALLTOALL),
                                ("dgx-a100-2", "dgx-a100:2", Kind.ALLGATHER),
                                ("one-node-switch", "dgx-a100", Kind.ALLREDUCE)):
        topology = zoo.get(machine)
        schedule = build(topology, kind, 2**24, chunks=None,
                         sketch=str(SKETCHES / f"{stem}.json"))
        verify(schedule, topology)
        assert stem in schedule.name


def test_time_limit_returns_a_schedule_with_its_gap():
    topology = zoo.get("ndv2:2")
    schedule = build(topology, Kind.ALLGATHER, 2**20, chunks=2,
                     sketch=str(SKETCHES / "ndv2-2.json"), time_limit=3.0,
                     contiguity_time_limit=0.2)
    verify(schedule, topology)
    report = schedule.metadata["taccl"]
    for stage in ("routing", "contiguity"):
        facts = report[stage]
        assert facts["status"] in ("optimal", "within gap", "time limit", "skipped",
                                   "heuristic")
        if facts["status"] == "time limit":
            assert facts["gap"] > 0 and "MIP gap" in facts["note"]
            assert "not proven optimal" in facts["note"]
    assert report["contiguity"]["status"] == "time limit"


def test_fallback_returns_the_faster_classic_and_says_so():
    topology = zoo.get("ndv2:2")
    one_relay = str(SKETCHES / "ndv2-2.json")  # alltoall through one relay per node: slow
    schedule = synthesize(topology, Kind.ALLTOALL, "taccl", size=2**24, sketch=one_relay,
                          chunks=1, time_limit=10.0)
    verify(schedule, topology)
    assert schedule.name.startswith("taccl->")
    assert "simulates faster" in schedule.metadata["fallback"]
    assert schedule.metadata["best_classic_us"] < schedule.metadata["taccl_time_us"]
    kept = synthesize(topology, Kind.ALLTOALL, "taccl", size=2**24, sketch=one_relay,
                      chunks=1, time_limit=10.0, fallback=False)
    assert kept.name.startswith("taccl(")


@pytest.mark.parametrize("channels", ["alternate", "one"])
def test_the_returned_schedule_is_what_the_export_runs(channels):
    """With channels=one MSCCL fuses relays, adding waits: the schedule returned is then
    the one the XML describes; either way the XML simulates as the schedule does."""
    from ccweave.export.msccl_xml import from_xml, to_xml

    topology = zoo.get("ndv2:2")
    for kind in (Kind.ALLGATHER, Kind.ALLREDUCE):
        schedule = build(topology, kind, 2**24, chunks=2, channels=channels)
        verify(schedule, topology)
        ours = simulate(schedule, topology, 2**24).time_s
        assert simulate(from_xml(to_xml(schedule)), topology, 2**24).time_s == \
            pytest.approx(ours, rel=1e-9)
        assert "MSCCL XML" in schedule.metadata["export"]
        if channels == "alternate":
            assert schedule.num_channels > 1


def test_compare_names_a_fallback_in_its_strategy_column(monkeypatch):
    """A taccl row that holds a classic schedule says so: ``taccl->direct``."""
    import ccweave.compare as compare_mod

    topology = zoo.get("ndv2:2")
    fell_back = synthesize(topology, Kind.ALLTOALL, "taccl", size=2**24, chunks=1,
                           sketch=str(SKETCHES / "ndv2-2.json"), time_limit=10.0)
    assert fell_back.metadata["fallback"]
    real = compare_mod._schedules

    def schedules(topology, kind, name, sizes, *rest):
        if name == "taccl":
            return dict.fromkeys(sizes, fell_back)
        return real(topology, kind, name, sizes, *rest)

    monkeypatch.setattr(compare_mod, "_schedules", schedules)
    result = compare_mod.compare(topology, Kind.ALLTOALL, [2**24], ["taccl", "ring"])
    names = sorted(r.strategy for r in result.results)
    best_classic = fell_back.metadata["best_classic"]
    assert names == sorted(["ring", f"taccl->{best_classic}"])
    row = next(r for r in result.results if r.strategy.startswith("taccl"))
    assert result.schedule(row) is fell_back


def test_candidates_are_listed_and_the_fastest_kept():
    topology = two_node_toy()
    schedule = synthesize_taccl(topology, Kind.ALLGATHER, None,
                                TacclOptions(size=2**24, fallback=False, **QUICK))
    tried = schedule.metadata["candidates"]
    timed = [c["time_us"] for c in tried if "time_us" in c]
    assert len(tried) >= 2 and simulate(schedule, topology, 2**24).time_s * 1e6 == \
        pytest.approx(min(timed))


def test_progress_reports_every_stage():
    events: list[Progress] = []
    build(two_node_toy(), Kind.ALLGATHER, 2**14, progress=events.append)
    stages = {e.stage for e in events}
    assert {"routing", "ordering", "contiguity"} <= stages
    assert all(str(e).startswith("taccl ") for e in events)


@pytest.mark.parametrize(("options", "text"), [
    ({"colour": 1}, "has no option 'colour'"),
    ({"size": 0}, "size must be a positive number"),
    ({"size": "big"}, "size 'big'"),
    ({"time_limit": -1}, "time_limit"),
    ({"max_paths": 1.5}, "max_paths must be a positive integer"),
    ({"fallback": "yes"}, "fallback must be true or false"),
    ({"routing": "lp"}, "routing is 'lp'; use one of milp, trees"),
    ({"ordering": "fifo"}, "ordering is 'fifo'; use one of best, joint, earliest-start"),
    ({"reduce_order": "x"}, "reduce_order is 'x'"),
    ({"channels": "two"}, "channels is 'two'; use one of alternate, one"),
    ({"relay_hops": 2, "routing": "trees"}, "relay_hops above 1 needs routing=milp"),
    ({"contiguity_window": 0}, "contiguity_window must be a positive integer"),
    ({"profile_scale": -1}, "profile_scale must be a positive number"),
])
def test_bad_options_are_named(options, text):
    with pytest.raises(InputError, match=r"taccl|size") as error:
        TacclOptions.parse(options)
    assert text in str(error.value)


def test_registered_and_refuses_what_it_does_not_build():
    strategy = get_strategy("taccl")
    assert strategy.slow and not strategy.classic
    assert Kind.BROADCAST not in strategy.collectives
    with pytest.raises(NotApplicableError):
        synthesize(zoo.get("switch:4"), Kind.BROADCAST, "taccl")


def test_reduce_scatter_on_an_asymmetric_machine():
    from ccweave.topology.model import Link, Topology

    links = (Link(0, 1, 50e9, 1e-6), Link(1, 2, 50e9, 1e-6), Link(2, 0, 50e9, 1e-6),
             Link(1, 0, 10e9, 1e-6), Link(2, 1, 10e9, 1e-6), Link(0, 2, 10e9, 1e-6))
    topology = Topology("tri", 3, links)
    assert not self_reverse(topology)
    schedule = build(topology, Kind.REDUCESCATTER, 2**20,
                     sketch=None, chunks=2)
    verify(schedule, topology)


# -------------------------------------------------------------------------- CLI


def test_cli_synth_with_sketch_size_and_time_limit(tmp_path, capsys):
    out = tmp_path / "ag.json"
    code = main(["synth", "ndv2:2", "allgather", "--strategy", "taccl",
                 "--sketch", str(SKETCHES / "ndv2-2.json"), "--size", "64MB",
                 "--time-limit", "10", "--chunks", "1", "-o", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "verified" in printed and "routing (milp):" in printed
    schedule = load(out)
    assert schedule.collective.kind is Kind.ALLGATHER


def test_cli_bad_sketch_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"internode": {"senders": [12]}}')
    code = main(["synth", "ndv2:2", "allgather", "--strategy", "taccl", "--sketch", str(bad),
                 "-o", str(tmp_path / "x.json")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.json: internode.senders names local rank 12" in err


def test_one_rank_is_a_local_copy():
    from ccweave.topology.model import Topology

    alone = Topology("one", 1, ())
    for kind in KINDS:
        schedule = synthesize(alone, kind, "taccl", size=2**20)
        verify(schedule, alone)
        assert len(schedule.transfers) == 1


def test_custom_topology_file_with_a_one_node_sketch(tmp_path, capsys):
    """What TACCL's public code crashes on: a custom machine, a sketch without nodes."""
    import json

    links = [{"src": r, "dst": "sw0", "bw_GBps": 25, "alpha_us": 0.7, "duplex": True}
             for r in range(4)]
    links.append({"src": 0, "dst": 1, "bw_GBps": 50, "alpha_us": 0.3, "duplex": True})
    topo = tmp_path / "quad.json"
    topo.write_text(json.dumps({"name": "quad", "ranks": 4, "fabric": {"sw0": "switch"},
                                "links": links}))
    sketch = tmp_path / "sk.json"
    sketch.write_text(json.dumps({"intranode": {"strategy": "routes"}, "input_chunkup": 2}))
    for kind in ("allgather", "alltoall", "allreduce"):
        out = tmp_path / f"{kind}.json"
        assert main(["synth", str(topo), kind, "--strategy", "taccl", "--sketch", str(sketch),
                     "--size", "4MB", "--time-limit", "10", "-o", str(out)]) == 0
        assert load(out).collective.kind is Kind.parse(kind)
    assert "verified" in capsys.readouterr().out
