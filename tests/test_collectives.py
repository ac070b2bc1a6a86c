"""Collective pre/postconditions match NCCL/MSCCL semantics."""

from __future__ import annotations

import pytest

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import InputError


def contributions(coll: Collective, value: int) -> set[tuple[int, int]]:
    ranks, index = coll.unpack(value)
    return {(rank, index) for rank in range(coll.num_ranks) if ranks >> rank & 1}


def test_allgather_output_is_every_rank_input_in_rank_order():
    coll = Collective(Kind.ALLGATHER, 3, 2)
    assert (coll.input_chunks, coll.output_chunks) == (2, 6)
    for rank in range(3):
        got = [contributions(coll, coll.postcondition[(rank, j)]) for j in range(6)]
        assert got == [{(i, k)} for i in range(3) for k in range(2)]


def test_reducescatter_sums_each_rank_segment():
    coll = Collective(Kind.REDUCESCATTER, 4, 1)
    assert contributions(coll, coll.postcondition[(2, 0)]) == {(i, 2) for i in range(4)}


def test_allreduce_sums_every_chunk_everywhere():
    coll = Collective(Kind.ALLREDUCE, 3, 1)
    for rank in range(3):
        for j in range(3):
            assert contributions(coll, coll.postcondition[(rank, j)]) == {(i, j) for i in range(3)}


def test_alltoall_transposes():
    coll = Collective(Kind.ALLTOALL, 3, 1)
    assert contributions(coll, coll.postcondition[(1, 2)]) == {(2, 1)}


@pytest.mark.parametrize("kind", [Kind.BROADCAST, Kind.SCATTER])
def test_rooted_inputs_only_on_root(kind):
    coll = Collective(kind, 4, 1, root=2)
    assert {rank for rank, _ in coll.precondition} == {2}


@pytest.mark.parametrize("kind", [Kind.REDUCE, Kind.GATHER])
def test_rooted_outputs_only_on_root(kind):
    coll = Collective(kind, 4, 1, root=3)
    assert {rank for rank, _ in coll.postcondition} == {3}


def test_busbw_factors_follow_nccl_tests():
    assert Collective(Kind.ALLREDUCE, 8).busbw_factor == pytest.approx(1.75)
    assert Collective(Kind.ALLGATHER, 8).busbw_factor == pytest.approx(0.875)
    assert Collective(Kind.BROADCAST, 8).busbw_factor == 1.0


def test_chunk_bytes_is_size_over_total_chunks():
    for kind in Kind.collectives():
        assert Collective(kind, 4, 2).chunk_bytes(800) == 100


def test_in_place_alias_follows_msccl_layout():
    ag = Collective(Kind.ALLGATHER, 4, 2)
    assert ag.in_place_alias(3, Buffer.INPUT, 1) == (Buffer.OUTPUT, 7)
    rs = Collective(Kind.REDUCESCATTER, 4, 2)
    assert rs.in_place_alias(1, Buffer.OUTPUT, 0) == (Buffer.INPUT, 2)
    ar = Collective(Kind.ALLREDUCE, 4)
    assert ar.in_place_alias(0, Buffer.INPUT, 3) == (Buffer.OUTPUT, 3)


def test_bad_collectives_are_refused():
    with pytest.raises(InputError, match="unknown collective 'allsum'"):
        Kind.parse("allsum")
    with pytest.raises(InputError, match="root 5 is not a rank"):
        Collective(Kind.BROADCAST, 4, root=5)
    assert Kind.parse("reduce-scatter") is Kind.REDUCESCATTER
    assert Kind.parse("all_gather") is Kind.ALLGATHER


def test_packed_sets_stay_narrow_for_wide_reductions():
    coll = Collective(Kind.ALLREDUCE, 256, 2)
    assert coll.postcondition[(255, 511)].bit_length() <= 256 + coll.index_bits
    a, b = coll.contribution(3, 7), coll.contribution(5, 7)
    assert contributions(coll, a | b) == {(3, 7), (5, 7)}
    assert (a & b) >> coll.index_bits == 0


def test_sendrecv_moves_the_senders_buffer_to_the_peer():
    coll = Collective(Kind.SENDRECV, 4, 2, root=1, peer=3)
    assert {rank for rank, _ in coll.precondition} == {1}
    assert {rank for rank, _ in coll.postcondition} == {3}
    assert contributions(coll, coll.postcondition[(3, 5)]) == {(1, 5)}
    assert Kind.SENDRECV not in Kind.collectives() and len(Kind.collectives()) == 8
    with pytest.raises(InputError, match="other than the sender"):
        Collective(Kind.SENDRECV, 4, root=2, peer=2)
