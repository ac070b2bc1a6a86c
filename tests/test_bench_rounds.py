"""How ``ccweave bench`` times its cases: in rounds, so a drift in the host's load falls
on every schedule alike (on the emulated rail machine one schedule measured 801-1011 ms
in successive benches; timed back to back, a schedule run during a busy spell lost)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ccweave.bench.cases import Entry, batch_cases, median_row
from ccweave.collectives import Collective, Kind
from ccweave.synth import synthesize
from ccweave.topology import zoo


def _entries() -> list[Entry]:
    topology = zoo.get("switch:4")
    size = 1 << 20
    return [Entry(name, "gloo", schedules={size: synthesize(topology, "allreduce", name)},
                  predicted={size: 0.01}) for name in ("ring", "direct")] + \
        [Entry("gloo all_reduce", "gloo", native=True)]


def test_every_case_runs_once_a_round_in_alternating_order():
    collective = Collective(Kind.ALLREDUCE, 4)
    cases = batch_cases(_entries(), [1 << 20], collective, "gloo", reps=3, warmup=2)
    names = [case.name for case in cases]
    first = names[:3]
    assert len(set(first)) == 3
    assert names == first + first[::-1] + first
    assert [case.warmup for case in cases] == [2] * 3 + [0] * 6  # only the first round
    assert all(case.reps == 1 for case in cases)


def _row(time_us: float, wrong: int) -> dict:
    return {"case": "c", "out_of_place": {"time_us": time_us, "wrong": wrong}}


def test_the_median_round_is_kept_and_any_wrong_element_reported():
    row = median_row([_row(5.0, 0), _row(1.0, 3), _row(3.0, 0)])
    assert row["out_of_place"]["time_us"] == 3.0
    assert row["out_of_place"]["wrong"] == 3  # a wrong round is never hidden by the median
    assert row["round_times_us"] == [5.0, 1.0, 3.0]
    assert median_row([_row(4.0, 0), _row(2.0, 0)])["out_of_place"]["time_us"] == 2.0


def test_a_bench_of_rounds_reports_one_row_per_schedule(tmp_path):
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, "-m", "ccweave.cli", "bench", "switch:3", "allreduce", "--sizes",
         "64KB", "--strategies", "ring,direct", "--baselines", "gloo", "--testbed", "none",
         "--no-calibrate", "--reps", "3", "--json"], capture_output=True, text=True,
        timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert sorted(row["algorithm"] for row in rows) == ["direct", "gloo all_reduce", "ring"]
    assert all(row["wrong"] == 0 and row["measured_s"] > 0 for row in rows)
    for row in rows:  # every round's time is reported, the median one as the row's
        assert len(row["round_s"]) == 3
        assert row["measured_s"] == sorted(row["round_s"])[1]
