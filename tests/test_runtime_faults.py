"""Faults under ``ccweave run``: a rank killed mid-run is named by every survivor within
seconds, Ctrl-C and a killed launcher leave no process behind, a world size that does
not fit or a schedule that fails verification is refused before any communication."""

from __future__ import annotations

import importlib.util
import ipaddress
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
from dataclasses import replace

import pytest

pytest.importorskip("torch")

from ccweave import schedule as schedule_io
from ccweave.cli import main
from ccweave.collectives import Kind
from ccweave.runtime.batch import classic_schedules
from ccweave.topology.io import load

needs_mpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None,
    reason="needs mpirun and mpi4py")
BOUND_S = 20.0
"""Survivors must report within this many seconds of the kill (they take about 2)."""


class Job:
    """``ccweave run`` in the background, its ranks found through a marker in their env."""

    def __init__(self, backend: str, *extra: str, env: dict[str, str] | None = None) -> None:
        self.mark = uuid.uuid4().hex
        env = dict(os.environ, CCWEAVE_TEST_MARK=self.mark, **(env or {}))
        command = [sys.executable, "-m", "ccweave.cli", "run", "switch:4", "allreduce",
                   "--sizes", "4MB", "--iters", "1000000", "--warmup", "0", "--modes", "out",
                   "--no-check", "--backend", backend, "--progress", *extra]
        self.proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.running = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stderr:  # type: ignore[union-attr]
            self.lines.append(line)
            if "check and time" in line:
                self.running.set()

    def wait_running(self) -> None:
        deadline = time.monotonic() + 180
        while not self.running.wait(0.5):
            assert self.proc.poll() is None, "".join(self.lines)
            assert time.monotonic() < deadline, "".join(self.lines)
        time.sleep(1.0)

    def processes(self) -> dict[int, str | None]:
        """pid -> rank of every live process carrying this job's marker."""
        found = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as handle:
                    pairs = handle.read().split(b"\0")
                with open(f"/proc/{pid}/stat") as handle:
                    if handle.read().split(")")[-1].split()[0] == "Z":
                        continue  # a zombie is already dead
            except OSError:
                continue
            env = dict(p.split(b"=", 1) for p in pairs if b"=" in p)
            if env.get(b"CCWEAVE_TEST_MARK") == self.mark.encode():
                rank = env.get(b"OMPI_COMM_WORLD_RANK") or env.get(b"RANK")
                found[int(pid)] = rank.decode() if rank else None
        return found

    def rank_pid(self, rank: int) -> int:
        return next(pid for pid, r in self.processes().items() if r == str(rank))

    def finish(self, timeout: float = 60.0) -> tuple[int, str]:
        code = self.proc.wait(timeout)
        time.sleep(0.2)
        return code, "".join(self.lines)

    def assert_nothing_left(self) -> None:
        deadline = time.monotonic() + 10
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = self.processes()
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"orphans: {left}"


def test_a_killed_gloo_rank_is_named_by_every_survivor():
    job = Job("gloo", "--timeout", "60")
    job.wait_running()
    os.kill(job.rank_pid(2), signal.SIGKILL)
    killed = time.monotonic()
    code, err = job.finish()
    assert code == 2
    assert time.monotonic() - killed < BOUND_S
    for rank in (0, 1, 3):
        prefix = f"ccweave: error: rank {rank}:"
        lines = [line for line in err.splitlines() if line.startswith(prefix)]
        assert lines and "rank 2 died" in lines[0], err
    assert "rank 2 was killed by SIGKILL; rank(s) 0, 1, 3 stopped with the errors above" in err
    job.assert_nothing_left()


@needs_mpi
def test_a_killed_mpi_rank_is_named_and_the_job_stopped():
    job = Job("mpi")
    job.wait_running()
    os.kill(job.rank_pid(2), signal.SIGKILL)
    killed = time.monotonic()
    code, err = job.finish()
    assert code == 2
    assert time.monotonic() - killed < BOUND_S
    assert "ccweave: error: rank 2 died (mpirun's report above)" in err
    assert "stopped (SIGTERM) by mpirun" in err
    job.assert_nothing_left()


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs /proc")
def test_a_local_job_listens_on_loopback_only_and_ctrl_c_exits_130():
    from tests.test_runtime_store import listening

    job = Job("gloo")
    job.wait_running()
    sockets = {pid: listening(pid) for pid in [job.proc.pid, *job.processes()]}
    assert sockets[job.proc.pid], "the launcher hosts the job's store"
    for pid, found in sockets.items():
        for address, port in found:
            ip = ipaddress.ip_address(address)
            assert (getattr(ip, "ipv4_mapped", None) or ip).is_loopback, \
                f"process {pid} listens on {address}:{port}"
    job.proc.send_signal(signal.SIGINT)
    code, err = job.finish()
    assert code == 130, err  # 128 + SIGINT, as a shell reports Ctrl-C; 2 is bad input
    assert "ccweave: interrupted (SIGINT); stopped all 4 ranks" in err
    job.assert_nothing_left()


def _run_folders() -> set[str]:
    return {name for name in os.listdir(tempfile.gettempdir())
            if name.startswith(("ccweave-run-", "ccweave-profile-"))}


@pytest.mark.parametrize("backend", ["gloo", pytest.param("mpi", marks=[needs_mpi,
                                                                          pytest.mark.slow])])
def test_a_killed_launcher_leaves_no_rank_and_no_file_behind(backend):
    before = _run_folders()
    job = Job(backend)
    job.wait_running()
    job.proc.kill()
    job.finish()
    job.assert_nothing_left()
    assert _run_folders() <= before  # the plan and report lived in the launcher's memory


NAMED_S = 15.0
"""A stopped rank is named within this many seconds after the ranks' timeout."""


@pytest.mark.parametrize("backend", ["gloo", pytest.param("mpi", marks=needs_mpi)])
def test_a_stopped_rank_is_named_with_its_collective_step_and_peers(backend):
    """Its progress record, frozen at the stop, names the collective, the step and the
    transfer it was waiting on; the others' records say they waited on it."""
    job = Job(backend, "--timeout", "3")
    job.wait_running()
    os.kill(job.rank_pid(2), signal.SIGSTOP)
    stopped = time.monotonic()
    code, err = job.finish(120)
    assert code == 2
    assert time.monotonic() - stopped < 3 + NAMED_S
    line = next(line for line in err.splitlines() if "made no progress" in line)
    assert line.startswith("ccweave: error: rank 2 (stopped: SIGSTOP or a debugger) made no "
                           "progress for "), err
    step = re.search(r"allreduce of 4\.0 MB, call \d+, (\d+) of \d+ ops done(, waiting on a )?",
                     line)
    assert step, line
    # a stop that lands between two calls finds the rank before its first op: nothing to
    # wait on yet, and the record says so (0 of N ops done, no peer)
    assert step.group(2) or step.group(1) == "0", line
    assert "waited on it" in line
    job.assert_nothing_left()


@needs_mpi
def test_an_mpi_rank_stopped_while_the_job_sets_up_is_named():
    """The others wait in MPI's own calls, which have no timeout (a stop landing there hung
    the job for minutes): the launcher sees no progress past the timeout and names it."""
    job = Job("mpi", "--timeout", "3")
    deadline = time.monotonic() + 180
    while "1" not in job.processes().values():
        assert time.monotonic() < deadline and job.proc.poll() is None
        time.sleep(0.01)
    os.kill(job.rank_pid(1), signal.SIGSTOP)
    code, err = job.finish(240)
    assert code == 2 and "Traceback" not in err
    assert "ccweave: error: rank(s) 1 (stopped: SIGSTOP or a debugger) never got as far as " \
        "the job's setup" in err or \
        "ccweave: error: rank 1 (stopped: SIGSTOP or a debugger) made no progress" in err, err
    job.assert_nothing_left()


@pytest.mark.slow
def test_a_rank_stopped_before_its_first_transfer_is_named():
    job = Job("gloo", "--timeout", "3")
    deadline = time.monotonic() + 180
    while "1" not in job.processes().values():
        assert time.monotonic() < deadline and job.proc.poll() is None
        time.sleep(0.01)
    os.kill(job.rank_pid(1), signal.SIGSTOP)  # before it joins: the others wait for it
    code, err = job.finish(180)
    assert code == 2 and "Traceback" not in err
    assert "rank(s) 1 never joined the job" in err or \
        "rank(s) 1 joined but did not finish setting up" in err, err
    assert "the launcher stopped rank(s) 1" in err
    job.assert_nothing_left()


def test_nproc_that_does_not_fit_is_refused_before_starting(capsys):
    assert main(["run", "switch:4", "allreduce", "--nproc", "3"]) == 2
    assert "--nproc 3 != the schedule's 4 ranks" in capsys.readouterr().err


def test_world_size_from_the_launcher_that_does_not_fit_is_refused(capsys, monkeypatch):
    # nothing listens on this port: connecting would hang, so refusing first is fast
    for key, value in {"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": "9", "TORCHELASTIC_RUN_ID": "x"}.items():
        monkeypatch.setenv(key, value)
    started = time.monotonic()
    assert main(["run", "switch:4", "allreduce"]) == 2
    assert time.monotonic() - started < 10
    assert "world size 3 (from torchrun) != the schedule's 4 ranks" in capsys.readouterr().err


def test_a_schedule_that_fails_verification_is_refused(tmp_path, capsys):
    good = classic_schedules(load("switch:4"), [Kind.ALLREDUCE])[0][1]
    bad = replace(good, transfers=good.transfers[:-1])
    path = tmp_path / "bad.json"
    schedule_io.save(bad, path)
    assert main(["run", "--schedule", str(path)]) == 2
    err = capsys.readouterr().err
    assert "ccweave: error:" in err and "output slot" in err


def test_mpi_backend_outside_mpirun_is_refused_when_joining_torchrun(capsys, monkeypatch):
    for key, value in {"RANK": "0", "WORLD_SIZE": "4", "MASTER_PORT": "9",
                       "TORCHELASTIC_RUN_ID": "x"}.items():
        monkeypatch.setenv(key, value)
    assert main(["run", "switch:4", "allreduce", "--backend", "mpi"]) == 2
    assert "--backend mpi needs mpirun" in capsys.readouterr().err


def test_unknown_dtype_and_op_are_refused_before_starting(capsys):
    assert main(["run", "switch:4", "allreduce", "--dtype", "float8"]) == 2
    assert "dtype 'float8'" in capsys.readouterr().err
    assert main(["run", "switch:4", "allreduce", "--op", "bxor"]) == 2
    assert "reduction 'bxor'" in capsys.readouterr().err


@pytest.mark.parametrize("timeout", ["nan", "inf", "0", "-1"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(capsys, timeout):
    assert main(["run", "switch:4", "allreduce", "--timeout", timeout]) == 2
    assert f"--timeout {float(timeout)}: give a positive number" in capsys.readouterr().err


def test_nccl_without_a_gpu_is_refused_before_any_rank_starts(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    started = time.monotonic()
    assert main(["run", "switch:4", "allreduce", "--backend", "nccl"]) == 2
    assert "--backend nccl needs CUDA GPUs" in capsys.readouterr().err
    assert time.monotonic() - started < 20  # no rank was started


def test_positional_arguments_must_agree_with_the_schedule(tmp_path, capsys):
    path = tmp_path / "ag4.json"
    assert main(["synth", "switch:4", "allgather", "-o", str(path)]) == 0
    capsys.readouterr()
    assert main(["run", "switch:4", "allreduce", "--schedule", str(path)]) == 2
    assert "'allreduce' disagrees with --schedule" in capsys.readouterr().err
    assert main(["run", "switch:8", "allgather", "--schedule", str(path)]) == 2
    assert "switch:8 has 8 ranks but --schedule" in capsys.readouterr().err


def test_a_schedule_that_fails_verification_names_the_file(tmp_path, capsys):
    good = classic_schedules(load("switch:4"), [Kind.ALLREDUCE])[0][1]
    path = tmp_path / "bad.json"
    schedule_io.save(replace(good, transfers=good.transfers[:-1]), path)
    assert main(["run", "--schedule", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ccweave: error: {path}: ") and "is not proven" in err


def test_sizes_that_cannot_fit_memory_are_refused_before_any_rank_starts(capsys):
    assert main(["run", "switch:4", "allreduce", "--sizes", "1TB"]) == 2
    err = capsys.readouterr().err
    assert "--sizes 1TB: 4 rank(s) on this host need about" in err and "available" in err
    assert main(["run", "ring:4096", "allgather", "--sizes", "1KB"]) == 2
    assert "ring:4096: 4096 rank(s) on this host need about" in capsys.readouterr().err


def test_a_closed_terminal_stops_the_job_and_leaves_nothing(tmp_path):
    """SIGHUP (the terminal or ssh session went away) killed the launcher by its default
    action: its folder of progress records stayed behind."""
    job = Job("gloo", env={"TMPDIR": str(tmp_path)})
    job.wait_running()
    job.proc.send_signal(signal.SIGHUP)
    code, err = job.finish()
    assert code == 129, err  # 128 + SIGHUP
    assert "ccweave: interrupted (SIGHUP); stopped all 4 ranks" in err
    job.assert_nothing_left()
    assert not list(tmp_path.iterdir())
