"""MSCCL XML printed by the public MSCCLang examples (../shared/fixtures/msccl) imports,
verifies as the collective its ``coll`` names, simulates, and survives re-export.

One example, allreduce_pcie_hier_4.xml, is a wrong program: msccl-tools printed its own
Check() failure after the XML ("Rank 0 chunk 0 is incorrect ...", 64 lines). It
imports (the trailing text is a runtime problem) and the verifier names the bug.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ccweave.collectives import Kind
from ccweave.export import Severity, check_xml, from_xml, lex_check, read, to_xml
from ccweave.simulate import simulate
from ccweave.topology import zoo
from ccweave.verify import ProblemKind, check

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "msccl"
FILES = sorted(FIXTURES.glob("*.xml")) if FIXTURES.is_dir() else []
BROKEN = "allreduce_pcie_hier_4.xml"
TOPOLOGY = {4: "switch:4", 8: "dgx-a100", 16: "dgx-a100:2"}

pytestmark = pytest.mark.skipif(not FILES, reason=f"no MSCCL fixtures at {FIXTURES}")


def _ids(paths):
    return [p.name for p in paths]


def test_all_fourteen_fixtures_are_here():
    assert len(FILES) == 14


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_fixture_imports_as_its_coll_and_simulates(path):
    sched = read(path)
    coll = ET.fromstring(path.read_text().split("</algo>")[0] + "</algo>").get("coll")
    assert sched.collective.kind is Kind.parse(coll)
    result = simulate(sched, zoo.get(TOPOLOGY[sched.num_ranks]), 64 * 2**20)
    assert 0 < result.time_s < math.inf


@pytest.mark.parametrize("path", [p for p in FILES if p.name != BROKEN],
                         ids=_ids([p for p in FILES if p.name != BROKEN]))
def test_fixture_verifies_and_passes_the_runtime_checker(path):
    sched = read(path)
    result = check(sched)
    assert result.ok, result.problems[0].message
    assert result.outputs == len(sched.collective.postcondition)
    assert check_xml(ET.parse(path), "msccl") == []
    assert lex_check(path.read_text()) == []


def test_the_broken_example_imports_and_the_verifier_names_its_bug():
    path = FIXTURES / BROKEN
    assert "is incorrect" in path.read_text()  # msccl-tools' own Check() said so
    sched = read(path)
    problems = sched.metadata["msccl_runtime_problems"]
    assert any("found 'R' outside the root element" in p for p in problems)
    result = check(sched)
    assert not result.ok
    assert {p.kind for p in result.problems} & {ProblemKind.MIXED_CHUNKS,
                                                ProblemKind.DUPLICATE_CONTRIBUTION}


@pytest.mark.parametrize("path", [p for p in FILES if p.name != BROKEN],
                         ids=_ids([p for p in FILES if p.name != BROKEN]))
def test_fixture_re_exports_to_the_same_algorithm(path):
    """import -> export -> import: proven again, and the simulator sees the same time."""
    sched = read(path)
    text = to_xml(sched, proto=sched.metadata["proto"])
    assert check_xml(ET.fromstring(text), "msccl") == [] and lex_check(text) == []
    again = from_xml(text)
    assert check(again).ok
    topo = zoo.get(TOPOLOGY[sched.num_ranks])
    first = simulate(sched, topo, 64 * 2**20).time_s
    assert simulate(again, topo, 64 * 2**20).time_s == pytest.approx(first, rel=1e-9)


def test_fused_and_nop_steps_of_the_fixtures_are_all_read():
    types = set()
    for path in FILES:
        text = path.read_text().split("</algo>")[0] + "</algo>"
        types |= {step.get("type") for step in ET.fromstring(text).iter("step")}
    assert types == {"s", "r", "rcs", "rrc", "rrs", "rrcs", "cpy", "re", "nop"}


def test_runtime_problems_of_a_fixture_are_not_malformed():
    path = FIXTURES / BROKEN
    text = path.read_text().split("</algo>")[0] + "</algo>"
    problems = check_xml(ET.fromstring(text))
    assert all(p.severity is Severity.RUNTIME for p in problems)
