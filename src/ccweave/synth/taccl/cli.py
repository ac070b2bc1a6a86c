"""What ``ccweave synth`` needs for ``--strategy taccl``: its flags as options, a live
progress display, and the solver's notes said plainly."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ccweave.schedule import Schedule
from ccweave.synth.taccl.progress import live_display
from ccweave.units import parse_size

STRATEGY = "taccl"


def add_flags(parser) -> None:
    """``--sketch``, ``--profile``, ``--size``, ``--time-limit`` and
    ``--contiguity-time-limit``."""
    parser.add_argument("--sketch", metavar="FILE",
                        help="communication sketch for --strategy taccl: ccweave's JSON "
                             "(docs/sketches.md), TACCL's own sketch file, or the name of a "
                             "sketch read off the topology (relay-per-nic, relay-all, "
                             "fully-connected, one-node); default: those read off it")
    parser.add_argument("--profile", metavar="FILE",
                        help="TACCL profiled topology (its --topology-file, e.g. "
                             "topo-ndv2-1MB.json) whose link costs taccl uses; see "
                             "--option profile_chunk=, profile_scale=")
    parser.add_argument("--size", metavar="SIZE",
                        help="size to synthesize for (taccl), e.g. 64MB (default 64MB)")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS",
                        help="time budget in seconds (taccl, default 120); a solver stage at "
                             "its limit returns the best schedule so far with its MIP gap")
    parser.add_argument("--contiguity-time-limit", type=float, metavar="SECONDS",
                        help="most seconds of the contiguity stage per candidate, shared "
                             "by the orderings tried (taccl, default 3)")


def flag_options(args) -> dict[str, object]:
    """The flags that were given, as strategy options."""
    options: dict[str, object] = {}
    if getattr(args, "sketch", None) is not None:
        options["sketch"] = args.sketch
    if getattr(args, "size", None) is not None:
        options["size"] = parse_size(args.size)
    if getattr(args, "time_limit", None) is not None:
        options["time_limit"] = args.time_limit
    if getattr(args, "profile", None) is not None:
        options["profile"] = args.profile
    if getattr(args, "contiguity_time_limit", None) is not None:
        options["contiguity_time_limit"] = args.contiguity_time_limit
    return options


@contextlib.contextmanager
def progress_options(strategy: str, console) -> Iterator[dict[str, object]]:
    """``{"progress": callback}`` for taccl on a terminal (a live status line), else {}."""
    if strategy != STRATEGY:
        yield {}
        return
    with live_display(console) as show:
        yield {} if show is None else {"progress": show}


def notes(schedule: Schedule) -> list[str]:
    """Lines for people: how each solver stage ended, and any fallback."""
    lines = []
    report = schedule.metadata.get("taccl")
    if isinstance(report, dict):
        routings = report.get("routings") or [report.get("routing")]
        for facts in routings:
            if isinstance(facts, dict) and facts.get("note"):
                lines.append(f"routing ({facts.get('method', 'trees')}): {facts['note']}")
        ordering = report.get("ordering")
        if isinstance(ordering, dict) and ordering.get("heuristic"):
            lines.append(f"ordering: heuristic {ordering['heuristic']}")
        facts = report.get("contiguity")
        if isinstance(facts, dict) and facts.get("note"):
            lines.append(f"contiguity: {facts['note']}")
    if schedule.metadata.get("export"):
        lines.append(f"export: {schedule.metadata['export']}")
    if schedule.metadata.get("fallback"):
        lines.append(str(schedule.metadata["fallback"]))
    return lines
