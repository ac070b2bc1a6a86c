"""Fuzzing the testbed's state, names and interrupts (issue 42): whatever a state folder
holds (records cut short, lying, huge, nested, a FIFO, a folder, a link to /dev/zero),
``records.read_records`` answers at once with each unreadable record named in one line,
and ``testbed down``, ``up`` and ``run`` end 0 or 2 with one error line and no traceback;
a topology's name prints as itself through ``testbed show`` and ``up``; ``testbed up``
interrupted at any point leaves nothing but a whole standing testbed.

Commands that touch namespaces run in a private mount and network namespace (``unshare
-m -n`` with its own ``/run/netns``): a bare ``down`` there sees only what the test made,
never another engineer's testbed. The full hostile pass is ``benchmarks/hostile_pass.py``;
these are a few examples each.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ccweave.testbed import records
from tests.strategies import json_text, mutated
from tests.test_fuzz import check, cli

ROOT = Path(__file__).resolve().parents[1]
FEW = settings(max_examples=int(os.environ.get("CCWEAVE_FUZZ_TESTBED_EXAMPLES", "2")),
               deadline=None, suppress_health_check=list(HealthCheck))
"""A sandboxed example runs two or three commands (a second or two each): a few only."""
MANY = settings(max_examples=int(os.environ.get("CCWEAVE_FUZZ_EXAMPLES", "40")),
                deadline=None, suppress_health_check=list(HealthCheck))
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
PAIR = {"name": "pair", "ranks": 2, "fabric": {"sw": "switch"},
        "links": [{"src": r, "dst": "sw", "bw_GBps": 0.0125, "duplex": True}
                  for r in range(2)]}
RECORD = {"tag": "ab12", "maker": {"pid": 999999999, "start": 1},
          "namespaces": ["ccwab12r0", "ccwab12r1", "ccwab12f0"], "links": [],
          "standing": True, "spec": "other.json", "subnet": 77, "control_subnet": None,
          "max_rate": None, "info": {}}


def _sandbox_reason() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not all(shutil.which(tool) for tool in ("ip", "tc", "unshare")):
        return "needs ip, tc and unshare"
    probe = subprocess.run(["unshare", "--mount", "--net", "true"], capture_output=True)
    return None if probe.returncode == 0 else "unshare --mount --net fails here"


SANDBOX = _sandbox_reason()
needs_sandbox = pytest.mark.skipif(SANDBOX is not None, reason=SANDBOX or "")

# ------------------------------------------------------------------ drawn state folders

ENTRY_NAMES = ["testbed-ab12.json", "testbed-zz99.json", "testbed-0.json", "notes.txt",
               "testbed-.json", "testbed-a b.json", "testbed-\u202e.json",
               "testbed-\x1b.json"]


@st.composite
def record_texts(draw) -> bytes:
    """A record as ccweave writes it, edited (hostile values anywhere, keys dropped or
    repeated), cut short, or bytes that are no record at all."""
    kind = draw(st.sampled_from(["mutated", "mutated", "cut", "bytes", "deep", "huge"]))
    if kind == "mutated":
        return json_text(draw(mutated(RECORD))).encode()
    if kind == "cut":
        text = json.dumps(RECORD)
        return text[:draw(st.integers(0, len(text)))].encode()
    if kind == "deep":
        return ('{"tag": "ab12", "maker": ' + "[" * 100_000 + "]" * 100_000 + "}").encode()
    if kind == "huge":  # a rate of 400 digits (float() overflows), a pid of 1e400
        return json.dumps(RECORD).replace('"max_rate": null', '"max_rate": ' + "9" * 400) \
            .replace("999999999", draw(st.sampled_from(["999999999", "1e400"]))).encode()
    return draw(st.binary(max_size=64))


ENTRY = st.tuples(st.sampled_from(ENTRY_NAMES),
                  st.one_of(record_texts(), st.sampled_from(
                      ["folder", "fifo", "to-dev-zero", "link-loop", "dangling"])))


def make_state(folder: Path, entries: list[tuple[str, object]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, what in entries:
        path = folder / name
        if path.exists() or path.is_symlink():
            continue
        if isinstance(what, bytes):
            path.write_bytes(what)
        elif what == "folder":
            path.mkdir()
        elif what == "fifo":
            os.mkfifo(path)
        elif what == "to-dev-zero":
            path.symlink_to("/dev/zero")
        elif what == "link-loop":
            path.symlink_to(name)
        else:
            path.symlink_to("nowhere/at/all")


def _read_within(seconds: float):
    """``records.read_records()`` in a thread: a reader that blocks (a FIFO once did)
    fails the test instead of hanging it."""
    found: list[object] = []
    worker = threading.Thread(target=lambda: found.append(records.read_records()),
                              daemon=True)
    worker.start()
    worker.join(seconds)
    assert found, f"read_records still running after {seconds} s"
    return found[0]


@settings(MANY)
@given(entries=st.lists(ENTRY, max_size=4))
@example(entries=[("testbed-ab12.json", json.dumps(RECORD).replace(
    "999999999", "1e400").encode())])
@example(entries=[("testbed-ab12.json", b"{" + b"[" * 100_000)])
@example(entries=[("testbed-ab12.json", json.dumps(RECORD).replace(
    '"max_rate": null', '"max_rate": ' + "9" * 400).encode())])
@example(entries=[("testbed-ab12.json", "fifo"), ("testbed-zz99.json", "to-dev-zero"),
                  ("testbed-0.json", "folder")])
@example(entries=[("testbed-ab12.json", json.dumps({**RECORD, "namespaces": ["ccwork"]})
                   .encode())])
def test_read_records_answers_at_once_and_names_each_bad_record(tmp_path_factory, entries):
    state = tmp_path_factory.mktemp("state")
    make_state(state, entries)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(records.STATE_ENV, str(state))
        good, bad = _read_within(10.0)
    for record in good:  # a record names only its own testbed's names
        assert all(name.startswith(f"ccw{record.tag}")
                   for name in (*record.namespaces, *record.links))
    for item in bad:
        assert "\n" not in item.reason and len(item.reason) <= 200
    named = {item.path.name for item in bad} | {f"testbed-{r.tag}.json" for r in good}
    assert named == {name for name, _ in entries
                     if re.fullmatch(r"testbed-\w+\.json", name)}


# ------------------------------------------------------------------ in a sandbox

DRIVER = r"""
import json, os, signal, subprocess, sys, time
plan = json.loads(sys.argv[1])
for folder in ("/run/netns", "/run/ccweave-testbed"):
    os.makedirs(folder, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "fuzz-testbed", folder], check=True)
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
for command in plan.get("before", []):  # another tool's names, made in here only
    subprocess.run(command, check=True)
steps = []
for step in plan["steps"]:
    proc = subprocess.Popen([sys.executable, "-m", "ccweave.cli", *step["argv"]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    if step.get("signal"):
        time.sleep(step["after"])
        if proc.poll() is None:
            os.killpg(proc.pid, step["signal"])
    out, err = proc.communicate(timeout=180)
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    state, found = os.environ["CCWEAVE_TESTBED_DIR"], []
    for name in sorted(os.listdir(state)) if os.path.isdir(state) else []:
        path = os.path.join(state, name)
        if name.startswith("testbed-") and os.path.isfile(path) and not os.path.islink(path):
            try:  # a regular file only: the state may hold a FIFO on purpose
                with open(path) as handle:
                    found.append(json.load(handle))
            except ValueError:
                pass
    steps.append({"code": proc.returncode, "out": out, "err": err, "records": found,
                  "namespaces": sorted(line.split()[0] for line in spaces.splitlines()
                                       if line.strip())})
deadline = time.monotonic() + 10  # a guard may still be undoing a killed build
while time.monotonic() < deadline:
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    if {line.split()[0] for line in spaces.splitlines() if line.strip()} <= set(plan["keep"]):
        break
    time.sleep(0.2)
links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
print(json.dumps({"steps": steps, "namespaces": sorted(
    line.split()[0] for line in spaces.splitlines() if line.strip()),
    "links": [line.split()[0].split("@")[0] for line in links.splitlines()
              if line.startswith("ccw")]}))
"""


def in_sandbox(steps: list[dict[str, object]], state: Path,
               before: list[list[str]] = ()) -> dict[str, object]:
    """Run ``ccweave`` steps one after another in a private mount and network namespace
    (its own /run/netns: no other testbed is seen or touched; ``before``'s commands run
    there first) with ``state`` as the testbed state folder; what each printed and ended
    with, and what is left."""
    plan = {"steps": steps, "before": list(before),
            "keep": [command[3] for command in before if command[:3] == ["ip", "netns", "add"]]}
    done = subprocess.run(["unshare", "--mount", "--net", sys.executable, "-c", DRIVER,
                           json.dumps(plan)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, records.STATE_ENV: str(state),
                                            "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def clean(step: dict[str, object], codes: tuple[int, ...], what: str) -> None:
    """Exit code in ``codes`` (as a shell shows it: killed by signal N is 128 + N, as a
    signal landing before Python has a handler kills it), no traceback, one error line,
    nothing printed raw."""
    err = step["err"]
    if step["code"] < 0:
        step = {**step, "code": 128 - step["code"]}
    assert step["code"] in codes, f"{what}: exit {step['code']}\n{err}"
    check(0 if step["code"] in (130, 143) else step["code"], err, what)
    assert not RAW.search(err) and not RAW.search(step["out"]), f"{what}: a raw character"
    if step["code"] == 2:
        assert len([line for line in err.splitlines()
                    if line.startswith("ccweave: error:")]) == 1, f"{what}: {err}"


@needs_sandbox
@FEW
@given(entries=st.lists(ENTRY, min_size=1, max_size=3))
@example(entries=[("testbed-ab12.json", "folder"), ("testbed-zz99.json", "fifo"),
                  ("testbed-0.json", json.dumps(RECORD).replace("999999999", "1e400")
                   .encode())])
def test_down_survives_any_state_folder(tmp_path_factory, entries):
    """A bare ``down`` (every testbed whose maker has ended: here, in the sandbox, none)
    reads every record and removes the unreadable files, naming each; a folder it did not
    make is left and named; ``down TOPO`` with none up is one line, exit 2."""
    folder = tmp_path_factory.mktemp("down")
    state = folder / "state"
    make_state(state, entries)
    (folder / "pair.json").write_text(json.dumps(PAIR))
    ran = in_sandbox([{"argv": ["testbed", "down"]},
                      {"argv": ["testbed", "down", str(folder / "pair.json")]}], state)
    bare, topo = ran["steps"]
    clean(bare, (0,), f"down beside {entries}")
    clean(topo, (2,), f"down TOPO beside {entries}")
    for path in state.iterdir():  # what looks like a record and stays is a folder, named
        if re.fullmatch(r"testbed-\w+\.json", path.name):
            assert path.is_dir() and not path.is_symlink(), f"{path.name} was left"
            assert f"left alone: {path}" in bare["out"], bare["out"]
    assert not ran["namespaces"]


@needs_sandbox
def test_a_record_naming_another_tool_s_names_is_not_obeyed(tmp_path):
    """A record is trusted to say what ``down`` removes: one of a dead maker that listed
    ``ccwork`` and ``ccwbr0`` (another tool's namespace and bridge) had a bare ``down``
    delete both."""
    state = tmp_path / "state"
    make_state(state, [("testbed-zz20.json", json.dumps(
        {**RECORD, "tag": "zz20", "namespaces": ["ccwork"], "links": ["ccwbr0"],
         "standing": False}).encode())])
    ran = in_sandbox([{"argv": ["testbed", "down"]}], state,
                     before=[["ip", "netns", "add", "ccwork"],
                             ["ip", "link", "add", "ccwbr0", "type", "bridge"]])
    down = ran["steps"][0]
    clean(down, (0,), "down beside a record naming another tool's names")
    assert ran["namespaces"] == ["ccwork"] and ran["links"] == ["ccwbr0"]
    assert "left alone: ccwork" in down["out"] and "left alone: ccwbr0" in down["out"]


@needs_sandbox
@FEW
@given(entries=st.lists(ENTRY, max_size=3))
def test_up_run_down_beside_any_state_folder(tmp_path_factory, entries):
    folder = tmp_path_factory.mktemp("up")
    state = folder / "state"
    make_state(state, entries)
    topo = str(folder / "pair.json")
    Path(topo).write_text(json.dumps(PAIR))
    ran = in_sandbox([{"argv": ["testbed", "up", topo]},
                      {"argv": ["testbed", "run", topo, "--", "true"]},
                      {"argv": ["testbed", "down", topo]}], state)
    for step, what in zip(ran["steps"], ("up", "run", "down")):
        clean(step, (0,), f"{what} beside {entries}")
    assert not ran["namespaces"] and not ran["links"]
    assert not list(state.glob("testbed-*.json")) or all(
        name in {n for n, _ in entries} for name in (p.name for p in state.iterdir()))


# ------------------------------------------------------------------ names

NAMES = st.one_of(st.text(max_size=40), st.sampled_from(
    ["\x1b]0;owned\x07\x1b[31mred", "safe\u202etxt.exe", "a\nb\rc", "", "[bold]x[/]",
     "n" * 5000, "%s%n", "\u0634\u0628\u0643\u0629"]))


@settings(MANY)
@given(name=NAMES)
def test_testbed_show_prints_any_name_as_itself(tmp_path_factory, name):
    path = tmp_path_factory.mktemp("names") / "pair.json"
    path.write_text(json.dumps({**PAIR, "name": name}))
    code, out, err = cli("testbed", "show", str(path))
    check(code, err, f"testbed show of {name!r}")
    assert code == 0, err
    assert not RAW.search(out) and not RAW.search(err), f"{name!r} printed raw: {out!r}"


@needs_sandbox
@settings(FEW, max_examples=1)
@given(name=NAMES)
@example(name="safe\u202etxt.exe")
def test_testbed_up_prints_any_name_as_itself(tmp_path_factory, name):
    folder = tmp_path_factory.mktemp("up-names")
    topo = str(folder / "pair.json")
    Path(topo).write_text(json.dumps({**PAIR, "name": name}))
    ran = in_sandbox([{"argv": ["testbed", "up", topo]},
                      {"argv": ["testbed", "down", topo]}], folder / "state")
    for step, what in zip(ran["steps"], ("up", "down")):
        clean(step, (0,), f"{what} of a topology named {name!r}")
    assert not ran["namespaces"]


# ------------------------------------------------------------------ interrupts

STAR = {"name": "star6", "ranks": 6, "fabric": {"sw": "switch"},
        "links": [{"src": r, "dst": "sw", "bw_GBps": 0.0125, "duplex": True}
                  for r in range(6)]}


@needs_sandbox
@FEW
@given(sig=st.sampled_from([signal.SIGINT, signal.SIGTERM]),
       after=st.floats(0.0, 2.5).map(lambda s: round(s, 2)))
def test_an_interrupted_up_leaves_nothing_or_a_whole_testbed(tmp_path_factory, sig, after):
    """Ctrl-C (to the group, as a terminal sends it) or SIGTERM at a random point of
    ``testbed up``: it leaves nothing, or a whole standing testbed (every namespace its
    record lists), which ``down TOPO`` then removes; stopped after the testbed stood, it
    says so (exit 130/143: it was interrupted, but the testbed is up)."""
    folder = tmp_path_factory.mktemp("interrupt")
    state = folder / "state"
    topo = str(folder / "star6.json")
    Path(topo).write_text(json.dumps(STAR))
    ran = in_sandbox([{"argv": ["testbed", "up", topo], "signal": int(sig), "after": after},
                      {"argv": ["testbed", "down", topo]}], state)
    up, down = ran["steps"]
    clean(up, (0, 128 + sig), f"up, {signal.Signals(sig).name} after {after} s")
    if up["code"] == 0 or up["namespaces"]:
        assert len(up["namespaces"]) == 7, up["namespaces"]  # 6 ranks and the switch
        assert [(set(record["namespaces"]), record["standing"]) for record in up["records"]
                ] == [(set(up["namespaces"]), True)], "not what its standing record says"
        # stopped once it stood, it says so; or the signal came after it had said so
        assert up["code"] == 0 or "it stays up" in up["err"] or "up; " in up["out"], \
            (up["err"], up["out"])
        clean(down, (0,), "down after a finished up")
    else:
        assert not up["records"], f"an interrupted up left {up['records']}"
        clean(down, (2,), "down after an interrupted up")
    assert not ran["namespaces"] and not ran["links"]
    assert not list(state.glob("testbed-*.json")) if state.exists() else True
