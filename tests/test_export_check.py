"""The checker enforces the MSCCL runtime parsers' rules and limits, and the importer
refuses bad XML naming the element and the attribute."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from ccweave.errors import InputError
from ccweave.export import Severity, check_xml, from_xml, lex_check
from ccweave.verify import check

# allgather on 2 ranks: each sends its chunk to the other and copies it into place
BASE = """<algo name="ag2" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="0">
  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"""  # noqa: E501


def _edit(*changes: tuple[str, str | None], text: str = BASE) -> str:
    """Apply ("gpu/tb/step@attr" or "algo@attr", value) changes; value None deletes."""
    root = ET.fromstring(text)
    for place, value in changes:
        path, attr = place.split("@")
        elem = root
        for part in path.split("/")[1:] if path.startswith("algo") else path.split("/"):
            tag, index = part.split(":")
            elem = elem.findall(tag)[int(index)]
        if value is None:
            del elem.attrib[attr]
        else:
            elem.set(attr, value)
    return ET.tostring(root, encoding="unicode")


def _problems(text: str, runtime: str | None = None):
    return check_xml(ET.fromstring(text), runtime)


def test_the_base_algorithm_is_clean_and_proven():
    assert lex_check(BASE) == []
    assert _problems(BASE) == []
    assert _problems(BASE, "msccl") == []
    assert check(from_xml(BASE)).ok


@pytest.mark.parametrize(("change", "message"), [
    (("gpu:0/tb:0/step:1@cnt", None), r"gpu 0 tb 0 step 1 attribute 'cnt': is missing"),
    (("gpu:1/tb:0@send", None), r"gpu 1 tb 0 attribute 'send': is missing"),
    (("algo@nchunksperloop", None), r"algo attribute 'nchunksperloop': is missing"),
    (("gpu:0@s_chunks", "two"), r"gpu 0 attribute 's_chunks': is 'two', not an integer"),
    (("gpu:0/tb:0/step:1@depid", "7"),
     r"gpu 0 tb 0 step 1 attribute 'depid': is 7, but gpu 0 has no threadblock 7 "
     r"\(a dangling dependency\)"),
    (("gpu:0/tb:0/step:1@depid", "1"), r"attribute 'deps': is -1, but tb 1 has steps 0..0"),
    (("gpu:1@o_chunks", "3"), r"gpu 1 attribute 'o_chunks': is 3, but allgather on 2 ranks"),
    (("gpu:0@i_chunks", "2"), r"gpu 0 attribute 'i_chunks': is 2"),
    (("algo@nchunksperloop", "3"), r"nchunksperloop=3 must be a positive multiple of ngpus"),
    (("algo@nchunksperloop", "1099511627776"), r"MSCCL addresses 32768 chunks per buffer"),
    (("gpu:0@s_chunks", "40000"), r"gpu 0 attribute 's_chunks': is 40000; scratch holds"),
    (("gpu:0/tb:0/step:0@type", "xs"), r"attribute 'type': is 'xs'; step types are"),
    (("gpu:0/tb:0/step:0@srcbuf", "q"), r"attribute 'srcbuf': is 'q'; buffers are i, o, s"),
    (("gpu:0/tb:0/step:0@srcoff", "1"), r"attribute 'srcoff': is 1: chunks 1..1 of buffer 'i'"),
    (("gpu:0/tb:0/step:1@s", "5"), r"attribute 's': is 5, but this is step 1"),
    (("gpu:0/tb:0/step:0@cnt", "0"), r"attribute 'cnt': is 0; a step moves at least one"),
    (("gpu:0/tb:0@send", "0"), r"gpu 0 tb 0 attribute 'send': is 0; a peer is another gpu"),
    (("gpu:1@id", "0"), r"gpu 0 attribute 'id': appears 2 times"),
    (("algo@coll", "allgatherv"), r"algo attribute 'coll': is 'allgatherv', not a collective"),
    (("algo@coll", "custom"), r"coll=\"custom\" needs ccweave's attribute 'collective'"),
    (("gpu:1/tb:0/step:1@cnt", "2"),
     r"gpu 0 tb 0 step 0 attribute 'cnt': message 0 to gpu 1 carries 1 chunk\(s\)"),
    (("gpu:1/tb:0/step:0@type", "cpy"),
     r"gpu 1 tb 0 attribute 'send': sends 0 message\(s\) to gpu 0 on channel 0 but gpu 0 tb 0 "
     r"receives 1; every send needs one receive"),
])
def test_bad_xml_is_refused_naming_element_and_attribute(change, message):
    text = _edit(change)
    with pytest.raises(InputError, match=message):
        from_xml(text, "bad.xml")
    assert any(p.severity is Severity.MALFORMED for p in _problems(text))


def test_a_dependency_cycle_is_refused():
    text = _edit(("gpu:0/tb:0/step:0@depid", "1"), ("gpu:0/tb:0/step:0@deps", "0"),
                 ("gpu:0/tb:0/step:0@hasdep", "1"), ("gpu:0/tb:1/step:0@depid", "0"),
                 ("gpu:0/tb:1/step:0@deps", "0"), ("gpu:0/tb:1/step:0@hasdep", "1"))
    with pytest.raises(InputError, match=r"a cycle \(deadlock\): gpu 0 tb \d step 0 -> "):
        from_xml(text)


def test_both_sides_receiving_first_is_a_deadlock():
    """Each threadblock waits for a message the other sends only after its receive."""
    text = BASE.replace('s="0" type="s"', 's="X" type="s"') \
        .replace('s="1" type="r"', 's="0" type="r"').replace('s="X" type="s"', 's="1" type="s"')
    root = ET.fromstring(text)
    for gpu in root.findall("gpu"):
        tb = gpu.find("tb")
        steps = tb.findall("step")
        for step in steps:
            tb.remove(step)
        for step in sorted(steps, key=lambda e: e.get("s")):
            tb.append(step)
    with pytest.raises(InputError, match="a cycle"):
        from_xml(ET.tostring(root, encoding="unicode"))


def test_a_wait_that_never_ends_is_refused():
    text = _edit(("gpu:0/tb:0/step:1@depid", "1"), ("gpu:0/tb:0/step:1@deps", "0"))
    with pytest.raises(InputError, match=r"no step from there on has hasdep=\"1\""):
        from_xml(text)


def test_waiting_on_a_step_that_does_not_signal_is_a_runtime_problem():
    text = _edit(("gpu:0/tb:0/step:1@depid", "1"), ("gpu:0/tb:0/step:1@deps", "0"),
                 ("gpu:0/tb:1@recv", "-1"))
    root = ET.fromstring(text)
    tb1 = root.find("gpu").findall("tb")[1]
    extra = ET.SubElement(tb1, "step", dict(tb1.find("step").attrib))
    extra.set("s", "1")
    extra.set("hasdep", "1")
    text = ET.tostring(root, encoding="unicode")
    problems = _problems(text)
    assert [p.severity for p in problems] == [Severity.RUNTIME]
    assert "does not signal" in str(problems[0]) and "hasdep=\"1\" on step 0" in str(problems[0])
    sched = from_xml(text)
    assert sched.metadata["msccl_runtime_problems"]


def test_two_threadblocks_on_one_connection_are_refused():
    root = ET.fromstring(BASE)
    gpu = root.find("gpu")
    ET.SubElement(gpu, "tb", {"id": "2", "send": "1", "recv": "-1", "chan": "0"})
    with pytest.raises(InputError, match="2 threadblocks send gpu 1 on channel 0"):
        from_xml(ET.tostring(root, encoding="unicode"))


def test_limits_are_runtime_problems_with_a_fix():
    big = _edit(("gpu:0/tb:0/step:0@cnt", "72"), ("gpu:1/tb:0/step:1@cnt", "72"),
                ("gpu:0@i_chunks", "0"), ("algo@nchunksperloop", "144"),
                ("gpu:0@o_chunks", "144"), ("gpu:1@o_chunks", "144"),
                ("gpu:1@i_chunks", "72"), ("gpu:0/tb:0/step:0@srcbuf", "o"))
    problems = [p for p in _problems(big) if p.attribute == "cnt"]
    assert problems and all(p.severity is Severity.RUNTIME for p in problems)
    assert "cnt < 72: split the step" in str(problems[0])


def test_too_many_steps_and_peers_are_flagged():
    root = ET.fromstring(BASE)
    tb = root.find("gpu").findall("tb")[1]
    template = tb.find("step")
    for s in range(1, 300):
        step = ET.SubElement(tb, "step", dict(template.attrib))
        step.set("s", str(s))
    problems = _problems(ET.tostring(root, encoding="unicode"))
    assert any("has 300 steps; MSCCL runs at most 256" in str(p) for p in problems)
    assert all(p.severity is Severity.RUNTIME for p in problems)


def test_runtime_spellings_and_required_attributes():
    assert any(p.attribute == "minBytes" for p in _problems(BASE, "azure"))
    rs = BASE.replace('coll="allgather"', 'coll="reducescatter"')
    assert any("spells reducescatter 'reduce_scatter'" in str(p) for p in _problems(rs, "msccl"))


def test_a_nop_must_hand_its_dependency_to_a_step_that_has_one():
    root = ET.fromstring(BASE)
    tb0 = root.find("gpu").find("tb")
    for step in tb0.findall("step"):
        step.set("s", str(int(step.get("s")) + 1))
    nop = ET.Element("step", {"s": "0", "type": "nop", "srcbuf": "i", "srcoff": "-1",
                              "dstbuf": "o", "dstoff": "-1", "cnt": "0", "depid": "1",
                              "deps": "0", "hasdep": "0"})
    tb0.insert(0, nop)
    root.find("gpu").findall("tb")[1].find("step").set("hasdep", "1")
    problems = _problems(ET.tostring(root, encoding="unicode"))
    assert any("follows nops with dependencies but has none" in str(p) for p in problems)
    assert all(p.severity is Severity.RUNTIME for p in problems)


def test_not_xml_and_not_msccl_are_refused():
    with pytest.raises(InputError, match="not well-formed XML"):
        from_xml("<algo name='x'", "broken.xml")
    with pytest.raises(InputError, match=r"the root element is <msccl_algos>"):
        from_xml("<msccl_algos/>")


def test_in_place_without_input_chunks_imports_through_the_alias():
    """MSCCL's in-place allgather keeps everything in the output buffer (i_chunks=0)."""
    text = BASE.replace('inplace="0"', 'inplace="1"').replace('i_chunks="1"', 'i_chunks="0"')
    text = text.replace('srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" '
                        'deps="-1" hasdep="0"/>\n      <step s="1" type="r"', 'srcbuf="o" '
                        'srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" '
                        'hasdep="0"/>\n      <step s="1" type="r"', 1)
    root = ET.fromstring(text)
    gpus = root.findall("gpu")
    gpus[1].find("tb").find("step").set("srcbuf", "o")
    gpus[1].find("tb").find("step").set("srcoff", "1")
    for gpu in gpus:
        gpu.remove(gpu.findall("tb")[1])  # nothing to copy in place
    sched = from_xml(ET.tostring(root, encoding="unicode"))
    assert sched.in_place and check(sched).ok


@pytest.mark.parametrize(("text", "message"), [
    ('<algo a="1"\n b="2"></algo>', "attributes go on the tag's line"),
    ('<?xml version="1.0"?>\n<algo></algo>', "no XML declaration"),
    ("<algo>\t<gpu/></algo>", "found '\\t' between elements"),
    ("<algo a='1'></algo>", "must be in double quotes"),
    ('<algo></algo>\nRank 0 chunk 0 is incorrect', "found 'R' outside the root element"),
    (f'<algo name="{"x" * 300}"></algo>', "longer than 255 characters"),
    ("<algo><gpu></algo>", "</algo> closes nothing open"),
    ("<algo><gpu>", "<gpu> is never closed"),
])
def test_what_the_runtimes_xml_reader_refuses(text, message):
    problems = lex_check(text)
    assert len(problems) == 1 and problems[0].severity is Severity.RUNTIME
    assert message in str(problems[0])


def test_the_readers_limits_are_reported_on_import():
    text = BASE.replace('nchannels="1" nchunksperloop', 'nchannels="1"\n nchunksperloop')
    sched = from_xml(text)
    assert any("attributes go on the tag's line" in p
               for p in sched.metadata["msccl_runtime_problems"])


@pytest.mark.parametrize(("changes", "message"), [
    ((("algo@minBytes", "4096"), ("algo@maxBytes", "1024")),
     "is 4096, above maxBytes=1024: the algorithm serves no size; give minBytes <= maxBytes"),
    ((("algo@minBytes", "-1"),), "is -1; a size in bytes is >= 0"),
    ((("algo@maxBytes", "-5"),), "is -5; a size in bytes is >= 0"),
    ((("gpu:0/tb:0@chan", "100"),), "is 100; NCCL has channels 0..63"),
])
def test_a_range_that_serves_no_size_and_a_channel_nccl_lacks_are_refused(changes, message):
    """minBytes above maxBytes was only a runtime note: the file imported and verified,
    and no call would ever select it. Like a channel past NCCL's 64, it is refused."""
    text = _edit(*changes)
    assert any(message in str(p) and p.severity is Severity.MALFORMED
               for p in _problems(text)), _problems(text)
    with pytest.raises(InputError, match=r"algo\.xml: .*" + message.split(";")[0]):
        from_xml(text, "algo.xml")
    assert not _problems(_edit(("algo@minBytes", "1024"), ("algo@maxBytes", "0")))  # 0: none
