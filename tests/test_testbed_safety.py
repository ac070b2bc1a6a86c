"""The testbed never touches what ccweave did not make, survives bad state, refuses what
it cannot build in reasonable time, and its jobs die with their launcher: a bare
``testbed down`` leaves other tools' namespaces and running testbeds alone; a SIGKILLed
``testbed run`` leaves no rank, namespace or folder; a rank's death is named with its
signal and its last lines, as lines."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccweave.errors import InputError, LimitError
from ccweave.testbed import Testbed, clear_testbeds, emulate, records
from ccweave.testbed.emulation import PREFIX
from tests.test_testbed import (
    kill_processes_with,
    namespaces,
    needs_netns,
    processes_with,
    star,
)


def cli(*argv: str, env: dict[str, str] | None = None, timeout: float = 120
        ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ccweave.cli", *argv], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def pair_file(folder: Path, name: str = "pair", ranks: int = 2) -> str:
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"name": name, "ranks": ranks, "fabric": {"sw": "switch"},
                                "links": [{"src": r, "dst": "sw", "bw_GBps": 0.0125,
                                           "duplex": True} for r in range(ranks)]}))
    return str(path)


def made_by(pid: int) -> list[str]:
    """Namespaces whose ccweave marker names process ``pid`` as their maker."""
    spaces, _ = records.host_names(PREFIX)
    return [name for name, mark in records.namespace_markers(spaces).items()
            if mark is not None and mark[1].pid == pid]


# ------------------------------------------------------------------ markers and records

def test_a_marker_names_its_testbed_and_maker_and_nothing_else_passes_for_one():
    maker = records.Maker(1234, 5678)
    assert records.read_marker(records.marker("ab12", maker)) == ("ab12", maker)
    for alias in (None, "", "ccweave-testbed", "ccweave-testbed:tag=ab12:pid=x:start=1",
                  "my ccweave-testbed:tag=ab12:pid=1:start=1", "ccwbr0"):
        assert records.read_marker(alias) is None, alias


def test_a_reused_pid_is_not_the_maker():
    me = records.Maker.this_process()
    assert me.alive()
    assert not records.Maker(me.pid, me.start + 1).alive()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not records.Maker(child.pid, 0).alive()


def test_unreadable_records_are_reported_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv(records.STATE_ENV, str(tmp_path))
    good = records.Record("ok12", records.Maker(1, 2), ("ccwok12r0",), standing=True,
                          spec="pair.json", subnet=9)
    records.write_record(good)
    (tmp_path / "testbed-bad1.json").write_text("{cut short")
    (tmp_path / "testbed-bad2.json").write_text(json.dumps({"tag": "bad2", "maker": 3}))
    (tmp_path / "testbed-bad3.json").write_text(json.dumps({**json.loads(good.to_json()),
                                                            "tag": "other"}))
    (tmp_path / "notes.txt").write_text("not a record: ignored")
    found, bad = records.read_records()
    assert found == [good]
    assert sorted(item.path.name for item in bad) == ["testbed-bad1.json",
                                                      "testbed-bad2.json",
                                                      "testbed-bad3.json"]
    assert records.standing_record("some/folder/pair.json")[0] == good


def test_a_state_folder_that_is_not_a_writable_folder_is_refused(tmp_path, monkeypatch):
    a_file = tmp_path / "file"
    a_file.write_text("")
    monkeypatch.setenv(records.STATE_ENV, str(a_file))
    with pytest.raises(InputError, match=r"CCWEAVE_TESTBED_DIR.*not a folder"):
        records.check_state_dir()
    monkeypatch.setenv(records.STATE_ENV, str(a_file / "below"))
    with pytest.raises(InputError, match="cannot be written"):
        records.check_state_dir()
    monkeypatch.setenv(records.STATE_ENV, str(tmp_path / ("s" * 300)))  # an OSError once
    with pytest.raises(InputError, match=r"cannot be written \(File name too long"):
        records.check_state_dir()
    assert records.read_records() == ([], [])


# ------------------------------------------------------------------ on a real host

@needs_netns
def test_a_bad_state_folder_is_refused_before_anything_is_built(tmp_path):
    a_file = tmp_path / "state"
    a_file.write_text("")
    proc = subprocess.Popen([sys.executable, "-m", "ccweave.cli", "testbed", "up",
                             pair_file(tmp_path)], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, records.STATE_ENV: str(a_file)})
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "CCWEAVE_TESTBED_DIR" in err and "not a folder" in err
    assert not made_by(proc.pid)


@needs_netns
def test_a_testbed_over_the_namespace_limit_is_refused_before_building():
    emulation = emulate(star([100] * 6), tag="tsl1", subnet=221)
    with pytest.raises(LimitError, match="--max-namespaces 7"), \
            Testbed(emulation, max_namespaces=6):
        pytest.fail("built")
    assert not set(emulation.namespaces) & namespaces()


@needs_netns
def test_a_build_reports_its_progress():
    seen: list[tuple[int, int]] = []
    emulation = emulate(star([100, 100, 100]), tag="tsl2", subnet=222)
    with Testbed(emulation, on_progress=lambda done, total: seen.append((done, total))):
        pass
    assert seen[0] == (0, 4) and seen[-1] == (4, 4)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)


@needs_netns
def test_down_removes_only_what_ccweave_made(tmp_path):
    """A bare ``down`` removes the testbed ``up`` left standing, and leaves alone another
    tool's ``ccw`` namespace and bridge and a testbed whose maker still runs; ``down
    TOPO`` survives an unreadable record beside it. (A bare ``down`` once removed every
    name starting with ``ccw``.)"""
    tag = f"{os.getpid() % 10**5:05d}"
    stranger, bridge = f"ccwork{tag}", f"ccwbr{tag}"
    subprocess.run(["ip", "netns", "add", stranger], check=True)
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    live = Testbed(emulate(star([100, 100]), tag="tsl3", subnet=223)).__enter__()
    standing = pair_file(tmp_path, "standing")
    try:
        up = cli("testbed", "up", standing, "--json")
        assert up.returncode == 0, up.stderr
        standing_spaces = set(json.loads(up.stdout)["namespaces"].values())
        assert standing_spaces <= namespaces()
        ran = cli("testbed", "run", standing, "--", "ip", "netns", "identify")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() in standing_spaces  # rank 0 ran in the standing testbed

        bad = records.state_dir() / "testbed-zz99.json"
        bad.write_text("{cut short")
        again = cli("testbed", "up", standing)
        assert again.returncode == 2 and "already up" in again.stderr
        assert "unreadable testbed record" in again.stderr and "Traceback" not in again.stderr

        down = cli("testbed", "down", "--json")
        assert down.returncode == 0, down.stderr
        report = json.loads(down.stdout)
        left = {item["name"]: item["why"] for item in report["left_alone"]}
        assert "not made by ccweave" in left[stranger] and "not made by ccweave" in left[bridge]
        assert all("in use" in left[name] for name in live.emulation.namespaces)
        assert not standing_spaces & namespaces()
        assert {stranger, *live.emulation.namespaces} <= namespaces()
        assert bridge in subprocess.run(["ip", "link", "show", bridge], capture_output=True,
                                        text=True).stdout
        assert not bad.exists()
        assert str(bad) in [item["path"] for item in report["unreadable_records"]]

        gone = cli("testbed", "down", standing)
        assert gone.returncode == 2 and "no testbed" in gone.stderr
    finally:
        live.close()
        subprocess.run(["ip", "netns", "del", stranger], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        cli("testbed", "down", standing)


@needs_netns
def test_a_killed_testbed_run_leaves_no_rank_namespace_or_folder(tmp_path):
    """``testbed run`` killed outright (SIGKILL: no clean-up of its own runs): its guard
    stops every rank (plain programs, which know nothing of their launcher), deletes the
    namespaces it built and its folder of logs."""
    marker = f"ccweave-killed-run-{os.getpid()}"
    proc = subprocess.Popen([sys.executable, "-m", "ccweave.cli", "testbed", "run",
                             pair_file(tmp_path), "--", "sh", "-c", f"sleep 61; : {marker}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 60
        while len(processes_with(marker)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)  # the launcher and its two ranks
        assert len(processes_with(marker)) >= 3, "the ranks did not start"
        built = made_by(proc.pid)
        assert len(built) == 3 and list(tmp_path.glob("ccweave-testbed-*"))
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 15
        while (processes_with(marker) or set(built) & namespaces()) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        assert not processes_with(marker)
        assert not set(built) & namespaces()
        assert not list(tmp_path.glob("ccweave-testbed-*"))
    finally:
        proc.kill()
        kill_processes_with(marker)


@needs_netns
def test_testbed_run_stops_at_its_timeout_given_after_the_topology(tmp_path):
    began = time.monotonic()
    done = cli("testbed", "run", pair_file(tmp_path), "--timeout", "3", "--", "sleep", "100")
    assert time.monotonic() - began < 40
    assert done.returncode == 2
    assert "ran past 3 s" in done.stderr and "rank(s) 0, 1 were still running" in done.stderr


RANK = """
import os, pathlib, signal, sys, time
rank, said = int(os.environ["RANK"]), pathlib.Path(sys.argv[1])
print("[W1207 c10d] a warning torch prints on stderr", file=sys.stderr, flush=True)
print(f"hello from rank {rank}", flush=True)
if rank == 1:
    print("rank 1 read its input", file=sys.stderr, flush=True)
    print("rank 1 goes down", file=sys.stderr, flush=True)
    said.write_text("")
    os.kill(os.getpid(), signal.SIGKILL)
if rank == 2:
    while not said.exists():
        time.sleep(0.01)
    time.sleep(0.1)
    print("rank 2: peer 1 is gone", file=sys.stderr, flush=True)
    sys.exit(2)
time.sleep(60)
"""


@needs_netns
def test_a_rank_that_dies_is_named_with_its_signal_and_its_last_lines(tmp_path):
    done = cli("testbed", "run", pair_file(tmp_path, ranks=3), "--", sys.executable, "-c",
               RANK, str(tmp_path / "rank-1-said"))
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    error = next(line for line in lines if line.startswith("ccweave: error:"))
    assert error.startswith("ccweave: error: testbed rank 1 was killed by SIGKILL first; "
                            "then rank 2 exited with code 2")
    assert "rank(s) 0 were stopped by the launcher" in error
    details = lines[lines.index(error) + 1:]
    assert details[0] == "  rank 1's last lines:"
    cut = details.index("  rank 2's last lines:")
    assert details[cut - 2:cut] == ["    rank 1 read its input", "    rank 1 goes down"]
    assert details[-1] == "    rank 2: peer 1 is gone"
    assert "\\x0a" not in done.stderr
    # rank 0's output on stdout, its stderr (torch's c10d warnings) on stderr
    assert done.stdout.strip() == "hello from rank 0"
    assert "c10d" in done.stderr


@needs_netns
def test_a_guard_undoes_a_testbed_whose_maker_was_killed_during_the_build(tmp_path):
    """The record is written and the guard watches before the first namespace is made:
    a maker killed at any point of the build leaves nothing."""
    build = ("import os, signal\n"
             "from ccweave.testbed import Testbed, emulate, netns\n"
             "from tests.test_testbed import star\n"
             "real = netns._batch\n"
             "def dying(command, lines, check=True):\n"
             "    real(command, lines, check)\n"
             "    if any('link add' in line for line in lines):\n"
             "        os.kill(os.getpid(), signal.SIGKILL)\n"
             "netns._batch = dying\n"
             "Testbed(emulate(star([100, 100]), tag='tsl4', subnet=224)).__enter__()\n")
    proc = subprocess.run([sys.executable, "-c", build], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    deadline = time.monotonic() + 10
    while any(name.startswith(f"{PREFIX}tsl4") for name in namespaces()) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(name.startswith(f"{PREFIX}tsl4") for name in namespaces())
    assert not records.record_path("tsl4").exists()
    with contextlib.suppress(Exception):
        clear_testbeds("tsl4")


def test_a_swallowed_ctrl_c_stops_a_testbed_job_at_the_launcher_s_next_check(tmp_path):
    """The launcher's wait checks for a signal whose KeyboardInterrupt Python swallowed
    (a testbed run once ran its ranks to the end and exited 0 after one)."""
    from ccweave import interrupts
    from ccweave.errors import Interrupted
    from ccweave.testbed import launch

    rank = subprocess.Popen(["sleep", "30"])
    try:
        interrupts.note(signal.SIGINT)
        began = time.monotonic()
        with pytest.raises(Interrupted, match=r"interrupted \(SIGINT\)"):
            launch._wait([rank], launch._Logs(tmp_path, "rank0"), 60.0, None)
        assert time.monotonic() - began < 5
    finally:
        rank.kill()
        interrupts.forget()
