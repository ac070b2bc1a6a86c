"""What a profile measured: one curve (times over sizes and their fit) per rank pair and
per CUDA copy path, in a JSON form ``ccweave profile --raw`` writes and ``--load`` reads."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ccweave import outfile
from ccweave.errors import InputError
from ccweave.profile.fit import Fit, fit

FORMAT = "ccweave-profile/1"
COPY_PATHS = ("h2d", "d2h", "d2d", "peer")


@dataclass(frozen=True)
class Curve:
    """Median one-way seconds per message size, and their alpha-beta fit."""

    sizes: tuple[int, ...]
    times: tuple[float, ...]
    fit: Fit

    @classmethod
    def of(cls, sizes, times) -> Curve:
        sizes, times = tuple(int(s) for s in sizes), tuple(float(t) for t in times)
        return cls(sizes, times, fit(sizes, times))

    def to_dict(self) -> dict[str, object]:
        return {"sizes": list(self.sizes), "times_s": list(self.times), "fit": self.fit.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> Curve:
        return cls(tuple(int(s) for s in data["sizes"]),
                   tuple(float(t) for t in data["times_s"]), Fit.from_dict(data["fit"]))


@dataclass(frozen=True)
class PairFigure:
    """Ping-pong between ranks ``a`` < ``b``: one-way times, the same both ways."""

    a: int
    b: int
    curve: Curve


@dataclass(frozen=True)
class CopyFigure:
    """A CUDA copy on ``rank``'s GPU: ``h2d``, ``d2h``, ``d2d``, or ``peer`` to ``peer``'s."""

    rank: int
    path: str
    curve: Curve
    peer: int | None = None

    @property
    def label(self) -> str:
        return f"{self.path}->{self.peer}" if self.peer is not None else self.path


@dataclass(frozen=True)
class Profile:
    """Everything one ``ccweave profile`` run measured."""

    world_size: int
    backend: str
    nodes: tuple[tuple[int, ...], ...]
    """Ranks grouped by host."""
    pairs: tuple[PairFigure, ...]
    copies: tuple[CopyFigure, ...] = ()
    notes: tuple[str, ...] = ()
    workloads: tuple[tuple[str, int, float], ...] = ()
    """Calibration schedules run for real: (schedule name, size in bytes, seconds)."""

    def pair(self, a: int, b: int) -> PairFigure | None:
        low, high = min(a, b), max(a, b)
        return next((p for p in self.pairs if (p.a, p.b) == (low, high)), None)

    def to_dict(self) -> dict[str, object]:
        return {
            "format": FORMAT, "world_size": self.world_size, "backend": self.backend,
            "nodes": [list(n) for n in self.nodes],
            "pairs": [{"a": p.a, "b": p.b, **p.curve.to_dict()} for p in self.pairs],
            "copies": [{"rank": c.rank, "path": c.path, "peer": c.peer, **c.curve.to_dict()}
                       for c in self.copies],
            "notes": list(self.notes),
            "workloads": [list(w) for w in self.workloads],
        }

    @classmethod
    def from_dict(cls, data: object, source: str = "profile") -> Profile:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"{source}: not a ccweave profile (expected \"format\": "
                             f"\"{FORMAT}\"; write one with `ccweave profile --raw`)")
        try:
            profile = cls(int(data["world_size"]), str(data["backend"]),
                          tuple(tuple(int(r) for r in n) for n in data["nodes"]),
                          tuple(PairFigure(int(p["a"]), int(p["b"]), Curve.from_dict(p))
                                for p in data["pairs"]),
                          tuple(CopyFigure(int(c["rank"]), str(c["path"]), Curve.from_dict(c),
                                           None if c.get("peer") is None else int(c["peer"]))
                                for c in data.get("copies", [])),
                          tuple(str(n) for n in data.get("notes", [])),
                          tuple((str(name), int(size), float(seconds))
                                for name, size, seconds in data.get("workloads", [])))
        except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as error:
            raise InputError(f"{source}: malformed profile ({type(error).__name__}: "
                             f"{str(error)[:200]}); write it again with `ccweave profile --raw`"
                             ) from None
        profile.check(source)
        return profile

    def check(self, source: str) -> None:
        """Refuse what no measurement gives (``InputError`` naming the field): a world size
        outside 1..MAX_RANKS, a rank outside it, a size or time that is not a positive
        finite number, a fit without a positive finite bandwidth or a finite latency."""
        from ccweave.limits import MAX_RANKS, MAX_SIZE_BYTES

        def refuse(where: str, value: object, fix: str) -> None:
            raise InputError(f"{source}: {where} is {value!r}; {fix} (write the file again "
                             "with `ccweave profile --raw`)")

        if not 1 <= self.world_size <= MAX_RANKS:
            refuse("world_size", self.world_size, f"give 1..{MAX_RANKS} ranks")
        for number, node in enumerate(self.nodes):
            for rank in node:
                if not 0 <= rank < self.world_size:
                    refuse(f"nodes[{number}]", rank, "name ranks of the world")
        figures = [(f"pairs[{n}]", p.curve, (p.a, p.b)) for n, p in enumerate(self.pairs)]
        figures += [(f"copies[{n}]", c.curve, (c.rank,) if c.peer is None else (c.rank, c.peer))
                    for n, c in enumerate(self.copies)]
        for where, curve, ranks in figures:
            for rank in ranks:
                if not 0 <= rank < self.world_size:
                    refuse(f"{where}: rank", rank, "name ranks of the world")
            for size in curve.sizes:
                if not 0 < size <= MAX_SIZE_BYTES:
                    refuse(f"{where}.sizes", size, "give message sizes in bytes")
            for seconds in curve.times:
                if not 0 < seconds < math.inf:
                    refuse(f"{where}.times_s", seconds, "give measured seconds")
            fit = curve.fit  # its intercept may fall below 0 on noisy times; not its slope
            if not 0 < fit.bandwidth < math.inf or not math.isfinite(fit.alpha):
                refuse(f"{where}.fit", fit.to_dict(), "a fit has a positive bandwidth and a "
                       "finite latency")

    def save(self, path: str | Path) -> None:
        outfile.write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        from ccweave.jsonfile import read_json

        data = read_json(path, "write one with `ccweave profile --raw`")
        return cls.from_dict(data, str(path))
