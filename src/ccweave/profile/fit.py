"""The alpha-beta fit: ``t(size) = alpha + size / bandwidth`` by weighted least squares.

Sizes span four or more decades, so plain least squares lets the largest messages decide
everything and leaves alpha to noise. We weight each point by ``1 / t`` (relative
residuals), which fits small and large messages alike; ``r2`` is the coefficient of
determination under the same weights (1.0: a straight line explains every point).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ccweave.errors import InputError

WEIGHTINGS = ("relative", "uniform")


@dataclass(frozen=True)
class Fit:
    """A fitted path: ``alpha`` seconds, ``bandwidth`` bytes/second, quality ``r2``."""

    alpha: float
    bandwidth: float
    r2: float
    points: int
    weighting: str = "relative"

    def time(self, size: float) -> float:
        """Predicted seconds for a message of ``size`` bytes."""
        return self.alpha + size / self.bandwidth

    def to_dict(self) -> dict[str, object]:
        return {"alpha_us": self.alpha * 1e6, "bw_GBps": self.bandwidth / 1e9, "r2": self.r2,
                "points": self.points, "weighting": self.weighting}

    @classmethod
    def from_dict(cls, data: dict) -> Fit:
        return cls(float(data["alpha_us"]) * 1e-6, float(data["bw_GBps"]) * 1e9,
                   float(data["r2"]), int(data["points"]), str(data.get("weighting",
                                                                      "relative")))


def fit(sizes: Sequence[float], times: Sequence[float], weighting: str = "relative") -> Fit:
    """Fit ``times[i] ~ alpha + sizes[i] / bandwidth``.

    Parameters
    ----------
    sizes: message sizes in bytes (at least two distinct ones).
    times: seconds per message, one per size (repeats allowed).
    weighting: ``relative`` (residuals over t, the default) or ``uniform`` (plain least
        squares).

    The intercept is not constrained: a negative ``alpha`` says the curve bends over the
    sizes (a burst allowance, a protocol switch) or that latency is below what they
    resolve; topologies built from a fit clamp it to 0. Raises ``InputError`` when the
    data cannot give a positive bandwidth.
    """
    if weighting not in WEIGHTINGS:
        raise InputError(f"weighting {weighting!r}: use one of {', '.join(WEIGHTINGS)}")
    x = np.asarray(sizes, dtype=float)
    y = np.asarray(times, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise InputError(f"fit: {x.size} sizes but {y.size} times; give one time per size")
    if len(np.unique(x)) < 2:
        raise InputError("fit: needs at least two distinct message sizes")
    if not (np.all(np.isfinite(y)) and np.all(y > 0) and np.all(x >= 0)):
        raise InputError("fit: times must be positive and finite, sizes non-negative")
    w = 1.0 / y if weighting == "relative" else np.ones_like(y)
    design = np.column_stack([np.ones_like(x), x]) * w[:, None]
    (alpha, slope), *_ = np.linalg.lstsq(design, y * w, rcond=None)
    if not slope > 0:
        raise InputError("fit: time does not grow with size, so no bandwidth can be fitted; "
                         "measure over a wider range of sizes (e.g. 4KB:64MB)")
    predicted = alpha + slope * x
    weights = w * w
    mean = np.sum(weights * y) / np.sum(weights)
    total = float(np.sum(weights * (y - mean) ** 2))
    residual = float(np.sum(weights * (y - predicted) ** 2))
    r2 = 1.0 - residual / total if total > 0 else 1.0
    return Fit(float(alpha), float(1.0 / slope), r2, int(x.size), weighting)
