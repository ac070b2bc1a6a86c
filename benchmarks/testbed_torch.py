"""The job of ``benchmarks/testbed.py --sections torch``, as every rank of a testbed job
(``ccweave testbed run TOPO -- python benchmarks/testbed_torch.py --model M ...``).

On the transport ``ccweave run`` and ``bench`` use (``ccweave.runtime.job.connect``:
shared memory, ccweave's sockets, gloo, the job's secret) it measures, at each size, the
auto plan of the calibrated model ``M`` (the plan ``bench --model M`` builds) four ways,
in rounds of rotated order, each as ``bench`` times it (a check, then runs for about 0.3 s
after a barrier, the slowest rank's time): bench's own executor out of place and in
place, ``ccweave.torch.all_reduce`` (in place, the incumbent left out: the same plan), and
gloo's ``dist.all_reduce``. At the per-call cost size it also times the pieces of a
``ccweave.torch.all_reduce`` call on their own. Rank 0 writes the JSON ``--out`` names.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import ccweave.torch as cw
from ccweave.peak_rss import peak_rss_bytes
from ccweave.runtime.job import connect, detect, disconnect
from ccweave.runtime.layout import layout_for_bytes
from ccweave.runtime.measure import Options, Runner, measure_call
from ccweave.runtime.native import native_call
from ccweave.runtime.reduce_ops import RedOp
from ccweave.runtime.worker import GroupWorker
from ccweave.select import best_plan
from ccweave.topology.io import load
from ccweave.units import parse_size

WAYS = ("bench", "bench in place", "ccweave.torch", "gloo")
TARGET_S = 0.3
"""Seconds of timed runs per way and round (bench's are 0.5 s; rounds alternate here)."""


def rotated(number: int) -> tuple[str, ...]:
    """Round ``number``'s order: the ways rotated by one each round, every second cycle
    backwards, so each way takes each place and follows each other way alike (gloo's
    16 MB run beside one way only would tax that way alone)."""
    turn = number % len(WAYS)
    order = WAYS[turn:] + WAYS[:turn]
    return order[::-1] if (number // len(WAYS)) % 2 else order


def measure_round(plan, transport, size: int, first: bool, order: tuple[str, ...]
                  ) -> dict[str, dict]:
    """One round at ``size``: each way once (``order``), as bench measures a case."""
    schedule = plan.schedule_for(size)
    coll = schedule.collective
    layout = layout_for_bytes(coll, size, 4)
    options = Options(torch.float32, RedOp.SUM, iters=200, warmup=1 if first else 0,
                      check=True, target_s=TARGET_S)
    runner = Runner(plan, transport, options)
    out_of_place, in_place = runner.executor(schedule, False), runner.executor(schedule, True)
    calls = {
        "bench": (lambda data, out: out_of_place.run(data, out), False),
        "bench in place": (lambda data, out: in_place.run(data, None), True),
        "ccweave.torch": (lambda data, out: cw.all_reduce(data, plan=plan, incumbent=False),
                          True),
        "gloo": (native_call(transport, coll, RedOp.SUM), False)}
    found = {}
    for way in order:
        call, mode = calls[way]
        result = measure_call(call, coll, layout, transport, options, mode)
        found[way] = {"time_s": result.time_us / 1e6, "wrong": result.wrong}
    for executor in (out_of_place, in_place):
        executor.release()
    return found


def elements(plan, size: int) -> int:
    """float32 elements of ``size`` bytes rounded down to the schedule's chunks (what
    bench and nccl-tests run)."""
    return layout_for_bytes(plan.schedule_for(size).collective, size, 4).count


def per_call_pieces(plan, size: int, repeats: int = 2000) -> dict[str, float]:
    """Microseconds of each piece of a ``ccweave.torch.all_reduce`` call on its own, on
    this rank (no communication): what the drop-in adds to the executor's run."""
    state = cw._state(None)
    tensor = torch.zeros(elements(plan, size))
    flat = tensor.view(-1)
    call = state.whole_call(cw.Kind.ALLREDUCE, flat, 0, plan, False)
    executor = state.executor(call.schedule, True)

    def clock(piece) -> float:
        start = time.perf_counter()
        for _ in range(repeats):
            piece()
        return (time.perf_counter() - start) / repeats * 1e6

    worker = GroupWorker("ccweave-cost-probe")
    pieces = {
        "argument checks": lambda: (cw._group(None), cw._reduce_op(dist.ReduceOp.SUM),
                                    cw._flat(tensor, "tensor")),
        "plan lookup (resolved call)": lambda: state.whole_call(
            cw.Kind.ALLREDUCE, flat, 0, plan, False),
        "in-place variant": lambda: state.executor(call.schedule, True),
        "executor binding": lambda: executor._bind(flat, None),
        "copy of the bucket (padding)": (lambda: (flat.clone(), flat.clone())) if call.copies
        else (lambda: None),
        "flush (nothing queued)": lambda: state.transport.flush(1.0),
        "progress thread hand-over": lambda: worker.submit(lambda: None).wait(),
        "inline (idle group)": lambda: worker.call(lambda: None)}
    found = {name: clock(piece) for name, piece in pieces.items()}
    worker.close()
    return found


def call_overhead(plan, size: int, calls: int = 300) -> dict[str, float]:
    """Microseconds a whole ``ccweave.torch.all_reduce`` call takes beyond its executor's
    run (every rank calls it: the calls communicate), median and mean over ``calls``."""
    from ccweave.runtime import executor as executors

    tensor = torch.ones(elements(plan, size))
    runs: list[float] = []
    run = executors.Executor.run

    def timed(self, *args, **kwargs) -> None:
        start = time.perf_counter()
        run(self, *args, **kwargs)
        runs.append(time.perf_counter() - start)

    calls_s = []
    executors.Executor.run = timed  # type: ignore[method-assign]
    try:
        for _ in range(calls):
            start = time.perf_counter()
            cw.all_reduce(tensor, plan=plan, incumbent=False)
            calls_s.append(time.perf_counter() - start)
    finally:
        executors.Executor.run = run  # type: ignore[method-assign]
    beyond = [(whole - inner) * 1e6 for whole, inner in zip(calls_s, runs)][calls // 10:]
    return {"beyond the run, median": statistics.median(beyond),
            "beyond the run, mean": statistics.mean(beyond),
            "the run, median": statistics.median(runs) * 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--sizes", default="32KB,1MB,16MB")
    parser.add_argument("--cost-size", default="4KB")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    sizes = [int(parse_size(s)) for s in args.sizes.split(",")]
    cost_size = int(parse_size(args.cost_size))
    job = detect()
    if job is None:
        raise SystemExit("run this as every rank of a job (ccweave testbed run)")
    transport = connect("gloo", job, 600.0)
    torch.set_num_threads(1)
    model = load(args.model)
    plan = best_plan(model, "allreduce", sorted({*sizes, cost_size}))
    rows = []
    start = time.time()
    for size in [cost_size, *sizes]:
        rounds = []
        for number in range(args.rounds):
            order = rotated(number)
            rounds.append(measure_round(plan, transport, size, number == 0, order))
            if job.rank == 0:
                print(f"PROGRESS {size} round {number + 1}/{args.rounds} "
                      f"({time.time() - start:.0f} s)", flush=True)
        rows.append({"size_bytes": size, "schedule": plan.schedule_for(size).name,
                     "rounds": rounds})
    pieces = {**call_overhead(plan, cost_size), **per_call_pieces(plan, cost_size)}
    rss = peak_rss_bytes() / 2**20
    peaks = transport.sum_values([rss if r == job.rank else 0.0
                                  for r in range(job.world_size)])
    if job.rank == 0:
        summary = {"rows": rows, "per_call_us": pieces, "peak_rss_MB": peaks,
                   "load_average": os.getloadavg(), "fallback": cw._state(None).fallback,
                   "transport": type(cw.transport_of()).__name__}
        for row in rows:
            for way in WAYS:
                row[way] = statistics.median(r[way]["time_s"] for r in row["rounds"])
        Path(args.out).write_text(json.dumps(summary))
    cw.reset()
    disconnect(transport)
    return 0


if __name__ == "__main__":
    sys.exit(main())
