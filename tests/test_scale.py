"""Synthesis at scale: compact bookkeeping must not change a schedule, and must stay small.

The digests were taken from the schedules the ring and hierarchical strategies built before
their bookkeeping was made compact (tuple-keyed dicts, a closure per hop); the same
transfers and deps must come out. A deliberate change to a strategy's output updates them
(print ``_digest(schedule)`` for the new ones).
"""

from __future__ import annotations

import gc
import hashlib
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from ccweave.schedule import Schedule, to_dict
from ccweave.synth.registry import synthesize
from ccweave.topology import zoo

DIGESTS = {
    ("dgx1", "ring", "allgather"): "477b1b0275401671",
    ("dgx1", "ring", "allreduce"): "be69470e8dc4120e",
    ("dgx1", "ring", "alltoall"): "a348dd46384edab0",
    ("dgx1", "ring", "broadcast"): "275c0ad7ea31b9bf",
    ("dgx1", "ring", "gather"): "b99a1223210be9c9",
    ("dgx1", "ring", "reduce"): "20fd247e20439888",
    ("dgx1", "ring", "reducescatter"): "46435d5bfeef88da",
    ("dgx1", "ring", "scatter"): "820e1598589aa66a",
    ("dgx2:2", "hierarchical", "allreduce"): "79c3e3a166ad7e38",
    ("dgx2:2", "ring", "allreduce"): "e72233e3081d7a4d",
    ("ndv2:2", "hierarchical", "allgather"): "c56efa615d4b341b",
    ("ndv2:2", "hierarchical", "allreduce"): "b891ce059db678f4",
    ("ndv2:2", "hierarchical", "reducescatter"): "db59f179a1fe8df3",
    ("ndv2:2", "ring", "allgather"): "376d51baa06a18b4",
    ("ndv2:2", "ring", "allreduce"): "f49dc929329be7f5",
    ("ndv2:2", "ring", "alltoall"): "591c3264c6430289",
    ("ndv2:2", "ring", "broadcast"): "3fb27c749bceddb8",
    ("ndv2:2", "ring", "gather"): "2b51eee272b05a17",
    ("ndv2:2", "ring", "reduce"): "fe6d9ae5c61635ca",
    ("ndv2:2", "ring", "reducescatter"): "3fabfc1cd6aec7f7",
    ("ndv2:2", "ring", "scatter"): "c1cc73de2fd08608",
    ("ring:8", "ring", "allgather"): "4571731375bb705e",
    ("ring:8", "ring", "allreduce"): "592a93a358d63826",
    ("ring:8", "ring", "alltoall"): "3525d596f336f689",
    ("ring:8", "ring", "broadcast"): "a6e37e3c2877b780",
    ("ring:8", "ring", "gather"): "d3cae538fbb45df2",
    ("ring:8", "ring", "reduce"): "7542a0d2382cb1ef",
    ("ring:8", "ring", "reducescatter"): "677239a4a44057cf",
    ("ring:8", "ring", "scatter"): "10db9860ec937cb1",
    ("torus:3x3", "ring", "allgather"): "1239f925b13f8ef8",
    ("torus:3x3", "ring", "allreduce"): "86498a266281f360",
    ("torus:3x3", "ring", "alltoall"): "d29b6721a8ffefea",
    ("torus:3x3", "ring", "broadcast"): "47afb0f210912f15",
    ("torus:3x3", "ring", "gather"): "edbfcd5d1bad39ed",
    ("torus:3x3", "ring", "reduce"): "0fe34141b2f8f4f2",
    ("torus:3x3", "ring", "reducescatter"): "4a31a72eea956028",
    ("torus:3x3", "ring", "scatter"): "3992995dfde3a941",
}


def _digest(schedule: Schedule) -> str:
    """The schedule's name, scratch, in-place flag and every transfer (with deps), hashed."""
    data = to_dict(schedule)
    canon = [data["name"], data["scratch_chunks"], data["in_place"], data["transfers"]]
    return hashlib.sha256(json.dumps(canon, separators=(",", ":")).encode()).hexdigest()[:16]


@pytest.mark.parametrize(("topology", "strategy", "kind"), sorted(DIGESTS))
def test_schedules_are_those_built_before(topology, strategy, kind):
    schedule = synthesize(zoo.get(topology), kind, strategy)
    assert _digest(schedule) == DIGESTS[(topology, strategy, kind)]


def _retained_bytes(schedule: Schedule) -> int:
    """Bytes the schedule's transfers hold: the objects, their deps tuples and the ints."""
    seen: set[int] = set()
    total = sys.getsizeof(schedule.transfers)
    for t in schedule.transfers:
        for obj in (t, t.deps, t.src_index, t.dst_index, *t.deps):
            if id(obj) not in seen:
                seen.add(id(obj))
                total += sys.getsizeof(obj)
    return total


@pytest.mark.parametrize(("kind", "strategy"), [("allgather", "ring"), ("allreduce", "ring"),
                                                ("reducescatter", "ring"),
                                                ("allreduce", "hierarchical")])
def test_synthesis_needs_little_beyond_its_result(kind, strategy):
    """Peak memory while synthesizing stays within a small factor of the finished
    schedule (the bookkeeping used to take 4-10x the result)."""
    topology = zoo.get("dgx-a100:4")
    synthesize(topology, kind, strategy)  # the ring search is remembered per topology
    gc.collect()
    tracemalloc.start()
    try:
        schedule = synthesize(topology, kind, strategy)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.6 * _retained_bytes(schedule)


def test_transfers_share_their_small_ints():
    """Slot indices are shared int objects, so a transfer costs its object and deps."""
    schedule = synthesize(zoo.get("dgx-a100:2"), "allgather", "ring")
    indices = {id(t.dst_index) for t in schedule.transfers}
    assert len(indices) <= schedule.collective.output_chunks + schedule.scratch_chunks


def test_the_scale_benchmark_runs_and_reports_json():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "scale.py"
    done = subprocess.run([sys.executable, str(script), "--topology", "dgx-a100:2",
                           "--cases", "ring-allgather,allgather-bound", "--json"],
                          capture_output=True, text=True, check=True, timeout=300)
    result = json.loads(done.stdout)
    ring, bound = result["cases"]
    assert ring["transfers"] == len(synthesize(zoo.get("dgx-a100:2"), "allgather").transfers)
    assert 0 < ring["peak_rss_GiB"] < 1 and ring["x_yardstick"] > 0
    assert bound["bound_us_at_1GiB"] > 0 and result["all_within_limit"]
