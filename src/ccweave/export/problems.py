"""What is wrong with an MSCCL XML file, named by element and attribute."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


class Severity(str, enum.Enum):
    """How bad a problem is."""

    MALFORMED = "malformed"
    """The file cannot be read as an algorithm (missing attribute, dangling dependency,
    cycle, wrong chunk counts); the importer refuses it."""
    RUNTIME = "runtime"
    """The meaning is clear but an MSCCL runtime would refuse the file or could hang on it
    (a limit, a spelling, a dependency on a step that never signals)."""


@dataclass(frozen=True)
class XmlProblem:
    """One problem: where (``algo``, ``gpu 3 tb 2 step 5``), which attribute, what and
    how to fix it."""

    where: str
    message: str
    attribute: str | None = None
    severity: Severity = Severity.MALFORMED

    def __str__(self) -> str:
        attr = f" attribute {self.attribute!r}" if self.attribute else ""
        return f"{self.where}{attr}: {self.message}"


def summary(problems: Sequence[XmlProblem], limit: int = 3) -> str:
    """The first few problems on one line, with how many more there are."""
    shown = "; ".join(str(p) for p in problems[:limit])
    more = len(problems) - limit
    return shown + (f" (and {more} more)" if more > 0 else "")


def where(gpu: int | None = None, tb: int | None = None, step: int | None = None) -> str:
    """``gpu 3 tb 2 step 5`` as far as known; ``algo`` for the root."""
    parts = [f"{name} {value}" for name, value in (("gpu", gpu), ("tb", tb), ("step", step))
             if value is not None]
    return " ".join(parts) or "algo"
