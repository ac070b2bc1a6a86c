"""The cases of ``hostile_pass.py``: what a new user would try, command by command.

Each area is one function returning :class:`hostile_pass.Case` rows; ``new`` marks a case
none of the earlier passes tried (``origin`` names where an old one came from). Inputs are
made from ccweave's own outputs (a zoo topology, a ring schedule, its MSCCL XML and
MSCCL++ plan, a plan of ``auto``) and the repository's fixtures, then broken.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

from hostile_pass import AS_LIMIT, MARK_ENV, Case, Interrupt, run_command, running

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
INT, TERM, KILL, HUP = signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGHUP
ESC = "\x1b]0;owned\x07\x1b[31mred"
BIDI = "safe\u202etxt.exe"
OLD_FUZZ = "tests/test_fuzz.py"
ISSUE_11 = "issue 11"
ISSUE_42 = "issue 42"


# ------------------------------------------------------------------ seed inputs

_SEEDS_LOCK = threading.Lock()


def seeds() -> dict[str, str]:
    """Valid inputs of every kind, as text (made once, in the pass's own process)."""
    with _SEEDS_LOCK:
        return _seeds()


@cache
def _seeds() -> dict[str, str]:
    import contextlib as _c
    import io
    import tempfile

    from ccweave import schedule as schedule_io
    from ccweave.cli import main
    from ccweave.export import to_xml
    from ccweave.profile.result import Curve, PairFigure, Profile
    from ccweave.synth import synthesize
    from ccweave.topology import io as topology_io
    from ccweave.topology import zoo

    topo = topology_io.to_dict(zoo.get("switch:4"))
    topo["name"] = "sw4"
    schedule = synthesize(zoo.get("switch:4"), "allreduce", "ring")
    made = {"topology": json.dumps(topo, indent=1),
            "schedule": json.dumps(schedule_io.to_dict(schedule)),
            "xml": to_xml(schedule),
            "sketch": (ROOT / "examples" / "sketches" / "one-node-switch.json").read_text(),
            "taccl_profile": (FIXTURES / "taccl" / "topo" / "topo-ndv2-1MB.json").read_text(),
            "nccl_xml": (FIXTURES / "nccl_topo_ndv2.xml").read_text(),
            "hwloc": (FIXTURES / "hwloc_4gpu_pcie.xml").read_text(),
            "smi": (FIXTURES / "nvidia_smi_topo_dgx1.txt").read_text(),
            "inspector": "".join(_inspector(coll, size, t) for coll, size, t in
                                 (("AllReduce", 2**20, 40), ("AllReduce", 2**26, 900),
                                  ("AllGather", 2**20, 30))),
            "nccl_tests": NCCL_TESTS,
            "raw": json.dumps(Profile(2, "gloo", ((0, 1),), (PairFigure(0, 1, Curve.of(
                [1024, 65536, 1 << 20], [2e-5, 1e-4, 1.2e-3])),)).to_dict())}
    with tempfile.TemporaryDirectory() as folder, _c.redirect_stdout(io.StringIO()), \
            _c.redirect_stderr(io.StringIO()):
        sched = Path(folder, "s.json")
        sched.write_text(made["schedule"])
        for key, argv in (("mscclpp", ["export", str(sched), "--format", "mscclpp"]),
                          ("plan", ["synth", "switch:4", "allreduce", "--strategy", "auto",
                                    "--sizes", "1KB,1MB"]),
                          ("graphs", ["tune", "dgx-a100", "--nccl-graph"])):
            out = Path(folder, f"{key}.{'xml' if key == 'graphs' else 'json'}")
            assert main([*argv, "-o", str(out)]) == 0, key
            made[key] = out.read_text()
    return made


def _inspector(coll: str, size: int, time_us: int, ranks: int = 8, comm: str = "0xabc") -> str:
    """One NCCL Inspector record, one compact object per line (its README's layout)."""
    return json.dumps({"header": {"id": comm, "rank": 0, "n_ranks": ranks, "nnodes": 1},
                       "metadata": {"inspector_output_format_version": "v4.0"},
                       "coll_perf": {"coll": coll, "coll_sn": 1, "coll_msg_size_bytes": size,
                                     "coll_exec_time_us": time_us,
                                     "coll_timing_source": "kernel_gpu",
                                     "coll_algobw_gbs": 0.0, "coll_busbw_gbs": 1.0}}) + "\n"


def _row(size: int, count: int, time_us: float) -> str:
    return (f"{size:>12} {count:>12} {'float':>8} {'sum':>6} {-1:>6} {time_us:>8.2f} "
            f"{size / time_us / 1e3:>6.2f} {size / time_us / 1e3 * 1.75:>6.2f} {0:>5} "
            f"{time_us:>8.2f} {size / time_us / 1e3:>6.2f} {size / time_us / 1e3 * 1.75:>6.2f} "
            f"{0:>5}")


NCCL_TESTS = "\n".join([
    "# nccl-tests version 2.19.6 nccl-headers=23007 nccl-library=23007",
    "# Collective test starting: all_reduce_perf",
    "# nThread 1 nGpus 8 minBytes 1024 maxBytes 1048576 step: 1024(factor) warmup iters: 5",
    "#",
    "# Using devices",
    *(f"#  Rank {r:2d} Group  0 Pid  41231 on     node-0 device  {r} [0x07] NVIDIA A100-SXM4-80GB"
      for r in range(8)),
    "node-0:41231:41231 [0] NCCL INFO NCCL_ALGO set by environment to Ring",
    "node-0:41231:41231 [0] NCCL INFO NCCL_PROTO set by environment to LL",
    "#",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong",
    _row(1024, 256, 15.31), _row(1048576, 262144, 36.90),
    "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 24.9", "#",
    "# Collective test concluded: all_reduce_perf", ""])


# ------------------------------------------------------------------ file makers

def write(name: str, make: Callable[[], bytes | str]) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        data = make()
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str)
                         else data)
    return setup


def chain(*steps: Callable[[Path], object]) -> Callable[[Path], bytes | None]:
    def setup(folder: Path) -> bytes | None:
        stdin = None
        for step in steps:
            got = step(folder)
            if isinstance(got, bytes):
                stdin = got
        return stdin
    return setup


def stdin_of(make: Callable[[], str]) -> Callable[[Path], bytes]:
    return lambda folder: make().encode()


def _jsonish(kind: str, edit: Callable[[object], object]) -> Callable[[], str]:
    """A seed of ``kind`` parsed, edited, and written back (``allow_nan``: NaN stays); of
    NCCL Inspector's records, the first."""
    def make() -> str:
        text = seeds()[kind]
        data = json.loads(text.splitlines()[0] if kind == "inspector" else text)
        changed = edit(data)
        return changed if isinstance(changed, str) else json.dumps(
            data if changed is None else changed)
    return make


def _set(path: tuple, value: object) -> Callable[[object], None]:
    def edit(data: object) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


def _raw_value(path: tuple, text: str) -> Callable[[object], str]:
    """Put a literal ``text`` (``NaN``, ``1e400``, 5000 digits) where ``path`` sits."""
    marker = "\"@@RAW@@\""

    def edit(data: object) -> str:
        _set(path, "@@RAW@@")(data)
        return json.dumps(data).replace(marker, text)
    return edit


def deep_json(depth: int = 100_000) -> str:
    return "[" * depth + "]" * depth


def deep_xml(depth: int = 50_000) -> str:
    return "<a>" * depth + "</a>" * depth


# ------------------------------------------------------------------ readers x files

READERS: list[tuple[str, str, list[str], list[str], set[int], bool]] = [
    # (label, seed kind, argv with {f}, outputs, codes when valid, full variant set)
    ("topo-show", "topology", ["topo", "show", "{f}"], [], {0}, True),
    ("bounds", "topology", ["bounds", "{f}", "allgather", "--sizes", "1MB"], [], {0}, False),
    ("synth", "topology", ["synth", "{f}", "allgather", "-o", "{d}/out.json"], ["out.json"],
     {0}, False),
    ("compare", "topology", ["compare", "{f}", "allgather", "--sizes", "1MB",
                             "--strategies", "ring,direct"], [], {0}, False),
    ("testbed-show", "topology", ["testbed", "show", "{f}"], [], {0}, False),
    ("p2p", "topology", ["p2p", "{f}", "0", "1", "--sizes", "1MB"], [], {0}, False),
    ("tune-topo", "topology", ["tune", "{f}", "--nccl-tuner", "--gpu", "a100", "-o",
                               "{d}/t.conf"], ["t.conf"], {0}, False),
    ("verify", "schedule", ["verify", "{f}"], [], {0}, True),
    ("simulate", "schedule", ["simulate", "{f}", "switch:4", "--sizes", "1MB"], [], {0}, False),
    ("export-xml", "schedule", ["export", "{f}", "-o", "{d}/out.xml"], ["out.xml"], {0}, False),
    ("export-mscclpp", "schedule", ["export", "{f}", "--format", "mscclpp", "-o",
                                    "{d}/out.json"], ["out.json"], {0}, False),
    ("export-plan", "plan", ["export", "{f}", "-o", "{d}/outdir"], ["outdir", "outdir/*"],
     {0}, False),
    ("import-xml", "xml", ["import", "{f}", "-o", "{d}/out.json"], ["out.json"], {0}, True),
    ("verify-xml", "xml", ["verify", "{f}"], [], {0}, False),
    ("lint-xml", "xml", ["lint", "{f}", "--ignore-env", "--runtime", "msccl"], [], {0, 1}, True),
    ("import-mscclpp", "mscclpp", ["import", "{f}", "-o", "{d}/out.json"], ["out.json"], {0},
     True),
    ("lint-mscclpp", "mscclpp", ["lint", "{f}", "--ignore-env", "--runtime", "mscclpp"], [],
     {0, 1}, False),
    ("topo-import-nccl", "nccl_xml", ["topo", "import", "{f}", "--format", "nccl-xml", "-o",
                                      "{d}/out.json"], ["out.json"], {0}, True),
    ("topo-import-hwloc", "hwloc", ["topo", "import", "{f}", "--gpu-fabric", "pcie-only", "-o",
                                    "{d}/out.json"], ["out.json"], {0}, True),
    ("topo-import-smi", "smi", ["topo", "import", "{f}", "--format", "nvidia-smi", "--gpu",
                                "v100", "-o", "{d}/out.json"], ["out.json"], {0}, False),
    ("gpu-fabric", "nccl_xml", ["topo", "import", "{d}/pcie.xml", "--format", "hwloc",
                                "--gpu-fabric", "{f}", "-o", "{d}/out.json"], ["out.json"],
     {0, 2}, False),
    ("explain", "inspector", ["explain", "{f}", "--topology", "dgx-a100"], [], {0}, True),
    ("tune-measured", "nccl_tests", ["tune", "dgx-a100", "--nccl-tuner", "--measured", "{f}",
                                     "-o", "{d}/t.conf"], ["t.conf"], {0}, True),
    ("compare-graphs", "graphs", ["compare", "dgx-a100", "allreduce", "--sizes", "1MB",
                                  "--strategies", "ring", "--nccl-graphs", "{f}"], [], {0},
     False),
    ("profile-load", "raw", ["profile", "--load", "{f}", "-o", "{d}/out.json"], ["out.json"],
     {0}, True),
    ("taccl-sketch", "sketch", ["synth", "switch:4", "allgather", "--strategy", "taccl",
                                "--sketch", "{f}", "--time-limit", "5", "-o", "{d}/out.json"],
     ["out.json"], {0}, False),
]
OLD_READERS = {"topo-show", "bounds", "synth", "verify", "simulate", "export-xml",
               "import-xml", "verify-xml", "compare"}
"""Readers the first passes fuzzed (their files' contents: truncation, wrong values)."""

GENERIC = ["missing", "empty", "directory", "symlink-loop", "dangling-symlink", "dev-null",
           "dev-zero", "stdin", "stdin-empty", "fifo", "truncated", "garbage", "bad-utf8",
           "nul-bytes", "bom", "huge"]
SHORT = ["missing", "directory", "dev-zero", "stdin", "fifo", "truncated", "garbage"]


def _file_variant(variant: str, kind: str, label: str, rng: random.Random
                  ) -> tuple[str, Callable[[Path], object] | None, set[int] | None]:
    """(the path to give, the setup, codes; ``None``: as for a valid file)."""
    name = "in" + (".xml" if kind in ("xml", "nccl_xml", "hwloc", "graphs") else
                   ".txt" if kind in ("smi", "nccl_tests") else ".json")
    path = "{d}/" + name
    text = lambda: seeds()[kind]  # noqa: E731
    garbage = rng.randbytes(4096)
    if variant == "missing":
        return path, None, {2}
    if variant == "empty":
        return path, write(name, lambda: b""), {2}
    if variant == "directory":
        return path, lambda d: (d / name).mkdir(), {2}
    if variant == "symlink-loop":
        return path, lambda d: (d / name).symlink_to(name), {2}
    if variant == "dangling-symlink":
        return path, lambda d: (d / name).symlink_to("nowhere/at/all"), {2}
    if variant == "dev-null":
        return "/dev/null", None, {2}
    if variant == "dev-zero":
        return "/dev/zero", None, {2}
    if variant == "stdin":
        return "/dev/stdin", lambda d: text().encode(), None
    if variant == "stdin-empty":
        return "/dev/stdin", lambda d: b"", {2}
    if variant == "fifo":
        def make(d: Path) -> None:
            os.mkfifo(d / name)
            (d / ".fifo").write_text(text())
        return path, make, None
    if variant == "truncated":
        return path, write(name, lambda: text()[:len(text()) // 2]), {2}
    if variant == "garbage":
        return path, write(name, lambda: garbage), {2}
    if variant == "bad-utf8":
        return path, write(name, lambda: text().encode()[:40] + b"\xff\xfe\xc0"
                           + text().encode()[40:]), {0, 1, 2}
    if variant == "nul-bytes":  # inside a comment of a text log it is harmless
        return path, write(name, lambda: text().encode()[:60] + b"\0" * 64
                           + text().encode()[60:]), {0, 2} if kind in ("smi", "nccl_tests") \
            else {2}
    if variant == "bom":
        return path, write(name, lambda: b"\xef\xbb\xbf" + text().encode()), {0, 1, 2}
    if variant == "huge":
        pad = b" " * (24 << 20) if kind not in ("smi", "nccl_tests") else b"\n" * (24 << 20)
        return path, write(name, lambda: text().encode() + pad), {0, 1, 2}
    raise KeyError(variant)


def _file_options(variant: str, path: str) -> dict[str, object]:
    if variant == "fifo":
        return {"fifo": "{d}/" + path.rsplit("/", 1)[-1]}
    return {}


def file_cases(rng: random.Random) -> list[Case]:
    cases = []
    for label, kind, argv, outputs, valid, full in READERS:
        for variant in GENERIC if full else SHORT:
            path, setup, codes = _file_variant(variant, kind, label, rng)
            extra = []
            if label == "gpu-fabric":
                extra.append(write("pcie.xml", lambda: seeds()["hwloc"]))
            if setup is not None:
                extra.append(setup)
            old = (label in OLD_READERS and variant in ("missing", "directory", "truncated",
                                                        "garbage", "empty", "dev-null"))
            cases.append(Case(
                id=f"files/{label}/{variant}",
                argv=[a.replace("{f}", path) for a in argv], expect=codes or valid,
                new=not old, origin=OLD_FUZZ if old else "",
                what=f"{label} given a {variant.replace('-', ' ')} for its {kind} file",
                setup=chain(*extra) if extra else None, outputs=outputs,
                timeout=90 if variant in ("huge", "dev-zero") or label == "taccl-sketch"
                else 45, options=_file_options(variant, path)))
    return cases


# ------------------------------------------------------------------ readers x content

def content_cases() -> list[Case]:
    rows: list[tuple[str, str, Callable[[], str], list[str], set[int], bool, str]] = []

    def add(label: str, kind: str, make: Callable[[], str], argv: list[str],
            expect: set[int], new: bool = True, origin: str = "") -> None:
        rows.append((label, kind, make, argv, expect, new, origin))

    # names that carry escapes, bidi overrides, newlines: printed as themselves, escaped
    for tag, name in (("esc", ESC), ("bidi", BIDI), ("newline", "a\nb\rc"),
                      ("long", "n" * 20000), ("empty", "")):
        old = tag in ("esc", "newline") and True
        topo = _jsonish("topology", _set(("name",), name))
        for command in (["topo", "show", "{f}"], ["testbed", "show", "{f}"],
                        ["compare", "{f}", "allgather", "--sizes", "1MB", "--strategies",
                         "ring"], ["tune", "{f}", "--nccl-tuner", "--gpu", "a100", "-o",
                                   "{d}/t.conf"], ["p2p", "{f}", "0", "1", "--sizes", "1MB"]):
            is_old = old and command[0] in ("topo", "compare")
            add(f"topology-name-{tag}-{command[0]}-{command[1]}", "topology", topo, command,
                {0, 2} if tag in ("empty", "long") else {0}, not is_old,
                ISSUE_11 if is_old else "")
        sched = _jsonish("schedule", _set(("name",), name))
        add(f"schedule-name-{tag}-verify", "schedule", sched, ["verify", "{f}"], {0, 2},
            tag not in ("esc",), ISSUE_11)
        add(f"schedule-name-{tag}-export", "schedule", sched,
            ["export", "{f}", "-o", "{d}/out.xml"], {0, 2}, True)
        add(f"xml-name-{tag}-lint", "xml",
            lambda name=name: seeds()["xml"].replace('name="', f'name="{_xml_attr(name)}', 1),
            ["lint", "{f}", "--ignore-env", "--runtime", "msccl"], {0, 1, 2})
        add(f"inspector-comm-{tag}", "inspector",
            lambda name=name: _inspector("AllReduce", 2**20, 40, comm=name),
            ["explain", "{f}", "--topology", "dgx-a100"], {0, 2})
        add(f"profile-name-{tag}", "raw", lambda: seeds()["raw"],
            ["profile", "--load", "{f}", "--name", name, "-o", "{d}/out.json"], {0, 2})
    # numbers no machine has, in the newer readers
    for tag, text in (("nan", "NaN"), ("inf", "Infinity"), ("huge", "1e400"),
                      ("digits", "9" * 5000), ("string", '"fast"'), ("negative", "-1"),
                      ("null", "null"), ("deep", deep_json(1000))):
        add(f"raw-world-size-{tag}", "raw", _jsonish("raw", _raw_value(("world_size",), text)),
            ["profile", "--load", "{f}", "-o", "{d}/out.json"], {2})
        add(f"raw-pair-time-{tag}", "raw",
            _jsonish("raw", _raw_value(("pairs", 0, "times_s", 1), text)),
            ["profile", "--load", "{f}", "-o", "{d}/out.json"], {2})
        add(f"inspector-size-{tag}", "inspector",
            _jsonish("inspector", _raw_value(("coll_perf", "coll_msg_size_bytes"), text)),
            ["explain", "{f}", "--topology", "dgx-a100"], {2})
        add(f"inspector-ranks-{tag}", "inspector",
            _jsonish("inspector", _raw_value(("header", "n_ranks"), text)),
            ["explain", "{f}", "--topology", "dgx-a100"], {2})
        add(f"mscclpp-chunks-{tag}", "mscclpp",
            _jsonish("mscclpp", _raw_value(("gpus", 0, "input_chunks"), text)),
            ["import", "{f}", "-o", "{d}/out.json"], {2})
        add(f"sketch-chunkup-{tag}", "sketch",
            _jsonish("sketch", _raw_value(("input_chunkup",), text)),
            ["synth", "switch:4", "allgather", "--strategy", "taccl", "--sketch", "{f}",
             "--time-limit", "5", "-o", "{d}/out.json"], {2},
            tag not in ("nan", "inf", "deep", "string"), "tests/test_fuzz_readers.py")
    # unknown and misspelled keys: read, or refused by name, never silently defaulted
    add("topology-link-misspelled-bw", "topology",
        _jsonish("topology", lambda d: [link.update(bw_gbps=link.pop("bw_GBps"))
                                        for link in d["links"][:1]] and None),
        ["topo", "show", "{f}"], {2})
    add("topology-unknown-top-key", "topology", _jsonish("topology", _set(("comment",), "x")),
        ["topo", "show", "{f}"], {0, 2})
    add("mscclpp-unknown-op", "mscclpp",
        _jsonish("mscclpp", _set(("gpus", 0, "threadblocks", 0, "ops", 0, "name"), "teleport")),
        ["import", "{f}", "-o", "{d}/out.json"], {2})
    add("mscclpp-gpus-dict", "mscclpp", _jsonish("mscclpp", _set(("gpus",), {"0": 1})),
        ["import", "{f}", "-o", "{d}/out.json"], {2})
    add("mscclpp-no-gpus", "mscclpp", _jsonish("mscclpp", lambda d: d.pop("gpus") and None),
        ["lint", "{f}", "--ignore-env"], {2})
    add("inspector-not-object", "inspector", lambda: "[1, 2, 3]\n",
        ["explain", "{f}", "--topology", "dgx-a100"], {2})
    add("inspector-coll-unknown", "inspector",
        lambda: _inspector("AllTeleport", 2**20, 40), ["explain", "{f}", "--topology",
                                                       "dgx-a100"], {2})
    add("inspector-time-zero", "inspector", lambda: _inspector("AllReduce", 2**20, 0),
        ["explain", "{f}", "--topology", "dgx-a100"], {0, 2})
    add("inspector-prom-garbage", "inspector",
        lambda: 'nccl_bus_bandwidth_gbs{collective="AllReduce",nranks="8",message_size='
                '"4-5GB",algo_proto="Ring_ll"} NaN\n',
        ["explain", "{f}", "--topology", "dgx-a100"], {2})
    add("nccl-tests-row-nan", "nccl_tests",
        lambda: NCCL_TESTS.replace("   15.31", "     nan", 1),
        ["tune", "dgx-a100", "--nccl-tuner", "--measured", "{f}", "-o", "{d}/t.conf"], {2})
    add("nccl-tests-size-huge", "nccl_tests",
        lambda: NCCL_TESTS.replace("        1024          256", "9" * 30 + " 256", 1),
        ["tune", "dgx-a100", "--nccl-tuner", "--measured", "{f}", "-o", "{d}/t.conf"], {2})
    add("nccl-tests-algo-bidi", "nccl_tests",
        lambda: NCCL_TESTS.replace("to Ring", "to Ri\u202eng"),
        ["tune", "dgx-a100", "--nccl-tuner", "--measured", "{f}", "-o", "{d}/t.conf"], {2})
    add("graphs-nchannels-huge", "graphs",
        lambda: seeds()["graphs"].replace('nchannels="12"', 'nchannels="99999999999"', 1),
        ["compare", "dgx-a100", "allreduce", "--sizes", "1MB", "--strategies", "ring",
         "--nccl-graphs", "{f}"], {0, 2})
    add("graphs-rank-unknown", "graphs",
        lambda: seeds()["graphs"].replace('rank="7"', 'rank="700"', 1),
        ["compare", "dgx-a100", "allreduce", "--sizes", "1MB", "--strategies", "ring",
         "--nccl-graphs", "{f}"], {2})
    add("graphs-entity-bomb", "graphs", lambda: _billion_laughs("graphs"),
        ["compare", "dgx-a100", "allreduce", "--sizes", "1MB", "--strategies", "ring",
         "--nccl-graphs", "{f}"], {2})
    add("hwloc-entity-bomb", "hwloc", lambda: _billion_laughs("hwloc"),
        ["topo", "import", "{f}", "-o", "{d}/out.json"], {2})
    add("nccl-xml-entity-bomb", "nccl_xml", lambda: _billion_laughs("nccl_xml"),
        ["topo", "import", "{f}", "--format", "nccl-xml", "-o", "{d}/out.json"], {2})
    add("hwloc-deep", "hwloc", lambda: deep_xml(), ["topo", "import", "{f}", "--format",
                                                    "hwloc", "-o", "{d}/out.json"], {2})
    add("nccl-xml-deep", "nccl_xml", lambda: deep_xml(),
        ["topo", "import", "{f}", "--format", "nccl-xml", "-o", "{d}/out.json"], {2})
    add("graphs-deep", "graphs", lambda: deep_xml(),
        ["compare", "dgx-a100", "allreduce", "--strategies", "ring", "--nccl-graphs", "{f}"],
        {2})
    add("smi-huge-matrix", "smi",
        lambda: "\tGPU0\n" + "".join(f"GPU{i}\t" + "NV1\t" * 3000 + "\n" for i in range(3000)),
        ["topo", "import", "{f}", "--format", "nvidia-smi", "--gpu", "v100", "-o",
         "{d}/out.json"], {2})
    add("smi-bidi-gpu", "smi", lambda: seeds()["smi"].replace("GPU0", "GPU\u202e0", 1),
        ["topo", "import", "{f}", "--format", "nvidia-smi", "--gpu", "v100", "-o",
         "{d}/out.json"], {0, 2})

    cases = []
    for label, kind, make, argv, expect, new, origin in rows:
        name = "in" + (".xml" if kind in ("xml", "nccl_xml", "hwloc", "graphs") else
                       ".txt" if kind in ("smi", "nccl_tests") else ".json")
        outputs = [a.split("/")[-1] for a in argv if a.startswith("{d}/")]
        cases.append(Case(id=f"content/{label}", argv=[a.replace("{f}", "{d}/" + name)
                                                       for a in argv],
                          expect=expect, new=new, origin=origin, setup=write(name, make),
                          outputs=outputs, what=f"{kind} file: {label}",
                          timeout=60 if "taccl" not in argv else 90))
    return cases


def _xml_attr(text: str) -> str:
    return (text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
            .replace("\n", "&#10;").replace("\r", "&#13;").replace("\x1b", "&#27;")
            .replace("\x07", "&#7;"))


def _billion_laughs(kind: str) -> str:
    entities = ['<!ENTITY l0 "lol">'] + [f'<!ENTITY l{i} "{("&l" + str(i - 1) + ";") * 10}">'
                                         for i in range(1, 10)]
    body = seeds()[kind]
    head, _, rest = body.partition(">") if body.startswith("<?xml") else ("", "", body)
    doctype = f"<!DOCTYPE x [{''.join(entities)}]>"
    text = (head + ">" if head else "") + doctype + rest
    return text.replace('version="1"', 'version="&l9;"', 1) if "version=" in text else text


# ------------------------------------------------------------------ output paths

OUTPUT_COMMANDS: list[tuple[str, list[str], set[str], bool]] = [
    # (label, argv with {o} and {in}, kinds of input made, an earlier pass tried it)
    ("synth", ["synth", "switch:4", "allgather", "-o", "{o}"], set(), True),
    ("import", ["import", "{d}/in.xml", "-o", "{o}"], {"xml"}, True),
    ("export", ["export", "{d}/in.json", "-o", "{o}"], {"schedule"}, True),
    ("export-plan", ["export", "{d}/in.json", "-o", "{o}"], {"plan"}, False),
    ("topo-import", ["topo", "import", "{d}/in.xml", "--format", "nccl-xml", "-o", "{o}"],
     {"nccl_xml"}, False),
    ("tune", ["tune", "dgx-a100", "--nccl-tuner", "-o", "{o}"], set(), False),
    ("profile-load", ["profile", "--load", "{d}/in.json", "-o", "{o}"], {"raw"}, False),
    ("p2p", ["p2p", "dgx1", "0", "1", "--sizes", "1MB", "-o", "{o}"], set(), False),
    ("topo-plot", ["topo", "show", "ring:4", "--plot", "{o}"], set(), False),
]


def output_cases() -> list[Case]:
    cases = []
    long_name = "x" * 300 + ".json"
    variants = [
        # (variant, output path, setup, codes, outputs allowed, earlier)
        ("missing-dir", "{d}/no/such/dir/out.json", None, {2}, [], True),
        ("is-directory", "{d}/adir", lambda d: (d / "adir").mkdir(), {2}, [], True),
        ("empty-name", "", None, {2}, [], True),
        ("dev-full", "/dev/full", None, {2}, [], True),
        ("same-as-input", "{in}", None, {2}, [], True),
        ("symlink-to-input", "{d}/link.json", "link", {2}, [], False),
        ("immutable-dir", "{d}/ro/out.json", "immutable", {2}, [], True),
        ("name-too-long", "{d}/" + long_name, None, {2}, [], False),
        ("control-name", "{d}/o\x1b[31mut\u202e.json", None, {0}, ["o*"], False),
        ("under-a-file", "{d}/afile/out.json", lambda d: (d / "afile").write_text("x"), {2},
         [], False),
        ("existing-replaced", "{d}/old.json", lambda d: (d / "old.json").write_text("old"),
         {0}, ["old.json"], False),
        ("dev-stdout", "/dev/stdout", None, {0}, [], False),
    ]
    for label, argv, kinds, earlier in OUTPUT_COMMANDS:
        source = next(iter(kinds), None)
        in_name = "in.xml" if source in ("xml", "nccl_xml") else "in.json"
        for variant, out, make, codes, allowed, old in variants:
            if variant in ("same-as-input", "symlink-to-input") and source is None:
                continue
            suffix = {"topo-plot": ".png", "export": ".xml", "export-plan": ""}.get(label)
            if suffix is not None:
                out = out.replace(".json", suffix)
                allowed = [a.replace(".json", suffix) for a in allowed]
                if label == "export-plan":
                    allowed = [*allowed, *(f"{a}/*" for a in allowed)]
            expect = codes
            if label.startswith("export") and variant in ("dev-stdout", "missing-dir"):
                expect = {0, 2}  # a plan's folder is made; no format to write on stdout
                allowed = [*allowed, "no", "no/*", "no/*/*", "no/*/*/*"]
            if label.startswith("export") and variant == "is-directory":
                expect, allowed = {0}, ["adir/*"]  # -o DIR: the files go into it
            if label == "export-plan" and variant == "control-name":
                expect = {2}  # msccl_config.xml names each file by a path XML cannot hold
            steps = []
            if source is not None:
                steps.append(write(in_name, lambda source=source: seeds()[source]))
            if make == "link":
                steps.append(lambda d, in_name=in_name, out=out: (
                    d / out.rsplit("/", 1)[-1]).symlink_to(in_name))
            elif make == "immutable":
                steps.append(_immutable_dir)
            elif make is not None:
                steps.append(make)
            filled = [a.replace("{o}", out).replace("{in}", "{d}/" + in_name) for a in argv]
            if variant == "same-as-input":
                filled = [a.replace("{o}", "{d}/" + in_name) for a in argv]
            is_old = old and earlier
            cases.append(Case(
                id=f"outputs/{label}/{variant}", argv=filled, expect=expect, new=not is_old,
                json_out=variant == "dev-stdout",
                origin=ISSUE_11 if is_old else "", setup=chain(*steps) if steps else None,
                outputs=allowed, what=f"{label} writing to {variant.replace('-', ' ')}",
                keep=[in_name], stdout="file", needs=["root"] if make == "immutable" else []))
    return cases


def _immutable_dir(folder: Path) -> None:
    (folder / "ro").mkdir()
    subprocess.run(["chattr", "+i", str(folder / "ro")], check=True, capture_output=True)


# ------------------------------------------------------------------ option values

def option_cases() -> list[Case]:
    rows: list[tuple[str, list[str], set[int]]] = []
    for value in ("0", "-1", "99999", "x", "1e3"):
        rows.append((f"lint-ranks-{value}", ["lint", "{d}/in.xml", "--ranks", value,
                                             "--ignore-env"], {1, 2}))
    for value in ("0", "-1", "1000000000", "9"):
        rows.append((f"lint-ranks-per-process-{value}", ["lint", "{d}/in.xml",
                                                         "--ranks-per-process", value,
                                                         "--ignore-env"], {1, 2}))
    for value in ("nan", "1TB", "0", "1KB:1GB:1.0000001", ",,"):
        rows.append((f"lint-sizes-{value}", ["lint", "{d}/in.xml", "--sizes", value,
                                             "--ignore-env"], {1, 2}))
    for value in (",,", "bogus", "", "allreduce,allreduce", "\u202eallreduce"):
        rows.append((f"tune-collectives-{value!r}", ["tune", "dgx-a100", "--nccl-tuner",
                                                     "--collectives", value, "-o",
                                                     "{d}/t.conf"], {2}))
    for value in ("z80", "", "A100", "\x1b[31m"):
        rows.append((f"tune-gpu-{value!r}", ["tune", "switch:4", "--nccl-tuner", "--gpu",
                                             value, "-o", "{d}/t.conf"], {0, 2}))
    rows.append(("tune-no-gpu", ["tune", "switch:4", "--nccl-tuner", "-o", "{d}/t.conf"],
                 {0, 2}))
    for value in (",,,", "bogus", "ring,ring", "taccl"):
        rows.append((f"explain-strategies-{value}", ["explain", "{d}/r.json", "--topology",
                                                     "dgx-a100", "--strategies", value],
                     {0, 2} if value == "taccl" else {2}))
    rows.append(("explain-empty-dir", ["explain", "{d}/emptydir", "--topology", "dgx-a100"],
                 {2}))
    rows.append(("explain-topology-bogus", ["explain", "{d}/r.json", "--topology", "nope:3"],
                 {2}))
    for value in ("0", "-1", "100000", "x", "99999999999999999999"):
        rows.append((f"topo-import-nodes-{value}", ["topo", "import", "{d}/in.xml",
                                                    "--format", "nccl-xml", "--nodes", value,
                                                    "-o", "{d}/out.json"], {2}))
    for value in ("0", "nan", "-1", "1e300", "inf"):
        rows.append((f"topo-import-nic-gbits-{value}", ["topo", "import", "{d}/in.xml",
                                                        "--format", "nccl-xml",
                                                        "--nic-gbits", value, "-o",
                                                        "{d}/out.json"], {2}))
    for tag, value in (("empty", ""), ("esc", ESC), ("bidi", BIDI), ("long", "n" * 100000)):
        rows.append((f"topo-import-name-{tag}", ["topo", "import", "{d}/in.xml", "--format",
                                                 "nccl-xml", "--name", value, "-o",
                                                 "{d}/out.json"], {0, 2}))
    for value in ("h200-teleport", "", "/dev/zero", "{d}/emptydir"):
        rows.append((f"gpu-fabric-{value or 'empty'}".replace("{d}/", ""),
                     ["topo", "import", "{d}/pcie.xml", "--format", "hwloc", "--gpu-fabric",
                      value, "-o", "{d}/out.json"], {2}))
    rows.append(("gpu-fabric-three-times", ["topo", "import", "{d}/pcie.xml", "--gpu-fabric",
                                            "a100-nvswitch", "--gpu-fabric", "pcie-only",
                                            "--gpu-fabric", "h100-nvswitch", "-o",
                                            "{d}/out.json"], {2}))
    rows.append(("topo-import-rails-one-node", ["topo", "import", "{d}/in.xml", "--format",
                                                "nccl-xml", "--fabric", "rails", "-o",
                                                "{d}/out.json"], {0, 2}))
    for value in ("0", "-1", "100000", "x"):
        rows.append((f"export-instances-{value}", ["export", "{d}/in.json", "--instances",
                                                   value, "-o", "{d}/out.xml"], {2}))
    for value in ("0", "-1", "1000000000"):
        rows.append((f"export-max-threadblocks-{value}", ["export", "{d}/in.json", "--format",
                                                          "mscclpp", "--max-threadblocks",
                                                          value, "-o", "{d}/out.json"],
                     {0, 2} if value == "1000000000" else {2}))
    for value in ("0", "-1KB", "1e999", "abc", "2PB"):
        rows.append((f"export-max-bytes-{value}", ["export", "{d}/in.json", "--max-bytes",
                                                   value, "-o", "{d}/out.xml"], {2}))
    for src, dst in (("0", "0"), ("-1", "1"), ("0", "99"), ("x", "1"), ("0", "1e3")):
        rows.append((f"p2p-ranks-{src}-{dst}", ["p2p", "dgx1", src, dst, "--sizes", "1MB"],
                     {2}))
    for value in ("-1", "1000", "x"):
        rows.append((f"p2p-max-relays-{value}", ["p2p", "dgx1", "0", "1", "--max-relays",
                                                 value, "--paths", "direct,relay"],
                     {0, 2} if value == "1000" else {2}))
    for value in ("bogus", ",,", "direct,direct"):
        rows.append((f"p2p-paths-{value}", ["p2p", "dgx1", "0", "1", "--paths", value], {2}))
    for value in ("nan", "-1", "inf", "0", "1e300"):
        codes = {0, 2} if value in ("inf", "1e300") else {2}  # no limit: the solver's own
        rows.append((f"synth-time-limit-{value}", ["synth", "switch:4", "allgather",
                                                   "--strategy", "taccl", "--time-limit",
                                                   value, "-o", "{d}/out.json"], codes))
        rows.append((f"synth-contiguity-limit-{value}", ["synth", "switch:4", "allgather",
                                                         "--strategy", "taccl",
                                                         "--contiguity-time-limit", value,
                                                         "-o", "{d}/out.json"], codes))
    for value in ("0", "1e400", "abc", "-1MB"):
        rows.append((f"synth-size-{value}", ["synth", "switch:4", "allgather", "--strategy",
                                             "taccl", "--size", value, "-o",
                                             "{d}/out.json"], {2}))
    for value in ("-1", "99", "x", "99999999999999999999999"):
        rows.append((f"synth-root-{value}", ["synth", "switch:4", "broadcast", "--root",
                                             value, "-o", "{d}/out.json"], {2}))
    for value in ("-1", "0", "1000000000", "x"):
        rows.append((f"simulate-links-{value}", ["simulate", "{d}/in.json", "switch:4",
                                                 "--links", value],
                     {0, 2} if value in ("0", "1000000000") else {2}))
    for value in ("bogus", "", "\x1b[2J"):
        rows.append((f"compare-gpu-{value!r}", ["compare", "switch:4", "allreduce", "--gpu",
                                                value, "--sizes", "1MB"], {2}))
    for value in ("0", "-1", "40000"):
        rows.append((f"compare-chunks-{value}", ["compare", "switch:4", "allreduce",
                                                 "--chunks", value, "--sizes", "1MB"], {2}))
    for value in ("0", "-1", "100000"):
        rows.append((f"profile-nproc-{value}", ["profile", "--nproc", value, "--sizes", "4KB",
                                                "-o", "{d}/out.json"], {2}))
    for value in ("nan", "0", "1e300"):
        rows.append((f"profile-timeout-{value}", ["profile", "--nproc", "2", "--timeout",
                                                  value, "--sizes", "4KB", "-o",
                                                  "{d}/out.json"], {2}))
    for value in ("-1", "0"):
        rows.append((f"profile-iters-{value}", ["profile", "--nproc", "2", "--iters", value,
                                                "--sizes", "4KB", "-o", "{d}/out.json"], {2}))
    rows.append(("profile-sizes-1TB", ["profile", "--nproc", "2", "--sizes", "1TB", "-o",
                                       "{d}/out.json"], {2}))
    for value in ("nan", "0", "-5", "1e-9", "1e300", "inf"):
        rows.append((f"testbed-show-max-rate-{value}", ["testbed", "show", "ring:4",
                                                        "--max-rate", value],
                     {0, 2} if value in ("1e-9", "1e300") else {2}))
    rows.append(("verify-topology-bogus", ["verify", "{d}/in.json", "--topology", "nope:9"],
                 {2}))
    rows.append(("verify-topology-esc", ["verify", "{d}/in.json", "--topology", ESC], {2}))
    old = {"synth-root-", "compare-chunks-"}
    cases = []
    for label, argv, expect in rows:
        def setup(folder: Path, argv=argv) -> None:
            text = " ".join(argv)
            if "{d}/in.xml" in text:
                kind = "nccl_xml" if "topo" in argv else "xml"
                (folder / "in.xml").write_text(seeds()[kind])
            if "{d}/in.json" in text:
                (folder / "in.json").write_text(seeds()["schedule"])
            if "{d}/r.json" in text:
                (folder / "r.json").write_text(seeds()["inspector"])
            if "{d}/pcie.xml" in text:
                (folder / "pcie.xml").write_text(seeds()["hwloc"])
            if "{d}/emptydir" in text:
                (folder / "emptydir").mkdir()
        is_old = any(label.startswith(prefix) for prefix in old)
        outputs = [a.split("/")[-1] for a in argv if a.startswith("{d}/") and
                   a.split("/")[-1] in ("out.json", "out.xml", "t.conf")]
        cases.append(Case(id=f"options/{label}", argv=argv, expect=expect, new=not is_old,
                          origin=ISSUE_11 if is_old else "", setup=setup, outputs=outputs,
                          what=f"option value: {label}", timeout=90,
                          needs=["torch"] if argv[0] == "profile" else []))
    return cases


# ------------------------------------------------------------------ bench options

BENCH = ["bench", "switch:2", "allreduce", "--testbed", "none", "--sizes", "64KB",
         "--strategies", "ring", "--baselines", "gloo", "--reps", "1"]
"""A bench that runs for real on this machine (calibration, then one measurement): a
value refused only after that shows as minutes, not as a refusal."""
FUZZ_BENCH = "tests/test_fuzz_bench.py"


def _model_file(ranks: int, cost: bool) -> Callable[[], str]:
    """A topology file of ``ranks`` ranks, with a fitted cost model (and a host group of
    every rank) where ``cost``: what ``bench --save-model`` writes, or a plain one."""
    def make() -> str:
        from ccweave.topology import io as topology_io
        from ccweave.topology import zoo

        data = topology_io.to_dict(zoo.get(f"switch:{ranks}"))
        if cost:
            data["cost_model"] = {"message_overhead_us": 30.0, "message_latency_us": 100.0,
                                  "host_GBps": 1.5, "connection_fifo": True,
                                  "link_efficiency": 0.8, "host_cores": 2}
            data.setdefault("groups", {})["host"] = [list(range(ranks))]
        return json.dumps(data)
    return make


def bench_cases() -> list[Case]:
    """``bench`` values refused before anything is measured, by name (each would otherwise
    cost the calibration's minutes, or measure what the user did not ask for)."""
    rows: list[tuple[str, list[str], set[int], str, str, Callable[[Path], object] | None]] = [
        # (label, extra flags, codes, what the error must name, origin, setup)
        ("timeout-nan", ["--timeout", "nan"], {2}, "--timeout", ISSUE_42, None),
        ("sizes-1TB", ["--sizes", "1TB"], {2}, "1TB", ISSUE_42, None),
        ("strategies-commas", ["--strategies", ",,,"], {2}, "--strategies", ISSUE_42, None),
        ("max-rate-zero-netns", ["--testbed", "netns", "--max-rate", "0"], {2},
         "--max-rate", ISSUE_42, None),
        ("reps-0", ["--reps", "0"], {2}, "--reps", FUZZ_BENCH, None),
        ("warmup-negative", ["--warmup", "-1"], {2}, "--warmup", FUZZ_BENCH, None),
        ("baselines-bogus", ["--baselines", "bogus"], {2}, "bogus", FUZZ_BENCH, None),
        ("option-auto", ["--option", "auto:channels=2"], {2}, "--option", FUZZ_BENCH, None),
        ("option-not-run", ["--option", "direct:channels=2"], {2}, "--option", FUZZ_BENCH,
         None),
        ("max-rate-without-testbed", ["--max-rate", "100"], {2}, "--max-rate", FUZZ_BENCH,
         None),
        ("root-99-allreduce", ["--root", "99"], {2}, "--root", "", None),
        ("root-negative-allreduce", ["--root", "-1"], {2}, "--root", "", None),
        ("model-missing", ["--model", "{d}/none.json"], {2}, "none.json", "", None),
        ("model-dev-zero", ["--model", "/dev/zero"], {2}, "/dev/zero", "", None),
        ("model-directory", ["--model", "{d}/adir"], {2}, "adir", "",
         lambda d: (d / "adir").mkdir()),
        ("model-no-cost", ["--model", "{d}/plain.json"], {2}, "--model", "",
         write("plain.json", _model_file(2, cost=False))),
        ("model-other-machine", ["--model", "{d}/eight.json"], {2}, "--model", "",
         write("eight.json", _model_file(8, cost=True))),
        ("model-and-calibrate-sizes", ["--model", "{d}/m.json", "--calibrate-sizes", "1MB"],
         {2}, "--calibrate-sizes", "", write("m.json", _model_file(2, cost=True))),
        ("save-model-no-calibrate", ["--no-calibrate", "--save-model", "{d}/m.json"], {2},
         "--save-model", "", None),
        ("save-model-directory", ["--save-model", "{d}/adir"], {2}, "--save-model", "",
         lambda d: (d / "adir").mkdir()),
        ("save-model-missing-dir", ["--save-model", "{d}/no/dir/m.json"], {2},
         "--save-model", "", None),
        ("plot-empty", ["--plot", ""], {2}, "--plot", "", None),
        ("plot-missing-dir", ["--plot", "{d}/no/dir/p"], {2}, "--plot", "", None),
        ("calibrate-sizes-nan", ["--calibrate-sizes", "nan"], {2}, "--calibrate-sizes", "",
         None),
        ("calibrate-sizes-1TB", ["--calibrate-sizes", "1TB"], {2}, "--calibrate-sizes", "",
         None),
        ("collective-escape", [], {2}, "", "", None),
        ("sizes-bidi", ["--sizes", "64KB\u202e"], {2}, "--sizes", "", None),
    ]
    cases = []
    for label, extra, codes, names, origin, setup in rows:
        argv = [*BENCH, *extra]
        if label == "collective-escape":
            argv[2] = ESC
        cases.append(Case(id=f"bench/{label}", argv=argv, expect=codes, new=not origin,
                          origin=origin, setup=setup, timeout=60,
                          what="bench " + (" ".join(extra) or f"of a collective named {ESC!r}"),
                          options={"names": [names] if names else []},
                          needs=["torch"]))
    broadcast = [*BENCH[:2], "broadcast", *BENCH[3:], "--root", "2"]
    cases.append(Case(id="bench/root-2-broadcast", argv=broadcast, expect={2}, new=True,
                      timeout=60, what="bench broadcast --root 2 on 2 ranks",
                      options={"names": ["root 2"]}, needs=["torch"]))
    return cases


# ------------------------------------------------------------------ TACCL profiles

TACCL_SYNTH = ["synth", "ndv2:2", "allgather", "--strategy", "taccl", "--profile",
               "{d}/p.json", "--time-limit", "5", "-o", "{d}/out.json"]
FUZZ_READERS = "tests/test_fuzz_readers.py"


def taccl_cases() -> list[Case]:
    """TACCL's own profiled topology (``--profile``, its ``--topology-file``) hostile:
    values no machine has, and a profile of another machine."""
    rows: list[tuple[str, Callable[[], str], set[int], str]] = [
        ("remote-invbw-infinity", _jsonish("taccl_profile", _raw_value(("remote_invbw",),
                                                                        "Infinity")),
         {2}, ISSUE_42),
        ("alpha-nan", _jsonish("taccl_profile", _raw_value(("alpha",), "NaN")), {2},
         FUZZ_READERS),
        ("alpha-string", _jsonish("taccl_profile", _set(("alpha",), "fast")), {2},
         FUZZ_READERS),
        ("deep", lambda: deep_json(), {2}, FUZZ_READERS),
        ("alpha-negative", _jsonish("taccl_profile", _set(("alpha",), -1)), {2}, ""),
        ("alpha-1e400", _jsonish("taccl_profile", _raw_value(("alpha",), "1e400")), {2}, ""),
        ("gpus-per-node-4", _jsonish("taccl_profile", _set(("gpus_per_node",), 4)), {2}, ""),
        ("gpus-per-node-huge", _jsonish("taccl_profile", _set(("gpus_per_node",), 10**30)),
         {2}, ""),
        ("nics-per-node-100", _jsonish("taccl_profile", _set(("nics_per_node",), 100)), {2},
         ""),
        ("nics-per-node-zero", _jsonish("taccl_profile", _set(("nics_per_node",), 0)), {2},
         ""),
        ("betas-100000", _jsonish("taccl_profile", _set(("node_betas_list",), [23] * 100000)),
         {2}, ""),
        ("invbws-empty", _jsonish("taccl_profile", _set(("node_invbws_list",), [])), {2}, ""),
        ("betas-dict", _jsonish("taccl_profile", _set(("node_betas_list",), {"a": 1})), {2},
         ""),
        ("a-list", _jsonish("taccl_profile", lambda d: [d]), {2}, ""),
        ("remote-beta-missing", _jsonish("taccl_profile", lambda d: d.pop("remote_beta")
                                         and None), {2}, ""),
        ("a-ccweave-topology", lambda: seeds()["topology"], {2}, ""),
    ]
    cases = []
    for label, make, codes, origin in rows:
        cases.append(Case(id=f"taccl/profile-{label}", argv=TACCL_SYNTH, expect=codes,
                          new=not origin, origin=origin, setup=write("p.json", make),
                          outputs=["out.json"], timeout=90,
                          what=f"synth --strategy taccl --profile: {label}",
                          options={"names": ["p.json"]}))
    for variant in SHORT:
        path, setup, codes = _file_variant(variant, "taccl_profile", "taccl-profile",
                                           random.Random(variant))
        path = path.replace("in.json", "p.json")
        if setup is not None and variant not in ("stdin",):
            setup = _renamed(setup, "in.json", "p.json")
        cases.append(Case(id=f"taccl/profile-file-{variant}",
                          argv=[a.replace("{d}/p.json", path) for a in TACCL_SYNTH],
                          expect=codes or {0}, new=True, setup=setup, outputs=["out.json"],
                          timeout=120, what=f"synth --strategy taccl --profile given a "
                                            f"{variant.replace('-', ' ')}",
                          options=_file_options(variant, path)))
    return cases


def _renamed(setup: Callable[[Path], object], old: str, new: str) -> Callable[[Path], object]:
    """``setup`` as made for file ``old``, then moved to ``new``."""
    def make(folder: Path) -> object:
        got = setup(folder)
        made = folder / old
        if made.exists() or made.is_symlink():
            os.rename(made, folder / new)
        return got
    return make


# ------------------------------------------------------------------ the testbed

STAR = {"name": "star6", "ranks": 6, "fabric": {"sw": "switch"},
        "links": [{"src": r, "dst": "sw", "bw_GBps": 0.0125, "duplex": True}
                  for r in range(6)]}
PAIR = {"name": "pair", "ranks": 2, "fabric": {"sw": "switch"},
        "links": [{"src": r, "dst": "sw", "bw_GBps": 0.0125, "duplex": True}
                  for r in range(2)]}


def _topology_file(name: str, data: dict) -> Callable[[Path], None]:
    return write(name, lambda: json.dumps(data))


def _record(tag: str, **fields: object) -> dict[str, object]:
    base = {"tag": tag, "maker": {"pid": 999999999, "start": 1},
            "namespaces": [f"ccw{tag}r0"], "links": [], "standing": True,
            "spec": "other.json", "subnet": 77, "control_subnet": None, "max_rate": None,
            "info": {}}
    base.update(fields)
    return base


def _state(name: str, make: Callable[[], str | bytes]) -> Callable[[Path], None]:
    return write(f"state/{name}", make)


RECORDS: list[tuple[str, Callable[[Path], None]]] = [
    ("cut-short", _state("testbed-zz01.json", lambda: '{"tag": "zz01", "mak')),
    ("empty", _state("testbed-zz02.json", lambda: "")),
    ("pid-infinite", _state("testbed-zz03.json",
                            lambda: json.dumps(_record("zz03")).replace("999999999", "1e400"))),
    ("pid-negative", _state("testbed-zz04.json",
                            lambda: json.dumps(_record("zz04", maker={"pid": -1, "start": 0})))),
    ("start-huge", _state("testbed-zz05.json", lambda: json.dumps(
        _record("zz05", maker={"pid": 1, "start": 10**30})))),
    ("namespaces-string", _state("testbed-zz06.json",
                                 lambda: json.dumps(_record("zz06", namespaces="ccwzz06r0")))),
    ("deep", _state("testbed-zz07.json", lambda: deep_json())),
    ("max-rate-huge", _state("testbed-zz08.json", lambda: json.dumps(
        _record("zz08")).replace('"max_rate": null', '"max_rate": ' + "9" * 400))),
    ("max-rate-nan", _state("testbed-zz09.json", lambda: json.dumps(
        _record("zz09")).replace('"max_rate": null', '"max_rate": NaN'))),
    ("directory", lambda d: (d / "state" / "testbed-zz10.json").mkdir()),
    ("fifo", lambda d: os.mkfifo(d / "state" / "testbed-zz11.json")),
    ("dev-zero", lambda d: (d / "state" / "testbed-zz12.json").symlink_to("/dev/zero")),
    ("bad-utf8", _state("testbed-zz13.json", lambda: json.dumps(_record("zz13")).encode()
                        .replace(b"pair", b"p\xffir"))),
    ("tag-mismatch", _state("testbed-zz14.json", lambda: json.dumps(_record("other")))),
    ("subnet-999", _state("testbed-zz15.json", lambda: json.dumps(_record("zz15",
                                                                          subnet=999)))),
    ("info-list", _state("testbed-zz16.json", lambda: json.dumps(_record("zz16",
                                                                         info=[1, 2])))),
    ("huge", _state("testbed-zz17.json", lambda: json.dumps(_record(
        "zz17", namespaces=[f"ccwzz17r{i}" for i in range(2_000_000)])))),
    ("tag-escape", _state("testbed-zz18.json", lambda: json.dumps(_record("\x1b[31m")))),
    ("control-subnet-300", _state("testbed-zz19.json", lambda: json.dumps(
        _record("zz19", control_subnet=300)))),
    ("names-stranger", _state("testbed-zz20.json", lambda: json.dumps(_record(
        "zz20", namespaces=["ccwork"], links=["ccwbr0"], standing=False)))),
]
"""Corrupt or hostile testbed records, each made in the case's state folder."""


def _stranger(space: str, bridge: str | None = None) -> Callable[[Path], None]:
    """Another tool's namespace (and bridge) whose names start like a testbed's, made
    inside the case's sandbox (``Case.inside``: never on the host, where another tool's
    might be real)."""
    return lambda folder: _make_stranger(space, bridge)


def _make_stranger(space: str, bridge: str | None) -> None:
    if os.environ.get("CCWEAVE_HOSTILE_SANDBOX") != "1":
        raise RuntimeError("strangers are made inside a case's sandbox only")
    subprocess.run(["ip", "netns", "add", space], check=True, capture_output=True)
    if bridge:
        subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True,
                       capture_output=True)


def testbed_cases(rng: random.Random) -> list[Case]:
    cases: list[Case] = []
    pair = _topology_file("pair.json", PAIR)
    star = _topology_file("star6.json", STAR)
    down_pair = (["testbed", "down", "{d}/pair.json"], "{0} if code == 0 else {2}")
    # interrupted once it stood, up says so and leaves it whole: down removes it (0);
    # interrupted before, nothing is up (2); either way nothing may be left after
    DOWN_STAR = (["testbed", "down", "{d}/star6.json"], {0, 2})

    def tb(label: str, argv: list[str], expect: set[int], setup=None, after=(), what="",
           timeout=90.0, interrupt=None, keep=(), needs=(), new=True, origin="",
           json_out=False, runs_nothing=False, env=None, driver=None, options=None,
           inside=None, outputs=()) -> None:
        cases.append(Case(id=f"testbed/{label}", argv=argv, expect=expect, new=new,
                          inside=inside, outputs=list(outputs),
                          origin=origin, setup=setup, after=list(after), what=what,
                          timeout=timeout, interrupt=interrupt, sandbox=True, heavy=True,
                          keep=list(keep), needs=list(needs), json_out=json_out,
                          runs_nothing=runs_nothing, env=dict(env or {}), driver=driver,
                          options=dict(options or {})))

    # -- corrupt records beside: a bare down removes them (and names each), up and run skip
    for name, make in RECORDS:
        stranger = name == "names-stranger"
        keep = ["ccwork", "ccwbr0"] if stranger else []
        inside = _stranger("ccwork", "ccwbr0") if stranger else None
        tb(f"records/{name}/down", ["testbed", "down"], {0}, setup=make, keep=keep,
           what=f"a bare down with a {name} record in the state folder", inside=inside)
        tb(f"records/{name}/up", ["testbed", "up", "{d}/pair.json"], {0},
           setup=chain(pair, make), after=[down_pair], keep=keep,
           what=f"up beside a {name} record", inside=inside)
    for name in ("cut-short", "pid-infinite", "deep", "fifo", "dev-zero", "max-rate-huge",
                 "directory"):
        make = dict(RECORDS)[name]
        tb(f"records/{name}/down-topo", ["testbed", "down", "{d}/pair.json"], {2},
           setup=chain(pair, make), what=f"down TOPO (none up) beside a {name} record",
           new=name != "cut-short", origin=ISSUE_42 if name == "cut-short" else "")
        tb(f"records/{name}/run", ["testbed", "run", "{d}/pair.json", "--", "true"], {0},
           setup=chain(pair, make), what=f"run beside a {name} record")
    # a standing record whose namespaces are gone (a reboot), or that lies about them
    gone = _state("testbed-zz30.json", lambda: json.dumps(_record(
        "zz30", spec="pair.json", namespaces=["ccwzz30r0", "ccwzz30r1", "ccwzz30sw"])))
    tb("records/standing-but-gone/run", ["testbed", "run", "{d}/pair.json", "--", "true"],
       {0, 2}, setup=chain(pair, gone),
       what="run TOPO whose standing record names namespaces that are gone")
    tb("records/standing-but-gone/down-topo", ["testbed", "down", "{d}/pair.json"], {0},
       setup=chain(pair, gone), what="down TOPO whose namespaces are gone")
    tb("records/standing-subnet-999/run", ["testbed", "run", "{d}/pair.json", "--", "true"],
       {0, 2}, setup=chain(pair, _state("testbed-zz31.json", lambda: json.dumps(_record(
           "zz31", subnet=999, spec="pair.json")))),
       what="run TOPO whose standing record has subnet 999")
    tb("records/claims-live-testbed/down", ["testbed", "down"], {0}, driver="live-and-lying",
       setup=pair, what="a dead maker's record naming a live testbed's namespaces: a bare "
       "down must leave the live one alone")

    # -- the state folder
    def state_env(value: str) -> dict[str, str]:
        return {"CCWEAVE_TESTBED_DIR": value}

    states = [
        ("a-file", "{d}/statefile", write("statefile", lambda: "x"), {2}),
        ("below-a-file", "{d}/statefile/below", write("statefile", lambda: "x"), {2}),
        ("immutable", "{d}/ro", lambda d: (d / "ro").mkdir() or subprocess.run(
            ["chattr", "+i", str(d / "ro")], check=True), {2}),
        ("symlink-loop", "{d}/loop", lambda d: (d / "loop").symlink_to("loop"), {2}),
        ("control-chars", "{d}/st\x1b[31mate\u202e", None, {0}),
        ("too-long", "{d}/" + "s" * 300, None, {2}),
        ("dev-null", "/dev/null", None, {2}),
    ]
    for name, value, make, codes in states:
        env = state_env(value)
        made = ["st*", "st*/*"] if name == "control-chars" else []
        tb(f"state/{name}/up", ["testbed", "up", "{d}/pair.json"], codes, outputs=made,
           setup=chain(pair, *([make] if make else [])), env=env,
           after=[down_pair] if codes == {0} else [],
           what=f"up with CCWEAVE_TESTBED_DIR {name}", origin=ISSUE_42,
           new=name not in ("a-file", "below-a-file"))
        tb(f"state/{name}/run", ["testbed", "run", "{d}/pair.json", "--", "true"], codes,
           outputs=made,
           setup=chain(pair, *([make] if make else [])), env=env,
           what=f"run with CCWEAVE_TESTBED_DIR {name}")
        tb(f"state/{name}/down", ["testbed", "down"], {0, 2},
           setup=chain(*([make] if make else [])), env=env,
           what=f"a bare down with CCWEAVE_TESTBED_DIR {name}")
        tb(f"state/{name}/down-topo", ["testbed", "down", "{d}/pair.json"], {2},
           setup=chain(pair, *([make] if make else [])), env=env,
           what=f"down TOPO with CCWEAVE_TESTBED_DIR {name}")
    tb("state/unset-default/up", ["testbed", "up", "{d}/pair.json"], {0}, setup=pair,
       env={"CCWEAVE_TESTBED_DIR": None}, after=[down_pair],
       what="up with CCWEAVE_TESTBED_DIR unset (the sandbox's own /run/ccweave-testbed)")

    # -- names
    names = [("esc", ESC), ("bidi", BIDI), ("newline", "a\nb"), ("empty", ""),
             ("long", "n" * 5000), ("slash", "a/b/../c"), ("percent", "%s%n%x"),
             ("markup", "[bold red]x[/]"), ("unicode", "\u0634\u0628\u0643\u0629-\u7f51\u7edc")]
    for tag, name in names:
        data = {**PAIR, "name": name}
        tb(f"names/{tag}/show", ["testbed", "show", "{d}/pair.json"], {0},
           setup=_topology_file("pair.json", data), runs_nothing=True,
           what=f"testbed show of a topology named {tag}", origin=ISSUE_42,
           new=tag not in ("esc",))
        tb(f"names/{tag}/up", ["testbed", "up", "{d}/pair.json"], {0},
           setup=_topology_file("pair.json", data), after=[down_pair],
           what=f"testbed up of a topology named {tag}", origin=ISSUE_42,
           new=tag not in ("esc",))
    for tag, file_name in (("esc", "p\x1b[31mair.json"), ("bidi", "p\u202eair.json"),
                           ("space", "my pair.json"), ("dash", "-pair.json")):
        path = "{d}/" + file_name
        tb(f"file-names/{tag}/up", ["testbed", "up", path], {0},
           setup=_topology_file(file_name, PAIR),
           after=[(["testbed", "down", path], "{0} if code == 0 else {2}")],
           what=f"testbed up of a file named {tag}")
    tb("names/spec-torus-too-big", ["testbed", "up", "torus:16x16"], {2},
       what="testbed up of 257 namespaces (over the default limit)", origin=ISSUE_42,
       new=False)

    # -- plain misuse
    tb("misuse/down-topo-none-up", ["testbed", "down", "{d}/pair.json"], {2}, setup=pair)
    tb("misuse/up-twice", ["testbed", "up", "{d}/pair.json"], {0}, setup=pair,
       after=[(["testbed", "up", "{d}/pair.json"], {2}), down_pair],
       what="up, up again (already up), down")
    tb("misuse/run-no-command", ["testbed", "run", "{d}/pair.json"], {2}, setup=pair)
    tb("misuse/run-only-dashes", ["testbed", "run", "{d}/pair.json", "--"], {2}, setup=pair)
    tb("misuse/run-missing-binary", ["testbed", "run", "{d}/pair.json", "--",
                                     "/no/such/binary"], {2}, setup=pair)
    tb("misuse/run-false", ["testbed", "run", "{d}/pair.json", "--", "false"], {2},
       setup=pair)
    tb("misuse/run-timeout-nan", ["testbed", "run", "{d}/pair.json", "--timeout", "nan",
                                  "--", "true"], {2}, setup=pair, origin=ISSUE_42, new=False)
    tb("misuse/run-timeout-after-topo", ["testbed", "run", "{d}/pair.json", "--timeout", "2",
                                         "--", "sleep", "60"], {2}, setup=pair,
       origin=ISSUE_42, new=False)
    tb("misuse/run-max-namespaces-1", ["testbed", "up", "{d}/pair.json", "--max-namespaces",
                                       "1"], {2}, setup=pair)
    tb("misuse/run-max-namespaces-huge", ["testbed", "up", "{d}/pair.json",
                                          "--max-namespaces", "99999999999"], {2}, setup=pair)
    tb("misuse/max-rate-zero", ["testbed", "up", "{d}/pair.json", "--max-rate", "0"], {2},
       setup=pair, origin=ISSUE_42, new=False)
    tb("misuse/max-rate-tiny", ["testbed", "up", "{d}/pair.json", "--max-rate", "1e-9"],
       {0, 2}, setup=pair, after=[down_pair])
    tb("misuse/run-output-flood", ["testbed", "run", "{d}/pair.json", "--", "sh", "-c",
                                   "yes 0123456789 | head -c 50000000"], {0}, setup=pair,
       what="ranks that print 50 MB each")
    tb("misuse/run-ranks-ignore-term", ["testbed", "run", "{d}/pair.json", "--timeout", "3",
                                        "--", "sh", "-c", "trap '' TERM INT; sleep 60"], {2},
       setup=pair, what="ranks that ignore SIGTERM and SIGINT, past --timeout")
    tb("misuse/run-rank-forks-daemon", ["testbed", "run", "{d}/pair.json", "--", "sh", "-c",
                                        "setsid sleep 120 & exit 0"], {0}, setup=pair,
       what="a rank that leaves a daemon behind in its namespace")
    tb("misuse/down-strangers", ["testbed", "down", "--json"], {0}, json_out=True,
       inside=_stranger("ccw", "ccwbr1"), keep=["ccw", "ccwbr1"],
       origin=ISSUE_42, new=False, what="a bare down beside another tool's ccw names")
    tb("misuse/backend-mpi", ["testbed", "run", "{d}/pair.json", "--backend", "mpi", "--",
                              "true"], {0}, setup=pair, needs=["mpirun"], timeout=120)

    # -- hostile progress records written by the ranks themselves
    for name, script in PROGRESS_TRICKS.items():
        tb(f"progress/{name}", ["testbed", "run", "{d}/pair.json", "--timeout", "20", "--",
                                sys.executable, "-c", script], {2}, setup=pair, timeout=90,
           what=f"a rank that leaves a {name} progress record and fails",
           options={"relays_output": True})

    # -- interrupts at random points of up, run (and two of down)
    for number in range(8):
        sig = (INT, TERM)[number % 2]
        at = round(rng.uniform(0.05, 2.5), 2)
        tb(f"interrupts/up/{signal.Signals(sig).name}-{number}", ["testbed", "up",
                                                                  "{d}/star6.json"],
           {128 + sig, 0}, setup=star, interrupt=Interrupt(sig, at, group=sig == INT),
           after=[DOWN_STAR],
           what=f"{signal.Signals(sig).name} {at} s into testbed up")
    for number in range(3):
        at = round(rng.uniform(0.1, 2.0), 2)
        tb(f"interrupts/up/SIGKILL-{number}", ["testbed", "up", "{d}/star6.json"],
           {128 + KILL, 0}, setup=star, interrupt=Interrupt(KILL, at),
           after=[DOWN_STAR],
           what=f"SIGKILL {at} s into testbed up: its guard undoes the build")
    for number in range(2):
        at = round(rng.uniform(0.1, 2.0), 2)
        tb(f"interrupts/up/SIGHUP-{number}", ["testbed", "up", "{d}/star6.json"],
           {128 + HUP, 0}, setup=star, interrupt=Interrupt(HUP, at, group=True),
           after=[DOWN_STAR],
           what=f"the terminal closes (SIGHUP) {at} s into testbed up")
    for number in range(2):
        at = round(rng.uniform(0.1, 1.5), 2)
        tb(f"interrupts/up/double-SIGINT-{number}", ["testbed", "up", "{d}/star6.json"],
           {130, 0}, setup=star, interrupt=Interrupt(INT, at, group=True,
                                                      again=round(rng.uniform(0.02, 0.4), 2)),
           after=[DOWN_STAR],
           what="Ctrl-C twice during testbed up")
    for number in range(6):
        sig = (INT, TERM, INT)[number % 3]
        at = round(rng.uniform(0.05, 3.5), 2)
        tb(f"interrupts/run/{signal.Signals(sig).name}-{number}",
           ["testbed", "run", "{d}/pair.json", "--", "sleep", "30"], {128 + sig},
           setup=pair, interrupt=Interrupt(sig, at, group=sig == INT),
           what=f"{signal.Signals(sig).name} {at} s into testbed run")
    for number in range(2):
        at = round(rng.uniform(0.3, 3.0), 2)
        tb(f"interrupts/run/SIGKILL-{number}", ["testbed", "run", "{d}/pair.json", "--",
                                                "sleep", "30"], {128 + KILL}, setup=pair,
           interrupt=Interrupt(KILL, at), what=f"SIGKILL {at} s into testbed run",
           new=False, origin=ISSUE_42)
    tb("interrupts/run/double-SIGINT", ["testbed", "run", "{d}/star6.json", "--", "sleep",
                                        "30"], {130}, setup=star,
       interrupt=Interrupt(INT, round(rng.uniform(0.5, 2.5), 2), group=True, again=0.1),
       what="Ctrl-C twice during testbed run (the second during the teardown)")
    tb("interrupts/run-standing/SIGINT", ["testbed", "up", "{d}/pair.json"], {0},
       setup=pair, driver="interrupt-standing-run",
       what="Ctrl-C during a run on a standing testbed: the testbed stays, the ranks go")
    for number in range(2):
        at = round(rng.uniform(0.05, 1.0), 2)
        tb(f"interrupts/down/SIGTERM-{number}", ["testbed", "up", "{d}/star6.json"], {0},
           setup=star, driver="interrupt-down", options={"at": at},
           what=f"SIGTERM {at} s into testbed down TOPO")
    tb("interrupts/bench-netns/SIGINT", ["bench", "{d}/pair.json", "allreduce", "--sizes",
                                         "64KB", "--strategies", "ring", "--baselines", "gloo",
                                         "--no-calibrate", "--reps", "1"], {130, 0},
       setup=pair, interrupt=Interrupt(INT, round(rng.uniform(1.0, 6.0), 2), group=True),
       timeout=240, needs=["torch"], what="Ctrl-C during bench on its testbed")
    tb("interrupts/bench-netns/SIGTERM", ["bench", "{d}/pair.json", "allreduce", "--sizes",
                                          "64KB", "--strategies", "ring", "--baselines",
                                          "gloo", "--no-calibrate", "--reps", "1"], {143, 0},
       setup=pair, interrupt=Interrupt(TERM, round(rng.uniform(1.0, 8.0), 2)), timeout=240,
       needs=["torch"], what="SIGTERM during bench on its testbed")
    return cases


PROGRESS_TRICKS = {
    "fifo": "import os, time; d = os.environ['CCWEAVE_PROGRESS_DIR']; "
            "os.mkfifo(os.path.join(d, 'rank%s.progress' % os.environ['RANK'])); "
            "time.sleep(0.5); raise SystemExit(3)",
    "dev-zero": "import os, time; d = os.environ['CCWEAVE_PROGRESS_DIR']; "
                "os.symlink('/dev/zero', os.path.join(d, 'rank%s.progress' % "
                "os.environ['RANK'])); time.sleep(0.5); raise SystemExit(3)",
    "lying": "import os, struct, time; d = os.environ['CCWEAVE_PROGRESS_DIR']; "
             "r = int(os.environ['RANK']); "
             "data = struct.pack('<4sHHiidd12q', b'CCWP', 1, 1, 10**9 + r, -5, float('nan'), "
             "float('-inf'), 99, -2**62, -7, 5, 3, 2**40, 1, 4, 2, 0, 0, 0); "
             "open(os.path.join(d, 'rank%d.progress' % r), 'wb').write(data); "
             "time.sleep(0.5); raise SystemExit(3)",
    "directory": "import os, time; d = os.environ['CCWEAVE_PROGRESS_DIR']; "
                 "os.mkdir(os.path.join(d, 'rank%s.progress' % os.environ['RANK'])); "
                 "time.sleep(0.5); raise SystemExit(3)",
    "escape-in-output": "import sys; print('\\x1b]0;owned\\x07\\u202eevil', file=sys.stderr); "
                        "raise SystemExit(3)",
}
"""A rank of ``testbed run`` is any program: one that leaves a hostile progress record in
its launcher's folder, then fails (the launcher reads every record to name the culprit)."""


# ------------------------------------------------------------------ ranks of `run`

RUN = ["run", "switch:4", "allreduce", "--nproc", "4", "--sizes", "256KB", "--iters", "400",
       "--warmup", "0", "--modes", "out", "--no-check"]


def runtime_cases(rng: random.Random) -> list[Case]:
    cases: list[Case] = []

    def rt(label: str, argv: list[str], expect: set[int], what: str, new: bool = True,
           origin: str = "", interrupt=None, driver=None, env=None, timeout=180.0,
           needs=("torch",), options=None, json_out=False, setup=None) -> None:
        cases.append(Case(id=f"runtime/{label}", argv=argv, expect=expect, new=new,
                          setup=setup,
                          origin=origin, what=what, interrupt=interrupt, driver=driver,
                          env=dict(env or {}), timeout=timeout, heavy=True,
                          needs=list(needs), runs_nothing=False, options=dict(options or {}),
                          json_out=json_out))

    for number in range(2):
        at = round(rng.uniform(1.0, 6.0), 2)
        rt(f"run/SIGINT-{number}", RUN, {130, 0}, f"Ctrl-C {at} s into run",
           interrupt=Interrupt(INT, at, group=True), new=number > 0, origin=ISSUE_11)
        at = round(rng.uniform(1.0, 6.0), 2)
        rt(f"run/SIGTERM-{number}", RUN, {143, 0}, f"SIGTERM {at} s into run",
           interrupt=Interrupt(TERM, at), new=number > 0, origin=ISSUE_11)
    rt("run/double-SIGINT", RUN, {130, 0}, "Ctrl-C twice during run",
       interrupt=Interrupt(INT, round(rng.uniform(2.0, 5.0), 2), group=True, again=0.15))
    rt("run/SIGKILL-launcher", RUN, {128 + KILL}, "the launcher killed outright: its ranks die",
       interrupt=Interrupt(KILL, round(rng.uniform(2.0, 5.0), 2)), origin=ISSUE_11, new=False)
    rt("run/SIGHUP", RUN, {128 + HUP, 0}, "the terminal closes during run",
       interrupt=Interrupt(HUP, round(rng.uniform(2.0, 5.0), 2), group=True))
    rt("run/kill-rank-2", [*RUN, "--timeout", "10"], {2}, "rank 2 SIGKILLed mid-run",
       driver="signal-rank", options={"rank": 2, "signal": KILL})
    rt("run/stop-rank-1", [*RUN, "--timeout", "5"], {2}, "rank 1 SIGSTOPped mid-run",
       driver="signal-rank", options={"rank": 1, "signal": signal.SIGSTOP}, origin=ISSUE_42,
       new=False)
    rt("run/term-rank-3", [*RUN, "--timeout", "10"], {2}, "rank 3 gets SIGTERM mid-run",
       driver="signal-rank", options={"rank": 3, "signal": TERM})
    rt("run/mpi-SIGINT", ["run", "switch:4", "allreduce", "--nproc", "4", "--backend", "mpi",
                          "--sizes", "256KB", "--iters", "400"], {130, 0},
       "Ctrl-C during an MPI run", needs=("torch", "mpirun"),
       interrupt=Interrupt(INT, round(rng.uniform(2.0, 6.0), 2), group=True))
    bench = ["bench", "switch:2", "allreduce", "--testbed", "none", "--sizes", "64KB",
             "--strategies", "ring", "--baselines", "gloo", "--no-calibrate", "--reps", "1"]
    for number in range(1):
        rt(f"bench/SIGINT-{number}", bench, {130, 0}, "Ctrl-C during bench --testbed none",
           interrupt=Interrupt(INT, round(rng.uniform(1.0, 8.0), 2), group=True))
        rt(f"bench/SIGTERM-{number}", bench, {143, 0}, "SIGTERM during bench --testbed none",
           interrupt=Interrupt(TERM, round(rng.uniform(1.0, 8.0), 2)))
    short = ["run", "switch:2", "allreduce", "--nproc", "2", "--sizes", "4KB", "--iters", "2"]
    for tag, value, codes in (("x", "x", {2}), ("out-of-range", "70000-70010", {2}),
                              ("reversed", "5000-3000", {2}), ("one-port", "29731", {0, 2}),
                              ("privileged", "1-2", {0, 2})):
        rt(f"env/data-ports-{tag}", short, codes, f"CCWEAVE_DATA_PORTS={value}",
           env={"CCWEAVE_DATA_PORTS": value}, timeout=120)
    for tag, value in (("empty", ""), ("escape", "\x1b[31m")):
        rt(f"env/job-secret-{tag}", short, {0, 2}, f"CCWEAVE_JOB_SECRET set to {tag}",
           env={"CCWEAVE_JOB_SECRET": value}, timeout=120)
    for tag, value in (("file", "{d}/afile"), ("off", "off")):
        rt(f"env/progress-dir-{tag}", short, {0}, f"CCWEAVE_PROGRESS_DIR {tag}",
           env={"CCWEAVE_PROGRESS_DIR": value}, timeout=120, setup=write("afile", str))
    rt("env/tmpdir-a-file", short, {0, 2}, "TMPDIR is a file",
       env={"TMPDIR": "{d}/afile"}, setup=write("afile", str), timeout=120)
    rt("env/master-port-x", short, {0, 2}, "MASTER_PORT=x in the user's environment",
       env={"MASTER_PORT": "x"}, timeout=120)
    rt("env/omp-threads-x", short, {0, 2}, "OMP_NUM_THREADS=x", env={"OMP_NUM_THREADS": "x"},
       timeout=120)
    return cases


# ------------------------------------------------------------------ hostile peers

def listener_cases() -> list[Case]:
    cases = []
    for attack, what in (("slowloris", "20 connections that send nothing, held to the end"),
                         ("half-hello", "a hello cut after 8 bytes, held open"),
                         ("megabyte", "1 MB of random bytes"),
                         ("reset", "connections reset at once (SO_LINGER 0)"),
                         ("flood", "300 connections at once"),
                         ("wrong-mac", "a well-formed hello for rank 1 with a wrong MAC")):
        cases.append(Case(id=f"listener/{attack}", argv=[
            "run", "switch:4", "allreduce", "--nproc", "4", "--sizes", "4KB,256KB", "--iters",
            "50", "--json", "--timeout", "20"], expect={0}, new=True, what=what,
            driver="listener", options={"attack": attack}, heavy=True, timeout=180,
            needs=["torch"], runs_nothing=False, json_out=True))
    return cases


# ------------------------------------------------------------------ pipes and terminals

def pipe_cases() -> list[Case]:
    commands = [("topo-show", ["topo", "show", "dgx1"]),
                ("topo-show-json", ["topo", "show", "dgx1", "--json"]),
                ("compare", ["compare", "switch:4", "allreduce", "--sizes", "1MB"]),
                ("testbed-show", ["testbed", "show", "ring:4"]),
                ("help", ["--help"]),
                ("lint", ["lint", "{d}/in.xml", "--ignore-env", "--runtime", "msccl"]),
                ("explain", ["explain", "{d}/r.json", "--topology", "dgx-a100"]),
                ("verify-json", ["verify", "{d}/in.json", "--json"]),
                ("tune", ["tune", "dgx-a100", "--nccl-tuner", "-o", "{d}/t.conf"]),
                ("bounds", ["bounds", "dgx1", "allreduce", "--sizes", "1KB:1GB"])]

    def setup(folder: Path) -> None:
        (folder / "in.xml").write_text(seeds()["xml"])
        (folder / "in.json").write_text(seeds()["schedule"])
        (folder / "r.json").write_text(seeds()["inspector"])

    cases = []
    for label, argv in commands:
        outputs = ["t.conf"] if label == "tune" else []
        cases.append(Case(id=f"pipes/closed-reader/{label}", argv=argv, expect={0, 141},
                          new=label not in ("topo-show-json",), origin="f128b08",
                          setup=setup, stdout="closed-reader", outputs=outputs,
                          what=f"{label} | head -c0", options={"outputs_on_failure": True}))
        cases.append(Case(id=f"pipes/dev-full/{label}", argv=argv, expect={2}, new=True,
                          setup=setup, stdout="full", what=f"{label} > /dev/full",
                          outputs=outputs, options={"outputs_on_failure": True}))
    for label, argv in commands[:3]:
        cases.append(Case(id=f"pipes/stdout-closed/{label}", argv=argv, expect={0, 2},
                          new=True, driver="closed-fd", options={"fd": 1}, setup=setup,
                          what=f"{label} >&- (no standard output at all)"))
    for label, argv in (("bad-topology", ["topo", "show", "nope:3"]),
                        ("verify-missing", ["verify", "{d}/none.json"])):
        cases.append(Case(id=f"pipes/stderr-closed/{label}", argv=argv, expect={2},
                          new=True, driver="closed-fd", options={"fd": 2, "no_stderr": True},
                          setup=setup,
                          what=f"{label} 2>&- (an error with nowhere to say it)"))
    return cases


def env_cases() -> list[Case]:
    cases = []
    for value in ("0", "-5", "x", "999999"):
        for label, argv in (("topo-show", ["topo", "show", "dgx1"]),
                            ("compare", ["compare", "switch:4", "allreduce", "--sizes",
                                         "1MB"])):
            cases.append(Case(id=f"env/COLUMNS={value}/{label}", argv=argv, expect={0},
                              new=True, env={"COLUMNS": value},
                              what=f"COLUMNS={value} {label}"))
    cases.append(Case(id="env/TERM=dumb/topo-show", argv=["topo", "show", "dgx1"],
                      expect={0}, new=True, env={"TERM": "dumb"}))
    cases.append(Case(id="env/LC_ALL=C/bidi-name", argv=["topo", "show", "{d}/t.json"],
                      expect={0}, new=True, env={"LC_ALL": "C", "LANG": "C"},
                      setup=write("t.json", _jsonish("topology", _set(("name",), BIDI)))))
    cases.append(Case(id="env/PYTHONIOENCODING=ascii/bidi-name",
                      argv=["topo", "show", "{d}/t.json"], expect={0, 2}, new=True,
                      env={"PYTHONIOENCODING": "ascii"},
                      setup=write("t.json", _jsonish("topology", _set(("name",), BIDI)))))
    cases.append(Case(id="env/HOME-missing/plot", argv=["topo", "show", "ring:4", "--plot",
                                                        "{d}/t.png"], expect={0}, new=True,
                      env={"HOME": "/nonexistent/home", "MPLCONFIGDIR": None},
                      outputs=["t.png"]))
    cases.append(Case(id="env/TMPDIR-a-file/synth", argv=["synth", "switch:4", "allgather",
                                                          "-o", "{d}/o.json"], expect={0},
                      new=True, env={"TMPDIR": "{d}/afile"}, outputs=["o.json"],
                      setup=write("afile", lambda: "x")))
    cases.append(Case(id="env/testbed-dir-file/show", argv=["testbed", "show", "ring:4"],
                      expect={0}, new=True, env={"CCWEAVE_TESTBED_DIR": "{d}/afile"},
                      setup=write("afile", lambda: "x"),
                      what="testbed show needs no state folder"))
    return cases


# ------------------------------------------------------------------ long commands, interrupted

def long_cases(rng: random.Random) -> list[Case]:
    cases = []
    long_synth = ["synth", "dgx-a100:8", "allreduce", "--strategy", "auto", "--sizes",
                  "1KB:1GB", "-o", "{d}/plan.json"]
    for number in range(3):
        sig = (INT, TERM, INT)[number]
        at = round(rng.uniform(0.8, 4.0), 2)
        cases.append(Case(id=f"interrupts/synth/{signal.Signals(sig).name}-{number}",
                          argv=long_synth, expect={128 + sig, 0}, new=True,
                          interrupt=Interrupt(sig, at, group=sig == INT),
                          outputs=["plan.json"],
                          what=f"{signal.Signals(sig).name} {at} s into a long synth -o"))
    for number in range(2):
        at = round(rng.uniform(0.8, 3.0), 2)
        cases.append(Case(id=f"interrupts/compare/SIGINT-{number}",
                          argv=["compare", "dgx-a100:8", "allreduce", "--sizes", "1KB:1GB"],
                          expect={130, 0}, new=True, interrupt=Interrupt(INT, at, group=True),
                          what=f"Ctrl-C {at} s into compare"))
    at = round(rng.uniform(0.5, 2.0), 2)
    cases.append(Case(id="interrupts/taccl/SIGTERM", argv=[
        "synth", "ndv2:2", "allgather", "--strategy", "taccl", "--time-limit", "30", "-o",
        "{d}/t.json"], expect={143, 0}, new=True, interrupt=Interrupt(TERM, at),
        outputs=["t.json"], what=f"SIGTERM {at} s into a TACCL solve", timeout=120))
    return cases


# ------------------------------------------------------------------ drivers

def _signal_rank(case: Case, folder: Path, env: dict[str, str]) -> dict[str, object]:
    """Run the command; once its ranks run, send ``signal`` to rank ``rank``."""
    mark, rank, sig = env[MARK_ENV], case.options["rank"], case.options["signal"]

    def hit(proc) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and running(proc.pid):
            pids = rank_pids(mark)
            if len(pids) >= 4:
                time.sleep(2.0)
                with contextlib.suppress(ProcessLookupError, KeyError):
                    os.kill(pids[rank], sig)
                if sig == signal.SIGSTOP:  # once the launcher has ended, end the rank
                    while running(proc.pid):
                        time.sleep(0.2)
                    with contextlib.suppress(ProcessLookupError, KeyError):
                        os.kill(pids[rank], signal.SIGKILL)
                return
            time.sleep(0.1)
    return run_command(case.argv, folder, env, None, case.timeout, on_start=hit)


def rank_pids(mark: str) -> dict[int, int]:
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{pid}/environ", "rb") as handle:
                env = dict(item.split(b"=", 1) for item in handle.read().split(b"\0")
                           if b"=" in item)
            rank = env.get(b"OMPI_COMM_WORLD_RANK") or env.get(b"RANK")
            if env.get(MARK_ENV.encode()) == mark.encode() and rank is not None:
                found.setdefault(int(rank), int(pid))
    return found


def _listening_ports(pid: int) -> set[int]:
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


def _listener(case: Case, folder: Path, env: dict[str, str]) -> dict[str, object]:
    """Attack every rank's data listener while the job runs (its ranks held with SIGSTOP
    from when they listen until every attack is in, as benchmarks/hardening.py does)."""
    low = 20000 + (abs(hash(case.id)) % 400) * 20
    env = dict(env, CCWEAVE_DATA_PORTS=f"{low}-{low + 19}")
    mark, attack = env[MARK_ENV], case.options["attack"]
    held_sockets: list[socket.socket] = []
    rng = random.Random(7)

    def attack_all(proc) -> None:
        ports: dict[int, int] = {}
        held: list[int] = []
        deadline = time.monotonic() + 120
        while len(ports) < 4 and running(proc.pid) and time.monotonic() < deadline:
            for rank, pid in rank_pids(mark).items():
                ours = [p for p in _listening_ports(pid) if low <= p < low + 20]
                if ours and rank not in ports:
                    os.kill(pid, signal.SIGSTOP)
                    held.append(pid)
                    ports[rank] = ours[0]
            time.sleep(0.02)
        for port in ports.values():
            with contextlib.suppress(OSError):
                _attack(attack, port, rng, held_sockets)
        for pid in held:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    try:
        return run_command(case.argv, folder, env, None, case.timeout, on_start=attack_all)
    finally:
        for sock in held_sockets:
            sock.close()


def _attack(attack: str, port: int, rng: random.Random, held: list[socket.socket]) -> None:
    def connect() -> socket.socket:
        return socket.create_connection(("127.0.0.1", port), timeout=5)
    if attack == "slowloris":
        for _ in range(5):
            held.append(connect())
    elif attack == "half-hello":
        sock = connect()
        sock.sendall(struct.pack("<q", 0))
        held.append(sock)
    elif attack == "megabyte":
        with connect() as sock, contextlib.suppress(OSError):
            sock.sendall(rng.randbytes(1 << 20))
    elif attack == "reset":
        for _ in range(10):
            sock = connect()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
    elif attack == "flood":
        socks = []
        for _ in range(75):
            with contextlib.suppress(OSError):
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=1))
        for sock in socks:
            sock.close()
    elif attack == "wrong-mac":
        with connect() as sock, contextlib.suppress(OSError):
            sock.sendall(struct.pack("<qqq", 1, 0, -1) + rng.randbytes(32))
            time.sleep(0.1)


def _closed_fd(case: Case, folder: Path, env: dict[str, str]) -> dict[str, object]:
    """The command with standard output (or error) closed, as ``>&-`` leaves it."""
    fd = case.options["fd"]
    argv = [a.replace("{d}", str(folder)) for a in case.argv]
    script = f"exec {sys.executable} -m ccweave.cli \"$@\" {fd}>&-"
    return run_command(["sh", "-c", script, "sh", *argv], folder, env, None, case.timeout,
                       ccweave=False)


def _live_and_lying(case: Case, folder: Path, env: dict[str, str]) -> dict[str, object]:
    """A live testbed (a ``testbed run`` of ``sleep``) and, beside it, a record of a dead
    maker that claims the live one's namespaces; a bare ``down`` must leave them."""
    state = Path(env["CCWEAVE_TESTBED_DIR"])
    live = subprocess.Popen([sys.executable, "-m", "ccweave.cli", "testbed", "run",
                             str(folder / "pair.json"), "--", "sleep", "40"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        spaces: list[str] = []
        while time.monotonic() < deadline and len(spaces) < 3:
            spaces = [line.split()[0] for line in subprocess.run(
                ["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()]
            time.sleep(0.2)
        (state / "testbed-zz40.json").write_text(json.dumps(_record(
            "zz40", namespaces=spaces, standing=False)))
        done = run_command(case.argv, folder, env, None, case.timeout)
        still = [line.split()[0] for line in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()]
        if set(spaces) - set(still):
            done["stderr"] += (f"\nccweave: error: HOSTILE PASS: a bare down removed the live "
                               f"testbed's {sorted(set(spaces) - set(still))}\n")
            done["code"] = 99
        return done
    finally:
        live.terminate()
        live.wait(timeout=60)


def _interrupt_standing_run(case: Case, folder: Path, env: dict[str, str]
                            ) -> dict[str, object]:
    """``up``, then a ``run`` on it interrupted with Ctrl-C: the run ends 130, its ranks are
    gone, the standing testbed is whole (a second run works), then ``down`` removes it."""
    topo = str(folder / "pair.json")
    up = run_command(case.argv, folder, env, None, 120, name="up")
    run = run_command(["testbed", "run", topo, "--", "sleep", "30"], folder, env, None, 60,
                      interrupt=Interrupt(INT, 1.5, group=True), name="run",)
    again = run_command(["testbed", "run", topo, "--", "true"], folder, env, None, 60,
                        name="again")
    down = run_command(["testbed", "down", topo], folder, env, None, 60, name="down")
    problems = [f"{name} exited {step['code']}, expected {want}"
                for name, step, want in (("up", up, 0), ("the interrupted run", run, 130),
                                         ("a second run", again, 0), ("down", down, 0))
                if step["code"] != want]
    up["stderr"] += run["stderr"] + again["stderr"] + down["stderr"]
    if problems:
        up["code"] = 99
        up["stderr"] += "ccweave: error: HOSTILE PASS: " + "; ".join(problems) + "\n"
    return up


def _interrupt_down(case: Case, folder: Path, env: dict[str, str]) -> dict[str, object]:
    """``up``, then ``down TOPO`` with SIGTERM at a random point: either it finished, or a
    second ``down TOPO`` finishes the job; nothing is left."""
    topo = str(folder / "star6.json")
    up = run_command(case.argv, folder, env, None, 120, name="up")
    down = run_command(["testbed", "down", topo], folder, env, None, 60, name="down",
                       interrupt=Interrupt(TERM, float(case.options["at"])))
    again = run_command(["testbed", "down", topo], folder, env, None, 60, name="again")
    up["stderr"] += down["stderr"]
    code = 128 - down["code"] if down["code"] < 0 else down["code"]
    wanted = {0: {2}, 143: {0, 2}}.get(code)
    if wanted is None or again["code"] not in wanted:
        up["code"] = 99
        up["stderr"] += (f"ccweave: error: HOSTILE PASS: down exited {down['code']}, then a "
                         f"second down {again['code']}: {again['stderr'].strip()[-200:]}\n")
    return up


DRIVERS: dict[str, Callable[[Case, Path, dict[str, str]], dict[str, object]]] = {
    "signal-rank": _signal_rank, "listener": _listener, "closed-fd": _closed_fd,
"live-and-lying": _live_and_lying,
    "interrupt-standing-run": _interrupt_standing_run, "interrupt-down": _interrupt_down,
}


def catalogue(seed: int) -> list[Case]:
    rng = random.Random(seed)
    cases = [*file_cases(rng), *content_cases(), *output_cases(), *option_cases(),
             *testbed_cases(rng), *runtime_cases(rng), *listener_cases(), *pipe_cases(),
             *env_cases(), *long_cases(rng), *bench_cases(), *taccl_cases()]
    for case in cases:
        if "/dev/zero" in case.argv:  # read up to the input limit (Inspector's: 4 GiB)
            case.options.setdefault("rss_mb", AS_LIMIT >> 20)  # or the cap, then refused
    return cases
