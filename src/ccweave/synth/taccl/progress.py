"""Progress of a long synthesis: which stage, the incumbent, the bound and the gap.

The strategy calls ``progress(Progress(...))``; a plain ``print`` works (each event
prints as one line), and :func:`live_display` renders the events on a terminal with
rich, updating one status line.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """One report: ``stage`` (routing, ordering, contiguity, schedule, select), what
    happens, and for solver stages the incumbent and the bound (the objective, in
    microseconds of makespan) and the relative gap."""

    stage: str
    message: str
    incumbent: float | None = None
    bound: float | None = None
    gap: float | None = None
    elapsed_s: float | None = None

    def __str__(self) -> str:
        parts = [f"taccl {self.stage}: {self.message}"]
        if self.incumbent is not None:
            parts.append(f"incumbent {self.incumbent:.4g} us")
        if self.bound is not None:
            parts.append(f"bound {self.bound:.4g} us")
        if self.gap is not None and math.isfinite(self.gap):
            parts.append(f"gap {100 * self.gap:.1f}%")
        if self.elapsed_s is not None:
            parts.append(f"{self.elapsed_s:.1f} s")
        return ", ".join(parts)


ProgressCallback = Callable[[Progress], None]


@contextlib.contextmanager
def live_display(console) -> Iterator[ProgressCallback | None]:
    """A progress callback that keeps one rich status line up to date on ``console``
    (a terminal), or ``None`` when the console is not a terminal."""
    if not console.is_terminal:
        yield None
        return
    with console.status("taccl: starting") as status:
        def show(event: Progress) -> None:
            if event.message == "solving":
                status.update(str(event))
            else:
                console.print(str(event))
                status.update(f"taccl {event.stage}: {event.message}")

        yield show
