"""Fuzzing the readers issue 42 hardened: TACCL sketches and profiles (nesting, NaN and
infinities, wrong types, figures no link has) and the schedule and MSCCL XML fields that
name things (channel, root, peer, via, minBytes, maxBytes, chan). Whatever the input,
the outcome is exit 0, 1 or 2, an error is one line on stderr, nothing escapes as a
traceback (``tests/test_fuzz.py``'s check).

A TACCL file is read and fitted to its machine as ``synth --strategy taccl`` does before
it solves (the solve itself takes seconds to minutes, too slow to fuzz); any ccweave
error there is what the CLI prints as its one line."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ccweave import schedule as schedule_io
from ccweave.errors import CCWeaveError, printable
from ccweave.export import to_xml
from ccweave.synth import synthesize
from ccweave.synth.taccl import logical, profile, sketch
from ccweave.topology import zoo
from tests.strategies import DEEP, hostile_values, json_text, mutated
from tests.test_fuzz import XML_ATTRIBUTE, _file, check, cli

EXAMPLES = int(os.environ.get("CCWEAVE_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ROOT = Path(__file__).resolve().parents[1]
TACCL = ROOT / "tests" / "fixtures" / "taccl"
SKETCHES = [(json.loads((TACCL / "sketch" / name).read_text()), machine)
            for name, machine in (("sk1-ndv2-n2.json", "ndv2:2"), ("sk2-dgx2-n2.json", "dgx2:2"))]
SKETCHES.append((json.loads((ROOT / "examples" / "sketches" / "one-node-switch.json")
                            .read_text()), "switch:4"))
PROFILE = json.loads((TACCL / "topo" / "topo-ndv2-1MB.json").read_text())
MACHINES = {name: zoo.get(name) for name in ("ndv2:2", "dgx2:2", "switch:4")}

NUMBERS = st.one_of(st.integers(-2**70, 2**70),
                    st.sampled_from([-1, 0, 1, 63, 64, 99, 10**6, 2**31, 2**63]),
                    st.floats(allow_nan=True, allow_infinity=True), hostile_values())


def read_as_the_cli_does(read) -> tuple[int, str]:
    """``read()`` with ``ccweave.cli``'s mapping: a ccweave error is one line, exit 2;
    any other exception escapes (a traceback: the test fails)."""
    try:
        read()
    except CCWeaveError as error:
        return 2, f"ccweave: error: {printable(error)}\n"
    return 0, ""


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@FUZZ
@given(case=st.sampled_from(SKETCHES).flatmap(
    lambda case: st.tuples(mutated(case[0]), st.just(case[1]))))
@example(case=({**SKETCHES[0][0], "intranode_sketch": DEEP.format(100_000)}, "ndv2:2"))
@example(case=({**SKETCHES[2][0], "input_chunkup": float("inf")}, "switch:4"))
def test_taccl_sketch_files(case):
    data, machine = case
    with tempfile.TemporaryDirectory() as folder:
        path = _file(folder, "sketch.json", json_text(data))
        code, err = read_as_the_cli_does(
            lambda: logical.apply(MACHINES[machine], sketch.load(path)))
        check(code, err, f"sketch {json_text(data)[:300]}")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@FUZZ
@given(data=st.one_of(mutated(PROFILE), st.builds(
    lambda field, value: {**PROFILE, field: value},
    st.sampled_from(sorted(PROFILE)), NUMBERS)))
@example(data={**PROFILE, "remote_invbw": float("inf")})
@example(data={**PROFILE, "node_invbws_list": [23, float("nan")]})
@example(data={**PROFILE, "node_betas_list": [1e-300, 46]})
def test_taccl_profile_files(data):
    with tempfile.TemporaryDirectory() as folder:
        path = _file(folder, "topo.json", json_text(data))
        code, err = read_as_the_cli_does(
            lambda: profile.apply(profile.load(path), MACHINES["ndv2:2"]))
        check(code, err, f"profile {json_text(data)[:300]}")
        text = json_text(data)
        if any(word in text for word in ("NaN", "Infinity", "e-300")):
            assert code == 2, f"a figure no link has was accepted: {text[:300]}"


SCHEDULE = schedule_io.to_dict(synthesize(zoo.get("switch:4"), "broadcast", "ring"))
PINNED = schedule_io.to_dict(synthesize(zoo.get("switch:4"), "allgather", "trees"))


@st.composite
def _named_fields(draw) -> dict[str, object]:
    """A schedule with hostile values where it names channels, roots, peers and routes."""
    data = json.loads(json.dumps(draw(st.sampled_from([SCHEDULE, PINNED]))))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["channel", "root", "peer", "via", "ranks"]))
        if where in ("root", "peer", "ranks"):
            data["collective"][where] = draw(NUMBERS)
            continue
        row = data["transfers"][draw(st.integers(0, len(data["transfers"]) - 1))]
        if where == "channel":
            row[9] = draw(NUMBERS)
        else:
            row[10:] = [draw(st.one_of(st.lists(st.sampled_from(
                ["sw", "net", "", "cpu0", "\u202e", "0"]), max_size=4), hostile_values()))]
    return data


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@FUZZ
@given(data=_named_fields())
@example(data={**SCHEDULE, "collective": {**SCHEDULE["collective"], "root": 99}})
@example(data={**SCHEDULE, "transfers": [[*SCHEDULE["transfers"][0][:9], -5],
                                         *SCHEDULE["transfers"][1:]]})
def test_schedule_fields_that_name_things(data):
    with tempfile.TemporaryDirectory() as folder:
        path = _file(folder, "sched.json", json_text(data))
        for argv in (["verify", path], ["verify", path, "--topology", "switch:4"],
                     ["simulate", path, "switch:4", "--sizes", "1MB"]):
            code, _, err = cli(*argv)
            check(code, err, f"{argv[0]} on {json_text(data)[:300]}")
            if _names_nothing(data):
                assert code == 2, f"{argv[0]} took {json_text(data)[:300]}"


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _names_nothing(data: dict) -> bool:
    """A field the reader must refuse: a whole-number channel outside 0..63, a root that
    is not a rank of a broadcast (or any root but 0 of an allgather), a route through an
    empty name."""
    coll = data["collective"]
    root, rooted = coll.get("root"), coll["kind"] == "broadcast"
    return (any(_integer(row[9]) and not 0 <= row[9] < 64 for row in data["transfers"])
            or (_integer(root) and _integer(coll["ranks"]) and coll["ranks"] == 4
                and not (0 <= root < 4 if rooted else root == 0))
            or any(len(row) > 10 and isinstance(row[10], list) and "" in row[10]
                   for row in data["transfers"]))


XML = to_xml(synthesize(zoo.get("switch:4"), "allgather", "ring"))
XML_FIELDS = ("minBytes", "maxBytes", "chan", "nchannels", "root")


@st.composite
def _xml_fields(draw) -> str:
    text = XML
    for _ in range(draw(st.integers(1, 3))):
        spots = [m for m in XML_ATTRIBUTE.finditer(text) if m.group(1) in XML_FIELDS]
        spot = spots[draw(st.integers(0, len(spots) - 1))]
        value = draw(st.one_of(st.integers(-2**40, 2**40).map(str), st.sampled_from(
            ["-1", "0", "63", "64", "4096", "1099511627776", "9" * 19, "", "x", "1e3"])))
        text = text[:spot.start(2)] + value + text[spot.end(2):]
    return text


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@FUZZ
@given(text=_xml_fields())
@example(text=XML.replace('minBytes="0"', 'minBytes="4096"').replace(
    'maxBytes="1099511627776"', 'maxBytes="1024"'))
def test_msccl_xml_fields_that_name_things(text):
    with tempfile.TemporaryDirectory() as folder:
        path = _file(folder, "algo.xml", text)
        for argv in (["import", path, "-o", os.path.join(folder, "s.json")],
                     ["verify", path]):
            code, _, err = cli(*argv)
            check(code, err, f"{argv[0]} on {text[:300]}")
            if _serves_no_size(text) or _channel_nccl_lacks(text):
                assert code == 2, f"{argv[0]} took {text[:300]}"


def _attributes(text: str, name: str) -> list[int]:
    return [int(m.group(2)) for m in XML_ATTRIBUTE.finditer(text)
            if m.group(1) == name and re.fullmatch(r"-?\d{1,18}", m.group(2))]


def _serves_no_size(text: str) -> bool:
    low, high = _attributes(text, "minBytes"), _attributes(text, "maxBytes")
    return bool(low and high) and (low[0] < 0 or high[0] < 0 or 0 < high[0] < low[0])


def _channel_nccl_lacks(text: str) -> bool:
    return any(not 0 <= chan < 64 for chan in _attributes(text, "chan"))
