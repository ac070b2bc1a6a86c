"""Inputs that would eat the machine are refused before anything is allocated, with one
line naming the input, the estimate and the limit; the project's own largest figures
(1024-rank synthesis of dgx-a100:128) stay inside the limits."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest

from ccweave import limits, units
from ccweave.cli import build_parser, main
from ccweave.collectives import Collective, Kind
from ccweave.errors import LimitError
from ccweave.schedule import Schedule, Transfer
from ccweave.topology import zoo

FAST_S = 10.0
"""A refusal is immediate; the inputs below took 15 s to several minutes before."""
SMALL = 64 * 2**20
"""Python-side memory a refusal may allocate (the inputs took 3.5 to 16.7 GB before)."""

build_parser()  # import every command now, not inside the first timed refusal


def refused(capsys, *argv: str) -> str:
    """Run ``ccweave ARGV``: it must exit 2 at once, in one line, allocating little."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        code = main(list(argv))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert code == 2, err
    assert time.monotonic() - started < FAST_S
    assert peak < SMALL, f"{peak / 2**20:.0f} MB allocated"
    assert err.startswith("ccweave: error:") and err.count("\n") == 1, err
    return err


def _schedule_file(tmp_path, **collective) -> str:
    data = {"format": "ccweave.schedule", "version": 1, "name": "x",
            "collective": {"kind": "allgather", "ranks": 4, "chunks_per_rank": 1,
                           **collective},
            "transfers": [[0, 1, "i", 0, "o", 0, 1, "c", [], 0]]}
    path = tmp_path / "sched.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize(("spec", "estimate"), [
    ("torus:1000x1000x1000", "1,000,000,000 ranks"),
    ("hypercube:40", "2**40 ranks"),
    ("dgx1:99999", "799,992 ranks"),
    ("ring:100000", "100,000 ranks"),
    ("fully-connected:2000", "3,998,000 directed links"),
    ("ring:" + "9" * 5000, "more than 12 digits"),
])
def test_topology_specs_over_the_limits(capsys, spec, estimate):
    err = refused(capsys, "topo", "show", spec)
    assert estimate in err and "limit of" in err


def test_a_topology_file_of_a_billion_ranks(tmp_path, capsys):
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"ranks": 10**9, "links": [{"src": 0, "dst": 1,
                                                           "bw_GBps": 1, "duplex": True}]}))
    err = refused(capsys, "topo", "show", str(path))
    assert f"{path}: field 'ranks': 1,000,000,000 ranks, over the limit of 4,096" in err


def test_a_100000_rank_file_in_compare(tmp_path, capsys):
    path = tmp_path / "ring.json"
    n = 100_000
    path.write_text(json.dumps({"ranks": n, "links": [  # the first 5000 links of a ring
        {"src": r, "dst": (r + 1) % n, "bw_GBps": 1, "duplex": True} for r in range(5000)]}))
    assert "100,000 ranks, over the limit" in refused(capsys, "compare", str(path),
                                                       "allgather")


def test_compare_on_100000_ranks(capsys):
    assert "100,000 ranks" in refused(capsys, "compare", "ring:100000", "allgather")


@pytest.mark.parametrize(("collective", "estimate"), [
    ({"ranks": 10**9}, "1,000,000,000 ranks"),
    ({"chunks_per_rank": 10**9}, "1,000,000,000 chunks per rank"),
    ({"ranks": 4096, "chunks_per_rank": 8}, "buffer slots"),
])
def test_schedule_files_declaring_huge_collectives(tmp_path, capsys, collective, estimate):
    err = refused(capsys, "verify", _schedule_file(tmp_path, **collective))
    assert estimate in err and "field 'collective'" in err


def test_a_schedule_file_with_huge_scratch(tmp_path, capsys):
    path = tmp_path / "s.json"
    data = json.loads(Path(_schedule_file(tmp_path)).read_text())
    path.write_text(json.dumps({**data, "scratch_chunks": 10**12}))
    assert "buffer slots" in refused(capsys, "verify", str(path))


def test_sizes_that_make_too_many_or_too_large(capsys):
    err = refused(capsys, "bounds", "ring:4", "allgather", "--sizes", "1KB:1GB:1.0000001")
    assert "138,629,443 sizes, over the limit of 1,000" in err
    err = refused(capsys, "bounds", "ring:4", "allgather", "--sizes", "1" + "0" * 400)
    assert "over the limit of 1024TB" in err


def test_too_many_chunks_per_rank(tmp_path, capsys):
    err = refused(capsys, "synth", "ring:4", "allreduce", "--chunks", "1000000",
                  "-o", str(tmp_path / "x.json"))
    assert "1,000,000 chunks per rank, over the limit of 32,768" in err
    assert not (tmp_path / "x.json").exists()


def test_the_projects_largest_figures_fit():
    # what dgx-a100:128 synthesizes: ring allreduce 8 chunks, hierarchical allreduce 16
    for chunks in (8, 16):
        Collective(Kind.ALLREDUCE, 1024, chunks)
    with pytest.raises(LimitError, match="buffer slots"):
        Collective(Kind.ALLREDUCE, 1024, 20)
    assert zoo.get("dgx-a100:128").num_ranks == 1024
    assert limits.MAX_LINKS >= 1024 * 1023  # fully-connected:1024


def test_scratch_counts_in_the_slots():
    coll = Collective(Kind.ALLREDUCE, 1024, 16)
    move = (Transfer(0, 1, "input", 0, "output", 0),)
    Schedule(coll, move, scratch_chunks=0)
    with pytest.raises(LimitError, match="scratch"):
        Schedule(coll, move, scratch_chunks=16384)


def test_a_size_spelled_exactly():
    assert units.parse_size("1.5MB") == 3 * 2**19
    assert units.parse_size("0.1KB") == 102  # exact decimal, rounded down like int()
    assert units.parse_size("1024TB") == limits.MAX_SIZE_BYTES
