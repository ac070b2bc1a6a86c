"""``ccweave bench``'s results: nccl-tests rows with the model's prediction beside each
measured time, the figures a reader asks for (fastest measured, ``auto``'s pick against
it, ccweave against the incumbents, prediction error), JSON and PNG plots."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ccweave.bench.cases import AUTO, Entry, measured_key
from ccweave.bench.jobs import Measured
from ccweave.collectives import Collective


@dataclass(frozen=True)
class Row:
    """One algorithm at one size (as asked; the buffers hold whole elements per chunk,
    ``count`` of them, as nccl-tests rounds). Times in seconds, as the machine would take
    them (emulated times multiplied by the testbed's scale); ``predicted_s`` is ``None``
    for an incumbent; ``error`` is ``(predicted - measured) / measured``; ``measured_s``
    is the median round's, ``round_s`` every round's in the order they ran."""

    algorithm: str
    schedule: str
    native: bool
    size_bytes: int
    count: int
    measured_s: float
    predicted_s: float | None
    algbw_GBps: float
    busbw_GBps: float
    wrong: int
    round_s: tuple[float, ...] = ()

    @property
    def error(self) -> float | None:
        if self.predicted_s is None or not self.measured_s > 0:
            return None
        return (self.predicted_s - self.measured_s) / self.measured_s

    def to_dict(self) -> dict[str, object]:
        return asdict(self) | {"error": self.error}


@dataclass(frozen=True)
class SizeSummary:
    """What one size shows: the fastest ccweave schedule measured, ``auto``'s pick and
    how far it is from that fastest, ccweave against each incumbent."""

    size_bytes: int
    fastest: str | None
    fastest_s: float | None
    auto_schedule: str | None
    auto_over_fastest: float | None
    """auto's measured time / the fastest ccweave time measured (1.0: it picked it)."""
    speedup: dict[str, float]
    """incumbent -> its time / the best ccweave time that ships (auto's when present)."""


def rows_for(entries: Sequence[Entry], measured: Measured, sizes: Sequence[int]) -> list[Row]:
    rows = []
    for entry in entries:
        for size in sizes:
            raw = measured.rows.get(measured_key(entry, size))
            if raw is None:
                continue
            mode = raw["out_of_place"]
            if mode.get("time_us") is None:
                continue
            seconds = mode["time_us"] * 1e-6 * measured.scale
            factor = mode["busbw_GBps"] / mode["algbw_GBps"] if mode["algbw_GBps"] else 0.0
            algbw = raw["size_bytes"] / seconds / 1e9 if seconds > 0 else float("inf")
            rows.append(Row(entry.label, raw["schedule"], entry.native, size, raw["count"],
                            seconds, entry.predicted.get(size), algbw, algbw * factor,
                            int(mode.get("wrong") or 0),
                            tuple(us * 1e-6 * measured.scale
                                  for us in raw.get("round_times_us", ()))))
    return rows


def summarize(rows: Sequence[Row], sizes: Sequence[int]) -> list[SizeSummary]:
    summaries = []
    for size in sizes:
        here = [row for row in rows if row.size_bytes == size]
        ours = [row for row in here if not row.native]
        fastest = min(ours, key=lambda row: row.measured_s, default=None)
        auto = next((row for row in ours if row.algorithm == AUTO), None)
        shipped = auto or fastest
        speedup = {row.algorithm: row.measured_s / shipped.measured_s
                   for row in here if row.native and shipped is not None}
        summaries.append(SizeSummary(
            size, fastest.algorithm if fastest else None,
            fastest.measured_s if fastest else None,
            auto.schedule if auto else None,
            auto.measured_s / fastest.measured_s if auto and fastest else None, speedup))
    return summaries


@dataclass(frozen=True)
class ErrorStats:
    """``|predicted - measured| / measured`` over the rows with a prediction."""

    cases: int
    median: float
    worst: float
    worst_row: str


def error_stats(rows: Sequence[Row]) -> ErrorStats | None:
    errors = [(abs(row.error), row) for row in rows if row.error is not None]
    if not errors:
        return None
    worst, row = max(errors, key=lambda item: item[0])
    return ErrorStats(len(errors), statistics.median(e for e, _ in errors), worst,
                      f"{row.algorithm} at {row.size_bytes} B")


def plot(rows: Sequence[Row], collective: Collective, title: str, prefix: str) -> list[str]:
    """``PREFIX-busbw.png`` (measured busbw vs size per algorithm, the prediction dashed)
    and ``PREFIX-predicted.png`` (predicted vs measured time). Returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(8, 5))
    for name in dict.fromkeys(row.algorithm for row in rows):
        mine = sorted((row for row in rows if row.algorithm == name),
                      key=lambda row: row.size_bytes)
        sizes = [row.size_bytes for row in mine]
        line, = ax.plot(sizes, [row.busbw_GBps for row in mine], marker="o", label=name)
        predicted = [(row.size_bytes, row.size_bytes / row.predicted_s / 1e9
                      * collective.busbw_factor) for row in mine if row.predicted_s]
        if predicted:
            ax.plot(*zip(*predicted), linestyle="--", color=line.get_color(), alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s), measured; dashed: predicted")
    ax.set_title(title, parse_math=False)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    paths.append(f"{prefix}-busbw.png")
    _save(fig, paths[-1])
    pairs = [(row.measured_s, row.predicted_s, row.algorithm) for row in rows
             if row.predicted_s]
    if pairs:
        fig, ax = plt.subplots(figsize=(5.5, 5))
        for name in dict.fromkeys(p[2] for p in pairs):
            mine = [p for p in pairs if p[2] == name]
            ax.scatter([p[0] for p in mine], [p[1] for p in mine], label=name, s=18)
        low = min(min(p[0], p[1]) for p in pairs)
        high = max(max(p[0], p[1]) for p in pairs)
        ax.plot([low, high], [low, high], color="grey", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured time (s)")
        ax.set_ylabel("predicted time (s)")
        ax.set_title(f"{title}: predicted vs measured", parse_math=False)
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
        paths.append(f"{prefix}-predicted.png")
        _save(fig, paths[-1])
    return paths


def _save(fig, path: str) -> None:
    """Write a figure as PNG atomically (a failed write keeps the old file), then close it."""
    import matplotlib.pyplot as plt

    from ccweave import outfile

    try:
        outfile.write_with(path, lambda temp: fig.savefig(temp, dpi=120, format="png",
                                                          bbox_inches="tight"))
    finally:
        plt.close(fig)
