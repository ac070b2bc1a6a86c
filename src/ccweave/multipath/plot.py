"""Point-to-point bandwidth against message size, one line per path set (``osu_bw``
style): what striping over more kinds of path buys at each size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ccweave import outfile
from ccweave.units import GB_PER_S, format_size


def plot_bandwidth(curves: Mapping[str, Sequence[tuple[int, float]]], title: str,
                   path: str | Path) -> Path:
    """Write a PNG of ``curves`` (label -> ``(size_bytes, bytes_per_second)`` points),
    size on a log-2 axis, GB/s linear; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    sizes: set[int] = set()
    for label, points in curves.items():
        xs = [size for size, _ in points]
        sizes.update(xs)
        axes.plot(xs, [bw / GB_PER_S for _, bw in points], marker="o", markersize=3,
                  label=label)
    axes.set_xscale("log", base=2)
    ticks = sorted(sizes)[::max(1, len(sizes) // 10)]
    axes.set_xticks(ticks, [format_size(s) for s in ticks], rotation=45, ha="right")
    axes.set_xlabel("message size")
    axes.set_ylabel("bandwidth (GB/s)")
    axes.set_title(title, parse_math=False)  # names may hold '$'
    axes.grid(True, alpha=0.3)
    axes.legend(title="paths")
    figure.tight_layout()
    path = Path(path)
    try:
        outfile.write_with(path, lambda temp: figure.savefig(temp, dpi=120, format="png"))
    finally:
        plt.close(figure)
    return path
