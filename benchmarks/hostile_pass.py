"""A hostile pass over the whole command line, as a new user would try it (issue 42's last
figure: at least 400 cases, 100 of them new, and it must find nothing).

Every case is a real ``ccweave`` process: the command, the outcome class it must end in
(exit 0/1/2, 130 for SIGINT, 143 for SIGTERM, 141 for a reader that went away, or the
signal that killed it where the case kills it; a process killed by signal N counts as
128 + N, as a shell shows it), and what happened. Commands that start no rank are forked
from a process that has imported ccweave (a fresh process each, its own environment,
folder, descriptors and a 4 GiB address-space cap; ``--no-fork`` starts each in a fresh
interpreter); those with interrupts, pipes or startup variables always start fresh. A
case is **clean** when the exit code is in its class and:

- nothing escaped as a traceback, and an exit 2 said why in exactly one
  ``ccweave: error:`` line (detail lines after it are indented; argparse's usage errors
  are their own form);
- stderr and a table on stdout carry no raw control or bidi character (names print as
  themselves);
- nothing is left behind: no process carrying the case's mark in its environment, nothing
  in the case's ``TMPDIR``, no output file from a command that failed (and an existing one
  unchanged), no temporary beside it, no namespace, link or testbed record (testbed cases
  run in a private mount and network namespace, ``unshare -m -n``, so they never see or
  touch another engineer's testbed; ``CCWEAVE_TESTBED_DIR`` is the case's own folder);
- it ended within its time limit, and a command that runs nothing kept its peak RSS under
  :data:`RSS_LIMIT_MB`.

The cases are listed in ``hostile_cases.py`` (files, output paths, option values, the
testbed's state, names and interrupts, ranks that die or stop, hostile peers of the data
listener, pipes and environments, ``bench`` options, TACCL profiles); each says whether
it is **new** and where an old one came from. New: in none of the earlier passes, which
are the inputs issues 11 and 42 list (the second pass's 412) and the fuzz tests as they
stood before this pass (``tests/test_fuzz.py``, ``test_fuzz_readers.py``,
``test_fuzz_bench.py``, ``test_export_fuzz.py``, ``test_limits.py``, ``test_cli.py``,
``test_cli_pipes.py``, ``benchmarks/hardening.py``); a test written for one of this
pass's own findings (``tests/test_fuzz_testbed.py``) does not make its case old. Random
points (interrupt times, garbage bytes) come from ``--seed``, so a run is reproducible
(what a loaded host makes of a time is not).

    python benchmarks/hostile_pass.py [--jobs 2] [--seed 42] [--only AREA,...] [--json]
                                      [--no-fork]
    python benchmarks/hostile_pass.py --case ID     # one case, its folder kept, all shown
    python benchmarks/hostile_pass.py --list

Prints the summary: cases, new cases, clean, skipped (with the reason: no root, no
netns, no mpirun), findings each with its reproducer, wall time, load average and peak
RSS (this process's and the largest case's).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))

AS_LIMIT = 4 << 30
"""Address space a command that starts no rank may map (``prlimit --as``): a reader that
would take the host's memory (``/dev/zero`` read whole took 22 GB) fails there instead."""
RSS_LIMIT_MB = 1536
"""Peak RSS a command that starts no rank may reach (issue 11: under 1 GB for an input
under 1 MB, beside the CLI's own ~150 MB; a huge input case may read it whole)."""
MARK_ENV = "CCWEAVE_HOSTILE_MARK"
"""Every case's processes carry this in their environment (how leftovers are found)."""
GRACE_S = 6.0
"""How long after a case ends its guard processes may take to finish their work."""
_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class Interrupt:
    """Send ``signal`` to the command (``group``: its whole process group, as a terminal's
    Ctrl-C; else the process alone, as ``kill``) ``after`` seconds from its start, or
    ``after`` seconds from when ``wait_for`` appears in its stderr; ``again``: send it a
    second time that much later (an impatient user)."""

    signal: int
    after: float
    group: bool = False
    wait_for: str | None = None
    again: float | None = None


@dataclass
class Case:
    """One hostile try. ``argv`` may hold ``{d}`` (the case's folder); ``setup`` makes the
    inputs in it (and returns text for stdin, if any); ``after`` are commands run in the
    same place once ``argv`` ends (``testbed down TOPO``), each with its allowed codes,
    ``{code}`` standing for the first command's exit code. ``options["names"]``: texts
    (the flag, the file) an exit 2's error line must hold."""

    id: str
    argv: list[str]
    expect: set[int]
    new: bool
    what: str = ""
    origin: str = ""
    setup: Callable[[Path], bytes | None] | None = None
    inside: Callable[[Path], None] | None = None
    """Setup done inside the sandbox (another tool's namespaces: never on the host)."""
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 60.0
    outputs: list[str] = field(default_factory=list)
    sandbox: bool = False
    interrupt: Interrupt | None = None
    after: list[tuple[list[str], set[int] | str]] = field(default_factory=list)
    heavy: bool = False
    needs: list[str] = field(default_factory=list)
    driver: str | None = None
    options: dict[str, object] = field(default_factory=dict)
    json_out: bool = False
    runs_nothing: bool = True
    keep: list[str] = field(default_factory=list)
    stdout: str = "file"


@dataclass
class Result:
    id: str
    new: bool
    expect: list[int]
    code: int | None = None
    wall_s: float = 0.0
    rss_mb: float = 0.0
    findings: list[str] = field(default_factory=list)
    skipped: str = ""
    stderr_tail: str = ""
    notes: list[str] = field(default_factory=list)
    reproducer: str = ""


# ------------------------------------------------------------------ what the host has

def missing(needs: list[str]) -> str:
    """Why a case cannot run here ('' when it can)."""
    for need in needs:
        if need == "root" and os.geteuid() != 0:
            return "needs root"
        if need == "netns" and (os.geteuid() != 0 or not all(
                map(shutil.which, ("ip", "tc", "unshare")))):
            return "needs root, iproute2 (ip, tc) and unshare for a private testbed"
        if need == "mpirun" and not shutil.which("mpirun"):
            return "needs mpirun (Open MPI)"
        if need == "torch":
            import importlib.util
            if importlib.util.find_spec("torch") is None:
                return "needs torch"
    return ""


# ------------------------------------------------------------------ running one command

def _ccweave(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "ccweave.cli", *argv]


def _fill(argv: list[str], folder: Path, code: int | None = None) -> list[str]:
    return [arg.replace("{d}", str(folder)).replace("{code}", str(code)) for arg in argv]


def case_env(case: Case, folder: Path, mark: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CCWEAVE_JOB_SECRET", None)
    env.update({"CCWEAVE_TESTBED_DIR": str(folder / "state"), "TMPDIR": str(folder / "tmp"),
                MARK_ENV: mark, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "120",
                "PYTHONDONTWRITEBYTECODE": "1"})
    for key, value in case.env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value.replace("{d}", str(folder))
    return env


def run_command(argv: list[str], folder: Path, env: dict[str, str], stdin: bytes | None,
                timeout: float, interrupt: Interrupt | None = None, name: str = "cmd",
                stdout: str = "file", on_start: Callable[[subprocess.Popen], None] | None
                = None, ccweave: bool = True, capped: bool = False,
                forked: bool = False) -> dict[str, object]:
    """Run ``ccweave ARGV`` (``ARGV`` itself where ``ccweave`` is false), ``{d}`` filled
    in; its exit code (negative: the signal that killed it), output, wall time, peak RSS
    (its own and its waited children's), whether it hung."""
    argv = _fill(argv, folder)
    out_path, err_path = folder / f".{name}.out", folder / f".{name}.err"
    stdin_file = None
    if stdin is not None:
        stdin_file = folder / f".{name}.in"
        stdin_file.write_bytes(stdin)
    if forked and ccweave and interrupt is None and stdout == "file" and not any(
            key.startswith(STARTUP_ENV) for key in env if os.environ.get(key) != env[key]):
        running = _Running()
        if on_start is not None:  # it waits for the command to open its FIFO
            threading.Thread(target=on_start, args=(running,), daemon=True).start()
        done = _server().run({"argv": argv, "cwd": str(folder), "env": env, "cap": capped,
                              "stdin": str(stdin_file) if stdin_file else None,
                              "out": str(out_path), "err": str(err_path),
                              "timeout": timeout})
        running.ended = True
        return {**done, "signals_sent": 0,
                "stdout": out_path.read_text(errors="replace"),
                "stderr": err_path.read_text(errors="replace")}
    if ccweave:
        argv = _ccweave(argv)
    if capped:
        argv = ["prlimit", f"--as={AS_LIMIT}", "--", *argv]
    with contextlib.ExitStack() as stack:
        err = stack.enter_context(open(err_path, "wb"))
        if stdout == "file":
            out = stack.enter_context(open(out_path, "wb"))
        elif stdout == "full":
            out = stack.enter_context(open("/dev/full", "wb"))
        else:
            out = subprocess.PIPE
        infile = stack.enter_context(open(stdin_file, "rb")) if stdin_file else \
            subprocess.DEVNULL
        began = time.monotonic()
        proc = subprocess.Popen(argv, cwd=folder, env=env, stdin=infile, stdout=out,
                                stderr=err, start_new_session=True)
        if stdout == "closed-reader":
            proc.stdout.close()  # the reader went away at once (`| head -c0`)
        if on_start is not None:
            threading.Thread(target=on_start, args=(proc,), daemon=True).start()
        sent, hung, status, usage = 0, False, 0, None
        deadline = began + timeout
        fire_at = None if interrupt is None or interrupt.wait_for else began + interrupt.after
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            now = time.monotonic()
            if interrupt is not None and fire_at is None and interrupt.wait_for:
                with contextlib.suppress(OSError):
                    if interrupt.wait_for.encode() in err_path.read_bytes():
                        fire_at = now + interrupt.after
            if fire_at is not None and now >= fire_at and interrupt is not None:
                target = os.killpg if interrupt.group else os.kill
                with contextlib.suppress(ProcessLookupError):
                    target(proc.pid, interrupt.signal)
                sent += 1
                fire_at = now + interrupt.again if interrupt.again and sent == 1 else None
            if now > deadline:
                hung = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                deadline = now + 30
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - began
    return {"code": proc.returncode, "wall_s": wall, "hung": hung, "signals_sent": sent,
            "rss_mb": usage.ru_maxrss / 1024 if usage else 0.0,
            "stdout": out_path.read_text(errors="replace") if stdout == "file" else "",
            "stderr": err_path.read_text(errors="replace"), "pid": proc.pid}


# ------------------------------------------------------------------ a fork server

STARTUP_ENV = ("PYTHON", "LC_", "LANG", "HOME", "MPLCONFIGDIR")
"""Variables Python or its libraries read when they start: a case that sets one runs in a
fresh interpreter, not a fork."""


class ForkServer:
    """A single-threaded process that has imported ccweave (1-2 s a start on a loaded host)
    and forks a child per command: each child is a fresh process for the command (its own
    environment, folder, descriptors, memory cap, process group), as ``python -m
    ccweave.cli`` would be, without paying the imports again."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def run(self, request: dict[str, object]) -> dict[str, object]:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = subprocess.Popen(
                    [sys.executable, __file__, "--fork-server"], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, text=True, env={**os.environ,
                                                            "PYTHONPATH": str(ROOT / "src")})
            assert self._proc.stdin and self._proc.stdout
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            return json.loads(self._proc.stdout.readline())

    def close(self) -> None:
        if self._proc is not None:
            self._proc.stdin.close()  # type: ignore[union-attr]
            self._proc.wait(timeout=30)


_SERVERS = threading.local()


def _server() -> ForkServer:
    if not hasattr(_SERVERS, "server"):
        _SERVERS.server = ForkServer()
        _ALL_SERVERS.append(_SERVERS.server)
    return _SERVERS.server


_ALL_SERVERS: list[ForkServer] = []


def serve_forks() -> None:
    """The fork server's loop: one request (a JSON line) in, one result out."""
    import importlib

    from ccweave.cli import build_parser

    build_parser()  # every command's module
    for name in ("ccweave.verify", "ccweave.simulate", "ccweave.synth", "ccweave.export",
                 "ccweave.lint", "ccweave.bounds", "ccweave.topology.zoo", "ccweave.nccl.model"):
        importlib.import_module(name)

    for line in sys.stdin:
        request = json.loads(line)
        print(json.dumps(_fork_one(request)), flush=True)


def _fork_one(request: dict[str, object]) -> dict[str, object]:
    import resource

    began = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the command's own process
        code = 1
        try:
            os.setsid()
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            import tempfile as _tempfile
            _tempfile.tempdir = None  # TMPDIR is the case's
            for fd, path, mode in ((0, request["stdin"] or os.devnull, os.O_RDONLY),
                                   (1, request["out"], os.O_WRONLY | os.O_TRUNC | os.O_CREAT),
                                   (2, request["err"], os.O_WRONLY | os.O_TRUNC | os.O_CREAT)):
                os.dup2(os.open(path, mode, 0o644), fd)
            if request["cap"]:
                resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
            sys.argv = ["ccweave", *request["argv"]]
            code = _as_python_would(request["argv"])
        finally:
            os._exit(code)
    deadline, hung = began + float(request["timeout"]), False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline and not hung:
            hung = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        time.sleep(0.005)
    return {"code": os.waitstatus_to_exitcode(status), "hung": hung,
            "wall_s": time.monotonic() - began, "rss_mb": usage.ru_maxrss / 1024, "pid": pid}


def _as_python_would(argv: list[str]) -> int:
    """``python -m ccweave.cli ARGV``'s exit code: what ``main`` returns, ``SystemExit``'s
    code, 1 and the traceback on stderr for anything else, 120 when flushing the output
    at exit fails (Python's own rule)."""
    import traceback

    from ccweave.cli import main

    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # Python prints "Exception ignored" and exits 120
            code = 120
    return code


def running(pid: int) -> bool:
    """Whether ``pid`` runs, without reaping it (the pass's own wait4 must get it)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class _Running:
    """What a FIFO's feeder polls while a forked command runs (as it polls a Popen)."""

    def __init__(self) -> None:
        self.ended = False

    def poll(self) -> int | None:
        return 0 if self.ended else None


def _fifo_writer(path: Path, data: bytes) -> Callable[[subprocess.Popen], None]:
    """Feed ``data`` into the FIFO ``path`` once the command opens it (as a shell's
    ``<(...)`` does), and stop trying when the command ends."""
    def feed(proc) -> None:
        while proc.poll() is None if isinstance(proc, _Running) else running(proc.pid):
            try:
                handle = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader yet
                time.sleep(0.02)
                continue
            os.set_blocking(handle, True)
            with contextlib.suppress(OSError):
                os.write(handle, data)
            os.close(handle)
            return
    return feed


def _netns_names() -> tuple[list[str], list[str]]:
    spaces = [line.split()[0] for line in subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()
        if line.strip()]
    try:
        links = [item["ifname"] for item in json.loads(subprocess.run(
            ["ip", "-j", "link", "show"], capture_output=True, text=True).stdout or "[]")]
    except (json.JSONDecodeError, KeyError):
        links = []
    return spaces, [name for name in links if name.startswith("ccw")]


def execute(case: Case, folder: Path, mark: str) -> dict[str, object]:
    """Run the case's command(s) here (inside the sandbox, for testbed cases) and return
    what happened, with the namespaces and links left (in a sandbox every one is the
    case's)."""
    import hostile_cases

    env = case_env(case, folder, mark)
    if case.inside is not None:
        if not case.sandbox:
            raise RuntimeError(f"{case.id}: setup inside a sandbox, but it runs in none")
        case.inside(folder)
    stdin = (folder / ".stdin").read_bytes() if (folder / ".stdin").exists() else None
    if case.driver:
        first = hostile_cases.DRIVERS[case.driver](case, folder, env)
    else:
        fifo = case.options.get("fifo")
        feed = None if fifo is None else _fifo_writer(Path(_fill([fifo], folder)[0]),
                                                      (folder / ".fifo").read_bytes())
        first = run_command(case.argv, folder, env, stdin, case.timeout, case.interrupt,
                            stdout=case.stdout, on_start=feed,
                            capped=case.runs_nothing and not case.sandbox,
                            forked=case.runs_nothing and not case.sandbox and FORK[0])
    steps = [first]
    for number, (argv, allowed) in enumerate(case.after):
        done = run_command(_fill(argv, folder, first["code"]), folder, env, None, 120,
                           name=f"after{number}")
        if isinstance(allowed, str):  # an expression of the first command's code
            allowed = eval(allowed, {"code": first["code"]})
        done["allowed"] = sorted(allowed)
        done["argv"] = argv
        steps.append(done)
    if case.sandbox:  # a guard may still be undoing a killed maker's work
        deadline = time.monotonic() + GRACE_S
        while _processes_with(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
    left_spaces, left_links = _netns_names() if case.sandbox else ([], [])
    return {"steps": steps, "namespaces": [n for n in left_spaces if n not in case.keep],
            "links": [n for n in left_links if n not in case.keep]}


# ------------------------------------------------------------------ judging a case

def _processes_with(mark: str) -> list[str]:
    found = []
    needle = f"{MARK_ENV}={mark}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as handle:
            if needle in handle.read().split(b"\0") and int(pid) != os.getpid():
                with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                    command = cmd.read().replace(b"\0", b" ")[:120]
                found.append(f"{pid}: {command.decode(errors='replace')}")
    return found


def _listing(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (but the pass's own ``.name.*``) with a digest."""
    seen = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if rel.startswith(".") and "/" not in rel:
            continue
        if path.is_symlink() or not path.is_file():
            seen[rel] = "link" if path.is_symlink() else ("dir" if path.is_dir() else "special")
            continue
        with contextlib.suppress(OSError):
            seen[rel] = hashlib.sha1(path.read_bytes()).hexdigest() if \
                path.stat().st_size < 2**27 else f"size {path.stat().st_size}"
    return seen


def judge(case: Case, ran: dict[str, object], before: dict[str, str], folder: Path,
          mark: str) -> list[str]:
    """What is wrong with how the case ended (empty: clean)."""
    findings = []
    first = ran["steps"][0]
    code = _shell_code(first["code"])
    if first["hung"]:
        findings.append(f"still running after {case.timeout:.0f} s (killed)")
    elif code not in case.expect:
        findings.append(f"exit {code}, expected {sorted(case.expect)}")
    for step in ran["steps"]:
        err, out = step["stderr"], step["stdout"]
        if "Traceback (most recent call last)" in err + out:
            tail = [line for line in err.splitlines() if line and not line.startswith(" ")]
            findings.append(f"traceback: {tail[-1][:200] if tail else '?'}")
        # a rank's own error ("ccweave: error: rank 2: ...") comes before its launcher's
        # one line that names what happened to the job (docs/runtime.md)
        errors = [line for line in err.splitlines() if line.startswith("ccweave: error:")
                  and not re.match(r"ccweave: error: rank \d+: ", line)]
        usage = "usage:" in err and re.search(r"^ccweave[\w\- ]*: error:", err, re.M)
        if step["code"] == 2 and not usage and len(errors) != 1 and \
                not case.options.get("no_stderr"):
            findings.append(f"exit 2 with {len(errors)} 'ccweave: error:' lines"
                            + (f": {errors[-1][:160]}" if errors else ""))
        if step is first and step["code"] == 2 and errors:  # the input a refusal must name
            findings += [f"the error does not name {text!r}: {errors[-1][:160]}"
                         for text in case.options.get("names", ()) if text not in errors[-1]]
        ours = err
        if case.options.get("relays_output"):  # a rank's own lines pass as they are (its
            # colours are the user's); ccweave's own error and detail lines must not
            lines = err.splitlines()
            start = next((n for n, line in enumerate(lines)
                          if line.startswith("ccweave: error:")), len(lines))
            ours = "\n".join(lines[start:])
        if _RAW.search(ours):
            findings.append(f"raw control or bidi character on stderr: "
                            f"{_RAW.search(ours).group()!r}")
        if not case.json_out and _RAW.search(out):
            findings.append(f"raw control or bidi character on stdout: "
                            f"{_RAW.search(out).group()!r}")
        if "allowed" in step and step["code"] not in step["allowed"] and not step["hung"]:
            findings.append(f"then `{' '.join(step['argv'])}`: exit {step['code']}, "
                            f"expected {step['allowed']}: {err.strip()[-200:]}")
    rss_limit = case.options.get("rss_mb", RSS_LIMIT_MB)
    if case.runs_nothing and first["rss_mb"] > rss_limit:
        findings.append(f"peak RSS {first['rss_mb']:.0f} MB (limit {rss_limit})")
    deadline = time.monotonic() + GRACE_S
    while _processes_with(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = _processes_with(mark)
    if alive:
        findings.append(f"left {len(alive)} process(es) running: {alive[0]}")
        for line in alive:
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
    tmp = sorted(os.listdir(folder / "tmp")) if (folder / "tmp").is_dir() else []
    if tmp:
        findings.append(f"left in TMPDIR: {', '.join(tmp[:3])}")
    after = _listing(folder)
    made = sorted(set(after) - set(before))
    changed = sorted(name for name in set(after) & set(before) if after[name] != before[name])
    succeeded = code == 0 or case.options.get("outputs_on_failure")
    allowed = set(case.outputs) if succeeded else set()
    stray = [name for name in made if not any(_matches(name, pattern) for pattern in allowed)
             and not name.startswith(("tmp", "state"))]
    if stray:
        findings.append(f"left behind: {', '.join(stray[:3])}")
    if not succeeded:
        touched = [name for name in changed if not name.startswith(("tmp", "state"))
                   and name not in case.keep]
        if touched:
            findings.append(f"failed but changed {', '.join(touched[:3])}")
    records = [name for name in made if name.startswith("state/testbed-")]
    if records:
        findings.append(f"left a testbed record: {records[0]}")
    if ran["namespaces"] or ran["links"]:
        findings.append(f"left namespaces {ran['namespaces'][:4]} links {ran['links'][:4]}")
    return findings


def _shell_code(code: int) -> int:
    """An exit code as a shell reports it: a process killed by signal N is 128 + N (SIGINT
    during Python's own start, before any handler: -2, which a shell shows as 130)."""
    return 128 - code if code < 0 else code


def _matches(name: str, pattern: str) -> bool:
    import fnmatch
    return fnmatch.fnmatch(name, pattern)


def _reproducer(case: Case, folder: Path) -> str:
    env = " ".join(f"{k}={v!r}" for k, v in case.env.items() if v is not None)
    shown = " ".join(_shell(arg) for arg in _fill(case.argv, folder))
    how = f" [{case.driver}]" if case.driver else ""
    sig = ""
    if case.interrupt:
        i = case.interrupt
        sig = (f"; then {signal.Signals(i.signal).name} to the "
               f"{'group' if i.group else 'process'} after {i.after:.2f} s"
               + (f" from {i.wait_for!r}" if i.wait_for else "")
               + (f", again {i.again:.2f} s later" if i.again else ""))
    box = "unshare -m -n (private /run/netns) " if case.sandbox else ""
    return (f"python benchmarks/hostile_pass.py --case {case.id}   # {box}{env} "
            f"ccweave {shown}{how}{sig}").replace("  ", " ")


def _shell(arg: str) -> str:
    import shlex
    return shlex.quote(arg)


def run_case(case: Case, base: Path, keep: bool = False) -> Result:
    result = Result(case.id, case.new, sorted(case.expect))
    why = missing(case.needs + (["netns"] if case.sandbox else []))
    if why:
        result.skipped = why
        return result
    folder = Path(tempfile.mkdtemp(prefix=f"{case.id.replace('/', '-')[:60]}-", dir=base))
    (folder / "tmp").mkdir()
    (folder / "state").mkdir()
    mark = uuid.uuid4().hex
    result.reproducer = _reproducer(case, folder)
    try:
        stdin = case.setup(folder) if case.setup else None
        if stdin is not None:
            (folder / ".stdin").write_bytes(stdin)
        before = _listing(folder)
        ran = _sandboxed(case, folder, mark) if case.sandbox else execute(case, folder, mark)
        first = ran["steps"][0]
        result.code, result.wall_s, result.rss_mb = first["code"], first["wall_s"], \
            max(step["rss_mb"] for step in ran["steps"])
        result.stderr_tail = "\n".join(first["stderr"].strip().splitlines()[-6:])
        result.notes = list(ran.get("notes", []))
        result.findings = judge(case, ran, before, folder, mark)
        if first.get("signals_sent") == 0 and case.interrupt is not None:
            result.notes.append("ended before the interrupt")
    except Exception as error:  # the pass itself failed on this case: say so, go on
        result.findings = [f"the pass could not run it: {type(error).__name__}: {error}"]
    finally:
        if not keep and not result.findings:
            _remove(folder)
    return result


def _remove(folder: Path) -> None:
    subprocess.run(["chattr", "-R", "-i", str(folder)], capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def _sandboxed(case: Case, folder: Path, mark: str) -> dict[str, object]:
    """Run the case in a private mount and network namespace (its own ``/run/netns``):
    it sees no other testbed, and every namespace left there is its own."""
    inner = folder / ".sandbox.json"
    command = ["unshare", "--mount", "--net", sys.executable, __file__, "--sandboxed",
               case.id, "--folder", str(folder), "--mark", mark, "--seed", str(SEED[0])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=case.timeout + 300,
                          env={**os.environ, MARK_ENV: mark})
    if not inner.exists():
        raise RuntimeError(f"the sandbox failed: {done.stderr.strip()[-300:]}")
    return json.loads(inner.read_text())


def _enter_sandbox() -> None:
    os.environ["CCWEAVE_HOSTILE_SANDBOX"] = "1"
    for folder in ("/run/netns", "/run/ccweave-testbed"):
        os.makedirs(folder, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "hostile-pass", folder], check=True)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


# ------------------------------------------------------------------ the pass

SEED = [42]
FORK = [True]


def _runs_ranks(case: Case) -> bool:
    """A job of torch ranks (seconds to start, a core each): one at a time."""
    return case.heavy and not case.runs_nothing and "torch" in case.needs


def summary(results: list[Result], wall: float, loads: tuple[float, float]) -> str:
    from ccweave.peak_rss import peak_rss_bytes

    ran = [r for r in results if not r.skipped]
    clean = [r for r in ran if not r.findings]
    findings = [r for r in ran if r.findings]
    new = [r for r in results if r.new]
    lines = [f"hostile pass (seed {SEED[0]}): {len(results)} cases, {len(new)} new; "
             f"{len(ran)} ran, {len(clean)} clean, {len(findings)} with findings, "
             f"{len(results) - len(ran)} skipped",
             f"  new cases run: {sum(1 for r in ran if r.new)}, clean: "
             f"{sum(1 for r in clean if r.new)}"]
    areas: dict[str, list[Result]] = {}
    for r in results:
        areas.setdefault(r.id.split("/")[0], []).append(r)
    for area, rows in areas.items():
        done = [r for r in rows if not r.skipped]
        lines.append(f"  {area:<10} {len(rows):4d} cases ({sum(r.new for r in rows):3d} new), "
                     f"{sum(not r.findings for r in done):4d} clean, "
                     f"{sum(bool(r.findings) for r in done):3d} findings, "
                     f"{len(rows) - len(done):3d} skipped; "
                     f"{sum(r.wall_s for r in done):5.0f} s of commands")
    skipped: dict[str, int] = {}
    for r in results:
        if r.skipped:
            skipped[r.skipped] = skipped.get(r.skipped, 0) + 1
    for why, count in skipped.items():
        lines.append(f"  skipped {count}: {why}")
    codes: dict[str, int] = {}
    for r in ran:
        codes[str(r.code)] = codes.get(str(r.code), 0) + 1
    lines.append("  exit codes: " + ", ".join(f"{k}: {v}" for k, v in sorted(codes.items())))
    biggest = max(ran, key=lambda r: r.rss_mb, default=None)
    lines.append(f"  wall {wall:.0f} s; load average {loads[0]:.2f} before, {loads[1]:.2f} "
                 f"after; peak RSS: this process {peak_rss_bytes() / 2**20:.0f} MB, largest "
                 f"case {biggest.rss_mb if biggest else 0:.0f} MB"
                 + (f" ({biggest.id})" if biggest else ""))
    if findings:
        lines.append("findings:")
        for r in findings:
            lines.append(f"  {r.id} (exit {r.code}, {r.wall_s:.1f} s): {'; '.join(r.findings)}")
            lines.append(f"    reproduce: {r.reproducer}")
            if r.stderr_tail:
                lines += [f"    | {line[:200]}" for line in r.stderr_tail.splitlines()[-3:]]
    else:
        lines.append("findings: none")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--jobs", type=int, default=2, help="cases at once (default 2)")
    parser.add_argument("--seed", type=int, default=42,
                        help="seed of the random points: interrupt times, garbage bytes")
    parser.add_argument("--only", help="areas (comma-separated), or id prefixes")
    parser.add_argument("--case", help="run one case, keep its folder, show everything")
    parser.add_argument("--list", action="store_true", help="list the cases, new or where from")
    parser.add_argument("--json", action="store_true", help="also print every result as JSON")
    parser.add_argument("--no-fork", action="store_true",
                        help="run every command in a fresh interpreter (slower; the default "
                             "forks those that start no rank from one that imported ccweave)")
    parser.add_argument("--fork-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sandboxed", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--mark", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # a pass started in the background (`cmd &` in a script) inherits SIGINT ignored, and so
    # would every command it starts: Ctrl-C could not reach them (they ended 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # and nohup leaves SIGHUP ignored
    if args.fork_server:
        serve_forks()
        return 0
    SEED[0] = args.seed
    FORK[0] = not args.no_fork
    import hostile_cases

    cases = hostile_cases.catalogue(args.seed)
    by_id = {case.id: case for case in cases}
    assert len(by_id) == len(cases), "case ids must be unique"
    if args.sandboxed:
        _enter_sandbox()
        folder = Path(args.folder)
        ran = execute(by_id[args.sandboxed], folder, args.mark)
        (folder / ".sandbox.json").write_text(json.dumps(ran))
        return 0
    if args.list:
        for case in cases:
            print(f"{case.id}{'  [new]' if case.new else '  [' + case.origin + ']'}  "
                  f"{case.what}")
        return 0
    base = Path(tempfile.mkdtemp(prefix="ccweave-hostile-pass-"))
    if args.case:
        result = run_case(by_id[args.case], base, keep=True)
        print(json.dumps(asdict(result), indent=1))
        print(f"folder kept: {base}")
        return 1 if result.findings else 0
    if args.only:
        wanted = args.only.split(",")
        cases = [case for case in cases if any(case.id == w or case.id.startswith(w + "/")
                                               or case.id.startswith(w) for w in wanted)]
    loads = os.getloadavg()[0]
    began = time.monotonic()
    done: list[Result] = []
    progress = threading.Lock()

    def one(case: Case) -> Result:
        result = run_case(case, base)
        with progress:
            done.append(result)
            if result.findings:
                print(f"[{len(done)}/{len(cases)}] FINDING {case.id}: "
                      f"{'; '.join(result.findings)}", file=sys.stderr, flush=True)
            elif len(done) % 25 == 0:
                print(f"[{len(done)}/{len(cases)}] {time.monotonic() - began:.0f} s",
                      file=sys.stderr, flush=True)
        return result

    # jobs of ranks (torch processes, seconds each) run one at a time, first, on one worker;
    # the others take the testbed's sandboxes, then the commands that run nothing
    queues = [[case for case in cases if _runs_ranks(case)],
              sorted((case for case in cases if not _runs_ranks(case)),
                     key=lambda case: not case.heavy)]
    lock = threading.Lock()

    def worker(first: int) -> list[Result]:
        mine = []
        while True:
            with lock:
                queue = next((q for q in (queues[first], queues[1]) if q), None)
                if queue is None:
                    return mine
                case = queue.pop(0)
            mine.append(one(case))

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(worker, 0 if number == 0 else 1)
                   for number in range(max(1, args.jobs))]
        results = [result for future in futures for result in future.result()]
    for server in _ALL_SERVERS:
        server.close()
    position = {case.id: number for number, case in enumerate(cases)}
    results.sort(key=lambda r: position[r.id])
    wall = time.monotonic() - began
    if not any(r.findings for r in results):
        shutil.rmtree(base, ignore_errors=True)
    else:
        print(f"folders of cases with findings kept under {base}", file=sys.stderr)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=1))
    print(summary(results, wall, (loads, os.getloadavg()[0])))
    return 1 if any(r.findings for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
