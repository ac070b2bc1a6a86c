"""Reading the JSON files ccweave takes (schedules, plans, topologies, TACCL sketches and
profiles) with one kind of error: the file, what is wrong, and how to make a good one.

Two things Python's ``json`` lets through are refused here, before any reader walks the
data: nesting deeper than :data:`MAX_DEPTH` (a reader, a ``repr`` in an error message or a
copy would recurse that deep and fail with a RecursionError) and the non-standard
constants ``NaN``, ``Infinity`` and ``-Infinity`` (RFC 8259 has no such numbers; a figure
that is infinite is no figure), named by where they sit in the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ccweave.errors import InputError

MAX_DEPTH = 64
"""Arrays and objects nested at most this deep: ccweave's files nest 4 to 8 levels (a plan
holds schedules, a schedule rows, a row its deps); TACCL's sketches 3."""

_BRACKET_STEP = np.zeros(256, dtype=np.int8)
_BRACKET_STEP[[ord("["), ord("{")]] = 1
_BRACKET_STEP[[ord("]"), ord("}")]] = -1
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'[]{}"')


def read_json(path: str | Path, fix: str, error: type[InputError] = InputError) -> object:
    """The parsed content of ``path`` (read once, within :data:`ccweave.limits.MAX_INPUT_BYTES`:
    :mod:`ccweave.infile`); ``error`` names the file and says ``fix`` when it is missing, a
    directory, not UTF-8, too large, not JSON, nested deeper than :data:`MAX_DEPTH` or
    holding NaN or an infinity."""
    from ccweave.infile import read_text

    return parse(read_text(path, fix, error=error), str(path), fix, error)


def parse(text: str, source: str, fix: str, error: type[InputError] = InputError) -> object:
    """:func:`read_json` on text already read; ``source`` names it in errors."""
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise error(f"{source}: arrays or objects nested too deep to read ({depth:,} levels, "
                    f"at most {MAX_DEPTH}) ({fix})")
    constants: list[_Constant] = []
    try:
        data = json.loads(text, parse_constant=lambda name: _remember(constants, name))
    except json.JSONDecodeError as problem:
        raise error(f"{source}: not valid JSON: {problem.msg} at line {problem.lineno} "
                    f"column {problem.colno} ({fix})") from None
    except RecursionError:  # not reached past the depth check; kept as a last guard
        raise error(f"{source}: arrays or objects nested too deep to read ({fix})") from None
    except ValueError:  # Python reads integers of at most 4300 digits
        raise error(f"{source}: holds a number too long to read (over 4300 digits) "
                    f"({fix})") from None
    if constants:
        where = _place(data, constants[0])
        raise error(f"{source}: {where} is {constants[0].name}; give a finite number "
                    "(JSON has no NaN or infinities)")
    return data


def nesting_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON ``text`` (brackets inside strings do not
    count), found without recursion in linear time: the escapes that hide a quote or a
    backslash dropped, then everything but brackets and quotes, then numpy counts (a
    million-row schedule in a small fraction of the time ``json.loads`` takes)."""
    raw = text.encode("utf-8", "surrogatepass")  # multi-byte characters hold no ASCII
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    data = np.frombuffer(raw.translate(None, _NOT_STRUCTURE), dtype=np.uint8)
    inside = (np.cumsum(data == ord('"'), dtype=np.int32) & 1).astype(bool)
    steps = _BRACKET_STEP[data]
    steps[inside] = 0
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))


class _Constant:
    """Where ``NaN``, ``Infinity`` or ``-Infinity`` stood in the parsed data."""

    def __init__(self, name: str) -> None:
        self.name = name


def _remember(constants: list[_Constant], name: str) -> _Constant:
    constants.append(_Constant(name))
    return constants[-1]


def _place(data: object, target: _Constant) -> str:
    """Where ``target`` sits, as readers name fields: ``links[4]: field 'bw_GBps'``,
    ``field 'remote_invbw'``, ``node_betas_list[1]`` (iterative; the depth is checked)."""
    stack: list[tuple[object, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if value is target:
            return _path_text(path)
        if isinstance(value, dict):
            stack.extend((item, (*path, str(key))) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((item, (*path, number)) for number, item in enumerate(value))
    return "a value"


def _path_text(path: tuple[str | int, ...]) -> str:
    if not path:
        return "the document"
    *head, last = path
    prefix = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in head).lstrip(".")
    if isinstance(last, int):
        return f"{prefix}[{last}]" if prefix else f"element [{last}]"
    return f"{prefix}: field {last!r}" if prefix else f"field {last!r}"


def finite(data: object) -> object:
    """``data`` with every NaN or infinity as ``None``: what ccweave writes, its readers
    read back (they refuse non-finite numbers; a MILP's gap at a time limit is infinite)."""
    if isinstance(data, float):
        return data if np.isfinite(data) else None
    if isinstance(data, dict):
        return {key: finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(value) for value in data]
    return data
