"""The calibration measures its workloads in rounds: every workload once a round, the
rounds in alternating order, the median of each workload's rounds; a workload that
computes wrong elements stops it. End to end on local gloo ranks as well."""

from __future__ import annotations

import json

import pytest

from ccweave.cli import main
from ccweave.errors import RuntimeFault
from ccweave.profile.calibrate import (
    MAX_ITERS,
    ROUNDS,
    TARGET_SECONDS,
    first_round,
    measure,
    workloads,
)
from ccweave.runtime.batch import Case
from ccweave.topology import zoo


def _fake_run(seconds_of: dict[str, list[float]], log: list[list[Case]], wrong: int = 0):
    """A runner that answers each case with the next of its times and logs each round."""
    def run(cases: list[Case]) -> list[dict]:
        log.append(cases)
        return [{"case": case.name, "schedule": case.schedule.name,
                 "size_bytes": case.sizes[0],
                 "out_of_place": {"time_us": seconds_of[case.name].pop(0) * 1e6,
                                  "wrong": wrong}}
                for case in cases]
    return run


def test_each_workload_once_a_round_in_alternating_order_and_its_median_kept():
    loads = workloads(zoo.get("switch:3"), (1 << 16,))
    names = [case.name for case in first_round(loads)]
    assert len(loads) >= 4 and len(set(names)) == len(loads)
    # the second workload has a slow spell in its second round: its median ignores it
    seconds_of = {name: [0.01 * (i + 1)] * ROUNDS for i, name in enumerate(names)}
    seconds_of[names[1]][1] = 5.0
    log: list[list[Case]] = []
    measured = measure(loads, _fake_run(seconds_of, log))
    assert measured == pytest.approx([0.01 * (i + 1) for i in range(len(loads))])
    assert len(log) == ROUNDS and all(len(round_) == len(loads) for round_ in log)
    assert [case.name for case in log[0]] == names
    assert [case.name for case in log[1]] == names[::-1]
    assert [case.name for case in log[2]] == names
    first, later = log[0][0], log[1][-1]
    assert (first.warmup, first.target_s, first.iters) == (1, TARGET_SECONDS, MAX_ITERS)
    # later rounds run as often as the first round's time says lasts the target
    assert (later.warmup, later.target_s) == (0, None)
    assert later.iters == min(MAX_ITERS, round(TARGET_SECONDS / 0.01))
    assert log[1][0].iters == round(TARGET_SECONDS / (0.01 * len(loads)))


def test_a_workload_with_wrong_elements_stops_the_calibration():
    loads = workloads(zoo.get("switch:3"), (1 << 16,))
    seconds_of = {case.name: [0.01] * ROUNDS for case in first_round(loads)}
    with pytest.raises(RuntimeFault, match="wrong elements"):
        measure(loads, _fake_run(seconds_of, [], wrong=3))


def test_a_local_calibration_fits_every_workload(capsys):
    pytest.importorskip("torch")
    code = main(["profile", "--nproc", "3", "--no-pairs", "--no-cuda", "--base", "switch:3",
                 "--calibrate", "--calibrate-sizes", "64KB", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    expected = workloads(zoo.get("switch:3"), (1 << 16,))
    rows = report["calibration"]
    assert sorted((r["schedule"], r["size_bytes"]) for r in rows) == sorted(
        (w.schedule.name, w.size_bytes) for w in expected)
    assert all(r["measured_s"] > 0 and r["predicted_s"] > 0 for r in rows)
    assert report["cost_model"]["source"].startswith("fitted")
