"""Printing for the CLI: rich tables for people, ``--json`` for programs."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ccweave.errors import OutputError, printable


class _Stdout:
    """Standard output as the CLI writes it: a write that fails for want of space, or to
    a closed descriptor, is one :class:`~ccweave.errors.OutputError` (one line, exit 2;
    it was an OSError or AttributeError traceback); a reader that went away stays a
    ``BrokenPipeError`` (the CLI exits 141, as ``cat`` does)."""

    def write(self, text: str) -> int:
        return self._do("write", text)

    def flush(self) -> None:
        self._do("flush")

    def _do(self, action: str, *args: object):
        stream = sys.stdout
        if stream is None:
            raise OutputError.of(None)
        try:
            return getattr(stream, action)(*args)
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as error:  # ValueError: a closed file object
            raise OutputError.of(error if isinstance(error, OSError) else None) from None

    def isatty(self) -> bool:
        return sys.stdout is not None and sys.stdout.isatty()

    def fileno(self) -> int:
        if sys.stdout is None:
            raise OSError("standard output is closed")
        return sys.stdout.fileno()

    @property
    def encoding(self) -> str:
        return getattr(sys.stdout, "encoding", None) or "utf-8"


class _Console(Console):
    """rich's console, but a reader that went away is the CLI's to handle (rich's own
    answer was a silent exit 1)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


stdout = _Stdout()
# wide when piped, so tables are not folded into unreadable columns
console = _Console(file=stdout, highlight=False, width=None if stdout.isatty() else 200)
progress_console = Console(stderr=True, highlight=False)


def progress_printer():
    """A callback that shows progress lines on a terminal, and nothing when piped."""
    return progress_line if progress_console.is_terminal else None


def progress_line(line: object) -> None:
    """One progress line on stderr, its names escaped (:func:`plain`)."""
    progress_console.print(plain(line))


def print_json(data: object) -> None:
    """``data`` as JSON; infinities and NaN (a zero time, a one-rank bound) become
    ``null``, so the output is JSON every parser reads."""
    json.dump(_finite(data), stdout, indent=1, default=_jsonable, allow_nan=False)
    stdout.write("\n")


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_finite(item) for item in value]
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy arrays and scalars
        return _finite(value.tolist())
    return value


def _jsonable(value: object) -> object:
    if hasattr(value, "value"):  # enums
        return value.value
    if hasattr(value, "tolist"):  # numpy
        return value.tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def plain(value: object) -> str:
    """``value`` as text that prints as itself: control characters (terminal escape
    sequences, newlines) shown as ``\\xNN`` and rich markup escaped. For names and paths
    that come from files or arguments."""
    return escape(printable(value))


def wrote(path: object, replaced: bool) -> str:
    """``wrote PATH``, or ``replaced PATH`` when a file was there before."""
    return f"{'replaced' if replaced else 'wrote'} {plain(path)}"


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]],
                highlight: Sequence[bool] | None = None) -> None:
    table = Table(title=plain(title), title_justify="left", header_style="bold")
    for number, column in enumerate(columns):
        table.add_column(column, justify="left" if number == 0 else "right")
    for number, row in enumerate(rows):
        style = "bold green" if highlight and highlight[number] else None
        table.add_row(*(plain(fmt(cell)) for cell in row), style=style)
    console.print(table)


def fmt(value: object) -> str:
    """A float as a figure that shows its value: two decimals from 1 to 1e9; below 1 (from
    1e-4) and in exponent form beyond, three significant digits and a fourth where it is
    not zero (0.0375, 0.01875, 0.700). Every digit shown is the value's, correctly
    rounded, and a value that is not zero never shows as zero; other values as ``str``."""
    if not isinstance(value, float):
        return str(value)
    magnitude = abs(value)
    if not math.isfinite(value):
        return str(value)
    if value == 0 or 1 <= magnitude < 1e9:
        return f"{value:.2f}"
    if 1e-4 <= magnitude < 1:
        return _drop_a_zero(f"{value:.{3 - math.floor(math.log10(magnitude))}f}")
    mantissa, _, exponent = f"{value:.3e}".partition("e")
    return f"{_drop_a_zero(mantissa)}e{exponent}"


def _drop_a_zero(digits: str) -> str:
    """Four significant digits as three when the fourth is a zero."""
    return digits[:-1] if digits.endswith("0") else digits


TIME_UNITS = (("us", 1e-6), ("ms", 1e-3), ("s", 1.0))


def time_unit(seconds: Iterable[float]) -> tuple[str, float]:
    """One unit for a table's times, from its longest (``us`` below 10 ms, ``ms`` below
    10 s, else ``s``), so a column reads ``1370.25 ms``, not ``1.37e+06 us``: returns the
    label and the seconds per unit."""
    longest = max((abs(t) for t in seconds if math.isfinite(t)), default=0.0)
    for label, scale in TIME_UNITS[:-1]:
        if longest < 1e4 * scale:
            return label, scale
    return TIME_UNITS[-1]


def add_json_flag(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
