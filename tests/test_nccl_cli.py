"""``ccweave tune`` and NCCL's row in ``ccweave compare``, end to end."""

from __future__ import annotations

import json

from ccweave.cli import main
from ccweave.nccl import tuner
from ccweave.nccl.model import nccl_model
from ccweave.topology import zoo
from tests.test_nccl_fit import NCCL_TESTS


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_tune_writes_the_model_s_rules(tmp_path, capsys):
    path = tmp_path / "nccl_tuner.conf"
    code, out, _ = run(capsys, "tune", "dgx-a100:2", "--nccl-tuner", "-o", str(path))
    lines = [x for x in path.read_text().splitlines() if not x.startswith("#")]
    expected = tuner.rules(nccl_model(zoo.get("dgx-a100:2")))
    assert code == 0 and lines == [rule.line() for rule in expected]
    assert "NCCL_TUNER_CONFIG_FILE=" in out and "ring" in out


def test_tune_fits_nccl_tests_output(tmp_path, capsys):
    sweep = tmp_path / "ar_ring_ll.txt"
    sweep.write_text(NCCL_TESTS)
    path = tmp_path / "fitted.conf"
    code, out, _ = run(capsys, "tune", "dgx-a100", "--nccl-tuner", "-o", str(path),
                       "--measured", str(sweep), "--json")
    report = json.loads(out)
    assert code == 0 and report["model"] == "NCCL's model fitted to 2 measurements"
    assert {(r["collective"], r["algorithm"], r["protocol"]) for r in report["rules"]} == {
        ("allreduce", "ring", "ll")}  # the one combination measured
    assert report["fit"][0]["measurements"] == 2


def test_tune_writes_the_graph_file_and_refuses_what_it_cannot(tmp_path, capsys):
    path = tmp_path / "graph.xml"
    code, _, _ = run(capsys, "tune", "cedar", "--nccl-graph", "-o", str(path))
    assert code == 0 and path.read_text().count("<channel>") == 12
    code, _, err = run(capsys, "tune", "cedar:2", "--nccl-graph", "-o", str(path))
    assert code == 2 and "intra-node only" in err and err.count("\n") == 1
    code, _, err = run(capsys, "tune", "ring:8", "--nccl-tuner", "-o", str(path))
    assert code == 2 and "--gpu" in err
    code, _, err = run(capsys, "tune", "dgx1", "--nccl-tuner", "-o", str(path),
                       "--measured", str(tmp_path / "missing.txt"))
    assert code == 2 and "missing.txt: no such file" in err


def test_compare_shows_what_nccl_runs_beside_the_schedules(capsys):
    code, out, _ = run(capsys, "compare", "dgx-a100", "allreduce", "--sizes", "64KB,1GB",
                       "--strategies", "ring", "--json")
    report = json.loads(out)
    nccl = {row["size_bytes"]: row for row in report["nccl"]}
    model = nccl_model(zoo.get("dgx-a100"))
    assert code == 0 and set(nccl) == {2**16, 2**30}
    for size, row in nccl.items():
        choice = model.choose("allreduce", size)
        assert (row["algorithm"], row["protocol"], row["channels"]) == (
            choice.algorithm, choice.protocol, choice.channels)
        assert row["time_s"] == choice.time_s and row["ratio_to_bound"] >= 1
    assert all(row["strategy"] != "nccl" for row in report["results"])
    code, out, _ = run(capsys, "compare", "dgx-a100", "allreduce", "--sizes", "1GB",
                       "--strategies", "ring")
    assert code == 0 and "nccl ring/simple x24" in out
    code, out, _ = run(capsys, "compare", "switch:4", "allgather", "--sizes", "1MB",
                       "--json")
    refused = {r["strategy"]: r["reason"] for r in json.loads(out)["refused"]}
    assert "--gpu" in refused["nccl"]


def test_a_graph_dump_of_another_machine_is_refused(tmp_path, capsys):
    """A dump naming GPU rank 700 on an 8-GPU machine was taken as this machine's."""
    dump = tmp_path / "graphs.xml"
    assert run(capsys, "tune", "dgx-a100", "--nccl-graph", "-o", str(dump))[0] == 0
    dump.write_text(dump.read_text().replace('rank="7"', 'rank="700"', 1))
    code, _, err = run(capsys, "compare", "dgx-a100", "allreduce", "--sizes", "1MB",
                       "--strategies", "ring", "--nccl-graphs", str(dump))
    assert code == 2 and err.count("\n") == 1
    assert "names GPU rank 700, but the machine has ranks 0..7" in err
