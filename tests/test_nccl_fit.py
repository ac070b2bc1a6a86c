"""Measured NCCL times (nccl-tests output under NCCL_ALGO/NCCL_PROTO sweeps, the CSV
optimize_config.py reads) and NCCL's model fitted to them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.errors import InputError
from ccweave.nccl import constants as C
from ccweave.nccl import tuner
from ccweave.nccl.fit import fit
from ccweave.nccl.measured import Measurement, parse_nccl_tests, read
from ccweave.nccl.model import TuningModel, nccl_model
from ccweave.topology import zoo

FIXTURE = Path(__file__).parents[2] / "shared" / "fixtures" / "nccl-tuner"

def nccl_tests_row(size: int, count: int, dtype: str, redop: str, root: int, time: float,
                   algbw: float, busbw: float) -> str:
    """One result row as nccl-tests prints it (src/util.cu: writeBenchmarkLinePreamble's
    ``%12li  %12li  %8s  %6s  %6s`` and writeBenchmarkLineBody's ``  %7s  %6s  %6s  %6g``,
    out-of-place then in-place)."""
    body = f"  {time:7.2f}  {algbw:6.2f}  {busbw:6.2f}  {0:6g}"
    return f"{size:12d}  {count:12d}  {dtype:>8}  {redop:>6}  {root:6d}" + body * 2


DEVICE = "#  Rank {0:2d} Group  0 Pid  41231 on     node-0 device {0:2d} [0000:07:00] NVIDIA A100"
# Laid out as nccl-tests 2.19 prints, with NCCL_DEBUG=INFO's line (src/graph/tuning.cc)
# naming the forced algorithm and protocol.
NCCL_TESTS = "\n".join([
    "# nccl-tests version 2.19.6 nccl-headers=23007 nccl-library=23007",
    "# Collective test starting: all_reduce_perf",
    "# nThread 1 nGpus 8 minBytes 1024 maxBytes 1048576 step: 1024(factor) warmup iters: 5",
    "#",
    "# Using devices",
    *(DEVICE.format(rank) for rank in range(8)),
    "node-0:41231:41231 [0] NCCL INFO NCCL_ALGO set by environment to Ring",
    "node-0:41231:41231 [0] NCCL INFO NCCL_PROTO set by environment to LL",
    "#",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong",
    nccl_tests_row(1024, 256, "float", "sum", -1, 15.31, 0.07, 0.12),
    nccl_tests_row(1048576, 262144, "float", "sum", -1, 36.90, 28.42, 49.73),
    "# Out of bounds values : 0 OK",
    "# Avg bus bandwidth    : 24.9",
    "#",
    "# Collective test concluded: all_reduce_perf",
    ""])
ROW = 1 + NCCL_TESTS.splitlines().index(nccl_tests_row(1024, 256, "float", "sum", -1, 15.31,
                                                        0.07, 0.12))
"""The line number of the first row."""


def test_nccl_tests_rows_take_the_forced_algorithm_protocol_and_collective():
    rows = parse_nccl_tests(NCCL_TESTS, "ar.txt")
    assert [(r.collective, r.size_bytes, r.algorithm, r.protocol, r.time_us, r.ranks)
            for r in rows] == [("allreduce", 1024, "ring", "ll", 15.31, 8),
                               ("allreduce", 2**20, "ring", "ll", 36.90, 8)]
    assert rows[0].where == f"ar.txt:{ROW}"


def test_without_the_program_line_the_collective_comes_from_the_columns():
    body = [line for line in NCCL_TESTS.splitlines() if "Collective test" not in line]
    rs = "\n".join(body).replace("262144     float     sum", "32768     float     sum")
    assert rs != "\n".join(body)
    rows = parse_nccl_tests(rs, "rs.txt")  # size = count x 4 B x 8 ranks: reduce-scatter
    assert [r.collective for r in rows] == ["allreduce", "reducescatter"]
    ag = "\n".join(body).replace("sum      -1", "none      -1")
    with pytest.raises(InputError, match=f"ag.txt:{ROW - 1}: cannot tell which collective"):
        parse_nccl_tests(ag, "ag.txt")


@pytest.mark.parametrize("text, message", [
    (NCCL_TESTS.replace("NCCL_ALGO set by environment to Ring", "hello"),
     f"ar.txt:{ROW}: no NCCL_ALGO/NCCL_PROTO before this row"),
    (NCCL_TESTS.replace("to Ring", "to Ring,Tree"), "a sweep forces one algorithm"),
    (NCCL_TESTS.replace("to LL\n", "to LL256\n"), "protocol 'LL256'"),
    (NCCL_TESTS.replace("all_reduce_perf", "alltoall_perf"), "alltoall_perf is not"),
])
def test_bad_sweeps_are_one_line_naming_the_place(text, message):
    with pytest.raises(InputError, match=message):
        parse_nccl_tests(text, "ar.txt")


def test_the_fixture_s_csv_reads_unchanged():
    path = FIXTURE / "scripts" / "sample_performance_data.csv"
    if not path.is_file():
        pytest.skip(f"{path} is missing: NVIDIA's sample data is not at hand")
    rows = read(path)
    assert len(rows) == 23 and rows[0] == Measurement(
        "allreduce", 1024, "tree", "simple", 12.5, 8, 1, f"{path}:2")


def sampled(truth: TuningModel, sizes: list[int], names=("allreduce", "allgather")
            ) -> list[Measurement]:
    """The truth model's times: what a sweep on that machine would measure."""
    rows = []
    for name in names:
        func = C.FUNCTIONS.index(name)
        for a, p in truth.candidates(func):
            rows += [Measurement(name, n, C.ALGORITHMS[a], C.PROTOCOLS[p],
                                 truth.time_us(func, a, p, n)) for n in sizes]
    return rows


def scaled(model: TuningModel, latency: float, transfer: float) -> TuningModel:
    lat = tuple(tuple(tuple(x * latency for x in row) for row in f) for f in model.latencies)
    bw = tuple(tuple(tuple(x / transfer for x in row) for row in f) for f in model.bandwidths)
    return model.with_tables(lat, bw, model.enabled, "truth")


@settings(max_examples=15, deadline=None)
@given(st.floats(0.3, 3.0), st.floats(0.3, 3.0))
def test_two_sizes_per_combination_recover_the_machine_and_its_rules(latency, transfer):
    prior = nccl_model(zoo.get("dgx-a100:2"))
    truth = scaled(prior, latency, transfer)
    fitted = fit(prior, sampled(truth, [4096, 256 * 2**20]))
    for scale in fitted.scales:
        assert scale.latency == pytest.approx(latency, rel=1e-3)
        assert scale.transfer == pytest.approx(transfer, rel=1e-3)
    names = ["allreduce", "allgather"]
    want = [(r.min_bytes, r.algorithm, r.protocol) for r in tuner.rules(truth, names)]
    got = [(r.min_bytes, r.algorithm, r.protocol) for r in tuner.rules(fitted.model, names)]
    assert len(got) == len(want)
    assert all(g[1:] == w[1:] and g[0] == pytest.approx(w[0], rel=1e-2, abs=2)
               for g, w in zip(got, want))


def test_measurements_nccl_cannot_use_are_left_out_and_said():
    prior = nccl_model(zoo.get("dgx-a100"))
    rows = [Measurement("allreduce", 2**20, "nvls", "simple", 30.0, 8, 1, "m:1"),
            Measurement("allreduce", 2**20, "ring", "simple", 40.0, 16, 2, "m:2"),
            Measurement("allreduce", 2**20, "ring", "simple", 40.0, 8, 1, "m:3")]
    fitted = fit(prior, rows)
    assert [(s.algorithm, s.protocol) for s in fitted.scales] == [("ring", "simple")]
    assert any("nvls/simple: NCCL does not run it on dgx-a100" in why
               for why in fitted.ignored)
    assert any("16 ranks / 2 nodes" in why for why in fitted.ignored)
    with pytest.raises(InputError, match="no measurement NCCL's tuner could use"):
        fit(prior, rows[:2])


@pytest.mark.parametrize("text, message", [
    (NCCL_TESTS.replace(nccl_tests_row(1024, 256, "float", "sum", -1, 15.31, 0.07, 0.12),
                        "9" * 30 + "  256  float  sum  -1  15.31  0.07  0.12  0"),
     "over the largest message ccweave models"),
    (NCCL_TESTS.replace(nccl_tests_row(1024, 256, "float", "sum", -1, 15.31, 0.07, 0.12),
                        "1024  256  float  sum  " + "9" * 5000 + "  15.31  0.07  0.12  0"),
     "give -1 \\(no root\\)"),
])
def test_a_row_no_run_prints_is_refused_naming_its_line(text, message):
    """A 30-digit size was taken as measured; a 5000-digit root was a ValueError."""
    with pytest.raises(InputError, match=message):
        parse_nccl_tests(text, "ar.txt")
