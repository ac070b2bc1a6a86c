"""``ccweave lint`` on the command line: one line per finding naming the rule, the value
and the fix; exit 0 clean, 1 with findings, 2 for bad input; ``export`` warns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccweave.cli import main
from ccweave.lint.cases import XML_BASE, xml_baseline
from ccweave.lint.model import Runtime

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
needs_fixtures = pytest.mark.skipif(not (FIXTURES / "msccl").is_dir(),
                                    reason=f"{FIXTURES} is missing (the MSCCL fixtures live "
                                           "in ../shared)")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def rccl_file(tmp_path) -> Path:
    path = tmp_path / "ring.xml"
    path.write_text(xml_baseline(Runtime.RCCL, FIXTURES / "msccl" / XML_BASE))
    return path


@needs_fixtures
def test_a_correct_file_exits_0(capsys, rccl_file, monkeypatch):
    monkeypatch.setenv("RCCL_MSCCL_FORCE_ENABLE", "1")
    code, out, _ = run(capsys, "lint", str(rccl_file), "--ranks", "8", "--sizes", "1MB,64MB",
                       "--inplace")
    assert code == 0
    assert out.strip() == f"{rccl_file}: passes 10 rccl rules (allreduce on 8 ranks)"


@needs_fixtures
def test_findings_are_one_line_each_and_exit_1(capsys, rccl_file, monkeypatch):
    monkeypatch.setenv("RCCL_MSCCL_FORCE_ENABLE", "1")
    code, out, _ = run(capsys, "lint", str(rccl_file), "--ranks", "16", "--sizes", "1MB",
                       "--op", "avg", "--ranks-per-process", "8")
    assert code == 1
    lines = out.splitlines()
    findings = [line for line in lines if ": finding " in line]
    assert [line.split(": finding ")[1].split(":")[0] for line in findings] == [
        "ranks", "in-place", "op", "processes"]
    for line in findings:
        assert line.startswith(f"{rccl_file}: finding ") and "; fix: " in line
    assert "ngpus=8 but the communicator has 16 ranks" in findings[0]
    assert lines[-1] == (f"{rccl_file}: 4 finding(s), 0 note(s): calls fall back (allreduce "
                         "on 8 ranks; 10 rccl rules)")


@needs_fixtures
def test_the_environment_is_read_unless_ignored(capsys, rccl_file, monkeypatch):
    monkeypatch.setenv("RCCL_MSCCL_ENABLE", "0")
    code, out, _ = run(capsys, "lint", str(rccl_file), "--inplace")
    assert code == 1 and "finding enabled: RCCL_MSCCL_ENABLE=0" in out
    code, out, _ = run(capsys, "lint", str(rccl_file), "--inplace", "--ignore-env")
    assert code == 0 and "enabled" not in out


@needs_fixtures
def test_json_lists_the_rules_with_their_sources(capsys, rccl_file):
    code, out, _ = run(capsys, "lint", str(rccl_file), "--inplace", "--ignore-env",
                       "--sizes", "1MB", "--op", "avg", "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is False
    assert [f["rule"] for f in data["findings"]] == ["op"]
    sources = {r["rule"]: r["source"] for r in data["rules"]}
    assert sources["op"] == ("ROCm/rccl src/misc/msccl/msccl_lifecycle.cc "
                             "mscclInternalSchedulerSelectAlgo")


@needs_fixtures
def test_a_plan_is_linted_for_mscclpp_by_default(capsys):
    plan = FIXTURES.parent / "fixtures" / "mscclpp" / "plans" / "allreduce.json"
    code, out, _ = run(capsys, "lint", str(plan), "--ranks", "2", "--sizes", "1MB",
                       "--inplace", "--ignore-env")
    assert code == 0 and "passes 8 mscclpp rules (allreduce on 2 ranks)" in out


@needs_fixtures
@pytest.mark.parametrize(("argv", "says"), [
    (["--sizes", "6B"], "--sizes: 6 B is not a whole number of float32 elements"),
    (["--sizes", "lots"], "size 'lots'"),
    (["--ranks", "0"], "--ranks 0"),
    (["--runtime", "mscclpp"], "--runtime mscclpp lints MSCCL++ execution plans"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, rccl_file, argv, says):
    code, out, err = run(capsys, "lint", str(rccl_file), *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and says in err and err.startswith("ccweave: error: ")


def test_a_missing_or_unreadable_file_is_exit_2(capsys, tmp_path):
    code, _, err = run(capsys, "lint", str(tmp_path / "none.xml"))
    assert code == 2 and "none.xml: no such file" in err
    broken = tmp_path / "broken.xml"
    broken.write_text("<algo name=")
    code, _, err = run(capsys, "lint", str(broken))
    assert code == 2 and "not well-formed XML" in err and err.count("\n") == 1
    plan = tmp_path / "plan.json"
    plan.write_text('{"gpus": 3}')
    code, _, err = run(capsys, "lint", str(plan))
    assert code == 2 and err.count("\n") == 1 and "plan.json" in err


def test_export_warns_what_the_file_alone_breaks(capsys, tmp_path):
    """An alltoall plan: MSCCL++'s NCCL shim never asks for one."""
    sched, plan = tmp_path / "a2a.json", tmp_path / "a2a_plan.json"
    assert run(capsys, "synth", "switch:4", "alltoall", "--strategy", "direct",
               "-o", str(sched))[0] == 0
    code, out, _ = run(capsys, "export", str(sched), "--format", "mscclpp", "-o", str(plan),
                       "--topology", "switch:4")
    assert code == 0
    warnings = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "finding collective: collective 'alltoall'" in warnings[0]
    code, out, _ = run(capsys, "export", str(sched), "--format", "mscclpp", "-o", str(plan),
                       "--topology", "switch:4", "--json")
    assert [w["rule"] for w in json.loads(out)["lint"]] == ["collective"]
    ring = tmp_path / "ring.json"
    run(capsys, "synth", "switch:4", "allreduce", "--strategy", "ring", "-o", str(ring))
    code, out, _ = run(capsys, "export", str(ring), "-o", str(tmp_path / "ring.xml"),
                       "--runtime", "azure")
    assert code == 0 and "warning" not in out
