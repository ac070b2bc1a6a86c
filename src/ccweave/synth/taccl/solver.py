"""A small mixed-integer model builder over HiGHS (``highspy``), with time limits, warm
starts and progress reports: what the routing and contiguity stages share.

Columns and rows are collected in numpy-friendly lists and handed to HiGHS in one call;
the result says plainly whether the solution is optimal or the best found at the time
limit, and with which gap.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ccweave.errors import SolverError
from ccweave.solvers import quiet_highs
from ccweave.synth.taccl.progress import Progress

INF = math.inf

PROGRESS_INTERVAL_S = 1.0
"""Least time between two progress reports from inside one solve."""


@dataclass(frozen=True)
class SolverSettings:
    """How long and how hard HiGHS works on one stage."""

    time_limit_s: float = 60.0
    mip_gap: float = 1e-3
    """Relative gap at which a MILP counts as solved."""
    threads: int = 1
    seed: int = 0


DEFAULT_SETTINGS = SolverSettings()


OPTIMAL = "optimal"
"""Status of a solve whose incumbent meets its bound (HiGHS's gap is zero)."""
WITHIN_GAP = "within gap"
"""Status of a solve HiGHS stopped because its gap fell below the ``mip_gap`` tolerance:
the incumbent is within that gap of optimal, not proven optimal."""
TIME_LIMIT = "time limit"
"""Status of a solve stopped by its time limit: the best solution found, with its gap."""
ZERO_GAP = 1e-9
"""A relative gap at most this is reported as zero (optimal)."""


@dataclass(frozen=True)
class MilpResult:
    """A solve's outcome: the values and how good they are known to be."""

    status: str
    """:data:`OPTIMAL`, :data:`WITHIN_GAP` or :data:`TIME_LIMIT`."""
    values: np.ndarray
    objective: float
    bound: float
    gap: float
    """HiGHS's relative MIP gap of the incumbent (``inf`` when no bound is known)."""
    seconds: float
    tolerance: float = 0.0
    """The ``mip_gap`` the solve ran with."""

    @property
    def optimal(self) -> bool:
        """Proven optimal: the gap is zero."""
        return self.status == OPTIMAL

    @property
    def solved(self) -> bool:
        """Optimal, or within the requested gap tolerance."""
        return self.status in (OPTIMAL, WITHIN_GAP)

    def describe(self) -> str:
        if self.status == OPTIMAL:
            return f"optimal in {self.seconds:.1f} s (MIP gap 0)"
        if self.status == WITHIN_GAP:
            return (f"stopped after {self.seconds:.1f} s at MIP gap {_percent(self.gap)}, "
                    f"within the {_percent(self.tolerance)} tolerance (mip_gap): not proven "
                    "optimal")
        return (f"stopped at the time limit after {self.seconds:.1f} s with MIP gap "
                f"{_percent(self.gap)}: the best schedule found, not proven optimal")


def _percent(gap: float) -> str:
    if not math.isfinite(gap):
        return "unknown"
    return f"{100 * gap:.2g}%" if 0 < gap < 1e-3 else f"{100 * gap:.1f}%"


class Model:
    """Columns (continuous or binary) and sparse rows, solved by HiGHS."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lower: list[float] = []
        self._upper: list[float] = []
        self._cost: list[float] = []
        self._integer: list[bool] = []
        self._row_lower: list[float] = []
        self._row_upper: list[float] = []
        self._row_start: list[int] = [0]
        self._index: list[int] = []
        self._value: list[float] = []

    @property
    def num_vars(self) -> int:
        return len(self._lower)

    @property
    def num_rows(self) -> int:
        return len(self._row_lower)

    @property
    def num_integers(self) -> int:
        return sum(self._integer)

    def add_vars(self, count: int, lower: float = 0.0, upper: float = INF, cost: float = 0.0,
                 binary: bool = False) -> range:
        """``count`` new columns; binaries have bounds [0, 1]."""
        first = self.num_vars
        if binary:
            lower, upper = 0.0, 1.0
        self._lower += [lower] * count
        self._upper += [upper] * count
        self._cost += [cost] * count
        self._integer += [binary] * count
        return range(first, first + count)

    def set_upper(self, column: int, upper: float) -> None:
        self._upper[column] = upper

    def set_cost(self, column: int, cost: float) -> None:
        self._cost[column] = cost

    def add_cost(self, column: int, cost: float) -> None:
        self._cost[column] += cost

    def fixed(self, values: dict[int, float]) -> Model:
        """A copy with the given columns fixed to values (e.g. binaries, to solve the rest
        as an LP)."""
        copy = Model(self.name)
        copy.__dict__.update({key: list(value) if isinstance(value, list) else value
                              for key, value in self.__dict__.items()})
        for column, value in values.items():
            copy._lower[column] = copy._upper[column] = value
            copy._integer[column] = False
        return copy

    def cost_of(self, values: np.ndarray) -> float:
        """The objective at ``values``."""
        return float(np.asarray(values, dtype=float) @ np.array(self._cost))

    def least_feasible(self, values: np.ndarray, column: int) -> tuple[float, int | None]:
        """The least value of ``column`` that satisfies every row's upper bound given the
        other columns' ``values``, for rows where it has a negative coefficient (a
        makespan ``T`` with rows ``sum - T <= b``), at least its lower bound; and the row
        that sets it (``None``: the lower bound does)."""
        values = np.asarray(values, dtype=float)
        least, binding = self._lower[column], None
        index, value = self._index, self._value
        for row in range(self.num_rows):
            begin, end = self._row_start[row], self._row_start[row + 1]
            coef = 0.0
            rest = 0.0
            for k in range(begin, end):
                if index[k] == column:
                    coef = value[k]
                else:
                    rest += value[k] * values[index[k]]
            if coef >= 0 or not math.isfinite(self._row_upper[row]):
                continue
            need = (rest - self._row_upper[row]) / -coef
            if need > least:
                least, binding = need, row
        return least, binding

    def relaxation(self, column: int) -> Model:
        """The LP relaxation (no integers) that minimises ``column`` alone: its optimum is
        a lower bound on ``column`` over every solution of this model."""
        copy = self.fixed({})
        copy._integer = [False] * self.num_vars
        copy._cost = [0.0] * self.num_vars
        copy._cost[column] = 1.0
        return copy

    def add_row(self, columns: Sequence[int], coefficients: Sequence[float],
                lower: float = -INF, upper: float = INF) -> None:
        """``lower <= sum(coefficient * column) <= upper``; repeated columns are summed."""
        merged: dict[int, float] = {}
        for column, coefficient in zip(columns, coefficients):
            merged[column] = merged.get(column, 0.0) + coefficient
        self._index += merged.keys()
        self._value += merged.values()
        self._row_start.append(len(self._index))
        self._row_lower.append(lower)
        self._row_upper.append(upper)

    def solve(self, settings: SolverSettings, warm_start: np.ndarray | None = None,
              progress: Callable[[Progress], None] | None = None,
              stage: str = "") -> MilpResult:
        """Solve; return the optimum or, at the time limit, the best solution found (the
        warm start, if HiGHS found none better, with an unknown gap).

        Raises ``SolverError`` when the model is infeasible, or when no solution was
        found and there is no warm start.
        """
        import highspy

        highs = quiet_highs(threads=settings.threads)
        n = self.num_vars
        highs.setOptionValue("time_limit", float(max(settings.time_limit_s, 0.01)))
        highs.setOptionValue("mip_rel_gap", float(settings.mip_gap))
        highs.setOptionValue("random_seed", int(settings.seed))
        highs.addVars(n, np.array(self._lower), np.array(self._upper))
        columns = np.arange(n, dtype=np.int32)
        highs.changeColsCost(n, columns, np.array(self._cost))
        integers = np.flatnonzero(self._integer).astype(np.int32)
        if len(integers):
            highs.changeColsIntegrality(len(integers), integers,
                                        np.array([highspy.HighsVarType.kInteger]
                                                 * len(integers)))
        if self.num_rows:
            highs.addRows(self.num_rows, np.array(self._row_lower), np.array(self._row_upper),
                          len(self._index), np.array(self._row_start[:-1], dtype=np.int32),
                          np.array(self._index, dtype=np.int32), np.array(self._value))
        started = time.perf_counter()
        if progress is not None and len(integers):
            self._watch(highs, progress, stage, started)
        if warm_start is not None and len(integers):
            highs.setSolution(n, columns, np.asarray(warm_start, dtype=float))
        highs.run()
        seconds = time.perf_counter() - started
        status = highs.getModelStatus()
        info = highs.getInfo()
        has_solution = info.primal_solution_status == 2
        if status == highspy.HighsModelStatus.kOptimal:
            gap = max(float(info.mip_gap), 0.0) if len(integers) else 0.0
            if not math.isfinite(gap):
                gap = 0.0
            label = OPTIMAL if gap <= ZERO_GAP else WITHIN_GAP
        elif has_solution and status in (highspy.HighsModelStatus.kTimeLimit,
                                         highspy.HighsModelStatus.kInterrupt,
                                         highspy.HighsModelStatus.kSolutionLimit):
            label = TIME_LIMIT
            gap = float(info.mip_gap) if len(integers) else INF
        elif status == highspy.HighsModelStatus.kInfeasible:
            raise SolverError(f"{self.name}: the model is infeasible")
        elif warm_start is not None:  # out of time before HiGHS took any solution: ours
            values = np.asarray(warm_start, dtype=float)
            objective = float(values @ np.array(self._cost))
            return MilpResult(TIME_LIMIT, values, objective, -INF, INF, seconds,
                              settings.mip_gap)
        else:
            raise SolverError(f"{self.name}: HiGHS stopped ({highs.modelStatusToString(status)}) "
                              f"after {seconds:.1f} s without a solution; raise the time limit")
        values = np.array(highs.getSolution().col_value)
        objective = float(info.objective_function_value)
        bound = float(info.mip_dual_bound) if len(integers) else objective
        if len(integers) and not math.isfinite(gap):
            gap = INF
        return MilpResult(label, values, objective, bound, max(gap, 0.0), seconds,
                          settings.mip_gap)

    @staticmethod
    def _watch(highs, progress: Callable[[Progress], None], stage: str, started: float) -> None:
        last = [0.0]

        def report(event, force: bool) -> None:
            now = time.perf_counter()
            if not force and now - last[0] < PROGRESS_INTERVAL_S:
                return
            last[0] = now
            data = event.data_out
            incumbent = float(data.objective_function_value)
            bound = float(data.mip_dual_bound)
            gap = float(data.mip_gap)
            progress(Progress(stage, "solving", incumbent if math.isfinite(incumbent) else None,
                              bound if math.isfinite(bound) else None,
                              gap if math.isfinite(gap) else None, now - started))

        highs.cbMipImprovingSolution.subscribe(lambda event: report(event, True))
        highs.cbMipInterrupt.subscribe(lambda event: report(event, False))
