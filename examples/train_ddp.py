"""Train a small model with DistributedDataParallel on CPU processes (gloo), with DDP's
stock all_reduce and with ccweave's communication hook (``ccweave.torch.allreduce_hook``),
in alternated rounds; show the two loss curves agree, each step's time, and how much of
the communication the hook hides behind the backward pass.

    python examples/train_ddp.py [--nproc 4] [--steps 60] [--strategy ring] [--rounds 1]
                                 [--width 64] [--depth 1] [--batch 32] [--overlap]
    ccweave testbed run rail.json -- python examples/train_ddp.py --topology MODEL.json \
        --strategy auto --width 512     # one rank per emulated rank (any launcher works)

Every round trains both from the same weights on the same batches (stock first in even
rounds, the hook first in odd ones, so a change in the machine's load falls on both);
only the order in which gradients are summed differs, so the curves match to float32
rounding. The script exits 1 if any step's losses differ by more than ``--tolerance``
(relative, default 1e-4). ``--topology`` names the machine the plan is made for; a
calibrated one (``ccweave bench ... --save-model``) is also the model that decides where
the group's own all_reduce is the faster (else a first call is timed on every rank).
``--overlap`` then times the backward pass without communication (``no_sync``) and the
buckets' allreduces alone, beside the step with the hook.
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
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import ccweave.torch as cw


def make_model(width: int = 64, depth: int = 1) -> nn.Module:
    torch.manual_seed(0)
    hidden = [layer for _ in range(depth) for layer in (nn.Linear(width, width), nn.Tanh())]
    return nn.Sequential(nn.Linear(16, width), nn.Tanh(), *hidden, nn.Linear(width, 1))


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
    from ccweave.select import best_plan
    from ccweave.topology.io import load

    topo = load(topology or f"switch:{world}")
    if strategy == "auto":  # gradient buckets are at most 25 MB
        return best_plan(topo, "allreduce", sizes=[2**k for k in range(10, 26)])
    return Plan.single(build_verified(topo, "allreduce", strategy))


@dataclass(frozen=True)
class Shape:
    """The model and data: hidden width, hidden layers after the first, batch per rank."""

    width: int = 64
    depth: int = 1
    batch: int = 32
    bucket_mb: float | None = None
    """DDP's bucket cap (default: 0.01 MB up to 64 wide, several buckets; else 25)."""


def ddp_model(shape: Shape) -> DistributedDataParallel:
    cap = shape.bucket_mb if shape.bucket_mb is not None else \
        0.01 if shape.width <= 64 else 25  # small models: several buckets
    return DistributedDataParallel(make_model(shape.width, shape.depth), bucket_cap_mb=cap)


def slowest(times: list[float]) -> list[float]:
    """Each step's time on the slowest rank (a step ends for all when its last rank's
    does; one rank's own time hides the others' compute)."""
    tensor = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def train(rank: int, world: int, steps: int, plan, hook: bool, shape: Shape,
          buckets: list[int] | None = None, handed: list[float] | None = None
          ) -> tuple[list[float], list[float]]:
    """The global mean loss per step, and each step's time (seconds). ``buckets``
    collects the sizes (elements) of the buckets the hook sums in the last step,
    ``handed`` when in each step the hook handed its last bucket over (seconds)."""
    model = ddp_model(shape)
    start = 0.0
    if hook:
        state = cw.HookState(plan=plan)

        def summed(state: object, bucket: dist.GradBucket) -> torch.futures.Future:
            if buckets is not None:
                buckets.append(bucket.buffer().numel())
            future = cw.allreduce_hook(state, bucket)
            if handed is not None:
                handed[-1] = time.perf_counter() - start
            return future

        summed.__annotations__ = cw.allreduce_hook.__annotations__
        model.register_comm_hook(state, summed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, times = [], []
    for x, y in batches(rank, steps, shape.batch):
        if buckets is not None:
            buckets.clear()
        if handed is not None:
            handed.append(0.0)
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
    return losses, slowest(times)


def compute_alone(rank: int, steps: int, shape: Shape) -> list[float]:
    """Each step's time without communication: DDP under ``no_sync``, which skips the
    buckets' allreduces (the forward, backward and optimizer of a step)."""
    model = ddp_model(shape)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    times = []
    for x, y in batches(rank, steps, shape.batch):
        dist.barrier()
        start = time.perf_counter()
        with model.no_sync():
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return slowest(times)


def communication_alone(steps: int, plan, buckets: list[int], hook: bool) -> list[float]:
    """Each step's buckets summed one after another with nothing else running: the
    hook's all_reduce (``hook``) or gloo's."""
    tensors = [torch.zeros(count) for count in buckets]
    times = []
    for _ in range(steps):
        dist.barrier()
        start = time.perf_counter()
        for tensor in tensors:
            if hook:
                cw.all_reduce(tensor, plan=plan)
            else:
                dist.all_reduce(tensor)
        times.append(time.perf_counter() - start)
    return slowest(times)


def worker(rank: int, world: int, port: int | None, steps: int, strategy: str,
           topology: str | None, shape: dict, rounds: int, overlap: bool,
           out: str | None, tolerance: float = 1e-4) -> int:
    if port is not None:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    shared = [hook_plan(world, strategy, topology) if rank == 0 else None]
    dist.broadcast_object_list(shared, src=0)  # one rank plans, every rank runs it
    plan = shared[0]
    if plan is not None and topology is not None:
        cw.use(plan, model=topology)  # a calibrated machine decides where gloo's is faster
    form = Shape(**shape)
    curves: dict[str, list] = {"stock": [], "ccweave": []}
    times: dict[str, list] = {"stock": [], "ccweave": []}
    buckets: list[int] = []
    handed: list[float] = []
    for number in range(rounds):
        for hook in (False, True) if number % 2 == 0 else (True, False):
            name = "ccweave" if hook else "stock"
            handed.clear()
            losses, spent = train(rank, world, steps, plan, hook, form,
                                  buckets if hook else None, handed if hook else None)
            curves[name].append(losses)
            times[name].append(spent)
    result = {"stock": curves["stock"][0], "ccweave": curves["ccweave"][0],
              "stock_rounds": times["stock"], "ccweave_rounds": times["ccweave"],
              "buckets": list(buckets), "handed": list(handed), "choices": {
                  str(k): c.describe() for k, c in cw.choices().items()}}
    if overlap:
        result["compute_alone"] = compute_alone(rank, steps, form)
        result["stock_communication"] = communication_alone(steps, plan, buckets, False)
        result["ccweave_communication"] = communication_alone(steps, plan, buckets, True)
    code = 0
    if rank == 0:
        if out:
            with open(out, "w") as handle:
                json.dump(result, handle)
        else:
            code = report(result, strategy, tolerance)
    cw.reset()  # ccweave's cached transports hold the group: let it go with destroy
    dist.destroy_process_group()
    return code


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def report(curves: dict, strategy: str, tolerance: float = 1e-4) -> int:
    """Print the curves, the step times (median of each round, the ratio per round) and,
    when measured, the overlap; 1 when the curves differ by more than ``tolerance``."""
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
    stock_rounds = [statistics.median(t[skip:]) for t in curves["stock_rounds"]]
    ours_rounds = [statistics.median(t[skip:]) for t in curves["ccweave_rounds"]]
    ratios = [a / b for a, b in zip(stock_rounds, ours_rounds)]
    base, ours = statistics.median(stock_rounds), statistics.median(ours_rounds)
    print(f"median step time: stock DDP {base * 1e3:.1f} ms, ccweave hook ({strategy}) "
          f"{ours * 1e3:.1f} ms: {statistics.median(ratios):.2f}x (rounds "
          f"{', '.join(f'{r:.2f}' for r in ratios)}; load {os.getloadavg()[0]:.1f})")
    print(f"buckets (elements): {curves['buckets']}; the hook ran: "
          + ("; ".join(f"class {k}: {v}" for k, v in curves["choices"].items())
             or "ccweave's schedules"))
    if "compute_alone" in curves:
        compute = statistics.median(curves["compute_alone"][skip:])
        for name, step in (("stock DDP", base), ("ccweave hook", ours)):
            key = "stock_communication" if name == "stock DDP" else "ccweave_communication"
            talk = statistics.median(curves[key][skip:])
            hidden = compute + talk - step
            late = curves["handed"][skip:]
            handed = (f"; the hook handed its last bucket over "
                      f"{statistics.median(late) * 1e3:.1f} ms into the step"
                      if name == "ccweave hook" and late else "")
            print(f"overlap, {name}: step {step * 1e3:.1f} ms; backward without "
                  f"communication {compute * 1e3:.1f} ms + the buckets' allreduces alone "
                  f"{talk * 1e3:.1f} ms = {(compute + talk) * 1e3:.1f} ms; hidden "
                  f"{hidden * 1e3:.1f} ms (at most {min(compute, talk) * 1e3:.1f} ms can be)"
                  f"{handed}")
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
    parser.add_argument("--depth", type=int, default=1,
                        help="hidden width x width layers (default 1)")
    parser.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--bucket-mb", type=float,
                        help="DDP's bucket cap in MB (default 0.01 up to 64 wide, else 25)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternated rounds of stock DDP and the hook (default 1)")
    parser.add_argument("--overlap", action="store_true",
                        help="also time the backward pass and the allreduces alone")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest relative difference between the curves (default 1e-4)")
    args = parser.parse_args()
    shape = asdict(Shape(args.width, args.depth, args.batch, args.bucket_mb))
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # one rank of a launched job
        return worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), None,
                      args.steps, args.strategy, args.topology, shape, args.rounds,
                      args.overlap, None, args.tolerance)
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "losses.json")
        mp.start_processes(worker, args=(args.nproc, free_port(), args.steps, args.strategy,
                                         args.topology, shape, args.rounds, args.overlap,
                                         out),
                           nprocs=args.nproc, start_method="spawn")
        with open(out) as handle:
            curves = json.load(handle)
    return report(curves, args.strategy, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
