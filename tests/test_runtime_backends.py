"""Real processes: every collective and classic strategy at 4 and 8 ranks over
gloo and over MPI (mpirun), out of place and in place, dtypes and reductions rotating,
every element checked. One job per backend and size of world runs the whole matrix."""

from __future__ import annotations

import importlib.util
import itertools
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")

from ccweave.collectives import Kind
from ccweave.runtime import batch
from ccweave.topology.io import load

DTYPES = ["float32", "float16", "bfloat16", "int32", "int64"]
OPS = ["sum", "max", "min"]
SIZES = (1024, 40960)
EIGHT_SIZES = (2048, 24576)
"""At 8 ranks every classic schedule runs at two small sizes (2 KB: the smallest every
dtype fills at 144 chunks); benchmarks/executor.py runs the whole 1 KB..64 MB ladder."""

TWO_NODES = Path(__file__).resolve().parents[1] / "examples/topologies/two-nodes.json"
"""4 ranks on two nodes (so the hierarchical strategy builds too)."""

needs_mpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None,
    reason="needs mpirun and mpi4py (Debian: openmpi-bin libopenmpi-dev; pip install mpi4py)")


def classic_cases(topology: str, sizes: tuple[int, ...]) -> list[batch.Case]:
    """Every classic strategy x collective on ``topology``, dtypes and ops in turn."""
    combos = itertools.cycle(itertools.product(DTYPES, OPS))
    cases = []
    for strategy, schedule in batch.classic_schedules(load(topology)):
        dtype, op = next(combos)
        cases.append(batch.Case(f"{strategy}/{schedule.collective.kind.value}", schedule,
                                sizes, dtype, op))
    return cases


def four_rank_cases() -> list[batch.Case]:
    return classic_cases(str(TWO_NODES), SIZES)


def eight_rank_cases() -> list[batch.Case]:
    return classic_cases("cedar:2", EIGHT_SIZES)  # two nodes: hierarchical builds too


def check(results: list[dict], cases: list[batch.Case]) -> None:
    assert len(results) == sum(len(c.sizes) for c in cases)
    wrong = [(r["case"], r["type"], r["size_bytes"], r["out_of_place"]["wrong"],
              r["in_place"]["wrong"]) for r in results
             if r["out_of_place"]["wrong"] != 0 or r["in_place"]["wrong"] not in (0, None)]
    assert not wrong, wrong
    skipped = {r["case"] for r in results if r["in_place"]["skipped"]}
    assert skipped <= {c.name for c in cases if c.schedule.collective.kind is Kind.ALLTOALL}
    assert all(r["out_of_place"]["time_us"] > 0 for r in results)


def test_every_collective_and_classic_strategy_on_4_gloo_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("CCWEAVE_SHM_MIN_BYTES", "1024")  # 1 KB runs over TCP, 40 KB shm
    cases = four_rank_cases()
    assert len({c.name.split("/")[0] for c in cases}) == 9  # every classic strategy
    assert len({c.schedule.collective.kind for c in cases}) == 8  # every collective
    check(batch.launch(cases, 4, tmp_path, "gloo"), cases)


def test_every_collective_and_classic_strategy_on_8_gloo_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("CCWEAVE_SHM_MIN_BYTES", "1024")
    cases = eight_rank_cases()
    assert len({c.name.split("/")[0] for c in cases}) == 9
    assert len({c.schedule.collective.kind for c in cases}) == 8
    check(batch.launch(cases, 8, tmp_path, "gloo"), cases)


@needs_mpi
def test_every_collective_and_classic_strategy_on_4_mpi_ranks(tmp_path):
    cases = four_rank_cases()
    check(batch.launch(cases, 4, tmp_path, "mpi"), cases)


@needs_mpi
def test_every_collective_and_classic_strategy_on_8_mpi_ranks(tmp_path):
    cases = eight_rank_cases()
    check(batch.launch(cases, 8, tmp_path, "mpi"), cases)
