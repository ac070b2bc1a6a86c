"""Names from files and arguments reach the console through one helper
(``ccweave.errors.printable``, and ``_output.plain`` over it for rich): whatever a name
holds, every command prints it as visible text on its own line. U+202E (which turns the
rest of a terminal line around), zero-width and other format characters, line
separators and escape sequences were printed raw by some commands (``testbed up`` and
``show`` by all)."""

from __future__ import annotations

import contextlib
import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.cli import main
from ccweave.errors import printable

HOSTILE = "\u202eevil\x1b[31m\x1b]0;t\x07\n\u2066x\u200b\u2028[bold]y\u00a0\U000e0041"


def visible(text: str) -> bool:
    """Whether every character of ``text`` shows as itself (newlines end lines)."""
    return all(ch == "\n" or ch.isprintable() for ch in text)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_printable_shows_every_character_and_keeps_one_line(text):
    shown = printable(text)
    assert visible(shown) and "\n" not in shown
    if text.isprintable():
        assert shown == text  # printable names are left alone


def test_bidi_and_format_characters_are_escaped():
    assert printable("a\u202eb") == "a\\u202eb"
    assert printable("tag\U000e0041") == "tag\\U000e0041"
    assert printable("x\ud800") == "x\\ud800"
    assert printable("GPU 0 é 漢 😀") == "GPU 0 é 漢 😀"


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(argv))
    return code, out.getvalue()


def test_every_command_prints_a_hostile_name_as_text(tmp_path):
    topo = tmp_path / f"t{HOSTILE[:5]}.json"
    topo.write_text(json.dumps({"name": HOSTILE, "ranks": 2, "links": [
        {"src": 0, "dst": 1, "bw_GBps": 1, "duplex": True}]}))
    sched = tmp_path / "s\u202e.json"
    commands = [["topo", "show", str(topo)], ["testbed", "show", str(topo)],
                ["bounds", str(topo), "allgather", "--sizes", "1MB"],
                ["compare", str(topo), "allgather", "--sizes", "1MB", "--strategies", "ring"],
                ["synth", str(topo), "allgather", "-o", str(sched)],
                ["verify", str(sched)], ["simulate", str(sched), str(topo), "--sizes", "1MB"],
                ["export", str(sched), "-o", str(tmp_path / "a\u202e.xml")]]
    for argv in commands:
        code, out = _run(*argv)
        assert code == 0, (argv[:2], out)
        assert visible(out), (argv[:2], [ch for ch in out if not visible(ch)])
    code, out = _run("verify", str(tmp_path / "missing\u202e\x1b.json"))
    assert code == 2 and visible(out) and out.count("\n") == 1
