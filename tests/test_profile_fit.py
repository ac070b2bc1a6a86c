"""The alpha-beta fit: known alpha and bandwidth come back, noise lowers R^2, bad data is
refused with a reason."""

from __future__ import annotations

import numpy as np
import pytest

from ccweave.errors import InputError
from ccweave.profile.fit import Fit, fit

SIZES = [4096 * 2**k for k in range(15)]  # 4KB .. 64MB


def times(alpha: float, bw: float, sizes=SIZES) -> list[float]:
    return [alpha + s / bw for s in sizes]


@pytest.mark.parametrize("weighting", ["relative", "uniform"])
def test_exact_data_gives_alpha_bandwidth_and_r2_one(weighting):
    result = fit(SIZES, times(5e-6, 12.5e9), weighting)
    assert result.alpha == pytest.approx(5e-6, rel=1e-6)
    assert result.bandwidth == pytest.approx(12.5e9, rel=1e-9)
    assert result.r2 == pytest.approx(1.0) and result.points == len(SIZES)
    assert result.time(2**20) == pytest.approx(5e-6 + 2**20 / 12.5e9)


def test_noise_lowers_r2_and_relative_weights_keep_alpha():
    rng = np.random.default_rng(7)
    clean = np.array(times(20e-6, 25e9))
    noisy = clean * rng.lognormal(0.0, 0.05, clean.size)
    relative, uniform = fit(SIZES, noisy), fit(SIZES, noisy, "uniform")
    assert 0.9 < relative.r2 < 1.0
    assert relative.bandwidth == pytest.approx(25e9, rel=0.1)
    assert relative.alpha == pytest.approx(20e-6, rel=0.2)
    # plain least squares lets the 64MB point decide: alpha is lost in its noise
    assert abs(uniform.alpha - 20e-6) > abs(relative.alpha - 20e-6)
    very = clean * rng.lognormal(0.0, 0.5, clean.size)
    assert fit(SIZES, very).r2 < relative.r2


def test_repeated_sizes_are_fitted_together():
    sizes = [s for s in SIZES[:6] for _ in range(3)]
    assert fit(sizes, times(1e-6, 1e9, sizes)).bandwidth == pytest.approx(1e9)


def test_a_burst_shows_as_negative_alpha_with_the_true_slope():
    burst, rate = 128 * 1024, 100e6
    sizes = SIZES[6:]  # all above the burst
    result = fit(sizes, [(s - burst) / rate + 50e-6 for s in sizes])
    assert result.bandwidth == pytest.approx(rate, rel=1e-9) and result.alpha < 0


@pytest.mark.parametrize(("sizes", "data", "match"), [
    ([1024, 1024], [1e-6, 2e-6], "two distinct message sizes"),
    ([1024, 2048], [1e-6], "2 sizes but 1 times"),
    ([1024, 2048], [1e-6, -1.0], "positive and finite"),
    ([1024, 2048, 4096], [3e-6, 2e-6, 1e-6], "does not grow with size"),
])
def test_bad_data_is_refused(sizes, data, match):
    with pytest.raises(InputError, match=match):
        fit(sizes, data)
    with pytest.raises(InputError, match="weighting"):
        fit(SIZES, times(1e-6, 1e9), "log")


def test_fit_round_trips_through_its_dict():
    result = fit(SIZES, times(3e-6, 7e9))
    again = Fit.from_dict(result.to_dict())
    assert again.alpha == pytest.approx(result.alpha) and again.r2 == result.r2
    assert again.bandwidth == pytest.approx(result.bandwidth)
