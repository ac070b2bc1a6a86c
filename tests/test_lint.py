"""``ccweave.lint``: each runtime rule caught on an input crafted to break it alone, the
upstream files the runtimes read pass, and the edges of each rule as the runtime's code
draws them."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.errors import InputError
from ccweave.lint import RULES, Call, Runtime, lint, lint_xml_text
from ccweave.lint.cases import (
    MB,
    PLAN_BASE,
    XML_BASE,
    correct,
    crafted,
    set_attributes,
    xml_baseline,
    xml_call,
)
from ccweave.units import parse_size

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
needs_fixtures = pytest.mark.skipif(
    not (FIXTURES / "msccl").is_dir() or not (FIXTURES / "mscclpp").is_dir(),
    reason=f"{FIXTURES} is missing (the MSCCL and MSCCL++ fixtures live in ../shared)")
CASES = [(runtime, rule.id) for runtime in Runtime for rule in RULES[runtime]]


def rules_of(report) -> set[str]:
    return {finding.rule for finding in report.findings}


@needs_fixtures
@pytest.mark.parametrize(("runtime", "rule"), CASES, ids=[f"{r.value}-{i}" for r, i in CASES])
def test_each_rule_is_caught_alone_on_its_crafted_input(tmp_path, runtime, rule):
    cases = {case.rule: case for case in crafted(runtime, FIXTURES, tmp_path)}
    case = cases[rule]
    report = lint(case.path, runtime, case.call)
    assert rules_of(report) == {rule}, [f.line() for f in report.findings]
    assert not report.ok
    finding = report.findings[0]
    assert finding.fix and finding.message and "\n" not in finding.line()


@needs_fixtures
@pytest.mark.parametrize("runtime", list(Runtime))
def test_every_rule_has_a_crafted_case_and_the_baseline_passes(tmp_path, runtime):
    cases = crafted(runtime, FIXTURES, tmp_path)
    assert sorted(c.rule for c in cases) == sorted(r.id for r in RULES[runtime])
    if runtime is Runtime.MSCCLPP:
        base = FIXTURES / "mscclpp" / "plans" / PLAN_BASE
        call = replace(cases[0].call)  # the collective case keeps the baseline's call
    else:
        base = tmp_path / "base.xml"
        base.write_text(xml_baseline(runtime, FIXTURES / "msccl" / XML_BASE))
        call = xml_call(runtime, base)
    report = lint(base, runtime, call)
    assert report.findings == (), [f.line() for f in report.findings]


@needs_fixtures
@pytest.mark.parametrize("runtime", list(Runtime))
def test_upstream_files_pass_except_the_wrong_one(tmp_path, runtime):
    """msccl-tools' XML and MSCCL++'s plans pass with calls they serve; the XML kept on
    purpose as wrong (program output after </algo>) is caught by the reader rule, and the
    plan MSCCL++'s loader cannot read is refused as bad input."""
    passed, caught = [], {}
    for path, call in correct(runtime, FIXTURES, tmp_path):
        try:
            report = lint(path, runtime, call)
        except InputError:
            caught[path.name] = "refused"
            continue
        if report.findings:
            caught[path.name.removeprefix(f"{runtime.value}-")] = rules_of(report)
        else:
            passed.append(path.name)
    if runtime is Runtime.MSCCLPP:
        assert caught == {"allreduce_pipeline.json": "refused"} and len(passed) == 10
    else:
        assert caught == {"allreduce_pcie_hier_4.xml": {"loads"}} and len(passed) == 13


# ---------------------------------------------------------------- each rule's edges


def _ring(runtime: Runtime, **attributes: str) -> str:
    return set_attributes(xml_baseline(runtime, FIXTURES / "msccl" / XML_BASE), **attributes)


@needs_fixtures
def test_rccl_max_bytes_is_inclusive_and_zero_means_no_limit():
    text = _ring(Runtime.RCCL, maxBytes=str(MB))
    call = replace(xml_call(Runtime.RCCL, Path("x.xml")), sizes=(MB,))
    assert lint_xml_text(text, "x.xml", "rccl", call).ok
    over = replace(call, sizes=(MB + 32,))
    assert rules_of(lint_xml_text(text, "x.xml", "rccl", over)) == {"size"}
    unlimited = _ring(Runtime.RCCL, maxBytes="0")
    assert lint_xml_text(unlimited, "x.xml", "rccl", replace(call, sizes=(2**40,))).ok


@needs_fixtures
def test_msccl_max_bytes_is_exclusive_and_defaults_to_128_mb():
    text = (FIXTURES / "msccl" / XML_BASE).read_text()  # no minBytes, no maxBytes
    call = xml_call(Runtime.MSCCL, FIXTURES / "msccl" / XML_BASE)
    below = replace(call, sizes=(128 * MB - 32,))
    assert lint_xml_text(text, str(FIXTURES / "msccl" / XML_BASE), "msccl", below).ok
    at = lint_xml_text(text, str(FIXTURES / "msccl" / XML_BASE), "msccl",
                       replace(call, sizes=(128 * MB,)))
    assert rules_of(at) == {"size"} and "128 MB" in at.findings[0].message


@needs_fixtures
@pytest.mark.parametrize(("runtime", "falls_back"), [("rccl", True), ("msccl", False)])
def test_allgather_chunks_count_bytes_on_msccl_and_elements_on_rccl(runtime, falls_back):
    """microsoft/msccl's argcheck.cc turns an allgather's count into bytes before the
    divisibility test; RCCL tests elements. 48 B of float32 is 12 elements, not a
    multiple of 8 chunks, but 48 bytes is."""
    source = FIXTURES / "msccl" / "allgather_ring_8.xml"
    text = xml_baseline(Runtime(runtime), source)
    call = replace(xml_call(Runtime(runtime), source), sizes=(48,), inplace=None)
    call = replace(call, inplace=re.search(r'<algo[^>]* inplace="1"', text) is not None)
    report = lint_xml_text(text, str(source), runtime, call)
    assert ("chunks" in rules_of(report)) is falls_back


@needs_fixtures
def test_the_op_rule_is_for_reductions_only():
    source = FIXTURES / "msccl" / "allgather_ring_8.xml"
    text = xml_baseline(Runtime.RCCL, source)
    inplace = re.search(r'<algo[^>]* inplace="1"', text) is not None
    call = replace(xml_call(Runtime.RCCL, source), op="avg", inplace=inplace)
    assert "op" not in rules_of(lint_xml_text(text, "x.xml", "rccl", call))


@needs_fixtures
@pytest.mark.parametrize(("nccl_algo", "enabled"), [
    ("MSCCL,Ring,Tree", True), ("msccl", True), ("^Tree", True), ("^MSCCL", False),
    ("Ring,Tree", False), ("", False)])
def test_nccl_algo_is_read_as_nccl_parses_it(nccl_algo, enabled):
    path = FIXTURES / "msccl" / XML_BASE
    call = xml_call(Runtime.MSCCL, path)
    call = replace(call, env={**call.env, "NCCL_ALGO": nccl_algo})
    report = lint(path, "msccl", call)
    assert ("enabled" not in rules_of(report)) is enabled


@needs_fixtures
def test_msccl_xml_files_naming_the_file_by_another_path_counts(tmp_path, monkeypatch):
    path = FIXTURES / "msccl" / XML_BASE
    monkeypatch.chdir(path.parent)
    call = xml_call(Runtime.MSCCL, path)
    other = tmp_path / "other.xml"
    named = replace(call, env={**call.env, "MSCCL_XML_FILES": f"{other}:./{XML_BASE}"})
    assert lint(path, "msccl", named).ok
    unnamed = replace(call, env={**call.env, "MSCCL_XML_FILES": str(other)})
    assert rules_of(lint(path, "msccl", unnamed)) == {"enabled"}


@needs_fixtures
def test_rccl_force_enable_unset_is_a_note_not_a_finding():
    path = FIXTURES / "msccl" / XML_BASE
    text = xml_baseline(Runtime.RCCL, path)
    report = lint_xml_text(text, "x.xml", "rccl", replace(xml_call(Runtime.RCCL, path), env={}))
    assert report.ok and [f.rule for f in report.findings] == ["enabled"]
    assert report.findings[0].note


@needs_fixtures
def test_mscclpp_window_is_inclusive_and_allgather_compares_the_whole_output(tmp_path):
    data = json.loads((FIXTURES / "mscclpp" / "plans" / "transfer_pack.json").read_text())
    data["max_message_size"] = MB
    path = tmp_path / "ag.json"
    path.write_text(json.dumps(data))
    call = Call(ranks=2, sizes=(MB,), inplace=True, env={})
    assert lint(path, "mscclpp", call).ok
    assert rules_of(lint(path, "mscclpp", replace(call, sizes=(MB + 64,)))) == {"size"}


def _step(report) -> int:
    return parse_size(re.search(r"multiples of (\S+?)[,;]", report.findings[0].fix).group(1))


@needs_fixtures
@settings(max_examples=40, deadline=None)
@given(chunks=st.integers(1, 96), dtype=st.sampled_from(["int8", "float16", "float32", "float64"]),
       elements=st.integers(1, 10_000))
def test_the_chunks_fix_names_sizes_that_pass(chunks, dtype, elements):
    """Whenever the chunks rule fires, the sizes its fix names pass and the size it
    flagged is not one of them."""
    text = _ring(Runtime.RCCL, nchunksperloop=str(chunks))
    call = replace(xml_call(Runtime.RCCL, Path("x.xml")), dtype=dtype,
                   sizes=(elements * Call(dtype=dtype).element_bytes,), env=None)
    report = lint_xml_text(text, "x.xml", "rccl", call)
    chunked = [f for f in report.findings if f.rule == "chunks"]
    assert bool(chunked) == bool(elements % chunks)
    if chunked:
        step = _step(replace(report, findings=tuple(chunked)))
        assert call.sizes[0] % step
        for k in (1, 7):
            fixed = replace(call, sizes=(k * step,))
            assert "chunks" not in rules_of(lint_xml_text(text, "x.xml", "rccl", fixed))


@needs_fixtures
@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["allreduce.json", "transfer_pack.json", "reduce_pack.json"]),
       size=st.integers(1, 1 << 16).map(lambda k: 16 * k))
def test_the_mscclpp_chunks_fix_names_sizes_that_pass(name, size):
    path = FIXTURES / "mscclpp" / "plans" / name
    data = json.loads(path.read_text())
    call = Call(ranks=len(data["gpus"]), sizes=(size,), inplace=True, env={})
    report = lint(path, "mscclpp", call)
    if not report.findings:
        return
    assert rules_of(report) == {"chunks"}
    step = _step(report)
    assert size % step
    assert lint(path, "mscclpp", replace(call, sizes=(3 * step,))).ok


# ---------------------------------------------------------------- bad input


def test_bad_calls_are_refused_naming_the_flag():
    with pytest.raises(InputError, match="--sizes: 6 B is not a whole number of float32"):
        Call(sizes=(6,))
    with pytest.raises(InputError, match="--op 'mean'"):
        Call(op="mean")
    with pytest.raises(InputError, match="--ranks 0"):
        Call(ranks=0)


def test_a_file_of_the_wrong_kind_for_the_runtime_is_refused(tmp_path):
    xml = tmp_path / "a.xml"
    xml.write_text('<algo name="a" coll="allreduce"/>')
    with pytest.raises(InputError, match="--runtime mscclpp lints MSCCL\\+\\+ execution plans"):
        lint(xml, "mscclpp")
    plan = tmp_path / "a.json"
    plan.write_text("{}")
    with pytest.raises(InputError, match="takes --runtime mscclpp"):
        lint(plan, "rccl")
    other = tmp_path / "b.xml"
    other.write_text("<system/>")
    with pytest.raises(InputError, match="not an MSCCL <algo>"):
        lint(other, "rccl")


@needs_fixtures
@settings(max_examples=60, deadline=None)
@given(values=st.dictionaries(
    st.sampled_from(["coll", "ngpus", "nchunksperloop", "nchannels", "minBytes", "maxBytes",
                     "inplace", "outofplace", "proto"]),
    st.one_of(st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                             blacklist_characters='"<>&'), max_size=12),
              st.integers(-2**70, 2**70).map(str)), max_size=4),
    runtime=st.sampled_from(["rccl", "msccl", "azure"]))
def test_any_header_value_gives_findings_or_one_input_error(values, runtime):
    """Whatever a file's header says, lint answers with findings or refuses it in one
    line; it never fails inside."""
    text = _ring(Runtime(runtime), **values)
    call = Call(ranks=8, sizes=(MB, 3 * MB), env={"NCCL_MAX_NCHANNELS": "4"})
    try:
        report = lint_xml_text(text, "x.xml", runtime, call)
    except InputError as error:
        assert "\n" not in str(error)
        return
    assert all("\n" not in f.line() for f in report.findings)
