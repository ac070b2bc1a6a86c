"""A model's choices as the rules of NCCL's example tuner plugin (``nccl_tuner.conf``).

NVIDIA/nccl ``plugins/tuner/example`` reads a CSV (``NCCL_TUNER_CONFIG_FILE``, default
``nccl_tuner.conf`` in the working directory), one rule a line::

    collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff

and, for each call, marks the first rule that matches (collective, ``min_bytes <= size <=
max_bytes``, nodes, ranks; ``-1`` matches any) as the cheapest in NCCL's cost table and
sets its channels. :func:`rules` turns a :class:`~ccweave.nccl.model.TuningModel` into
rules that make the plugin choose exactly what the model chooses, at every size from 0 to
the largest ``size_t``: one rule per run of sizes with the same algorithm, protocol and
channels.

What the plugin does that the rules must allow for (``plugin.c``): it sets one channel
before it looks for a rule, and keeps it when no rule matches or the rule says ``-1``; so
every rule names its channels and the rules cover every size (NCCL then runs on one
channel only for communicators of another shape, whose calls match no rule). Sizes are
NCCL's ``nBytes``: the whole buffer for allgather and reduce-scatter (nccl-tests' size).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ccweave import outfile
from ccweave.nccl import constants as C
from ccweave.nccl.model import TuningModel, pick

MAX_BYTES = 2**64 - 1
"""The largest ``size_t``: the last rule of each collective reaches it."""

HEADER = ("collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,"
          "numPipeOps,regBuff")


@dataclass(frozen=True)
class Rule:
    """One line of the tuner file."""

    collective: str
    min_bytes: int
    max_bytes: int
    algorithm: str
    protocol: str
    channels: int
    nodes: int
    ranks: int
    pipe_ops: int = -1
    reg_buff: int = -1

    def line(self) -> str:
        return ",".join(str(v) for v in (
            self.collective, self.min_bytes, self.max_bytes, self.algorithm, self.protocol,
            self.channels, self.nodes, self.ranks, self.pipe_ops, self.reg_buff))

    def matches(self, collective: str, nbytes: int) -> bool:
        return self.collective == collective and self.min_bytes <= nbytes <= self.max_bytes


def rules(model: TuningModel, collectives: Iterable[str] = C.FUNCTIONS,
          max_bytes: int = MAX_BYTES) -> list[Rule]:
    """Rules for every size 0..``max_bytes`` of each collective: what ``model`` chooses.
    A collective the model has no candidate for (a fitted model's unmeasured ones) gets
    none: NCCL keeps its own choice there."""
    system = model.system
    found: list[Rule] = []
    for name in collectives:
        func = C.FUNCTIONS.index(name)
        if not model.candidates(func):
            continue
        for lo, hi, (algo, proto) in _segments(model, func, max_bytes):
            for start, end, channels in _channel_runs(model, algo, proto, lo, hi):
                rule = Rule(name, start, end, C.ALGORITHMS[algo], C.PROTOCOLS[proto],
                            channels, system.nodes, system.ranks)
                if found and _extends(found[-1], rule):
                    found[-1] = Rule(**{**found[-1].__dict__, "max_bytes": end})
                else:
                    found.append(rule)
    return found


def _extends(last: Rule, rule: Rule) -> bool:
    return (last.collective == rule.collective and last.max_bytes + 1 == rule.min_bytes
            and (last.algorithm, last.protocol, last.channels)
            == (rule.algorithm, rule.protocol, rule.channels))


def _choice(model: TuningModel, func: int, nbytes: int) -> tuple[int, int]:
    algo, proto, _ = pick(model.cost_table(func, nbytes))
    return algo, proto


def _segments(model: TuningModel, func: int, max_bytes: int
              ) -> list[tuple[int, int, tuple[int, int]]]:
    """Runs of sizes with one (algorithm, protocol): the choice is sampled at every size
    where two candidates' times may cross (their lines meet, or a line changes at a
    breakpoint) and on both sides; between two samples that differ the change is found by
    bisection."""
    samples = sorted({min(max(x, 0), max_bytes) for x in _critical(model, func, max_bytes)})
    choices = [_choice(model, func, n) for n in samples]
    runs: list[tuple[int, int, tuple[int, int]]] = []
    start = samples[0]
    for (a, ca), (b, cb) in zip(zip(samples, choices), zip(samples[1:], choices[1:])):
        if ca == cb:
            continue
        while b - a > 1:  # the last size with ca
            mid = (a + b) // 2
            if _choice(model, func, mid) == ca:
                a = mid
            else:
                b = mid
        runs.append((start, a, ca))
        start = b
    runs.append((start, max_bytes, choices[-1]))
    return runs


def _critical(model: TuningModel, func: int, max_bytes: int) -> list[int]:
    """Sizes around every point where the choice may change."""
    candidates = model.candidates(func)
    edges = [0, *[b for b in model.breakpoints() if b < max_bytes], max_bytes]
    points: set[float] = set(edges)
    for lo, hi in itertools.pairwise(edges):
        lines = [model.line(func, a, p, lo) for a, p in candidates]
        for i, first in enumerate(lines):
            for second in lines[i + 1:]:
                if first is None or second is None:
                    continue
                (l1, b1), (l2, b2) = first, second
                slope = 1 / (1000 * b1) - 1 / (1000 * b2)
                if slope != 0:
                    cross = (l2 - l1) / slope
                    if lo <= cross <= hi:
                        points.add(cross)
    sizes: set[int] = set()
    for x in points:
        base = math.floor(x)
        sizes.update((base - 1, base, base + 1, base + 2))
    return sorted(sizes)


def _channel_runs(model: TuningModel, algo: int, proto: int, lo: int, hi: int
                  ) -> list[tuple[int, int, int]]:
    """``[lo, hi]`` cut where NCCL's channel count for (algo, proto) changes."""
    runs: list[tuple[int, int, int]] = []
    start = lo
    while start <= hi:
        channels = model.channels(algo, proto, start)
        end = _last_with(model, algo, proto, start, hi, channels)
        runs.append((start, end, channels))
        start = end + 1
    return runs


def _last_with(model: TuningModel, algo: int, proto: int, lo: int, hi: int,
               channels: int) -> int:
    """The last size in ``[lo, hi]`` with ``channels`` (channels never fall with size)."""
    if model.channels(algo, proto, hi) == channels:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if model.channels(algo, proto, mid) == channels:
            lo = mid
        else:
            hi = mid
    return lo


def lookup(rules: Sequence[Rule], collective: str, nbytes: int) -> Rule | None:
    """The plugin's match for a call: the first rule of ``collective`` holding ``nbytes``."""
    return next((r for r in rules if r.matches(collective, nbytes)), None)


def render(found: Sequence[Rule], comments: Iterable[str] = ()) -> str:
    """The file's text: ``#`` comment lines (each cut to one line), the header, the rules."""
    lines = ["# " + " ".join(str(c).split()) for c in comments]
    lines.append("# " + HEADER)
    lines += [rule.line() for rule in found]
    return "\n".join(lines) + "\n"


def write(path: str | Path, found: Sequence[Rule], comments: Iterable[str] = ()) -> None:
    """Write the rules to ``path`` (atomically, as every ccweave output)."""
    outfile.write_text(path, render(found, comments))
