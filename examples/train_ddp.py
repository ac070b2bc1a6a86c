"""Train a small model with DistributedDataParallel on CPU processes (gloo), twice: with
DDP's stock all_reduce, then with ccweave's communication hook
(``ccweave.torch.allreduce_hook``); show the two loss curves agree and each step's time.

    python examples/train_ddp.py [--nproc 4] [--steps 60] [--strategy ring]
    ccweave testbed run rail.json -- python examples/train_ddp.py --topology rail.json \
        --strategy auto --width 512     # one rank per emulated rank (any launcher works)

Both runs start from the same weights and see the same batches; only the order in which
gradients are summed differs, so the curves match to float32 rounding. The script exits
1 if any step's losses differ by more than ``--tolerance`` (relative, default 1e-4).
Started by a launcher (``RANK`` and ``WORLD_SIZE`` set: torchrun, ``ccweave testbed run``)
it is one rank of that job; by hand it starts ``--nproc`` local ranks itself.
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

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import ccweave.torch as cw


def make_model(width: int = 64) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                         nn.Linear(width, 1))


def batches(rank: int, steps: int, batch: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each rank's own shard of a synthetic regression task."""
    generator = torch.Generator().manual_seed(1000 + rank)
    weights = torch.linspace(-1, 1, 16)
    out = []
    for _ in range(steps):
        x = torch.randn(batch, 16, generator=generator)
        y = (x @ weights).sin().unsqueeze(1) + 0.05 * torch.randn(batch, 1, generator=generator)
        out.append((x, y))
    return out


def hook_plan(world: int, strategy: str, topology: str | None):
    """The plan the hook runs: ``strategy`` on the job's topology (``auto``: the fastest
    schedule per size); ``None`` is the drop-in's default ring."""
    if strategy == "ring" and topology is None:
        return None
    from ccweave.compare import build_verified
    from ccweave.plan import Plan
    from ccweave.synth.select import best_plan
    from ccweave.topology.io import load

    topo = load(topology or f"switch:{world}")
    if strategy == "auto":  # gradient buckets are at most 25 MB
        return best_plan(topo, "allreduce", sizes=[2**k for k in range(10, 26)])
    return Plan.single(build_verified(topo, "allreduce", strategy))


def train(rank: int, world: int, steps: int, plan, hook: bool, width: int
          ) -> tuple[list[float], list[float]]:
    """The global mean loss per step, and each step's time (seconds)."""
    model = DistributedDataParallel(make_model(width), bucket_cap_mb=0.01 if width <= 64
                                    else 25)  # small models: several buckets
    if hook:
        model.register_comm_hook(cw.HookState(plan=plan), cw.allreduce_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, times = [], []
    for x, y in batches(rank, steps):
        dist.barrier()
        start = time.perf_counter()
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / world)
    return losses, times


def worker(rank: int, world: int, port: int | None, steps: int, strategy: str,
           topology: str | None, width: int, out: str | None) -> int:
    if port is not None:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    shared = [hook_plan(world, strategy, topology) if rank == 0 else None]
    dist.broadcast_object_list(shared, src=0)  # one rank plans, every rank runs it
    plan = shared[0]
    stock, stock_times = train(rank, world, steps, plan, False, width)
    ccweave, ccweave_times = train(rank, world, steps, plan, True, width)
    code = 0
    if rank == 0:
        result = {"stock": stock, "ccweave": ccweave, "stock_times": stock_times,
                  "ccweave_times": ccweave_times}
        if out:
            with open(out, "w") as handle:
                json.dump(result, handle)
        else:
            code = report(result, strategy)
    cw.reset()  # ccweave's cached transports hold the group: let it go with destroy
    dist.destroy_process_group()
    return code


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def report(curves: dict, strategy: str, tolerance: float = 1e-4) -> int:
    stock, ccweave = curves["stock"], curves["ccweave"]
    worst = 0.0
    print(f"{'step':>5}  {'stock DDP':>12}  {'ccweave hook':>12}  {'rel diff':>9}")
    for step, (a, b) in enumerate(zip(stock, ccweave)):
        diff = abs(a - b) / max(abs(a), 1e-12)
        worst = max(worst, diff)
        if step % 10 == 0 or step == len(stock) - 1:
            print(f"{step:5d}  {a:12.6f}  {b:12.6f}  {diff:9.2e}")
    verdict = "same curve" if worst <= tolerance else "CURVES DIFFER"
    print(f"max relative difference {worst:.2e} (tolerance {tolerance:g}): {verdict}")
    skip = min(3, len(stock) - 1)  # first steps warm up (buckets, plans, connections)
    base = statistics.median(curves["stock_times"][skip:])
    ours = statistics.median(curves["ccweave_times"][skip:])
    print(f"median step time: stock DDP {base * 1e3:.1f} ms, ccweave hook ({strategy}) "
          f"{ours * 1e3:.1f} ms: {base / ours:.2f}x")
    return 0 if worst <= tolerance else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--strategy", default="ring",
                        help="ccweave strategy for allreduce, or auto (default ring)")
    parser.add_argument("--topology", help="the machine the plan is made for (default: "
                                           "one switch)")
    parser.add_argument("--width", type=int, default=64, help="hidden layer width")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest relative difference between the curves (default 1e-4)")
    args = parser.parse_args()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # one rank of a launched job
        return worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), None,
                      args.steps, args.strategy, args.topology, args.width, None)
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "losses.json")
        mp.start_processes(worker, args=(args.nproc, free_port(), args.steps, args.strategy,
                                         args.topology, args.width, out),
                           nprocs=args.nproc, start_method="spawn")
        with open(out) as handle:
            curves = json.load(handle)
    return report(curves, args.strategy, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
