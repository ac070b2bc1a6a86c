"""NCCL's model fitted to measured times, so a tuner file follows the machine, not NCCL's
defaults, from few measurements.

NCCL's model gives every (collective, algorithm, protocol) a time of the form
``latency + bytes / bandwidth`` with NCCL's corrections (the tree's factor per size, the
ring's plateau; :meth:`ccweave.nccl.model.TuningModel.line`). The fit keeps that shape and
scales each combination's latency by ``a`` and its transfer time by ``b``, minimising the
relative error of the measured times. First one pair of scales is fitted per collective
over all its measurements (how far the machine is from NCCL's figures as a whole); each
combination's own pair is then pulled weakly towards it, so that one measurement fixes
the term it sees and the other follows the machine's. Two measurements per combination (a
small size and a large one) fix both.

Only measured combinations are candidates in the fitted model: an unmeasured one keeps
NCCL's figures, which are not comparable with measured times. A combination NCCL does not
cost on the machine (a sweep can force it; a tuner cannot choose it) is left out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from ccweave.errors import InputError
from ccweave.nccl import constants as C
from ccweave.nccl.measured import Measurement
from ccweave.nccl.model import TuningModel

PRIOR_WEIGHT = 0.05
"""How strongly each scale is pulled towards its prior (against a relative error of 1 per
measurement)."""


@dataclass(frozen=True)
class Scale:
    """The fitted scales of one combination and how well they fit."""

    collective: str
    algorithm: str
    protocol: str
    latency: float
    transfer: float
    measurements: int
    worst_error: float
    """Largest relative error of the fitted time over its measurements."""


@dataclass(frozen=True)
class Fitted:
    """The fitted model, the scales per combination, and the measurements left out."""

    model: TuningModel
    scales: tuple[Scale, ...]
    ignored: tuple[str, ...]
    """Why measurements were left out, one line per kind of reason."""


def fit(model: TuningModel, measurements: Sequence[Measurement]) -> Fitted:
    """``model`` with each measured combination's latency and bandwidth fitted to
    ``measurements``, and only those combinations enabled.

    Left out (and said in ``ignored``): measurements on another number of ranks or nodes,
    and combinations NCCL does not cost on this machine (its cost table holds -1 there,
    so a tuner cannot choose them: tree for broadcast, NVLS without NVSwitch...).
    """
    system = model.system
    groups: dict[tuple[int, int, int], list[Measurement]] = defaultdict(list)
    ignored: dict[str, int] = defaultdict(int)
    for m in measurements:
        if m.ranks not in (-1, system.ranks) or m.nodes not in (-1, system.nodes):
            ignored[f"measured on {m.ranks} ranks / {m.nodes} nodes, not {system.ranks} / "
                    f"{system.nodes}"] += 1
            continue
        key = _key(m)
        if key[1:] not in model.candidates(key[0]):
            ignored[f"{m.collective} {m.algorithm}/{m.protocol}: NCCL does not run it on "
                    f"{system.name} by default, so a tuner cannot choose it"] += 1
            continue
        groups[key].append(m)
    if not groups:
        raise InputError(f"--measured: no measurement NCCL's tuner could use on "
                         f"{system.name}: " + "; ".join(f"{n} {why}"
                                                         for why, n in ignored.items()))
    latencies = [[list(row) for row in func] for func in model.latencies]
    bandwidths = [[list(row) for row in func] for func in model.bandwidths]
    enabled = [[[False] * len(C.PROTOCOLS) for _ in C.ALGORITHMS] for _ in C.FUNCTIONS]
    scales = []
    shared = {f: _solve([m for key, ms in groups.items() if key[0] == f for m in ms],
                        model, (1.0, 1.0))
              for f in {key[0] for key in groups}}
    for (f, a, p), group in sorted(groups.items()):
        lat_scale, transfer_scale, worst = _solve(group, model, shared[f][:2])
        latencies[f][a][p] = model.latencies[f][a][p] * lat_scale
        bandwidths[f][a][p] = model.bandwidths[f][a][p] / transfer_scale
        enabled[f][a][p] = True
        scales.append(Scale(C.FUNCTIONS[f], C.ALGORITHMS[a], C.PROTOCOLS[p], lat_scale,
                            transfer_scale, len(group), worst))
    used = sum(len(g) for g in groups.values())
    fitted = model.with_tables(_frozen(latencies), _frozen(bandwidths), _frozen(enabled),
                               f"NCCL's model fitted to {used} measurements")
    return Fitted(fitted, tuple(scales),
                  tuple(f"{n} measurement(s) {why}" for why, n in ignored.items()))


def _key(m: Measurement) -> tuple[int, int, int]:
    return (C.FUNCTIONS.index(m.collective), C.ALGORITHMS.index(m.algorithm),
            C.PROTOCOLS.index(m.protocol))


def _solve(group: list[Measurement], model: TuningModel, prior: tuple[float, float]
           ) -> tuple[float, float, float]:
    """Scales (latency, transfer) minimising the relative error of ``group``'s times,
    pulled weakly towards ``prior``; and the worst relative error."""
    rows, targets = [], []
    for m in group:
        latency, bandwidth = model.line(*_key(m), m.size_bytes)
        rows.append([latency / m.time_us, m.size_bytes / (1000.0 * bandwidth) / m.time_us])
        targets.append(1.0)
    rows += [[PRIOR_WEIGHT, 0.0], [0.0, PRIOR_WEIGHT]]
    targets += [PRIOR_WEIGHT * prior[0], PRIOR_WEIGHT * prior[1]]
    (lat_scale, transfer_scale), _ = nnls(np.array(rows), np.array(targets))
    lat_scale, transfer_scale = max(lat_scale, 1e-3), max(transfer_scale, 1e-3)
    worst = max(abs(lat_scale * r[0] + transfer_scale * r[1] - 1.0) for r in rows[:-2])
    return float(lat_scale), float(transfer_scale), float(worst)


def _frozen(table: list) -> tuple:
    return tuple(tuple(tuple(row) for row in func) for func in table)
