"""Fuzzing ``bench`` and ``run`` options (sizes, timeouts, rates, counts, strategy and
baseline lists, strategy options): whatever the values, the command ends with exit 0, 1
or 2, an error is one line, nothing escapes as a traceback, and nothing is left behind
(no temporary folder, no process, no namespace). A command stops where its first rank
(or its testbed) would start, so every value must be checked before: one that gets there
must be one the command uses as given, and the ranks and the testbed must get it so
(the issue's ``--max-rate 0`` reached the testbed as 400, ``--strategies ,,,`` as the
default list, ``--timeout nan`` the ranks)."""

from __future__ import annotations

import contextlib
import io
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccweave.cli import main
from ccweave.commands._inputs import MAX_ITERS, MAX_REPS, MAX_TIMEOUT_S
from ccweave.testbed.emulation import DEFAULT_MAX_RATE_MBIT
from ccweave.units import parse_sizes
from tests.strategies import size_texts
from tests.test_fuzz import GROWTH_CAP, _memory_cap

pytest.importorskip("torch")

FUZZ = settings(max_examples=max(10, int(os.environ.get("CCWEAVE_FUZZ_EXAMPLES", "60")) // 2),
                deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""Half the suite's examples: a command that gets to its ranks costs 0.1-0.3 s here."""
BAD_NUMBERS = ["0", "-0", "-1", "nan", "inf", "-inf", "1e300", "5e-324", "604801", "",
               "abc", "0x10"]
STRATEGIES = ["ring", "direct", "trees", "auto", "pairwise", "taccl", "bogus", "", " ring",
              "RING", "\x1b[31m"]
OPTION_KEYS = ["channels", "chunks", "kinds", "root", "size", "topology", "strategy", "foo",
               "", "progress"]


class Started(Exception):
    """Raised where a command would start its testbed (``what`` is the emulation) or its
    first rank (``what`` is the ranks' arguments)."""

    def __init__(self, what: object) -> None:
        super().__init__("started")
        self.what = what


def _testbed(emulation, **kwargs: object):
    raise Started(emulation)


def _ranks(argv, *args: object, **kwargs: object):
    raise Started(list(argv))


def numbers() -> st.SearchStrategy[str]:
    """Numbers as a flag's text: finite, huge, tiny, signed, non-finite, not numbers."""
    return st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                     st.integers(-10, 10**13).map(str), st.sampled_from(BAD_NUMBERS))


def counts(low: int, high: int) -> tuple[st.SearchStrategy[str], st.SearchStrategy[str]]:
    """(valid, hostile) texts of a whole number in ``low..high``."""
    return (st.integers(low, high).map(str),
            st.one_of(st.integers(-3, 10**12).map(str), st.sampled_from(
                [str(low - 1), str(high + 1), "1000001", "", "1.5", "x"])))


SIZES = (st.sampled_from(["4KB", "64KB", "1MB", "1KB:64KB", "1MB:16MB:4", "3000"]),
         st.one_of(size_texts(), st.sampled_from(["1TB", "1MB,1MB", "1B:3B:1.5"])))
SECONDS = (st.floats(1e-3, MAX_TIMEOUT_S).map(repr), numbers())


def name_lists(valid: list[str], hostile: list[str]):
    """(valid, hostile) comma-separated lists of names."""
    return (st.lists(st.sampled_from(valid), min_size=1, max_size=3, unique=True).map(",".join),
            st.one_of(st.lists(st.sampled_from(valid + hostile), max_size=4).map(",".join),
                      st.text(max_size=12)))


def options(strategy: bool):
    """(valid, hostile) ``KEY=VALUE`` (``STRATEGY:KEY=VALUE`` for ``strategy``)."""
    valid = st.sampled_from(["channels=1", "channels=2", "channels=100000", "chunks=2"])
    value = st.one_of(st.integers(-3, 10**6).map(str), numbers(),
                      st.sampled_from(["direct,relay", "true", "x"]))
    hostile = st.tuples(st.sampled_from(OPTION_KEYS), value).map("=".join)
    if not strategy:
        return valid, hostile
    return (valid.map("ring:".__add__),
            st.tuples(st.sampled_from(STRATEGIES), st.one_of(valid, hostile)).map(":".join))


@st.composite
def flags(draw, fields: dict[str, tuple]) -> dict[str, str | None]:
    """A value per flag (``None``: left out, where the flag may be): valid, but for none,
    one or two flags drawn hostile, so most commands get to where their ranks start, and
    a hostile value is most often the only one."""
    hostile = draw(st.sets(st.sampled_from(sorted(fields)), max_size=2))
    drawn = {}
    for name, (valid, bad, *optional) in fields.items():
        value = bad if name in hostile else valid
        drawn[name] = draw(st.one_of(st.none(), value) if optional else value)
    return drawn


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _int(text: str, otherwise: int) -> int:
    try:
        return int(text)
    except ValueError:
        return otherwise


def _list_ok(text: str | None) -> bool:
    """A comma-separated list flag may start the command: names, none empty or repeated."""
    if text is None:
        return True
    names = [name.strip() for name in text.split(",")]
    return all(names) and len(set(names)) == len(names)


def _children() -> list[str]:
    """This process's live child processes (any thread's)."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            found += (task / "children").read_text().split()
    return [pid for pid in found if _alive(pid)]


def _alive(pid: str) -> bool:
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def _our_namespaces() -> list[str]:
    """Network namespaces named after this process (what its checks make, as root)."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        return []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line for line in listed.stdout.splitlines() if str(os.getpid()) in line]


def run_cli(argv: list[str]) -> tuple[object, str, object]:
    """``ccweave ARGV`` in this process with its testbed and rank launchers stubbed, under
    the fuzz suite's memory cap, its temporary files in a folder of its own: (exit code or
    "started", stderr, what would have started). Fails if anything is left behind."""
    err = io.StringIO()
    what = None
    with tempfile.TemporaryDirectory(prefix="fuzz-bench-") as private, \
            mock.patch.object(tempfile, "tempdir", private), \
            mock.patch("ccweave.runtime.launch.launch_local", _ranks), \
            mock.patch("ccweave.runtime.launch.launch_mpi", _ranks), \
            mock.patch("ccweave.testbed.Testbed", _testbed), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), \
            _memory_cap(GROWTH_CAP):
        try:
            code: object = main(argv)
        except Started as started:
            code, what = "started", started.what
        except SystemExit as stop:  # argparse's own usage errors
            code = stop.code if isinstance(stop.code, int) else 2
        left = os.listdir(private)
    assert not left, f"{argv}: left {left} in the temporary folder"
    assert not _children(), f"{argv}: left processes {_children()}"
    assert not _our_namespaces(), f"{argv}: left namespaces {_our_namespaces()}"
    return code, err.getvalue(), what


def check(code: object, err: str, argv: list[str]) -> None:
    assert code in (0, 1, 2, "started"), f"{argv}: exit {code}\n{err}"
    assert "Traceback" not in err, f"{argv}: {err}"
    lines = err.splitlines()
    errors = [line for line in lines if line.startswith("ccweave: error:")]
    if errors:
        assert code == 2 and errors == [lines[-1]], f"{argv}: {err}"
        assert all(line.startswith("ccweave: note:") for line in lines[:-1]), f"{argv}: {err}"
        assert "\x1b" not in err, f"{argv}: a raw escape sequence: {err!r}"
    elif code == 2:  # argparse: usage, then one error line
        assert lines and lines[-1].startswith("ccweave"), f"{argv}: {err}"


def _argv(command: list[str], drawn: dict[str, str | None]) -> list[str]:
    """The command line: ``--flag=value`` for each flag drawn (``=`` keeps a value that
    starts with a dash a value); booleans as the flag alone."""
    argv = list(command)
    for name, value in drawn.items():
        if value in ("on", "off"):
            argv += [name] if value == "on" else []
        elif value is not None:
            argv.append(f"{name}={value}")
    return argv


def _asked(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs /proc")
@FUZZ
@given(drawn=flags({
    "--sizes": SIZES, "--timeout": SECONDS, "--reps": counts(1, 5),
    "--warmup": counts(0, 3), "--testbed": (st.sampled_from(["none", "netns"]), st.text()),
    "--max-rate": (st.floats(1.0, 1e5).map(repr), numbers(), None),
    "--strategies": (*name_lists(["ring", "direct", "trees", "auto"], STRATEGIES), None),
    "--baselines": (*name_lists(["gloo", "mpi"], ["bogus", ""]), None),
    "--option": (*options(strategy=True), None),
    "--no-calibrate": (st.sampled_from(["on", "off"]), st.just("off")),
    "--calibrate-sizes": (*SIZES, None)}))
def test_bench_options(drawn):
    argv = _argv(["bench", "switch:3", "allreduce"], drawn)
    code, err, what = run_cli(argv)
    check(code, err, argv)
    if code != "started":
        return
    # the bench starts only with values it uses as given, and uses them as given
    seconds = _float(drawn["--timeout"])
    assert 0 < seconds <= MAX_TIMEOUT_S, argv
    assert 1 <= _int(drawn["--reps"], 0) <= MAX_REPS and _int(drawn["--warmup"], -1) >= 0
    assert _list_ok(drawn["--strategies"]), argv
    assert drawn["--baselines"] == "" or _list_ok(drawn["--baselines"]), argv
    sizes = parse_sizes(drawn["--sizes"])
    assert len(set(sizes)) == len(sizes), argv
    if drawn["--testbed"] == "netns":
        rate = drawn["--max-rate"]
        assert what.max_rate_mbit == (DEFAULT_MAX_RATE_MBIT if rate is None else float(rate))
    else:
        assert drawn["--max-rate"] is None, argv  # it shapes nothing here: refused
        assert float(_asked(what, "--timeout")) == min(seconds, 600.0), argv


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs /proc")
@FUZZ
@given(drawn=flags({
    "--sizes": SIZES, "--timeout": SECONDS, "--iters": counts(1, MAX_ITERS),
    "--warmup": counts(0, MAX_ITERS),
    "--strategy": (st.sampled_from(["ring", "direct", "auto"]),
                   st.sampled_from(["pairwise", "bogus", "", "trees"])),
    "--option": (*options(strategy=False), None), "--chunks": (*counts(1, 8), None),
    "--root": (*counts(0, 2), None), "--backend": (st.sampled_from(["gloo", "mpi"]),
                                                   st.text(max_size=5))}))
def test_run_options(drawn):
    argv = _argv(["run", "switch:3", "allreduce"], drawn)
    code, err, what = run_cli(argv)
    check(code, err, argv)
    if code != "started":
        return
    sizes = parse_sizes(drawn["--sizes"])
    assert len(set(sizes)) == len(sizes), argv
    seconds = _float(drawn["--timeout"])
    assert 0 < seconds <= MAX_TIMEOUT_S, argv
    assert 1 <= _int(drawn["--iters"], 0) <= MAX_ITERS, argv
    assert 0 <= _int(drawn["--warmup"], -1) <= MAX_ITERS, argv
    # the ranks get the values as asked
    assert float(_asked(what, "--timeout")) == seconds, argv
    for flag in ("--iters", "--warmup"):
        assert int(_asked(what, flag)) == int(drawn[flag]), argv
    assert _asked(what, "--sizes") == drawn["--sizes"], argv
