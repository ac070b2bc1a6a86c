"""``ccweave export`` and ``ccweave import`` end to end; verify and simulate read XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ccweave import plan as plan_io
from ccweave.cli import main
from ccweave.export import check_xml
from ccweave.plan import Plan, PlanEntry
from ccweave.synth import synthesize
from ccweave.topology import zoo

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "msccl"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_synth_export_import_verify_simulate(tmp_path, capsys):
    sched, xml, back = tmp_path / "ring.json", tmp_path / "ring.xml", tmp_path / "back.json"
    assert run(capsys, "synth", "switch:8", "allreduce", "--strategy", "ring",
               "-o", str(sched))[0] == 0
    code, out, _ = run(capsys, "export", str(sched), "-o", str(xml), "--proto", "LL128",
                       "--instances", "2")
    assert code == 0 and "wrote" in out and "rrs" in out
    root = ET.parse(xml).getroot()
    assert (root.get("proto"), root.get("nchannels"), root.get("coll")) == \
        ("LL128", "2", "allreduce")
    assert check_xml(ET.parse(xml), "msccl") == []
    code, out, _ = run(capsys, "import", str(xml), "-o", str(back))
    assert code == 0 and "proven" in out and back.exists()
    code, out, _ = run(capsys, "verify", str(xml))
    assert code == 0 and "proven" in out
    code, out, _ = run(capsys, "simulate", str(xml), "switch:8", "--sizes", "1MB", "--json")
    assert code == 0 and json.loads(out)[0]["time_s"] > 0


def test_export_json_reports_the_file(tmp_path, capsys):
    sched = tmp_path / "ag.json"
    run(capsys, "synth", "switch:4", "allgather", "--strategy", "direct", "-o", str(sched))
    code, out, _ = run(capsys, "export", str(sched), "-o", str(tmp_path / "ag.xml"),
                       "--runtime", "azure", "--max-bytes", "1MB", "--json")
    row = json.loads(out)["files"][0]
    assert code == 0 and row["maxBytes"] == str(2**20 - 1) and row["threadblocks"] >= 1


def test_a_plan_exports_to_a_directory_with_the_config(tmp_path, capsys):
    topo = zoo.get("switch:4")
    plan = Plan((PlanEntry(0, 2**20, synthesize(topo, "allreduce", "direct")),
                 PlanEntry(2**20, None, synthesize(topo, "allreduce", "ring"))), "auto")
    path = tmp_path / "plan.json"
    plan_io.save(plan, path)
    out_dir = tmp_path / "algos"
    code, out, _ = run(capsys, "export", str(path), "-o", str(out_dir))
    assert code == 0 and "MSCCL_CONFIG=" in out
    assert sorted(p.name for p in out_dir.iterdir()) == ["auto_0.xml", "auto_1.xml",
                                                          "msccl_config.xml"]
    code, _, err = run(capsys, "export", str(path), "-o", str(tmp_path / "one.xml"))
    assert code == 2 and "give -o DIR" in err


def test_export_refuses_an_unproven_schedule(tmp_path, capsys):
    sched = tmp_path / "ag.json"
    run(capsys, "synth", "switch:4", "allgather", "--strategy", "direct", "-o", str(sched))
    data = json.loads(sched.read_text())
    del data["transfers"][-1]
    sched.write_text(json.dumps(data))
    code, _, err = run(capsys, "export", str(sched), "-o", str(tmp_path / "x.xml"))
    assert code == 2 and "not proven" in err and "--unverified" in err
    code, _, _ = run(capsys, "export", str(sched), "-o", str(tmp_path / "x.xml"),
                     "--unverified")
    assert code == 0


def test_import_of_bad_xml_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.xml"
    bad.write_text('<algo name="x" proto="Simple" nchannels="1" nchunksperloop="2" '
                   'ngpus="2" coll="allgather" inplace="0"><gpu id="0" i_chunks="1" '
                   'o_chunks="2"/></algo>')
    code, _, err = run(capsys, "import", str(bad), "-o", str(tmp_path / "x.json"))
    assert code == 2 and err.count("\n") == 1
    assert "gpu 0 attribute 's_chunks': is missing" in err


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="no MSCCL fixtures")
def test_import_of_a_wrong_algorithm_writes_it_and_exits_1(tmp_path, capsys):
    code, out, _ = run(capsys, "import", str(FIXTURES / "allreduce_pcie_hier_4.xml"),
                       "-o", str(tmp_path / "x.json"), "--json")
    report = json.loads(out)
    assert code == 1 and not report["verified"] and report["runtime_problems"]
    assert (tmp_path / "x.json").exists()


def test_export_says_which_pinned_routes_msccl_cannot_keep(tmp_path, capsys):
    sched, xml = tmp_path / "p2p.json", tmp_path / "p2p.xml"
    assert run(capsys, "synth", "mist", "sendrecv", "--strategy", "multipath",
               "-o", str(sched))[0] == 0
    code, out, _ = run(capsys, "export", str(sched), "-o", str(xml), "--json")
    notes = json.loads(out)["notes"]
    assert code == 0 and len(notes) == 1 and "through cpu0" in notes[0]
    ring = tmp_path / "ring.json"
    assert run(capsys, "synth", "switch:4", "allgather", "--strategy", "ring",
               "-o", str(ring))[0] == 0
    code, out, _ = run(capsys, "export", str(ring), "-o", str(tmp_path / "r.xml"), "--json")
    assert code == 0 and json.loads(out)["notes"] == []


def test_a_plan_folder_whose_path_xml_cannot_hold_is_refused_before_it_is_made(tmp_path,
                                                                                capsys):
    """msccl_config.xml names every algorithm by its full path: an escape character in it
    made XML no parser reads (an ElementTree ParseError traceback after the files were
    written)."""
    sched = tmp_path / "s.json"
    assert main(["synth", "switch:4", "allreduce", "-o", str(sched)]) == 0
    folder = tmp_path / "o\x1b[31mut"
    assert main(["export", str(sched), "-o", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "a character XML cannot carry" in err and "\\x1b" in err and err.count("\n") == 1
    assert not folder.exists()
