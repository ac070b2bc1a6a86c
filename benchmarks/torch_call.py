"""Per-call cost of ``ccweave.torch.all_reduce`` on local ranks: what a call takes beyond
its executor's run, at sizes that split into the plan's chunks and at one element more
(a DDP gradient bucket's size rarely splits), called as a job calls it and as the DDP
hook does (``async_op=True``, then wait).

    python benchmarks/torch_call.py [--topology mist] [--nproc 4] [--sizes 4KB,1MB]
                                    [--calls 300]

Prints per case the median call, the median executor run inside it, the difference (the
call's own cost: argument checks, plan lookup, binding, any copy of the buffer, the
progress thread's hand-over, the flush), whether the call copies the buffer, the load
average and peak RSS. Ranks share this host's cores: compare cases of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ccweave.units import parse_size


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rank(rank: int, world: int, port: int, args: argparse.Namespace, out: str) -> None:
    import ccweave.torch as cw
    from ccweave.peak_rss import peak_rss_bytes
    from ccweave.runtime import executor as executors
    from ccweave.select import best_plan
    from ccweave.topology.io import load

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sizes = [int(parse_size(s)) for s in args.sizes.split(",")]
    plan = best_plan(load(args.topology), "allreduce", sizes)
    runs: list[float] = []
    run = executors.Executor.run

    def timed(self, *a, **k) -> None:
        start = time.perf_counter()
        run(self, *a, **k)
        runs.append(time.perf_counter() - start)

    executors.Executor.run = timed  # type: ignore[method-assign]
    rows = []
    for size in sizes:
        per = plan.schedule_for(size).collective.total_chunks
        even = size // 4 // per * per
        for label, numel in (("splits", even), ("one more", even + 1)):
            tensor = torch.ones(numel)
            for way in ("sync", "async + wait"):
                calls: list[float] = []
                runs.clear()
                for _ in range(args.calls):
                    start = time.perf_counter()
                    if way == "sync":
                        cw.all_reduce(tensor, plan=plan, incumbent=False)
                    else:
                        cw.all_reduce(tensor, plan=plan, incumbent=False,
                                      async_op=True).wait()
                    calls.append(time.perf_counter() - start)
                    tensor.fill_(1.0)
                skip = args.calls // 10
                beyond = [(c - r) * 1e6 for c, r in zip(calls[skip:], runs[skip:])]
                state = cw._state(None)
                call = state.whole_call(cw.Kind.ALLREDUCE, tensor.view(-1), 0, plan, False)
                rows.append({"size": size, "numel": numel, "case": label, "way": way,
                             "call_us": statistics.median(calls[skip:]) * 1e6,
                             "run_us": statistics.median(runs[skip:]) * 1e6,
                             "beyond_us": statistics.median(beyond),
                             "copies": call.copies, "schedule": call.schedule.name})
    executors.Executor.run = run  # type: ignore[method-assign]
    rss = torch.tensor([peak_rss_bytes() / 2**20], dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        Path(out).write_text(json.dumps({"rows": rows, "rss_MB": rss.item(),
                                         "load": os.getloadavg()}))
    cw.reset()
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="mist")
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--sizes", default="4KB,1MB")
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder, "rows.json"))
        mp.start_processes(_rank, args=(args.nproc, _free_port(), args, out),
                           nprocs=args.nproc, start_method="spawn")
        found = json.loads(Path(out).read_text())
    load = found["load"]
    print(f"ccweave.torch.all_reduce per call, {args.nproc} local ranks, {args.topology}'s "
          f"auto plan (load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; peak RSS per rank "
          f"{found['rss_MB']:.0f} MB)")
    print(f"{'size':>8} {'elements':>9} {'case':>9} {'way':>13} {'call us':>9} {'run us':>9} "
          f"{'beyond us':>10} copies  schedule")
    for row in found["rows"]:
        print(f"{row['size'] >> 10:>6}KB {row['numel']:>9} {row['case']:>9} {row['way']:>13} "
              f"{row['call_us']:>9.0f} {row['run_us']:>9.0f} {row['beyond_us']:>10.0f} "
              f"{row['copies']!s:>6}  {row['schedule']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
