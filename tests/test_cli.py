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


def test_an_option_of_chunks_is_the_chunks_flag(tmp_path, capsys):
    """``--option chunks=N`` (how ``bench`` sets a strategy's chunks) is ``--chunks N``."""
    made = {}
    for name, argv in (("flag", ["--chunks", "3"]), ("option", ["--option", "chunks=3"])):
        out = tmp_path / f"{name}.json"
        code, _, err = run(capsys, "synth", "ring:4", "allreduce", "--strategy", "ring",
                           *argv, "-o", str(out))
        assert code == 0, err
        made[name] = json.loads(out.read_text())
    assert made["flag"] == made["option"]
    assert made["flag"]["collective"]["chunks_per_rank"] == 3


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
    (["synth", "ring:4", "allreduce", "--strategy", "ring", "--chunks", "2", "--option",
      "chunks=3", "-o", "x.json"], "--chunks 2 and --option chunks=3 disagree"),
    (["synth", "ring:4", "allreduce", "--option", "root=1", "-o", "x.json"], "use --root"),
    (["run", "ring:4", "allreduce", "--option", "chunks=two"], "whole number of chunks"),
    # the hostile pass of issue 42: each was accepted (or an OSError traceback) before
    (["p2p", "dgx1", "0", "1", "-o", ""], "-o '': give a file name"),
    (["topo", "show", "ring:4", "--plot", ""], "--plot '': give a file name"),
    (["simulate", "x.json", "ring:4", "--links", "-1"], "--links -1"),
    (["tune", "dgx-a100", "--nccl-tuner", "--collectives", "allreduce,allreduce", "-o",
      "t.conf"], "'allreduce' comes twice"),
    (["tune", "dgx-a100", "--nccl-tuner", "--collectives", ",,", "-o", "t.conf"],
     "an empty name"),
    (["p2p", "dgx1", "0", "1", "--paths", "direct,direct"], "'direct' comes twice"),
    (["synth", "ring:4", "allgather", "-o", "x" * 300 + ".json"], "File name too long"),
    (["export", "x.json", "-o", "x" * 300 + ".xml"], "File name too long"),
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


# ----------------------------------------------------------------- hostile input (issue 11)


def _one_line(err: str) -> None:
    assert err.startswith("ccweave: error:") and err.count("\n") == 1, err
    assert "Traceback" not in err


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_deeply_nested_and_huge_numbers_in_json_files(tmp_path, capsys):
    deep, digits = tmp_path / "deep.json", tmp_path / "digits.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    digits.write_text('{"ranks": ' + "9" * 5000 + ', "links": []}')
    for argv, path in ((["verify", str(deep)], deep), (["topo", "show", str(digits)], digits),
                       (["compare", str(deep), "allgather"], deep)):
        code, _, err = run(capsys, *argv)
        assert code == 2 and str(path) in err
        _one_line(err)
    assert "nested too deep" in run(capsys, "verify", str(deep))[2]


@pytest.mark.parametrize("sizes", ["1KB:1GB:abc", "1" + "0" * 400, "1KB:1GB:nan",
                                   "1KB:1GB:inf", "1KB:1GB:1.0000001"])
def test_bad_sizes_are_one_line(capsys, sizes):
    code, _, err = run(capsys, "bounds", "ring:4", "allgather", "--sizes", sizes)
    assert code == 2
    _one_line(err)
    assert "size" in err and len(err) < 300


def test_a_nan_bandwidth_names_the_file_entry(tmp_path, capsys):
    links = [{"src": a, "dst": b, "bw_GBps": 1, "duplex": True}
             for a, b in ((0, 1), (1, 2), (2, 3), (3, 0))]
    path = tmp_path / "nan.json"
    path.write_text(json.dumps({"ranks": 4, "links": [
        *links, {"src": 0, "dst": 2, "bw_GBps": float("nan"), "duplex": True}]}))
    code, _, err = run(capsys, "topo", "show", str(path))
    assert code == 2 and f"{path}: links[4]: field 'bw_GBps' is NaN" in err
    path.write_text(json.dumps({"ranks": 4, "links": [
        *links, {"src": 0, "dst": 2, "bw_GBps": 1, "alpha_us": 1e999}]}))
    assert "links[4]: field 'alpha_us' is Infinity" in run(capsys, "topo", "show", str(path))[2]


def test_names_with_escape_sequences_print_as_text(tmp_path, capsys):
    path = tmp_path / "evil.json"
    path.write_text(json.dumps({"name": "evil\x1b[31mRED\x1b]0;title\x07[bold]x",
                                "ranks": 2, "links": [{"src": 0, "dst": 1, "bw_GBps": 1,
                                                       "duplex": True}]}))
    for argv in (["topo", "show", str(path)], ["compare", str(path), "allgather",
                                               "--sizes", "1MB"]):
        code, out, err = run(capsys, *argv)
        assert code == 0
        assert "\x1b" not in out + err and "\x07" not in out + err
        assert "evil\\x1b[31mRED\\x1b]0;title\\x07[bold]x" in out


def test_json_never_prints_infinity(tmp_path, capsys):
    sched = tmp_path / "empty.json"
    assert run(capsys, "synth", "ring:4", "allgather", "-o", str(sched))[0] == 0
    data = json.loads(sched.read_text())
    data["transfers"] = []
    sched.write_text(json.dumps(data))
    code, out, _ = run(capsys, "simulate", str(sched), "ring:4", "--unverified", "--json")
    rows = _strict_json(out)
    assert code == 0 and rows[0]["algbw_GBps"] is None and rows[0]["verified"] is False
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"ranks": 1, "fabric": {"sw": "switch"},
                               "links": [{"src": 0, "dst": "sw", "bw_GBps": 1}]}))
    code, out, _ = run(capsys, "compare", str(one), "allreduce", "--sizes", "1MB", "--json")
    rows = _strict_json(out)["results"]
    assert code == 0 and rows and all(row["ratio_to_bound"] is None for row in rows)


@pytest.mark.parametrize(("change", "problem"), [
    (lambda d: d.update(transfers=[]), "never written"),
    (lambda d: [row.__setitem__(8, []) for row in d["transfers"]], "not ordered"),
    (lambda d: d["transfers"].append(d["transfers"][-1]), "also writes it"),
    (lambda d: d["transfers"][0].__setitem__(3, 99), "input buffer has"),
])
def test_simulate_times_proven_schedules_only(tmp_path, capsys, change, problem):
    sched = tmp_path / "s.json"
    assert run(capsys, "synth", "ring:4", "allgather", "-o", str(sched))[0] == 0
    data = json.loads(sched.read_text())
    change(data)
    sched.write_text(json.dumps(data))
    code, out, err = run(capsys, "simulate", str(sched), "ring:4")
    assert code == 2 and out == "" and f"{sched}: " in err and problem in err
    _one_line(err)


def test_simulate_unverified_says_so(tmp_path, capsys):
    sched = tmp_path / "s.json"
    assert run(capsys, "synth", "ring:4", "allgather", "-o", str(sched))[0] == 0
    data = json.loads(sched.read_text())
    for row in data["transfers"]:
        row[8] = []
    sched.write_text(json.dumps(data))
    code, out, _ = run(capsys, "simulate", str(sched), "ring:4", "--unverified")
    assert code == 0 and "UNPROVEN" in out
    data["transfers"][0][3] = 99  # malformed: not even --unverified times it
    sched.write_text(json.dumps(data))
    code, _, err = run(capsys, "simulate", str(sched), "ring:4", "--unverified")
    assert code == 2 and "malformed" in err


def test_transfer_fields_are_honoured_or_refused(tmp_path, capsys):
    sched = tmp_path / "s.json"
    assert run(capsys, "synth", "ring:4", "allgather", "-o", str(sched))[0] == 0
    data = json.loads(sched.read_text())
    fields = data["transfer_fields"][:10]
    reversed_rows = {**data, "transfer_fields": fields[::-1],
                     "transfers": [row[:10][::-1] for row in data["transfers"]]}
    sched.write_text(json.dumps(reversed_rows))
    code, out, _ = run(capsys, "verify", str(sched))
    assert code == 0 and "proven" in out  # the header is read: rows follow it
    sched.write_text(json.dumps({**data, "transfer_fields": fields[::-1]}))
    code, _, err = run(capsys, "verify", str(sched))
    assert code == 2 and "transfers[0]" in err  # rows that do not follow it are refused
    sched.write_text(json.dumps({**data, "transfer_fields": [*fields[:9], "chanel"]}))
    code, _, err = run(capsys, "verify", str(sched))
    assert code == 2 and "unknown field 'chanel'" in err


def test_python_api_errors_are_ccweave_errors():
    from ccweave.errors import CCWeaveError
    from ccweave.simulate import simulate
    from ccweave.synth import synthesize
    from ccweave.topology import zoo

    topo = zoo.get("ring:4")
    with pytest.raises(CCWeaveError, match="zoo name as a string"):
        zoo.get(None)
    with pytest.raises(CCWeaveError, match=r"must be a Topology.*ccweave\.topology\.io\.load"):
        synthesize("ring:4", "allreduce")
    with pytest.raises(CCWeaveError, match="finite number"):
        simulate(synthesize(topo, "allreduce"), topo, 10**400)


def test_an_error_reaches_stderr_as_one_write_of_a_whole_line(monkeypatch):
    """A job's ranks share the launcher's stderr: an error line written in two pieces
    (``print`` sends the newline on its own) ran into another rank's line, and the
    launcher's reader lost one rank's error (a killed-rank test failed on it)."""
    writes: list[str] = []

    class Recorder:
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stderr", Recorder())
    assert main(["topo", "show", "no-such-machine"]) == 2
    assert writes and all(text.endswith("\n") and text.count("\n") == 1 for text in writes)
    assert writes[0].startswith("ccweave: error: ")


def test_a_ctrl_c_python_swallowed_still_stops_the_command(monkeypatch, capsys):
    """A KeyboardInterrupt raised inside a finalizer or weakref callback is printed as
    "Exception ignored" and lost: a ``testbed run`` ran on to exit 0 after one. The
    command remembers the signal and ends 130 all the same."""
    import contextlib
    import signal

    import ccweave.commands.topo as topo

    real = topo.run_show

    def swallowing(args):
        with contextlib.suppress(KeyboardInterrupt):  # as Python ignores one in a callback
            signal.raise_signal(signal.SIGINT)
        return real(args)

    monkeypatch.setattr(topo, "run_show", swallowing)
    code, _, err = run(capsys, "topo", "show", "ring:4")
    assert code == 130 and err == "ccweave: interrupted (SIGINT)\n"
    monkeypatch.setattr(topo, "run_show", real)
    assert run(capsys, "topo", "show", "ring:4")[0] == 0  # nothing pending afterwards


@pytest.mark.parametrize("argv", [["run", "ring:4", "allreduce", "--sizes", "4KB"],
                                  ["run", "ring:4", "allreduce", "--option", "chunks=two"]])
def test_a_command_that_needs_torch_says_so_in_one_line_where_torch_is_missing(argv):
    """``pip install ccweave`` leaves torch out; ``run`` then names it and the fix (it was
    a ModuleNotFoundError traceback from runtime/measure.py)."""
    block = "import sys; sys.modules['torch'] = None; from ccweave.cli import main; "
    proc = subprocess.run([sys.executable, "-c", block + f"sys.exit(main({argv!r}))"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "needs torch" in proc.stderr and "pip install 'ccweave[torch]'" in proc.stderr
