"""``ccweave export --format mscclpp`` and ``ccweave import``/``verify``/``simulate`` on
MSCCL++ execution plans, end to end."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from ccweave import plan as plan_io
from ccweave import schedule as schedule_io
from ccweave.cli import main
from ccweave.plan import Plan, PlanEntry
from ccweave.synth import synthesize
from ccweave.topology import zoo

PLANS = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "mscclpp" / "plans"
needs_plans = pytest.mark.skipif(not PLANS.is_dir(), reason=f"{PLANS} is missing (the MSCCL++ "
                                 "fixtures live in ../shared)")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_export_import_verify_simulate(tmp_path, capsys):
    sched = tmp_path / "ring.json"
    assert run(capsys, "synth", "switch:4", "allreduce", "--strategy", "ring",
               "-o", str(sched))[0] == 0
    code, out, _ = run(capsys, "export", str(sched), "--format", "mscclpp", "-o",
                       str(tmp_path / "plans"))
    assert code == 0, out
    [path] = list((tmp_path / "plans").glob("*.json"))
    assert "allreduce on 4 gpus, Simple, in place" in out and "read back: proven" in out
    assert "multiples of 64 bytes" in out  # 16 x 4 chunks: checkMessageSize
    plan = json.loads(path.read_text())
    assert (plan["collective"], plan["min_message_size"], plan["max_message_size"]) == \
        ("allreduce", 0, 2**32 - 1)
    code, out, _ = run(capsys, "import", str(path), "-o", str(tmp_path / "back.json"))
    assert code == 0 and "proven" in out
    assert schedule_io.load(tmp_path / "back.json").metadata["format"] == "mscclpp"
    assert run(capsys, "verify", str(path))[0] == 0
    code, out, _ = run(capsys, "simulate", str(path), "switch:4", "--sizes", "1MB", "--json")
    assert code == 0 and json.loads(out)[0]["verified"]


def test_a_plan_of_size_ranges_is_one_execution_plan_per_range(tmp_path, capsys):
    """min/max_message_size are the loader's inclusive bounds of each range; the small
    range goes LL (it pays there), the open one Simple."""
    topo = zoo.get("switch:4")
    ring = synthesize(topo, "allreduce", "ring")
    plan = Plan((PlanEntry(0, 65536, ring), PlanEntry(65536, None, ring)), "ar")
    plan_io.save(plan, tmp_path / "plan.json")
    code, out, _ = run(capsys, "export", str(tmp_path / "plan.json"), "--format", "mscclpp",
                       "-o", str(tmp_path / "out"), "--json")
    assert code == 0
    files = [json.loads(Path(f["file"]).read_text()) for f in json.loads(out)["files"]]
    assert [(p["min_message_size"], p["max_message_size"], p["protocol"]) for p in files] == \
        [(0, 65535, "LL"), (65536, 2**32 - 1, "Simple")]


def test_one_file_and_the_flags(tmp_path, capsys):
    sched = tmp_path / "ag.json"
    schedule_io.save(synthesize(zoo.get("switch:4"), "allgather", "ring"), sched)
    code, out, _ = run(capsys, "export", str(sched), "--format", "mscclpp", "-o",
                       str(tmp_path / "ag.plan.json"), "--proto", "LL", "--max-bytes", "1MB")
    assert code == 0 and "LL, out of place" in out
    plan = json.loads((tmp_path / "ag.plan.json").read_text())
    assert (plan["protocol"], plan["inplace"], plan["max_message_size"]) == \
        ("LL", False, 2**20 - 1)


@pytest.mark.parametrize(("argv", "message"), [
    (["--proto", "LL128"], "--proto LL128: MSCCL\\+\\+ plans are Simple or LL"),
    (["--instances", "2"], "--instances is for MSCCL XML"),
    (["--in-place"], "not proven in place"),
])
def test_refusals_name_the_flag(tmp_path, capsys, argv, message):
    sched = tmp_path / "a2a.json"
    schedule_io.save(synthesize(zoo.get("switch:4"), "alltoall", "ring"), sched)
    code, _, err = run(capsys, "export", str(sched), "--format", "mscclpp", "-o",
                       str(tmp_path / "out"), *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert re.search(message, err), err


def test_a_schedule_without_its_machine_needs_topology(tmp_path, capsys):
    sched = synthesize(zoo.get("switch:4"), "allgather", "ring")
    path = tmp_path / "s.json"
    schedule_io.save(replace(sched, name="s", metadata={}), path)
    code, _, err = run(capsys, "export", str(path), "--format", "mscclpp", "-o",
                       str(tmp_path / "out"))
    assert code == 2 and "give --topology" in err
    code, out, _ = run(capsys, "export", str(path), "--format", "mscclpp", "-o",
                       str(tmp_path / "out"), "--topology", "switch:4")
    assert code == 0 and "read back: proven" in out


@needs_plans
def test_import_says_proven_not_proven_or_refused(tmp_path, capsys):
    code, out, _ = run(capsys, "import", str(PLANS / "transfer_pack.json"), "-o",
                       str(tmp_path / "a.json"))
    assert code == 0 and "allgather on 2 ranks" in out and "proven" in out
    code, out, _ = run(capsys, "import", str(PLANS / "reduce_tbg.json"), "-o",
                       str(tmp_path / "b.json"))
    assert code == 1 and "NOT proven" in out and "(group part 2 of 2)" in out
    code, _, err = run(capsys, "import", str(PLANS / "allreduce_pipeline.json"), "-o",
                       str(tmp_path / "c.json"))
    assert code == 2 and "'buffer_type'" in err
