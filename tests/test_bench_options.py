"""``bench`` refuses what ``run`` refuses, in the same words, before any rank starts; it
checks what its jobs need (mpi4py in the ranks' Python, mpirun) before the first
measurement; a job that fails costs only its own rows; and a value is never quietly
replaced by another (``--max-rate 0``, ``--strategies ,,,``, ``--option channels=N``)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccweave.cli import main
from ccweave.errors import RuntimeFault

torch = pytest.importorskip("torch")

HAS_MPI = shutil.which("mpirun") is not None and importlib.util.find_spec("mpi4py") is not None


class Started(Exception):
    """Raised where a command would start its testbed or its ranks."""

    def __init__(self, **seen: object) -> None:
        super().__init__("a rank would start")
        self.seen = seen


@pytest.fixture
def no_ranks(monkeypatch):
    """Stop ``bench`` and ``run`` where their first rank (or testbed) would start."""
    def site(topology, testbed="netns", **kwargs):
        raise Started(testbed=testbed, **kwargs)

    def launch(args, plan, nproc):
        raise Started(plan=plan, nproc=nproc)

    monkeypatch.setattr("ccweave.bench.jobs.site", site)
    monkeypatch.setattr("ccweave.commands.run._launch", launch)


def cli(*argv: str) -> tuple[int | str, str, str]:
    """``ccweave ARGV`` in this process: (exit code or "started", stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | str = main(list(argv))
        except Started:
            code = "started"
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def refused(*argv: str) -> str:
    """The one error line ``ccweave ARGV`` exits 2 with."""
    code, out, err = cli(*argv)
    assert code == 2, f"{argv}: {code}\n{out}\n{err}"
    assert err.startswith("ccweave: error: ") and err.count("\n") == 1, err
    return err.strip()


BENCH = ("bench", "switch:4", "allreduce", "--testbed", "none", "--baselines", "gloo")
RUN = ("run", "switch:4", "allreduce")


@pytest.mark.parametrize("flags,words", [
    (["--timeout", "nan"], "--timeout nan"),
    (["--timeout", "1e300"], "--timeout 1e+300"),
    (["--timeout", "-1"], "--timeout -1"),
    (["--sizes", "1TB"], "--sizes 1TB: 4 rank(s) on this host need about"),
    (["--sizes", "1MB,1MB"], "1MB comes twice"),
    (["--sizes", "1B:3B:1.5"], "1B comes twice"),
    (["--warmup", "-1"], "--warmup -1"),
    (["--sizes", "x"], "--sizes: size 'x'"),
    (["--sizes", "64KB\u202e"], "--sizes: size '64KB\\u202e'"),
])
def test_bench_refuses_what_run_refuses_in_the_same_words_before_any_rank(
        no_ranks, flags, words):
    line = refused(*BENCH, *flags)
    assert words in line
    memory = re.compile(r"over the [\d.]+ \w+ of memory")  # what is free changes meanwhile
    assert memory.sub("", refused(*RUN, *flags)) == memory.sub("", line)  # one check, two uses


@pytest.mark.parametrize("flags,words", [
    (["--strategies", ",,,"], "--strategies ',,,': an empty name"),
    (["--strategies", ""], "--strategies '': an empty name"),
    (["--strategies", "ring,,direct"], "an empty name"),
    (["--strategies", "ring,ring"], "'ring' comes twice"),
    (["--strategies", "pairwise"], "pairwise does not build allreduce"),
    (["--strategies", "bogus"], "unknown strategy 'bogus'"),
    (["--baselines", ",,"], "--baselines ',,': an empty name"),
    (["--baselines", "gloo,gloo"], "'gloo' comes twice"),
    (["--reps", "0"], "--reps 0: give a whole number from 1 to 1000"),
    (["--reps", "1000000000"], "--reps 1000000000"),
    (["--testbed", "netns", "--max-rate", "0"], "--max-rate 0: give"),
    (["--testbed", "netns", "--max-rate", "nan"], "--max-rate nan"),
    (["--testbed", "netns", "--max-rate", "-5"], "--max-rate -5"),
    (["--max-rate", "100"], "--max-rate 100: shapes the netns testbed's links"),
    (["--option", "auto:channels=2"], "auto takes no options"),
    (["--option", "direct:x=1", "--strategies", "ring"], "'direct' is not among"),
    (["--option", "ring:foo=1"], "--option ring:foo=1: strategy 'ring' has no option 'foo'"),
    (["--option", "ring:channels=0"], "channels must be a positive integer"),
    (["--option", "ring:root=1"], "--option ring:root=...: not a strategy option; use --root"),
    (["--option", "ring:size=1"], "use --sizes"),
    (["--option", "ring:topology=x"], "use the TOPOLOGY argument"),
    (["--no-calibrate", "--save-model", "m.json"], "--save-model: the bench does not "
                                                   "calibrate with --no-calibrate"),
    (["--model", "m.json", "--calibrate-sizes", "1MB"], "--calibrate-sizes: the bench does "
                                                       "not calibrate with --model"),
    (["--calibrate-sizes", "1TB"], "--calibrate-sizes 1TB: 4 rank(s)"),
    (["--calibrate-sizes", "4KB,4KB"], "4KB comes twice"),
    (["--calibrate-sizes", "nan"], "--calibrate-sizes: size 'nan'"),  # not --sizes'
    (["--root", "99"], "--root 99: not a rank of 'switch:4' (0..3)"),  # after calibrating
    (["--root", "-1"], "--root -1: not a rank"),
    (["--plot", ""], "--plot '': give"),  # was no plot, without a word
])
def test_bench_refuses_a_value_it_would_replace_or_ignore(no_ranks, flags, words):
    assert words in refused(*BENCH, *flags)


def test_bench_refuses_a_model_it_cannot_predict_with(no_ranks, tmp_path):
    """``--model FILE`` predicts with the cost model fitted on this machine: a topology
    without one was the plain link model without a word, and one of another machine (8
    ranks for 4) was an error about a host group that named neither flag nor file."""
    from ccweave.topology import io as topology_io
    from ccweave.topology import zoo

    def model(name: str, ranks: int, cost: bool) -> str:
        data = topology_io.to_dict(zoo.get(f"switch:{ranks}"))
        if cost:
            data["cost_model"] = {"message_overhead_us": 30.0, "message_latency_us": 100.0,
                                  "link_efficiency": 0.8, "host_cores": 2}
            data.setdefault("groups", {})["host"] = [list(range(ranks))]
        (tmp_path / name).write_text(json.dumps(data))
        return str(tmp_path / name)

    plain = model("plain.json", 4, cost=False)
    assert f"--model {plain}: has no cost model" in refused(*BENCH, "--model", plain)
    other = model("eight.json", 8, cost=True)
    assert f"--model {other}: a model of 8 ranks" in refused(*BENCH, "--model", other)
    code, _, err = cli(*BENCH, "--model", model("four.json", 4, cost=True))
    assert code == "started", err


def test_testbed_refuses_max_rate_zero_instead_of_shaping_at_400(no_ranks):
    assert "--max-rate 0: give" in refused("testbed", "show", "ring:4", "--max-rate", "0")
    code, out, _ = cli("testbed", "show", "ring:4", "--max-rate", "100", "--json")
    assert code == 0 and json.loads(out)["scale"] < 1  # a rate given is the rate used


def test_a_valid_bench_reaches_its_ranks_with_what_was_asked(no_ranks):
    code, _, err = cli(*BENCH, "--sizes", "64KB", "--strategies", "ring,auto", "--reps", "2",
                       "--warmup", "0", "--timeout", "30")
    assert code == "started", err
    code, _, err = cli("bench", "switch:4", "allreduce", "--max-rate", "123", "--baselines",
                       "", "--strategies", "ring", "--testbed", "netns")
    if code == 2:  # not root, or no ip/tc: said, and nothing else
        assert "--testbed netns" in err
    else:
        assert code == "started", err


def test_run_says_which_channels_it_used_instead_of_the_ones_asked(no_ranks):
    code, _, err = cli(*RUN, "--option", "channels=100000", "--sizes", "1KB")
    assert code == "started"
    note, = err.strip().splitlines()
    assert note.startswith("ccweave: note: --option channels=100000")
    assert "ring(channels=1, chunks=1) with 1 channel(s)" in note
    code, _, err = cli("run", "ring:4", "allreduce", "--option", "channels=2", "--sizes", "1KB")
    assert code == "started" and err == ""  # two rings asked, two found: nothing to say


@pytest.fixture
def mpi4py_hidden(tmp_path, monkeypatch):
    """The ranks' Python cannot import mpi4py (a module of that name that refuses)."""
    (tmp_path / "mpi4py.py").write_text("raise ImportError('hidden by the test')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))


def test_a_named_mpi_baseline_without_mpi4py_is_refused_before_measuring(
        no_ranks, mpi4py_hidden):
    if shutil.which("mpirun") is None:
        pytest.skip("needs mpirun on PATH (the probe checks it first)")
    line = refused("bench", "switch:4", "allreduce", "--testbed", "none", "--baselines",
                   "gloo,mpi")
    assert "cannot import mpi4py (ImportError: hidden by the test)" in line
    assert line.endswith("drop it with --baselines gloo")
    line = refused(*RUN, "--backend", "mpi", "--sizes", "1KB")
    assert "--backend mpi: the ranks' Python" in line and "mpi4py" in line


def test_the_default_baselines_leave_out_mpi_without_mpi4py_and_say_so(
        no_ranks, mpi4py_hidden):
    code, _, err = cli("bench", "switch:4", "allreduce", "--testbed", "none")
    assert code == "started"
    note, = err.strip().splitlines()
    assert note.startswith("ccweave: note: mpi baseline left out: ")
    assert "mpi4py" in note and "--baselines gloo" in note


def test_without_mpirun_the_mpi_baseline_is_refused_naming_it(no_ranks, monkeypatch,
                                                              tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # python is found by its full path
    line = refused("bench", "switch:4", "allreduce", "--testbed", "none", "--baselines",
                   "mpi")
    assert "mpirun is not on PATH" in line and "--baselines ''" in line


# ------------------------------------------------------------ a job that fails


def _threads_then_failing_mpi(self, module, argv, backend, timeout, on_line=None):
    """``Site.run`` for the test: the gloo job's cases run for real on in-process ranks
    (threads); the MPI job fails as on the testbed, its rank's error among mpirun's
    output and mpirun's report last."""
    from ccweave.runtime import batch
    from ccweave.runtime.transport.local import run_threads

    cases_path, out_path = argv[0], argv[1]
    if backend == "mpi":
        for line in ("PROGRESS 1/1 MPI_Allreduce 64KB", "Traceback (most recent call last):",
                     '  File "batch.py", line 218, in main',
                     "ModuleNotFoundError: No module named 'mpi4py.MPI'"):
            on_line(line)
        raise RuntimeFault("mpirun on the testbed ended with code 1:\n" + "\n".join(
            ["-" * 20, "Primary job  terminated normally, but 1 process returned",
             "a non-zero exit code.", "-" * 20, "Process name: [[13144,1],3]",
             "Exit code:    1", "-" * 20]))
    cases = list(batch.iter_cases(cases_path))
    rows = run_threads(self.topology.num_ranks,
                       lambda transport: batch.run_cases(cases, transport))[0]
    Path(out_path).write_text(json.dumps(rows))
    Path(f"{out_path}.rss").write_text(json.dumps([1.0] * self.topology.num_ranks))


@pytest.mark.parametrize("as_json", [False, True])
def test_a_failed_job_keeps_what_the_others_measured_and_names_its_rank_error(
        monkeypatch, as_json):
    from ccweave.bench import jobs

    monkeypatch.setattr(jobs.Site, "run", _threads_then_failing_mpi)
    monkeypatch.setattr("ccweave.runtime.prerequisites.mpi_missing", lambda env=None: None)
    code, out, err = cli("bench", "switch:3", "allreduce", "--testbed", "none", "--sizes",
                         "64KB", "--strategies", "ring,direct", "--baselines", "mpi",
                         "--no-calibrate", "--reps", "1", *(["--json"] if as_json else []))
    assert code == 2
    error, = err.strip().splitlines()  # one line, after everything measured is printed
    assert error == ("ccweave: error: the mpi job failed (mpirun on the testbed ended with "
                     "code 1); what the others measured is above")
    if as_json:
        report = json.loads(out)
        assert sorted(row["algorithm"] for row in report["rows"]) == ["direct", "ring"]
        assert all(row["wrong"] == 0 and row["measured_s"] > 0 for row in report["rows"])
        failed, = report["failed"]
        assert failed["job"] == "mpi"
        assert failed["last_lines"] == ["ModuleNotFoundError: No module named 'mpi4py.MPI'"]
        return
    lines = out.splitlines()
    assert any(line.startswith("│ ring ") for line in lines)
    assert any(line.startswith("│ direct ") for line in lines)
    at = lines.index("the mpi job failed: mpirun on the testbed ended with code 1")
    assert lines[at + 1] == "  ModuleNotFoundError: No module named 'mpi4py.MPI'"


def test_a_gloo_rank_that_died_is_shown_by_its_own_last_lines():
    from ccweave.bench.jobs import job_failure

    error = RuntimeFault("testbed rank 2 ended with code 1 (ranks [2] failed or were "
                         "stopped):\nTraceback (most recent call last):\nValueError: negative "
                         "count")
    failure = job_failure("gloo", error, ["rank 0 went on"])
    assert failure.error.startswith("testbed rank 2 ended with code 1")
    assert failure.lines == ("Traceback (most recent call last):", "ValueError: negative count")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MPI, reason="needs mpirun and mpi4py")
def test_a_bench_whose_mpi_job_fails_prints_the_gloo_rows(tmp_path):
    """End to end: Open MPI told to use a transport that does not exist fails at MPI_Init,
    after the gloo job measured."""
    done = subprocess.run(
        [sys.executable, "-m", "ccweave.cli", "bench", "switch:3", "allreduce", "--sizes",
         "64KB", "--strategies", "ring", "--baselines", "gloo,mpi", "--testbed", "none",
         "--no-calibrate", "--reps", "1", "--json"], capture_output=True, text=True,
        timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1", "OMPI_MCA_btl": "no_such_btl"})
    assert done.returncode == 2, done.stderr
    report = json.loads(done.stdout)
    assert sorted(row["algorithm"] for row in report["rows"]) == ["gloo all_reduce", "ring"]
    assert [failed["job"] for failed in report["failed"]] == ["mpi"]
    assert done.stderr.strip().splitlines()[-1].startswith("ccweave: error: the mpi job failed")
