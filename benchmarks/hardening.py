"""Issue 11's figures: hostile-size inputs stay linear or are refused, and the 1024-rank
compare fits the foundation's envelope.

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


CASES: dict[str, Callable[[], dict[str, object]]] = {
    "xml-import": _xml_import(STEPS),
    "xml-import-small": _xml_import(STEPS // 10),
    "compare-1024": _compare_1024,
    "refusals": _refusals,
    "listener-attack": _listener_attack,
    "startup": _startup,
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
    lines = ["issue 11: hostile-size inputs (each case in a fresh process)"]
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
