"""Joining jobs and judging them: launcher environments parsed, backends refused where
they cannot work, and the launcher's verdict on how ranks ended."""

from __future__ import annotations

import re
import signal

import pytest

pytest.importorskip("torch")

from ccweave.errors import InputError, RuntimeFault
from ccweave.runtime.job import HOSTED_STORE, JobEnv, check_backend, detect
from ccweave.runtime.launch import WRONG_EXIT, Outcome, _verdict, mpirun_command


def test_detect_reads_torchrun_mpirun_and_ccweave_environments():
    assert detect({}) is None
    torchrun = detect({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "h",
                       "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x",
                       "TORCHELASTIC_USE_AGENT_STORE": "True"})
    assert torchrun == JobEnv("torchrun", 3, 8, 1, "h", 29500, True)
    mpirun = detect({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
                     "OMPI_COMM_WORLD_LOCAL_RANK": "2"})
    assert (mpirun.launcher, mpirun.rank, mpirun.world_size) == ("mpirun", 2, 4)
    ours = detect({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1", HOSTED_STORE: "1"})
    assert (ours.launcher, ours.hosted_store) == ("ccweave", True)
    plain = detect({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"})
    assert (plain.launcher, plain.hosted_store) == ("env", False)


def test_backends_are_refused_where_they_cannot_work():
    with pytest.raises(InputError, match="choose one of"):
        check_backend("ucx", None)
    with pytest.raises(InputError, match="needs mpirun"):
        check_backend("mpi", JobEnv("torchrun", 0, 2, 0, "h", 1))
    with pytest.raises(InputError, match="needs MASTER_ADDR"):
        check_backend("gloo", JobEnv("mpirun", 0, 2, 0))
    check_backend("gloo", None)


def test_verdict_names_the_rank_that_died_and_those_that_reported():
    assert _verdict([Outcome(0, 0), Outcome(1, 0)]) == 0
    assert _verdict([Outcome(0, 0), Outcome(1, WRONG_EXIT)]) == 1
    with pytest.raises(RuntimeFault, match=r"rank 2 was killed by SIGKILL; rank\(s\) 0, 1 "
                                           r"stopped with the errors above"):
        _verdict([Outcome(0, 2), Outcome(1, 2), Outcome(2, -signal.SIGKILL)])
    with pytest.raises(RuntimeFault, match=r"rank 1 exited with code 1"):
        _verdict([Outcome(0, 2), Outcome(1, 1)])
    with pytest.raises(RuntimeFault, match=r"the launcher stopped rank\(s\) 1: they did not "
                                           r"stop within 10 s of the first failure"):
        _verdict([Outcome(0, 2), Outcome(1, -signal.SIGTERM)], hung=[1],
                 why="they did not stop within 10 s of the first failure")
    with pytest.raises(RuntimeFault, match=r"rank\(s\) 0, 1 failed"):
        _verdict([Outcome(0, 2), Outcome(1, 2)])


def test_mpirun_command_runs_ranks_as_root_only_when_root(monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 0)
    command = mpirun_command(4, ["run", "x"])
    assert "--allow-run-as-root" in command and "--oversubscribe" in command
    assert command[command.index("-np") + 1] == "4"
    assert command[-3:] == ["ccweave.cli", "run", "x"]
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert "--allow-run-as-root" not in mpirun_command(4, ["run"])


@pytest.mark.parametrize(("environ", "message"), [
    ({"RANK": "x", "WORLD_SIZE": "4"}, "RANK='x' (from env) is not a whole number"),
    ({"OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_SIZE is not set"),
    ({"RANK": "4", "WORLD_SIZE": "4"}, "RANK=4 is not a rank of the 4 WORLD_SIZE gives"),
    ({"RANK": "1"}, "RANK='1' is set but WORLD_SIZE is not"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE='2' is set but RANK is not"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "a job has at least one rank"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "99999"}, "is not a TCP port"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, "LOCAL_RANK='-1'"),
])
def test_bad_launcher_environments_are_named(environ, message):
    with pytest.raises(InputError, match=re.escape(message)):
        detect(environ)


@pytest.mark.parametrize("variables", [{"RANK": "x", "WORLD_SIZE": "4"},
                                       {"OMPI_COMM_WORLD_RANK": "0"},
                                       {"RANK": "4", "WORLD_SIZE": "4", "MASTER_PORT": "9"},
                                       {"RANK": "1"}])
def test_bad_launcher_environments_are_one_line_from_the_cli(capsys, monkeypatch, variables):
    from ccweave.cli import main

    for key in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        monkeypatch.delenv(key, raising=False)
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    assert main(["run", "switch:4", "allreduce"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ccweave: error:") and err.count("\n") == 1
