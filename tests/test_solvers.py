"""The shared HiGHS factory: quiet, and safe when thread counts change between solves."""

from __future__ import annotations

import numpy as np

from ccweave.solvers import quiet_highs


def _solve(threads):
    import highspy

    highs = quiet_highs(threads)
    highs.addVars(1, np.array([0.0]), np.array([1.0]))
    highs.changeColsCost(1, np.array([0], dtype=np.int32), np.array([-1.0]))
    highs.changeColsIntegrality(1, np.array([0], dtype=np.int32),
                                np.array([highspy.HighsVarType.kInteger]))
    highs.run()
    return highs.modelStatusToString(highs.getModelStatus())


def test_thread_counts_can_change_between_solves(capfd):
    assert [_solve(t) for t in (None, 1, 2, None, 1)] == ["Optimal"] * 5
    assert capfd.readouterr().out == ""  # no banner on stdout
