"""Linear programs on HiGHS, and the same programs shrunk by their symmetry.

A machine built of identical parts (a torus, NVSwitch boxes, identical nodes) gives LPs
whose variables fall into classes that an optimal solution may treat alike. Colour
refinement of the constraint matrix finds such classes (an *equitable partition*); the
LP over one variable per class has the original's optimum, and its solution, copied to
every member, is an optimal solution of the original (Grohe, Kersting, Mladenov, Selman:
"Dimension Reduction via Colour Refinement", ESA 2014). A torus 8x8 alltoall flow LP of
160,000 variables becomes one of a few hundred.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse

from ccweave.errors import SolverError

FEASIBILITY_TOLERANCE = 1e-7
"""A lifted solution may break a constraint by this much (relative to its scale)."""


@dataclass(frozen=True, eq=False)
class LinearProgram:
    """Minimise ``cost @ x`` subject to ``row_lower <= matrix @ x <= row_upper`` and
    ``col_lower <= x <= col_upper`` (``-inf``/``inf`` where unbounded)."""

    cost: np.ndarray
    matrix: scipy.sparse.csr_array
    row_lower: np.ndarray
    row_upper: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return self.matrix.shape

    def violation(self, x: np.ndarray) -> float:
        """The largest amount by which ``x`` breaks a row or column bound."""
        ax = self.matrix @ x
        gaps = [self.row_lower - ax, ax - self.row_upper, self.col_lower - x,
                x - self.col_upper]
        return float(max((np.max(g, initial=0.0) for g in gaps), default=0.0))


def solve(program: LinearProgram, solver: str = "simplex",
          time_limit: float | None = None) -> np.ndarray:
    """An optimal ``x`` found by HiGHS (``solver``: ``simplex`` or ``ipm``).

    Raises ``SolverError`` naming HiGHS' status when it finds no optimum.
    """
    import highspy

    from ccweave.solvers import quiet_highs

    matrix = scipy.sparse.csc_array(program.matrix)
    rows, cols = matrix.shape
    highs = quiet_highs()
    highs.setOptionValue("solver", solver)
    if time_limit is not None:
        highs.setOptionValue("time_limit", float(time_limit))
    lp = highspy.HighsLp()
    lp.num_row_, lp.num_col_ = rows, cols
    lp.col_cost_ = np.asarray(program.cost, dtype=float)
    lp.col_lower_ = _highs_bounds(program.col_lower)
    lp.col_upper_ = _highs_bounds(program.col_upper)
    lp.row_lower_ = _highs_bounds(program.row_lower)
    lp.row_upper_ = _highs_bounds(program.row_upper)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_row_, lp.a_matrix_.num_col_ = rows, cols
    lp.a_matrix_.start_ = matrix.indptr
    lp.a_matrix_.index_ = matrix.indices
    lp.a_matrix_.value_ = matrix.data
    highs.passModel(lp)
    highs.run()
    status = highs.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(f"HiGHS found no optimum of a {rows} x {cols} LP: "
                          f"{highs.modelStatusToString(status)}")
    return np.asarray(highs.getSolution().col_value, dtype=float)


def _highs_bounds(values: np.ndarray) -> np.ndarray:
    import highspy

    values = np.asarray(values, dtype=float)
    return np.clip(values, -highspy.kHighsInf, highspy.kHighsInf)


# -------------------------------------------------------------------- symmetry


def solve_symmetric(program: LinearProgram, solver: str = "simplex",
                    time_limit: float | None = None) -> tuple[np.ndarray, int]:
    """:func:`solve` on the LP reduced by its equitable partition; returns the lifted
    optimum and the number of variable classes.

    The lifted ``x`` is checked against every original constraint; should it break one
    (a hash collision in the refinement, never seen), the full LP is solved instead.
    """
    columns, rows = equitable_partition(program)
    classes = int(columns.max()) + 1 if len(columns) else 0
    if classes == program.shape[1]:
        return solve(program, solver, time_limit), classes
    members = scipy.sparse.csc_array(
        (np.ones(len(columns)), (np.arange(len(columns)), columns)),
        shape=(len(columns), classes))
    _, row_pick = np.unique(rows, return_index=True)
    _, col_pick = np.unique(columns, return_index=True)
    reduced = LinearProgram(
        cost=np.bincount(columns, weights=program.cost, minlength=classes),
        matrix=scipy.sparse.csr_array(program.matrix[row_pick] @ members),
        row_lower=program.row_lower[row_pick], row_upper=program.row_upper[row_pick],
        col_lower=program.col_lower[col_pick], col_upper=program.col_upper[col_pick])
    x = solve(reduced, solver, time_limit)[columns]
    scale = max(1.0, float(np.max(np.abs(x), initial=0.0)))
    if program.violation(x) > FEASIBILITY_TOLERANCE * scale:
        return solve(program, solver, time_limit), program.shape[1]
    return x, classes


def equitable_partition(program: LinearProgram, rounds: int = 1000
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Class labels of the columns and rows of ``program`` under colour refinement.

    Columns start coloured by (cost, bounds), rows by their bounds; each round a row's
    colour becomes its old colour with the multiset of (column colour, coefficient) it
    touches, and a column's likewise, until no class splits. Multisets are hashed
    (64-bit, order-free sums), so the labels are exact up to hash collisions.
    """
    matrix = scipy.sparse.coo_array(program.matrix)
    row, col = matrix.row, matrix.col
    _, value_id = np.unique(matrix.data, return_inverse=True)
    value_hash = _mix(value_id.astype(np.uint64) + np.uint64(0x51ED27))
    columns = _labels(_bits(program.cost), _bits(program.col_lower), _bits(program.col_upper))
    rows = _labels(_bits(program.row_lower), _bits(program.row_upper))
    count = (_count(columns), _count(rows))
    for _ in range(rounds):
        rows = _labels(rows, _multiset(row, _mix(columns[col].astype(np.uint64)) ^ value_hash,
                                       matrix.shape[0]))
        columns = _labels(columns, _multiset(col, _mix(rows[row].astype(np.uint64)
                                                       + np.uint64(0x9E37)) ^ value_hash,
                                             matrix.shape[1]))
        now = (_count(columns), _count(rows))
        if now == count:
            break
        count = now
    return columns, rows


_MULTIPLY_1 = np.uint64(0xBF58476D1CE4E5B9)
_MULTIPLY_2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a well-spread 64-bit hash of each element."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _MULTIPLY_1
        x = (x ^ (x >> np.uint64(27))) * _MULTIPLY_2
    return x ^ (x >> np.uint64(31))


def _multiset(owner: np.ndarray, items: np.ndarray, size: int) -> np.ndarray:
    """Per owner, the wrapping sum of its items' hashes (the same for equal multisets)."""
    total = np.zeros(size, dtype=np.uint64)
    np.add.at(total, owner, _mix(items))
    return total


def _labels(*keys: np.ndarray) -> np.ndarray:
    """Dense labels 0.. of the tuples ``keys[0][i], keys[1][i], ...``."""
    combined = np.zeros(len(keys[0]), dtype=np.uint64)
    for number, key in enumerate(keys):
        with np.errstate(over="ignore"):
            combined = _mix(combined * np.uint64(31)
                            + _mix(np.asarray(key).astype(np.uint64) + np.uint64(number + 1)))
    _, labels = np.unique(combined, return_inverse=True)
    return labels.reshape(-1).astype(np.int64)


def _bits(values: np.ndarray) -> np.ndarray:
    """Float values as exact 64-bit keys (``inf`` kept apart from large finite values)."""
    values = np.asarray(values, dtype=np.float64) + 0.0  # -0.0 -> 0.0
    return values.view(np.uint64)


def _count(labels: np.ndarray) -> int:
    return int(labels.max()) + 1 if len(labels) else 0
