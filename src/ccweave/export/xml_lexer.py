"""What the MSCCL runtimes' hand-written XML reader accepts, character by character.

Both runtimes read MSCCL files with a small reader of their own (NCCL's topology XML
reader), far stricter than XML: only spaces and newlines between elements (a tab is an
error), attributes separated by one space on the tag's line, values in double quotes of
at most 255 characters, no ``<?xml ...?>`` declaration, nothing after the root element.
:func:`lex_check` walks a text as that reader does and names the first place it stops.
"""

from __future__ import annotations

import re

from ccweave.export.problems import Severity, XmlProblem

MAX_STR_LEN = 255
_STOP = " >/\n\r"


class _Stop(Exception):
    def __init__(self, position: int, message: str) -> None:
        super().__init__(message)
        self.position = position


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def char(self) -> str:
        if self.at >= len(self.text):
            raise _Stop(self.at, "the file ends inside an element")
        c = self.text[self.at]
        self.at += 1
        return c

    def token(self, allow_value: bool) -> tuple[str, str | None, str]:
        """A name up to a stop character (or ``=`` and a quoted value)."""
        name = []
        while True:
            c = self.char()
            if c == "=":
                if not allow_value:
                    raise _Stop(self.at, f"unexpected '=' after {''.join(name)!r}")
                return "".join(name), self.value(), self.char()
            if c in _STOP:
                return "".join(name), None, c
            name.append(c)
            if len(name) >= MAX_STR_LEN:
                raise _Stop(self.at, f"a name longer than {MAX_STR_LEN - 1} characters")

    def value(self) -> str:
        if self.char() != '"':
            raise _Stop(self.at, "an attribute value must be in double quotes")
        value = []
        while (c := self.char()) != '"':
            value.append(c)
        if len(value) > MAX_STR_LEN:
            raise _Stop(self.at, f"an attribute value longer than {MAX_STR_LEN} characters "
                        "(the reader's buffer)")
        return "".join(value)


_SPACE = re.compile(r"[ \n\r]*")
_NAME = r"[^ >/\n\r=]"
_OPEN = re.compile(rf'<([^ >/\n\r="!?]{_NAME}{{0,253}})'
                   rf'((?: {_NAME}{{0,254}}="[^"]{{0,255}}")*)(/?)>')
_CLOSE = re.compile(rf"</({_NAME}{{1,254}})>")
"""Well-formed tags, the common case, matched whole; anything else is read character by
character (:func:`_element`), which names the first place the runtime's reader stops."""


def lex_check(text: str) -> list[XmlProblem]:
    """Where the runtimes' reader would refuse ``text`` (one RUNTIME problem), or []."""
    reader = _Reader(text)
    open_tags: list[str] = []
    at, end = 0, len(text)
    try:
        while True:
            at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
            if at >= end:
                if open_tags:
                    raise _Stop(at, f"<{open_tags[-1]}> is never closed")
                return []
            if text[at] != "<":
                where = "between elements" if open_tags else "outside the root element"
                raise _Stop(at + 1, f"expected '<' but found {text[at]!r} {where} (only spaces "
                            "and newlines may come between elements)")
            tag = _OPEN.match(text, at)
            if tag:
                if not tag.group(3):
                    open_tags.append(tag.group(1))
                at = tag.end()
                continue
            tag = _CLOSE.match(text, at)
            if tag:
                if not open_tags or open_tags.pop() != tag.group(1):
                    raise _Stop(tag.end(), f"</{tag.group(1)}> closes nothing open")
                at = tag.end()
                continue
            reader.at = at + 1
            _element(reader, open_tags)
            at = reader.at
    except _Stop as stop:
        line = text.count("\n", 0, stop.position) + 1
        return [XmlProblem(f"line {line}", f"the MSCCL runtimes' XML reader stops here: "
                           f"{stop}", None, Severity.RUNTIME)]


def _element(reader: _Reader, open_tags: list[str]) -> None:
    """One element (or comment) after its '<', character by character, as the runtime's
    reader goes; raises ``_Stop`` where it would stop."""
    text = reader.text
    name, _, c = reader.token(allow_value=False)
    if name.startswith("!--"):
        end = text.find("-->", reader.at - 1)
        if end < 0:
            raise _Stop(reader.at, "an unterminated comment")
        reader.at = end + 3
        return
    if name.startswith("?"):
        raise _Stop(reader.at, f"<{name}: the reader has no XML declaration; drop it")
    if not name and c == "/":
        name, _, c = reader.token(allow_value=False)
        if c != ">":
            raise _Stop(reader.at, f"unexpected {c!r} in closing tag </{name}")
        if not open_tags or open_tags.pop() != name:
            raise _Stop(reader.at, f"</{name}> closes nothing open")
        return
    while c == " ":
        _, _, c = reader.token(allow_value=True)
    if c == "/":
        _, _, c = reader.token(allow_value=False)
    elif c == ">":
        open_tags.append(name)
    if c != ">":
        raise _Stop(reader.at, f"expected '>' in <{name}> but found {c!r} (attributes "
                    "go on the tag's line, one space apart)")
