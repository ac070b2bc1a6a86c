"""Printing for the CLI: rich tables for people, ``--json`` for programs."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.table import Table

# wide when piped, so tables are not folded into unreadable columns
console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
progress_console = Console(stderr=True, highlight=False)


def progress_printer():
    """A callback that shows progress lines on a terminal, and nothing when piped."""
    return progress_console.print if progress_console.is_terminal else None


def print_json(data: object) -> None:
    json.dump(data, sys.stdout, indent=1, default=_jsonable)
    sys.stdout.write("\n")


def _jsonable(value: object) -> object:
    if hasattr(value, "value"):  # enums
        return value.value
    if hasattr(value, "tolist"):  # numpy
        return value.tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]],
                highlight: Sequence[bool] | None = None) -> None:
    table = Table(title=title, title_justify="left", header_style="bold")
    for number, column in enumerate(columns):
        table.add_column(column, justify="left" if number == 0 else "right")
    for number, row in enumerate(rows):
        style = "bold green" if highlight and highlight[number] else None
        table.add_row(*(fmt(cell) for cell in row), style=style)
    console.print(table)


def fmt(value: object) -> str:
    """Floats in fixed point: two decimals, or three significant digits below 1."""
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            return str(value)
        if value == 0 or abs(value) >= 1:
            return f"{value:.2f}"
        if abs(value) < 1e-9:
            return f"{value:.3g}"
        return f"{value:.{2 - math.floor(math.log10(abs(value)))}f}"
    return str(value)


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
