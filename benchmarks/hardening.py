"""Hardening figures: hostile-size inputs stay linear or are refused, the 1024-rank compare
fits the foundation's envelope (issue 11); a rank's listener shrugs off lying peers, a
stopped rank is named with its step within 15 s of the timeout on every backend, at a
negligible cost, and commands that run nothing start without torch (issue 42).

Cases, each in a fresh process (peak RSS is the child's own, from ``wait4``):

- ``xml-import``: MSCCL XML of 2 GPUs x 3 threadblocks x 10,000 one-chunk steps (7.4 MB;
  it took 5.0 GB before the import was made linear), read by ``ccweave.export.read``;
  beside it the same text parsed by ElementTree alone, the floor any import pays.
- ``xml-import-small``: the same at 1,000 steps per threadblock: time and memory grow
  about 10x between them when the import is linear (100x when quadratic).
- ``compare-1024``: ``ccweave compare ring:1024 allreduce --sizes 1GB`` (limit 8 GiB).
- ``refusals``: the issue's inputs that ate the machine, all in one process.
- ``listener-attack`` (issue 42): while ``ccweave run switch:4 allreduce --nproc 4`` runs,
  this process sends every rank's data listener the issue's 40-byte lying message, 4 KB
  of random bytes, a hello claiming rank 0 without the job's MAC and :data:`RANDOM_LIES`
  random lying hellos (each rank held with SIGSTOP from when it listens until every
  attack is in its kernel); prints the job's exit code, its wrong elements, and how many
  attackers the ranks named by address (each one must be).
- ``startup`` (issue 42): ``ccweave topo show dgx1`` from a fresh interpreter, median of
  :data:`STARTS` runs, with torch importable and with torch and mpi4py hidden (an import
  hook refuses them), beside a bare interpreter's start and ``import torch`` alone; says
  whether the command loaded torch.
- ``stopped-gloo``, ``stopped-mpi``, ``stopped-testbed`` (issue 42): rank 2 of a running
  4-rank allreduce (local gloo, under mpirun, gloo ranks in a testbed) is SIGSTOPped;
  prints how long after the ranks' timeout the error named it, with its collective and
  step (at most 15 s).
- ``progress-cost`` (issue 42): a 64 MB allreduce on 4 local ranks with progress records
  and with ``CCWEAVE_PROGRESS_DIR=off``, alternated rounds, the ratio of median times
  (noisy on a shared host); and what the records cost a call at most, measured apart:
  the busiest rank's writes per call times one write's time, over the call's time
  (under 1%).

Each line prints wall seconds, peak RSS and the load average when it ended.

    python benchmarks/hardening.py [--cases xml-import,compare-1024,...] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

LIMIT_GIB = 8.0
STEPS = 10_000


def chain_xml(steps: int) -> str:
    """An allgather on 2 GPUs, 3 threadblocks each (local copies, receives, sends), one
    chunk per step: the shape of the issue's 7.4 MB file."""
    lines = [f'<algo name="chain" proto="Simple" nchannels="1" nchunksperloop="{2 * steps}" '
             'ngpus="2" coll="allgather" inplace="0" outofplace="1" minBytes="0" '
             'maxBytes="1099511627776">']
    for gpu in (0, 1):
        peer = 1 - gpu
        lines.append(f'  <gpu id="{gpu}" i_chunks="{steps}" o_chunks="{2 * steps}" '
                     's_chunks="0">')
        for tb, (send, recv, kind) in enumerate(((-1, -1, "cpy"), (-1, peer, "r"),
                                                 (peer, -1, "s"))):
            lines.append(f'    <tb id="{tb}" send="{send}" recv="{recv}" chan="0">')
            for k in range(steps):
                dst = (peer if kind == "r" else gpu) * steps + k
                lines.append(f'      <step s="{k}" type="{kind}" srcbuf="i" srcoff="{k}" '
                             f'dstbuf="o" dstoff="{dst}" cnt="1" depid="-1" deps="-1" '
                             'hasdep="0"/>')
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def _xml_import(steps: int) -> Callable[[], dict[str, object]]:
    def case() -> dict[str, object]:
        import xml.etree.ElementTree as ET

        from ccweave.export import from_xml

        text = chain_xml(steps)
        began = time.perf_counter()
        ET.fromstring(text)
        parse_s = time.perf_counter() - began
        began = time.perf_counter()
        schedule = from_xml(text, "chain.xml")
        return {"wall_s": time.perf_counter() - began, "baseline_s": parse_s,
                "file_MB": len(text) / 1e6, "transfers": len(schedule.transfers)}
    return case


def _compare_1024() -> dict[str, object]:
    from ccweave.cli import main

    began = time.perf_counter()
    with open(os.devnull, "w") as sink:
        stdout, sys.stdout = sys.stdout, sink
        try:
            code = main(["compare", "ring:1024", "allreduce", "--sizes", "1GB", "--json"])
        finally:
            sys.stdout = stdout
    return {"wall_s": time.perf_counter() - began, "exit_code": code}


REFUSED = [["topo", "show", "torus:1000x1000x1000"], ["topo", "show", "hypercube:40"],
           ["topo", "show", "dgx1:99999"], ["compare", "ring:100000", "allgather"],
           ["bounds", "ring:4", "allgather", "--sizes", "1KB:1GB:1.0000001"],
           ["synth", "ring:4", "allreduce", "--chunks", "1000000", "-o", os.devnull]]


def _refusals() -> dict[str, object]:
    from ccweave.cli import main

    began = time.perf_counter()
    with open(os.devnull, "w") as sink:
        stderr, sys.stderr = sys.stderr, sink
        try:
            codes = [main(argv) for argv in REFUSED]
        finally:
            sys.stderr = stderr
    return {"wall_s": time.perf_counter() - began, "exit_codes": codes}


STARTS = 7
"""Fresh interpreters per figure of ``startup`` (the median is printed)."""

_STARTER = """
import contextlib, json, os, sys
if sys.argv[1] == "hidden":
    class Hide:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("torch", "mpi4py"):
                raise ImportError(f"{name} is hidden")
    sys.meta_path.insert(0, Hide())
if sys.argv[2:]:
    from ccweave.cli import main
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        code = main(sys.argv[2:])
else:
    code = 0
print(json.dumps({"code": code, "torch": "torch" in sys.modules}))
"""


def _startup() -> dict[str, object]:
    import statistics

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    def starts(*argv: str) -> tuple[float, float, dict[str, object]]:
        """Median wall and CPU seconds of a fresh ``python ARGV``, and its report."""
        walls, cpus, last = [], [], {}
        for _ in range(STARTS):
            began, spent = time.perf_counter(), cpu()
            done = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                                  check=True)
            walls.append(time.perf_counter() - began)
            cpus.append(cpu() - spent)
            if argv[1] == _STARTER:
                last = json.loads(done.stdout.strip().splitlines()[-1])
        return statistics.median(walls), statistics.median(cpus), last

    load_before = os.getloadavg()[0]
    figures: dict[str, object] = {}
    for name, argv in (("bare", ("-c", "pass")), ("torch", ("-c", "import torch")),
                       ("importable", ("-c", _STARTER, "importable", "topo", "show", "dgx1")),
                       ("hidden", ("-c", _STARTER, "hidden", "topo", "show", "dgx1"))):
        wall, spent, last = starts(*argv)
        figures |= {f"{name}_s": wall, f"{name}_cpu_s": spent}
        if last:
            figures[f"{name}_report"] = last
    return {"wall_s": figures["importable_s"], **figures, "load_before": load_before}


RANDOM_LIES = 12
"""Random lying hellos and headers of ``listener-attack``, spread over the ranks."""


def _listening_ports(pid: int) -> set[int]:
    """Ports ``pid`` listens on over TCP/IPv4 (its socket inodes in /proc/net/tcp)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in list(table)[1:]]
    return {int(row[1].split(":")[1], 16) for row in rows if row[3] == "0A" and row[9] in inodes}


def _listener_attack() -> dict[str, object]:
    import random
    import signal
    import socket
    import struct
    import uuid

    mark, low = uuid.uuid4().hex, random.randrange(20000, 30000)
    env = dict(os.environ, CCWEAVE_HARDENING_MARK=mark, CCWEAVE_DATA_PORTS=f"{low}-{low + 199}")
    began = time.perf_counter()
    job = subprocess.Popen([sys.executable, "-m", "ccweave.cli", "run", "switch:4", "allreduce",
                            "--nproc", "4", "--sizes", "4KB,256KB", "--iters", "100", "--json"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ports: dict[int, int] = {}
    held: list[int] = []  # each rank stopped from when it listens until every attack is in
    while len(ports) < 4 and job.poll() is None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/environ", "rb") as handle:
                    rank_env = dict(item.split(b"=", 1) for item in handle.read().split(b"\0")
                                    if b"=" in item)
                if rank_env.get(b"CCWEAVE_HARDENING_MARK") == mark.encode() and \
                        b"RANK" in rank_env:
                    ours = [port for port in _listening_ports(int(pid))
                            if low <= port < low + 200]
                    if ours and int(rank_env[b"RANK"]) not in ports:
                        os.kill(int(pid), signal.SIGSTOP)  # as a busy rank: no early end
                        held.append(int(pid))
                        ports[int(rank_env[b"RANK"])] = ours[0]
        time.sleep(0.02)
    hello = struct.Struct("<qqq")
    payloads = [struct.pack("<qqq", 0, 0, -1) + struct.pack("<qq", 999999, 2**50),
                os.urandom(4096), hello.pack(0, 0, -1) + bytes(32) + struct.pack("<qq", 1, 2**40)]
    attacks = [(rank, payload) for rank in sorted(ports) for payload in payloads]
    rng = random.Random(42)
    for number in range(RANDOM_LIES if ports else 0):
        lie = (hello.pack(rng.choice([0, 1, 2, 3, -1, 2**40]), rng.choice([0, 1, 64, -1]),
                          rng.choice([-1, 0, 7, 5000, 2**62])) + rng.randbytes(rng.randrange(40))
               + struct.pack("<qq", rng.getrandbits(63), rng.getrandbits(63) - 2**62))
        attacks.append((sorted(ports)[number % len(ports)], lie[:rng.randrange(len(lie) + 1)]))
    attackers = []
    for rank, payload in attacks:
        with socket.create_connection(("127.0.0.1", ports[rank]), timeout=10) as sock:
            host, port = sock.getsockname()[:2]
            attackers.append((rank, f"{host}:{port}"))
            with contextlib.suppress(OSError):
                sock.sendall(payload)
    for pid in held:
        os.kill(pid, signal.SIGCONT)
    out, err = job.communicate(timeout=600)
    refusals = [line for line in err.splitlines() if "refused a connection from" in line]
    named = sum(any(line.startswith(f"ccweave rank {rank}: refused a connection from "
                                    f"{address}: ") for line in refusals)
                for rank, address in attackers)
    try:
        wrong = json.loads(out)["wrong"]
    except (ValueError, KeyError):
        wrong = None
    return {"wall_s": time.perf_counter() - began, "job_exit": job.returncode, "wrong": wrong,
            "attackers": len(attackers), "named": named, "refusals": len(refusals),
            "tracebacks": err.count("Traceback"), "example": refusals[0] if refusals else ""}


STOP_TIMEOUT_S = 5
"""The ranks' ``--timeout`` in the stopped-rank cases."""


def _rank_pids(mark: str) -> dict[int, int]:
    """rank -> pid of every process whose environment carries ``mark`` and a rank."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{pid}/environ", "rb") as handle:
                env = dict(item.split(b"=", 1) for item in handle.read().split(b"\0")
                           if b"=" in item)
            rank = env.get(b"OMPI_COMM_WORLD_RANK") or env.get(b"RANK")
            if env.get(b"CCWEAVE_HARDENING_MARK") == mark.encode() and rank is not None:
                found.setdefault(int(rank), int(pid))
    return found


def _stopped(backend: str) -> Callable[[], dict[str, object]]:
    """SIGSTOP rank 2 of a running 4-rank allreduce (``backend``: gloo, mpi, or gloo ranks
    in a testbed) and time how long after the ranks' timeout the error names it."""
    def case() -> dict[str, object]:
        import signal
        import tempfile
        import uuid

        mark = uuid.uuid4().hex
        env = dict(os.environ, CCWEAVE_HARDENING_MARK=mark)
        job = ["run", "switch:4", "allreduce", "--sizes", "4MB", "--iters", "1000000",
               "--warmup", "0", "--modes", "out", "--no-check", "--timeout",
               str(STOP_TIMEOUT_S), "--progress"]
        with tempfile.TemporaryDirectory() as folder:
            if backend == "testbed":
                topology = os.path.join(folder, "four.json")
                with open(topology, "w") as out:
                    json.dump({"name": "four", "ranks": 4, "fabric": {"sw": "switch"},
                               "links": [{"src": r, "dst": "sw", "bw_GBps": 0.05,
                                          "duplex": True} for r in range(4)]}, out)
                command = ["testbed", "run", topology, "--", sys.executable, "-m",
                           "ccweave.cli", *job[:1], topology, *job[2:]]
            else:
                command = [*job, "--nproc", "4", "--backend", backend]
            proc = subprocess.Popen([sys.executable, "-m", "ccweave.cli", *command], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True)
            lines: list[str] = []
            running = threading.Event()

            def pump() -> None:
                for line in proc.stderr:  # type: ignore[union-attr]
                    lines.append(line)
                    if "check and time" in line or "time " in line:
                        running.set()

            threading.Thread(target=pump, daemon=True).start()
            deadline = time.monotonic() + 300
            while not running.wait(0.5) and proc.poll() is None and \
                    time.monotonic() < deadline:
                pass
            time.sleep(2.0)
            pids = _rank_pids(mark)
            if 2 not in pids or proc.poll() is not None:
                proc.kill()
                return {"wall_s": 0.0, "error_line": "the job did not start: "
                        + "".join(lines)[-300:]}
            os.kill(pids[2], signal.SIGSTOP)
            stopped = time.monotonic()
            proc.wait(timeout=600)
            named_after = time.monotonic() - stopped - STOP_TIMEOUT_S
            time.sleep(0.2)
        error = next((line.strip() for line in lines if "made no progress" in line), "")
        return {"wall_s": named_after, "exit": proc.returncode, "error_line": error,
                "names_rank_2": error.startswith("ccweave: error: rank 2 (stopped")
                and "waiting on a" in error}
    return case


def _progress_cost() -> dict[str, object]:
    """A 64 MB allreduce on 4 local ranks with progress records and without
    (``CCWEAVE_PROGRESS_DIR=off``), alternated; the median time of each."""
    import statistics

    def once(records: bool, strategy: str, chunks: str) -> float:
        env = dict(os.environ)
        if not records:
            env["CCWEAVE_PROGRESS_DIR"] = "off"
        done = subprocess.run([sys.executable, "-m", "ccweave.cli", "run", "switch:4",
                               "allreduce", "--strategy", strategy, "--chunks", chunks,
                               "--nproc", "4", "--sizes", "64MB", "--iters", "5", "--warmup",
                               "1", "--modes", "out", "--no-check", "--json"],
                              env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout)["rows"][0]["out_of_place"]["time_us"]

    began = time.perf_counter()
    write_us = _record_write_us()
    figures: dict[str, object] = {"write_us": write_us}
    for strategy, chunks in (("ring", "1"), ("trees", "16")):
        on, off = [], []
        for _ in range(ROUNDS):
            on.append(once(True, strategy, chunks))
            off.append(once(False, strategy, chunks))
        writes = _record_writes(strategy, int(chunks))
        figures[f"schedule {strategy}(chunks={chunks})"] = {
            "with_us": statistics.median(on), "without_us": statistics.median(off),
            "ratio": statistics.median(on) / statistics.median(off), "writes": writes,
            "bound": writes * write_us / statistics.median(off)}
    return {"wall_s": time.perf_counter() - began, **figures}


def _record_write_us() -> float:
    """Microseconds of one record write (:meth:`Recorder.step`), the median of 9 runs of
    20,000: what a rank adds each time its transfers make progress."""
    import statistics

    from ccweave.runtime.progress import Recorder

    with tempfile.TemporaryDirectory() as folder:
        recorder = Recorder(folder, 0, 60.0)
        recorder.run(0, 64 << 20, 1, 100)
        runs = []
        for _ in range(9):
            began = time.perf_counter()
            for step in range(20_000):
                recorder.step(step, 1, False, step, 2)
            runs.append((time.perf_counter() - began) / 20_000 * 1e6)
        recorder.close()
    return statistics.median(runs)


def _record_writes(strategy: str, chunks: int) -> int:
    """Record writes in one call at most: one per op of the busiest rank, plus the run's
    start and end (the executor writes once per wait, after at least one op finished)."""
    from ccweave.runtime.program import compile_program
    from ccweave.synth.registry import synthesize
    from ccweave.topology.io import load

    schedule = synthesize(load("switch:4"), "allreduce", strategy, chunks=chunks)
    return 2 + max(len(compile_program(schedule, rank).ops) for rank in range(4))


ROUNDS = 5
"""Alternated rounds of ``progress-cost``."""


CASES: dict[str, Callable[[], dict[str, object]]] = {
    "xml-import": _xml_import(STEPS),
    "xml-import-small": _xml_import(STEPS // 10),
    "compare-1024": _compare_1024,
    "refusals": _refusals,
    "listener-attack": _listener_attack,
    "startup": _startup,
    "stopped-gloo": _stopped("gloo"),
    "stopped-mpi": _stopped("mpi"),
    "stopped-testbed": _stopped("testbed"),
    "progress-cost": _progress_cost,
}


def run_case(name: str) -> dict[str, object]:
    """One case in a fresh Python: its figures, its own peak RSS and the load average."""
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen([sys.executable, __file__, "--child", name], stdout=out)
        _, status, usage = os.wait4(child.pid, 0)
        out.seek(0)
        text = out.read()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        return {"case": name, "error": f"exit code {code}"}
    peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return {"case": name, **json.loads(text.strip().splitlines()[-1]),
            "peak_rss_GiB": peak / 2**30, "load_avg_1min": os.getloadavg()[0]}


def report(rows: list[dict[str, object]]) -> str:
    lines = ["hardening figures (each case in a fresh process)"]
    for row in rows:
        if "error" in row:
            lines.append(f"  {row['case']:<18} FAILED: {row['error']}")
            continue
        line = (f"  {row['case']:<18} {row['wall_s']:8.2f} s  peak {row['peak_rss_GiB']:6.2f} "
                f"GiB  load {row['load_avg_1min']:5.2f}")
        if "baseline_s" in row:
            line += (f"  ({row['file_MB']:.1f} MB, {row['transfers']:,} transfers; "
                     f"{row['wall_s'] / row['baseline_s']:.1f}x ElementTree's parse of it)")
        if row["case"] == "compare-1024":
            verdict = "within" if row["peak_rss_GiB"] <= LIMIT_GIB else "OVER"
            line += f"  exit {row['exit_code']}, {verdict} {LIMIT_GIB:g} GiB"
        if "exit_codes" in row:
            line += f"  exit codes {row['exit_codes']}"
        if row["case"] == "listener-attack":
            line += (f"  job exit {row['job_exit']}, {row['wrong']} wrong element(s), "
                     f"{row['named']} of {row['attackers']} attackers named by address, "
                     f"{row['tracebacks']} traceback(s)\n    e.g. {row['example']}")
        if row["case"] == "startup":
            line = _startup_report(row)
        if row["case"].startswith("stopped-"):
            verdict = "met" if row.get("names_rank_2") and row["wall_s"] <= 15 else "MISSED"
            line = (f"  {row['case']:<18} rank 2 SIGSTOPped, named {row['wall_s']:5.1f} s "
                    f"after the {STOP_TIMEOUT_S} s timeout [{verdict}: <= 15 s, with its step]"
                    f"  peak {row['peak_rss_GiB']:.2f} GiB  load {row['load_avg_1min']:.2f}"
                    f"\n    {row['error_line']}")
        if row["case"] == "progress-cost":
            parts = [f"{key[9:]}: {fig['with_us'] / 1e3:.1f} ms with, "
                     f"{fig['without_us'] / 1e3:.1f} ms without ({fig['ratio']:.3f}x); "
                     f"{fig['writes']} writes x {row['write_us']:.2f} us = "
                     f"{100 * fig['bound']:.3f}% of a call"
                     for key, fig in row.items() if key.startswith("schedule ")]
            worst = max(fig["bound"] for key, fig in row.items() if key.startswith("schedule "))
            line = (f"  progress-cost      64 MB allreduce on 4 local ranks, medians of "
                    f"{ROUNDS} alternated rounds, and the records' own cost per call:\n    "
                    + "\n    ".join(parts)
                    + f"\n    [{'met' if worst < 0.01 else 'MISSED'}: < 1%]  load "
                    f"{row['load_avg_1min']:.2f}")
        lines.append(line)
    by_case = {row["case"]: row for row in rows if "error" not in row}
    if {"xml-import", "xml-import-small"} <= set(by_case):
        big, small = by_case["xml-import"], by_case["xml-import-small"]
        lines.append(f"  10x the steps: {big['wall_s'] / small['wall_s']:.1f}x the time, "
                     f"{big['peak_rss_GiB'] / small['peak_rss_GiB']:.1f}x the peak RSS "
                     "(linear: about 10x and less)")
    return "\n".join(lines)


def _startup_report(row: dict[str, object]) -> str:
    def figure(name: str) -> str:
        return f"{row[f'{name}_s']:.2f} s wall, {row[f'{name}_cpu_s']:.2f} s CPU"

    loaded = [name for name in ("importable", "hidden") if row[f"{name}_report"]["torch"]]
    codes = [row[f"{name}_report"]["code"] for name in ("importable", "hidden")]
    return "\n".join([
        f"  startup            ccweave topo show dgx1, median of {STARTS} fresh starts "
        f"(load {row['load_before']:.2f} before, {row['load_avg_1min']:.2f} after):",
        f"    torch importable   {figure('importable')}  "
        f"({'torch LOADED' if 'importable' in loaded else 'torch not loaded'}, exit {codes[0]})",
        f"    torch hidden       {figure('hidden')}  (exit {codes[1]})",
        f"    a bare python      {figure('bare')}",
        f"    import torch alone {figure('torch')}  (what every command paid before)"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(CASES[args.child]()))
        return 0
    names = args.cases.split(",")
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}; choose from {', '.join(CASES)}")
    rows = [run_case(name) for name in names]
    print(json.dumps(rows) if args.json else report(rows))
    compare = next((row for row in rows if row["case"] == "compare-1024"), None)
    return 1 if compare and compare.get("peak_rss_GiB", 0) > LIMIT_GIB else 0


if __name__ == "__main__":
    sys.exit(main())
