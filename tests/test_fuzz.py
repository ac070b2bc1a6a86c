"""Fuzzing the command line with hostile inputs: topology JSON, schedule JSON, MSCCL XML,
topology specs and ``--sizes``. Whatever the input, the command ends with exit code 0, 1
or 2, an error is one line on stderr, nothing escapes as a traceback, and no command
grows the process by more than 1 GB (an address-space cap turns any larger allocation
into a failure)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccweave import schedule as schedule_io
from ccweave.cli import main
from ccweave.export import to_xml
from ccweave.synth import synthesize
from ccweave.topology import io as topology_io
from ccweave.topology import zoo
from tests.strategies import json_text, mutated, size_texts, topology_specs

GROWTH_CAP = 900 * 2**20
"""Address space a command may add: with the CLI's own ~100 MB, under 1 GB."""
FUZZ = settings(max_examples=int(os.environ.get("CCWEAVE_FUZZ_EXAMPLES", "60")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

TOPOLOGIES = [topology_io.to_dict(zoo.get(name)) for name in ("ring:4", "mist")] + [
    json.loads((Path(__file__).resolve().parents[1] / "examples" / "topologies"
                / "two-nodes.json").read_text())]
SCHEDULES = [schedule_io.to_dict(synthesize(zoo.get(topo), kind, strategy))
             for topo, kind, strategy in (("ring:4", "allreduce", "ring"),
                                          ("switch:4", "alltoall", "pairwise"),
                                          ("ring:4", "broadcast", "ring"))]
XMLS = [to_xml(synthesize(zoo.get("switch:4"), "allreduce", "ring")),
        to_xml(synthesize(zoo.get("switch:4"), "alltoall", "pairwise"))]
XML_ATTRIBUTE = re.compile(r'\s(\w+)="([^"]*)"')
XML_VALUES = st.one_of(st.integers(-3, 70).map(str),
                       st.sampled_from(["4096", "4097", "32768", "999999999999999999",
                                        "9" * 30, "", "x", "-1", "1.5", "\x01"]))


def _vm_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def _memory_cap(extra: int):
    """Cap this process's address space at its current size plus ``extra`` bytes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _vm_bytes() + extra
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def cli(*argv: str) -> tuple[int, str, str]:
    """Run ``ccweave ARGV`` in this process under the memory cap: (code, stdout, stderr).
    A traceback (any exception out of ``main``) fails the test by itself."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            _memory_cap(GROWTH_CAP):
        try:
            code = main(list(argv))
        except SystemExit as stop:  # argparse's own usage errors
            code = stop.code if isinstance(stop.code, int) else 2
    return code, out.getvalue(), err.getvalue()


CODES: dict[int, int] = {}


def check(code: int, err: str, what: str) -> None:
    CODES[code] = CODES.get(code, 0) + 1
    assert code in (0, 1, 2), f"{what}: exit code {code}\n{err}"
    assert "Traceback" not in err, f"{what}: {err}"
    if code == 2 and err.startswith("ccweave: error:"):
        assert err.count("\n") == 1, f"{what}: the error is not one line:\n{err}"
        assert "\x1b" not in err, f"{what}: a raw escape sequence: {err!r}"


def _file(folder: str, name: str, text: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w") as handle:
        handle.write(text)
    return path


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@FUZZ
@given(data=st.sampled_from(TOPOLOGIES).flatmap(mutated))
def test_topology_files(data):
    with tempfile.TemporaryDirectory() as folder:
        path = _file(folder, "topo.json", json_text(data))
        for argv in (["topo", "show", path, "--json"], ["topo", "show", path],
                     ["bounds", path, "allgather", "--sizes", "1MB"],
                     ["synth", path, "allgather", "-o", os.path.join(folder, "s.json")]):
            check(*cli(*argv)[::2], f"{argv[:2]} on {json_text(data)[:300]}")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@FUZZ
@given(data=st.sampled_from(SCHEDULES).flatmap(mutated))
def test_schedule_files(data):
    with tempfile.TemporaryDirectory() as folder:
        path = _file(folder, "sched.json", json_text(data))
        ranks = data.get("collective", {}).get("ranks") if isinstance(data, dict) and \
            isinstance(data.get("collective"), dict) else None
        topo = f"switch:{ranks}" if isinstance(ranks, int) and 2 <= ranks <= 64 else "ring:4"
        for argv in (["verify", path], ["verify", path, "--json", "--topology", topo],
                     ["simulate", path, topo, "--sizes", "1KB,1GB"],
                     ["simulate", path, topo, "--unverified", "--json"],
                     ["export", path, "-o", os.path.join(folder, "a.xml")],
                     ["export", path, "-o", os.path.join(folder, "b.xml"), "--unverified"]):
            check(*cli(*argv)[::2], f"{argv[0]} on {json_text(data)[:300]}")


@st.composite
def _xml_texts(draw) -> str:
    text = draw(st.sampled_from(XMLS))
    for _ in range(draw(st.integers(1, 3))):
        spots = list(XML_ATTRIBUTE.finditer(text))
        if not spots:
            break
        spot = spots[draw(st.integers(0, len(spots) - 1))]
        action = draw(st.sampled_from(["value", "value", "delete", "cut", "line"]))
        if action == "value":
            text = text[:spot.start(2)] + draw(XML_VALUES) + text[spot.end(2):]
        elif action == "delete":
            text = text[:spot.start()] + text[spot.end():]
        elif action == "cut":
            text = text[:draw(st.integers(0, len(text)))]
        else:
            lines = text.splitlines(keepends=True)
            k = draw(st.integers(0, len(lines) - 1))
            text = "".join(lines[:k] + lines[k + 1:] if draw(st.booleans())
                           else [*lines[:k + 1], lines[k], *lines[k + 1:]])
    return text


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@FUZZ
@given(text=_xml_texts())
def test_msccl_xml_files(text):
    with tempfile.TemporaryDirectory() as folder:
        path = _file(folder, "algo.xml", text)
        for argv in (["import", path, "-o", os.path.join(folder, "s.json")],
                     ["verify", path], ["simulate", path, "switch:4", "--sizes", "1MB"]):
            check(*cli(*argv)[::2], f"{argv[0]} on {text[:300]}")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@FUZZ
@given(spec=topology_specs())
def test_topology_specs(spec):
    check(*cli("topo", "show", spec, "--json")[::2], f"topo show {spec[:80]!r}")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@FUZZ
@given(sizes=size_texts())
def test_sizes(sizes):
    check(*cli("bounds", "ring:4", "allgather", "--sizes", sizes)[::2],
          f"--sizes {sizes[:80]!r}")
