"""LPs shrunk by colour refinement keep their optimum, and their lifted solutions are
feasible for the original."""

from __future__ import annotations

import numpy as np
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.lp import LinearProgram, equitable_partition, solve, solve_symmetric
from ccweave.synth.flow import _program, rank_hops
from ccweave.topology import zoo
from tests.strategies import topologies


def _flow_program(topo, epochs):
    index = topo.node_index
    src = np.array([index[lk.src] for lk in topo.links])
    dst = np.array([index[lk.dst] for lk in topo.links])
    program, _ = _program(topo, epochs, rank_hops(topo), src, dst,
                          topo.bandwidths / topo.bandwidths.max())
    return program


@settings(max_examples=20, deadline=None)
@given(topologies(max_ranks=5), st.integers(0, 2))
def test_the_reduced_lp_has_the_full_lps_optimum(topo, extra):
    epochs = int(rank_hops(topo).max()) + extra
    program = _flow_program(topo, epochs)
    full = solve(program)
    lifted, _ = solve_symmetric(program)
    assert program.violation(lifted) < 1e-6
    assert abs(program.cost @ lifted - program.cost @ full) <= 1e-6 * abs(program.cost @ full)


def test_a_torus_lp_collapses_to_few_classes():
    program = _flow_program(zoo.get("torus:4x4"), 4)
    columns, rows = equitable_partition(program)
    assert columns.max() + 1 < program.shape[1] / 20
    assert rows.max() + 1 < program.shape[0] / 20


def test_an_lp_without_symmetry_keeps_every_variable():
    # min x0 + 2 x1 + 3 x2 s.t. x0 + x1 + x2 >= 1: three different costs, three classes
    program = LinearProgram(np.array([1.0, 2.0, 3.0]),
                            scipy.sparse.csr_array(np.ones((1, 3))), np.array([1.0]),
                            np.array([np.inf]), np.zeros(3), np.full(3, np.inf))
    x, classes = solve_symmetric(program)
    assert classes == 3
    assert np.allclose(x, [1, 0, 0])


def test_identical_variables_share_a_class_and_the_optimum():
    # min x0 + x1 s.t. x0 + x1 >= 2: one class, x = (1, 1)
    program = LinearProgram(np.ones(2), scipy.sparse.csr_array(np.ones((1, 2))),
                            np.array([2.0]), np.array([np.inf]), np.zeros(2),
                            np.full(2, np.inf))
    x, classes = solve_symmetric(program)
    assert classes == 1
    assert np.allclose(x, [1, 1])
