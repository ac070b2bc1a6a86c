"""Fuzzing the MSCCL XML importer: mutated fixtures (attributes deleted or changed,
elements dropped or repeated, text cut short or garbled) either import to a schedule
the verifier can judge or raise ``InputError``, never another exception."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccweave.errors import InputError
from ccweave.export import from_xml, to_xml
from ccweave.schedule import Schedule
from ccweave.synth import synthesize
from ccweave.topology import zoo
from ccweave.verify import check

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "msccl"
SMALL = [p.read_text() for p in sorted(FIXTURES.glob("*.xml")) if p.stat().st_size < 40_000] \
    if FIXTURES.is_dir() else []
SEEDS = [*SMALL, to_xml(synthesize(zoo.get("switch:4"), "allreduce", "ring")),
         to_xml(synthesize(zoo.get("switch:4"), "alltoall", "pairwise"))]
ATTRIBUTE = re.compile(r'\s(\w+)="([^"]*)"')
NUMBERS = st.one_of(st.integers(-3, 80), st.integers(-2**40, 2**40),
                    st.sampled_from(["", "x", "1.5", "0x10", " 3", "-", "99999999999999999999"]))


def _mutate_attribute(text: str, data) -> str:
    spots = list(ATTRIBUTE.finditer(text))
    spot = spots[data.draw(st.integers(0, len(spots) - 1))]
    if data.draw(st.booleans()):
        return text[:spot.start()] + text[spot.end():]  # delete it
    value = str(data.draw(NUMBERS))
    return text[:spot.start(2)] + value + text[spot.end(2):]


def _mutate_element(text: str, data) -> str:
    lines = text.splitlines(keepends=True)
    k = data.draw(st.integers(0, len(lines) - 1))
    if data.draw(st.booleans()):
        return "".join(lines[:k] + lines[k + 1:])  # drop a line (a step, or a tag)
    return "".join([*lines[:k + 1], lines[k], *lines[k + 1:]])  # repeat it


def _mutate_text(text: str, data) -> str:
    cut = data.draw(st.integers(0, len(text)))
    if data.draw(st.booleans()):
        return text[:cut]  # truncated
    garbage = data.draw(st.text(alphabet=st.sampled_from('<>/="\' abc1-&\n\x00'), max_size=12))
    return text[:cut] + garbage + text[cut:]


def _import(text: str) -> None:
    try:
        sched = from_xml(text, "fuzzed.xml")
    except InputError:
        return
    assert isinstance(sched, Schedule)
    check(sched)  # the verifier judges it without crashing


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_mutated_attributes_never_crash_the_importer(seed, data):
    text = seed
    for _ in range(data.draw(st.integers(1, 3))):
        text = _mutate_attribute(text, data)
    _import(text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_dropped_or_repeated_elements_never_crash_the_importer(seed, data):
    _import(_mutate_element(seed, data))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_truncated_or_garbled_text_never_crashes_the_importer(seed, data):
    _import(_mutate_text(seed, data))


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200))
def test_arbitrary_text_never_crashes_the_importer(text):
    _import(text)
