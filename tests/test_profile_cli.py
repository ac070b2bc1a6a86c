"""``ccweave profile`` end to end on local gloo ranks: a topology synth takes, the raw
measurements reused with --load and --base, bad use as one line."""

from __future__ import annotations

import json

import pytest

from ccweave.cli import main
from ccweave.profile import cuda
from ccweave.topology import io as topology_io

pytest.importorskip("torch")


def test_profile_two_local_ranks_writes_a_topology(tmp_path, capsys):
    out, raw = tmp_path / "topo.json", tmp_path / "raw.json"
    code = main(["profile", "--nproc", "2", "--sizes", "64KB:2MB", "--iters", "2",
                 "--warmup", "1", "-o", str(out), "--raw", str(raw), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["output"] == str(out)
    pair = report["profile"]["pairs"][0]
    assert (pair["a"], pair["b"]) == (0, 1) and len(pair["sizes"]) == 6
    assert pair["fit"]["bw_GBps"] > 0 and "r2" in pair["fit"]
    topo = topology_io.load(out)
    assert topo.num_ranks == 2 and topo.route_bandwidth(0, 1) > 0
    if cuda.unavailable_reason():
        assert any("CUDA copy paths skipped" in n for n in report["profile"]["notes"])

    code = main(["synth", str(out), "allgather", "--strategy", "ring", "-o",
                 str(tmp_path / "ag.json")])
    assert code == 0 and "verified" in capsys.readouterr().out

    onto = tmp_path / "onto.json"
    code = main(["profile", "--load", str(raw), "--base", "switch:2", "-o", str(onto)])
    text = capsys.readouterr().out
    assert code == 0 and "R^2" in text and "figures onto switch:2" in text
    based = topology_io.load(onto)
    assert "switch" in based.fabric
    assert based.route_bandwidth(0, 1) == pytest.approx(pair["fit"]["bw_GBps"] * 1e9)


def test_profile_needs_ranks(capsys):
    assert main(["profile"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--nproc N" in err
    assert main(["profile", "--nproc", "1"]) == 2
    assert "at least 2 ranks" in capsys.readouterr().err
    assert main(["profile", "--nproc", "2", "--sizes", "big"]) == 2
    assert "size 'big'" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--timeout", "1e300", "at most 604800"), ("--timeout", "nan", "positive number"),
    ("--iters", "0", "from 1 to"), ("--iters", "10000001", "from 1 to"),
    ("--warmup", "-1", "from 0 to")])
def test_profile_refuses_what_run_refuses_before_any_rank_starts(capsys, flag, value, says):
    """The same checks as ``run``'s (a timeout of 1e300 overflowed in every rank)."""
    assert main(["profile", "--nproc", "2", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err and says in err


@pytest.mark.skipif(cuda.unavailable_reason() is None, reason="a GPU is here")
def test_cuda_copies_say_why_they_are_skipped():
    assert "no CUDA GPU" in cuda.unavailable_reason()


@pytest.mark.skipif(cuda.unavailable_reason() is not None,
                    reason="no CUDA GPU here: the copy paths are untested on this machine")
def test_cuda_copy_paths_on_a_gpu():
    from ccweave.profile.fit import fit

    sizes = [2**k for k in range(16, 27)]
    times = cuda.measure_copies(0, sizes, iters=3, warmup=1, peers=cuda.peers_of(0))
    assert {"h2d", "d2h", "d2d"} <= set(times)
    for name, series in times.items():
        result = fit(sizes, series)
        assert result.bandwidth > 1e9 and result.r2 > 0.9, name


RAW = {"format": "ccweave-profile/1", "world_size": 2, "backend": "gloo", "nodes": [[0, 1]],
       "pairs": [{"a": 0, "b": 1, "sizes": [1024, 1048576], "times_s": [2e-5, 1.2e-3],
                  "fit": {"alpha_us": 18.8, "bw_GBps": 0.88, "r2": 1.0, "points": 2}}],
       "copies": [], "notes": [], "workloads": []}


@pytest.mark.parametrize(("text", "says"), [
    (json.dumps(RAW).replace('"world_size": 2', '"world_size": 1e400'), "malformed profile"),
    (json.dumps(RAW).replace('"world_size": 2', '"world_size": ' + "9" * 5000),
     "too long to read"),
    (json.dumps(RAW).replace("0.0012", "NaN"), "is NaN"),
    (json.dumps(RAW).replace("0.0012", "-1"), "times_s is -1.0"),
    (json.dumps(RAW).replace('"b": 1', '"b": 7'), "rank is 7"),
    (json.dumps(RAW).replace('"bw_GBps": 0.88', '"bw_GBps": 0'), "fit is"),
    ('{"format": "ccweave-profile/1", "pairs": ' + "[" * 100_000, "nested too deep"),
    (b"\xff\xfe\x00garbage", "not UTF-8 text"),
])
def test_a_raw_profile_no_measurement_makes_is_one_line(tmp_path, capsys, text, says):
    """``profile --load`` read NaN, negative times and ranks outside the world as measured,
    and a world size of 1e400, 5000 digits, deep nesting, a folder or bytes that are not
    text were tracebacks."""
    raw = tmp_path / "raw.json"
    raw.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "t.json"
    assert main(["profile", "--load", str(raw), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and str(raw) in err and not out.exists()
    raw.unlink()
    raw.mkdir()
    assert main(["profile", "--load", str(raw), "-o", str(out)]) == 2
    assert "is a directory" in capsys.readouterr().err
