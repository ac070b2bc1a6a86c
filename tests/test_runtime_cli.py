"""``ccweave run`` end to end: nccl-tests rows as JSON over gloo and as a table over MPI."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")


def ccweave(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ccweave.cli", *args], capture_output=True,
                          text=True, timeout=600)


def test_run_prints_nccl_tests_rows_as_json():
    result = ccweave("run", "switch:4", "allreduce", "--sizes", "1KB,64KB", "--iters", "2",
                     "--warmup", "1", "--dtype", "bfloat16", "--op", "max", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["collective"], report["ranks"], report["backend"]) == ("allreduce", 4, "gloo")
    rows = report["rows"]
    assert [row["size_bytes"] for row in rows] == [1024, 65536]
    assert [row["count"] for row in rows] == [512, 32768]
    for row in rows:
        assert (row["type"], row["redop"], row["root"]) == ("bfloat16", "max", -1)
        for mode in (row["out_of_place"], row["in_place"]):
            assert mode["wrong"] == 0 and mode["time_us"] > 0
            assert mode["busbw_GBps"] == pytest.approx(mode["algbw_GBps"] * 1.5)


@pytest.mark.skipif(shutil.which("mpirun") is None
                    or importlib.util.find_spec("mpi4py") is None, reason="needs mpirun")
def test_run_under_mpirun_prints_a_table():
    result = ccweave("run", "switch:4", "reducescatter", "--strategy", "direct", "--backend",
                     "mpi", "--sizes", "4KB", "--iters", "2", "--dtype", "int64")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for column in ("size", "count", "type", "redop", "root", "algbw(GB/s)", "busbw(GB/s)",
                   "#wrong"):
        assert column in out
    assert any(f"time({unit})" in out for unit in ("us", "ms", "s"))  # one unit per table
    assert "4KB" in out and "int64" in out and "sum" in out
    assert "# Wrong elements       : 0 (OK)" in out


def test_run_auto_runs_the_fastest_schedule_per_size():
    """mist: a small allreduce goes direct, a large one through the pipelined hierarchy."""
    result = ccweave("run", "mist", "allreduce", "--strategy", "auto", "--sizes", "1KB,4MB",
                     "--iters", "2", "--warmup", "1", "--modes", "out", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["plan"] == "auto(mist, allreduce)" and report["wrong"] == 0
    assert [row["size_bytes"] for row in report["rows"]] == [1024, 4 * 2**20]


@pytest.mark.parametrize(("ports", "says"), [
    ("70000-70010", "CCWEAVE_DATA_PORTS='70000-70010' is not a port range"),
    ("5000-3000", "is not a port range"),
    ("29731", "holds 1 port(s), but the 2 ranks on this host listen on one each")])
def test_a_data_port_range_the_ranks_would_refuse_is_refused_before_they_start(
        monkeypatch, capsys, ports, says):
    """Each rank refused ``CCWEAVE_DATA_PORTS=x`` once started (or found no free port of
    one), then the launcher said they failed: three error lines for one variable."""
    from ccweave.cli import main

    monkeypatch.setenv("CCWEAVE_DATA_PORTS", ports)
    code = main(["run", "switch:2", "allreduce", "--sizes", "4KB", "--iters", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("ccweave: error:") == 1 and err.count("\n") == 1
    assert says in err
