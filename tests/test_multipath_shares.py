"""Shares: the ExaMPI'25 closed form equalises finish times on disjoint paths, the LP
agrees with it there and respects shared links, and the piece rule matches ExaMPI's."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.multipath.paths import find_paths
from ccweave.multipath.shares import (
    MAX_PIECES,
    PathCost,
    closed_form,
    disjoint,
    lp,
    path_cost,
    pieces,
    solve,
)
from ccweave.topology import zoo

MB = 2**20


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5e-6), st.floats(1e9, 1e11)), min_size=1, max_size=6),
       st.integers(MB, 2**30))
def test_closed_form_finishes_every_path_together(paths, size):
    costs = [PathCost(alpha, 1 / bandwidth) for alpha, bandwidth in paths]
    shares = closed_form(costs, size)
    assert shares.sum() == pytest.approx(1.0)
    assert (shares >= 0).all()
    used = [c.time(x, size) for c, x in zip(costs, shares) if x > 0]
    assert max(used) == pytest.approx(min(used), rel=1e-9)
    for cost, x in zip(costs, shares):  # a dropped path could not have finished sooner
        if x == 0:
            assert cost.latency >= max(used) * (1 - 1e-9)


def test_closed_form_is_exampis_formula():
    """th_i = (1/W_i)/S (1 - D_i S/n + (1/n) sum D_j/W_j) on two paths."""
    costs = [PathCost(2e-6, 1 / 75e9), PathCost(3e-6, 1 / 75e9 + 1 / 75e9)]
    n = 64 * MB
    inv = [1 / c.per_byte for c in costs]
    s = sum(inv)
    expected = [inv[i] / s * (1 - costs[i].latency * s / n
                              + sum(c.latency * w for c, w in zip(costs, inv)) / n)
                for i in range(2)]
    assert closed_form(costs, n) == pytest.approx(expected)


def test_lp_agrees_with_the_closed_form_on_disjoint_paths():
    cedar = zoo.get("cedar")
    paths = [p for p in find_paths(cedar, 0, 1) if p.kind != "relay"]
    assert disjoint(paths)
    costs = [path_cost(p) for p in paths]
    assert lp(paths, costs, 64 * MB, cedar) == pytest.approx(closed_form(costs, 64 * MB),
                                                             abs=1e-6)


def test_lp_respects_a_shared_link():
    """On DGX-1 the host path and relays through the other socket share PCIe switch
    pcie0's link into GPU 1: together they get at most its 16 GB/s."""
    dgx1 = zoo.get("dgx1")
    paths = find_paths(dgx1, 0, 1)
    assert not disjoint(paths)
    size = 2**30
    costs = [path_cost(p) for p in paths]
    shares = lp(paths, costs, size, dgx1)
    finish = max(c.time(x, size) for c, x in zip(costs, shares) if x > 1e-9)
    pcie = dgx1.link_id[("pcie0", 1)]
    through = sum(x * p.link_uses[pcie] for p, x in zip(paths, shares))
    assert through > 0
    assert through * size / 16e9 <= finish * (1 + 1e-6)
    assert shares.sum() == pytest.approx(1.0)
    assert finish < size / 50e9 / 2  # direct + two relays + some PCIe


def test_path_cost_and_pieces_follow_exampi():
    dgx1 = zoo.get("dgx1")
    relay = next(p for p in find_paths(dgx1, 0, 1) if p.kind == "relay")
    (a, b), (a2, b2) = [(h.alpha, h.bandwidth) for h in relay.hops]
    one = path_cost(relay, 1)
    assert one.latency == pytest.approx(a + a2)
    assert one.per_byte == pytest.approx(1 / b + 1 / b2)
    share, n = 0.2, 64 * MB
    assert pieces(relay, share, n, max_pieces=10**6) == round(math.sqrt(share * n / (a * b2)))
    assert pieces(relay, share, n) == MAX_PIECES  # capped
    direct = find_paths(dgx1, 0, 1)[0]
    assert pieces(direct, 0.5, n) == 1


def test_solve_gives_shares_and_pieces():
    mist = zoo.get("mist")
    paths = find_paths(mist, 0, 1)
    shares, ks = solve(paths, 2**30, mist)
    # the host path is staged (in, then out) in pipelined pieces: a little under half
    assert ks == [1, MAX_PIECES]
    assert 0.45 < shares[1] < 0.5 and shares.sum() == pytest.approx(1.0)
