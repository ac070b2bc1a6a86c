"""Profiling: measure alpha and bandwidth between every pair of ranks (ping-pong over the
executor's transport, least-squares fit, R^2) and, on a GPU, the CUDA copy paths; build
a topology from the figures. ``ccweave profile`` is the command; docs/profiling.md the
guide."""

from ccweave.profile.build import flat, override
from ccweave.profile.fit import Fit, fit
from ccweave.profile.measure import measure
from ccweave.profile.result import CopyFigure, Curve, PairFigure, Profile

__all__ = ["CopyFigure", "Curve", "Fit", "PairFigure", "Profile", "fit", "flat", "measure",
           "override"]
