"""The one JSON reader: nesting measured before parsing (a reader, a ``repr`` or a copy
would recurse that deep), non-finite constants refused naming where they sit."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.errors import InputError
from ccweave.jsonfile import MAX_DEPTH, nesting_depth, parse, read_json

TRICKY_TEXT = st.text(alphabet=st.sampled_from('[]{}"\\ax\u00e9\u202e'), max_size=6)
VALUES = st.recursive(st.one_of(st.none(), st.integers(), TRICKY_TEXT),
                      lambda inner: st.one_of(st.lists(inner, max_size=3),
                                              st.dictionaries(TRICKY_TEXT, inner, max_size=3)),
                      max_leaves=40)


def depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(value=VALUES, ascii_only=st.booleans())
def test_nesting_depth_is_the_documents_depth(value, ascii_only):
    """Brackets, quotes and backslashes inside strings do not count."""
    assert nesting_depth(json.dumps(value, ensure_ascii=ascii_only)) == depth(value)


def test_deep_documents_are_refused_before_parsing(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(InputError, match=r"deep\.json: arrays or objects nested too deep to "
                                         r"read \(100,001 levels, at most 64\) \(the fix\)"):
        read_json(path, "the fix")
    shallow = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert parse(shallow, "ok.json", "fix") is not None


@pytest.mark.parametrize(("text", "where"), [
    ('{"links": [{"bw": 1}, {"bw": -Infinity}]}', "links[1]: field 'bw' is -Infinity"),
    ('{"remote_invbw": Infinity}', "field 'remote_invbw' is Infinity"),
    ('{"node_betas_list": [23, NaN]}', "node_betas_list[1] is NaN"),
    ("NaN", "the document is NaN"),
])
def test_non_finite_numbers_are_named_where_they_sit(text, where):
    with pytest.raises(InputError, match=r"f\.json") as error:
        parse(text, "f.json", "fix")
    assert where in str(error.value) and "give a finite number" in str(error.value)
