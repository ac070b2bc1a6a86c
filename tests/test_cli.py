"""The CLI: each command end to end, and bad input as one line with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ccweave.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_synth_verify_simulate_round_trip(tmp_path, capsys):
    sched = tmp_path / "ring.json"
    code, out, _ = run(capsys, "synth", "dgx1", "allreduce", "--strategy", "ring",
                       "-o", str(sched))
    assert code == 0 and "verified" in out
    code, out, _ = run(capsys, "verify", str(sched), "--topology", "dgx1")
    assert code == 0 and "proven" in out
    code, out, _ = run(capsys, "simulate", str(sched), "dgx1", "--sizes", "1MB,1GB", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["size_bytes"] for r in rows] == [2**20, 2**30]
    assert rows[1]["busbw_GBps"] > rows[0]["busbw_GBps"] > 0


def test_verify_exits_1_with_the_reason(tmp_path, capsys):
    sched = tmp_path / "ag.json"
    assert run(capsys, "synth", "switch:4", "allgather", "--strategy", "direct",
               "-o", str(sched))[0] == 0
    data = json.loads(sched.read_text())
    del data["transfers"][-1]
    sched.write_text(json.dumps(data))
    code, out, _ = run(capsys, "verify", str(sched))
    assert code == 1 and "NOT proven" in out and "never written" in out


def test_compare_json_has_the_documented_fields(capsys):
    code, out, _ = run(capsys, "compare", "ring:8", "allgather", "--sizes", "1MB,1GB",
                       "--json")
    report = json.loads(out)
    rows = report["results"]
    assert code == 0 and report["topology"] == "ring:8" and report["collective"] == "allgather"
    fields = {"strategy", "size_bytes", "time_s", "algbw_GBps", "busbw_GBps", "bound_s",
              "ratio_to_bound"}
    assert all(fields <= set(row) for row in rows)
    ring_1g = next(r for r in rows if r["strategy"] == "ring" and r["size_bytes"] == 2**30)
    assert ring_1g["ratio_to_bound"] < 1.01
    assert sum(r["best"] for r in rows) == 2


def test_compare_all_adds_the_solver_strategies(capsys):
    code, out, _ = run(capsys, "compare", "switch:4", "allgather", "--sizes", "1MB,1GB",
                       "--json")
    fast = {row["strategy"] for row in json.loads(out)["results"]}
    code_all, out_all, _ = run(capsys, "compare", "switch:4", "allgather", "--sizes",
                               "1MB,1GB", "--strategies", "all", "--json")
    every = {row["strategy"] for row in json.loads(out_all)["results"]}
    assert code == code_all == 0
    assert "taccl" not in fast and every == fast | {"taccl"}


def test_compare_json_lists_refused_strategies_with_the_reason(capsys):
    """ring:6 has no power-of-two ranks and no node groups: those strategies refuse."""
    code, out, _ = run(capsys, "compare", "ring:6", "allreduce", "--sizes", "1MB", "--json")
    report = json.loads(out)
    refused = {row["strategy"]: row["reason"] for row in report["refused"]}
    assert code == 0 and "power-of-two number of ranks" in refused["recursive-doubling"]
    shown = {row["strategy"] for row in report["results"]}
    assert not shown & set(refused)


def test_synth_auto_and_sized_strategies_write_a_plan_per_size(tmp_path, capsys):
    from ccweave import plan as plan_io

    path = tmp_path / "auto.json"
    code, out, _ = run(capsys, "synth", "switch:4", "alltoall", "--strategy", "auto",
                       "--sizes", "1KB,1GB", "--strategies", "direct,ring", "-o", str(path),
                       "--json")
    assert code == 0 and json.loads(out)["plan"] == "auto(switch:4, alltoall)"
    assert plan_io.load(path).schedule_for(2**30).name.startswith("direct")
    path = tmp_path / "multipath.json"
    code, out, _ = run(capsys, "synth", "mist", "sendrecv", "--strategy", "multipath",
                       "--sizes", "8KB,1GB", "-o", str(path))
    plan = plan_io.load(path)
    assert code == 0 and len(plan.entries) == 2 and "schedule tuned" in out
    assert len(plan.schedule_for(8 * 2**10).metadata["paths"]) == 1
    code, _, err = run(capsys, "synth", "mist", "allreduce", "--strategies", "ring",
                       "-o", str(path))
    assert code == 2 and "--strategy auto" in err


def test_p2p_writes_a_plan_per_size_and_plots_each_path_set(tmp_path, capsys):
    """8 KB goes over the direct link alone, 1 GB striped: the plan keeps both."""
    from ccweave import plan as plan_io
    from ccweave.commands.p2p import path_sets

    path, png = tmp_path / "p2p.json", tmp_path / "p2p.png"
    code, _, _ = run(capsys, "p2p", "mist", "0", "1", "--sizes", "8KB,1GB", "-o", str(path),
                     "--plot", str(png))
    plan = plan_io.load(path)
    assert code == 0 and png.stat().st_size > 10_000
    assert [len(e.schedule.metadata["paths"]) for e in plan.entries] == [1, 2]
    assert plan.collective.kind.value == "sendrecv"
    assert path_sets(("relay", "direct")) == [("direct",), ("direct", "relay")]


def test_tables_pick_one_time_unit_instead_of_exponents(capsys):
    code, out, _ = run(capsys, "compare", "ring:8", "allgather", "--sizes", "1KB,4GB",
                       "--strategies", "ring,direct")
    assert code == 0 and "time(ms)" in out and "bound(ms)" in out and "e+0" not in out
    code, out, _ = run(capsys, "bounds", "ring:8", "allgather", "--sizes", "1KB,8KB")
    assert code == 0 and "bound(us)" in out and "e-0" not in out


def test_bounds_and_topo_show(tmp_path, capsys):
    code, out, _ = run(capsys, "bounds", "dgx-a100:2", "allgather", "--sizes", "1GB", "--json")
    assert code == 0 and json.loads(out)[0]["busbw_GBps"] == pytest.approx(325, rel=1e-3)
    png = tmp_path / "t.png"
    code, out, _ = run(capsys, "topo", "show", "mist", "--plot", str(png))
    assert code == 0 and "mist" in out and png.stat().st_size > 1000


@pytest.mark.parametrize(("argv", "message"), [
    (["topo", "show", "dgx9"], "unknown topology 'dgx9'"),
    (["compare", "dgx1", "allsum"], "unknown collective 'allsum'"),
    (["synth", "dgx1", "allgather", "--strategy", "magic", "-o", "x.json"],
     "unknown strategy 'magic'"),
    (["bounds", "dgx1", "allgather", "--sizes", "lots"], "size 'lots'"),
    (["synth", "ring:8", "alltoall", "--strategy", "direct", "-o", "x.json"], "no route"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("content", ['{"ranks": 2, "links": []}', "{broken", '{"ranks": 4, '
                                     '"links": [{"src": 0, "dst": 1, "bw_GBps": 1}]}'])
def test_bad_topology_files_exit_2(tmp_path, capsys, content):
    path = tmp_path / "topo.json"
    path.write_text(content)
    code, _, err = run(capsys, "compare", str(path), "allgather")
    assert code == 2 and str(path) in err and err.count("\n") == 1


def test_corrupted_schedule_file_exits_2(tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text('{"format": "ccweave.schedule", "version": 1, "collective": '
                    '{"kind": "allgather", "ranks": 2}, "transfers": [[0, 1, "q"]]}')
    code, _, err = run(capsys, "verify", str(path))
    assert code == 2 and "transfers[0]" in err


def test_console_script_runs_as_a_process():
    proc = subprocess.run([sys.executable, "-m", "ccweave", "topo", "show", "ring:4", "--json"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ranks"] == 4
