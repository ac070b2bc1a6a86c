"""Train a small model with DistributedDataParallel on 4 CPU processes (gloo), twice:
with DDP's stock all_reduce, then with ccweave's communication hook
(``ccweave.torch.allreduce_hook``), and show the two loss curves agree.

    python examples/train_ddp.py [--nproc 4] [--steps 60] [--strategy ring]

Both runs start from the same weights and see the same batches; only the order in which
gradients are summed differs, so the curves match to float32 rounding. The script exits
1 if any step's losses differ by more than ``--tolerance`` (relative, default 1e-4).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import ccweave.torch as cw


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 1))


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


def train(rank: int, world: int, steps: int, hook: bool, strategy: str) -> list[float]:
    """The global mean loss per step."""
    model = DistributedDataParallel(make_model(), bucket_cap_mb=0.01)  # several buckets
    if hook:
        plan = None
        if strategy != "ring":
            from ccweave.synth.registry import synthesize
            from ccweave.topology.io import load

            plan = synthesize(load(f"switch:{world}"), "allreduce", strategy)
        model.register_comm_hook(cw.HookState(plan=plan), cw.allreduce_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in batches(rank, steps):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / world)
    return losses


def worker(rank: int, world: int, port: int, steps: int, strategy: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    stock = train(rank, world, steps, hook=False, strategy=strategy)
    ccweave = train(rank, world, steps, hook=True, strategy=strategy)
    if rank == 0:
        with open(out, "w") as handle:
            json.dump({"stock": stock, "ccweave": ccweave}, handle)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--strategy", default="ring", help="ccweave strategy for allreduce")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest relative difference between the curves (default 1e-4)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "losses.json")
        mp.start_processes(worker, args=(args.nproc, free_port(), args.steps, args.strategy,
                                         out), nprocs=args.nproc, start_method="spawn")
        with open(out) as handle:
            curves = json.load(handle)
    stock, ccweave = curves["stock"], curves["ccweave"]
    worst = 0.0
    print(f"{'step':>5}  {'stock DDP':>12}  {'ccweave hook':>12}  {'rel diff':>9}")
    for step, (a, b) in enumerate(zip(stock, ccweave)):
        diff = abs(a - b) / max(abs(a), 1e-12)
        worst = max(worst, diff)
        if step % 10 == 0 or step == len(stock) - 1:
            print(f"{step:5d}  {a:12.6f}  {b:12.6f}  {diff:9.2e}")
    verdict = "same curve" if worst <= args.tolerance else "CURVES DIFFER"
    print(f"max relative difference {worst:.2e} (tolerance {args.tolerance:g}): {verdict}")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
