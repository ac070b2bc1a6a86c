"""``ccweave.torch`` gives what ``torch.distributed`` gives, collective by collective, on 4
gloo processes; the DDP hook trains to the same loss curve as stock DDP."""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    if a.dtype.is_floating_point:
        tol = 1e-5 if a.dtype == torch.float32 else 5e-2
        assert torch.allclose(a.double(), b.double(), rtol=tol, atol=tol), what
    else:
        assert torch.equal(a, b), what


def _drop_in(rank: int, world: int, port: int) -> None:
    import ccweave.torch as cw
    from ccweave.synth.registry import synthesize
    from ccweave.topology.io import load

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    generator = torch.Generator().manual_seed(rank)
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for numel in (7, 1000):
            x = torch.randint(-50, 50, (numel,), generator=generator).to(dtype)
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN):
                a, b = x.clone(), x.clone()
                cw.all_reduce(a, op=op, incumbent=False)  # ccweave's schedule, not gloo's
                dist.all_reduce(b, op=op)
                _same(a, b, f"all_reduce {dtype} {numel} {op}")
            out_a, out_b = x.new_empty(world * numel), x.new_empty(world * numel)
            cw.all_gather_into_tensor(out_a, x)
            dist.all_gather_into_tensor(out_b, x)
            _same(out_a, out_b, "all_gather")
            big = torch.cat([x + i for i in range(world)])
            rs_a, rs_b = x.new_empty(numel), x.new_empty(numel)
            cw.reduce_scatter_tensor(rs_a, big)
            dist.reduce_scatter_tensor(rs_b, big)
            _same(rs_a, rs_b, "reduce_scatter")
            a2a_a, a2a_b = big.new_empty(big.numel()), big.new_empty(big.numel())
            cw.all_to_all_single(a2a_a, big)
            dist.all_to_all_single(a2a_b, big)
            _same(a2a_a, a2a_b, "all_to_all")
            root = numel % world
            bc_a, bc_b = x.clone(), x.clone()
            cw.broadcast(bc_a, root)
            dist.broadcast(bc_b, root)
            _same(bc_a, bc_b, "broadcast")
            rd_a, rd_b = x.clone(), x.clone()
            cw.reduce(rd_a, root, op=dist.ReduceOp.MAX)
            dist.reduce(rd_b, root, op=dist.ReduceOp.MAX)
            if rank == root:
                _same(rd_a, rd_b, "reduce")
            gathered = [torch.empty_like(x) for _ in range(world)] if rank == root else None
            cw.gather(x, gathered, root)
            expected = [torch.empty_like(x) for _ in range(world)] if rank == root else None
            dist.gather(x, expected, root)
            if rank == root:
                _same(torch.cat(gathered), torch.cat(expected), "gather")
            parts = [x + i for i in range(world)] if rank == root else None
            sc_a, sc_b = torch.empty_like(x), torch.empty_like(x)
            cw.scatter(sc_a, parts, root)
            dist.scatter(sc_b, parts, root)
            _same(sc_a, sc_b, "scatter")
    # AVG, async_op, an explicit plan, a registered plan and a subgroup
    x = torch.arange(12, dtype=torch.float32) * (rank + 1)
    avg = x.clone()
    work = cw.all_reduce(avg, op=dist.ReduceOp.AVG, async_op=True, incumbent=False)
    assert work.wait() and work.is_completed()
    _same(avg, torch.arange(12, dtype=torch.float32) * 2.5, "avg")
    halving = synthesize(load(f"switch:{world}"), "allreduce", "rabenseifner")
    mine, theirs = x.clone(), x.clone()
    cw.all_reduce(mine, plan=halving)
    dist.all_reduce(theirs)
    _same(mine, theirs, "explicit plan")
    cw.use(synthesize(load(f"switch:{world}"), "allreduce", "recursive-doubling"))
    mine = x.clone()
    cw.all_reduce(mine)
    _same(mine, theirs, "registered plan")
    (plan,) = cw.use_auto(f"switch:{world}", "alltoall", sizes=[2**6, 2**20])
    assert plan.name == f"auto(switch:{world}, alltoall)"
    a2a = torch.arange(world * 16, dtype=torch.float32) + 100 * rank
    mine, theirs = torch.empty_like(a2a), torch.empty_like(a2a)
    cw.all_to_all_single(mine, a2a)
    dist.all_to_all_single(theirs, a2a)
    _same(mine, theirs, "auto plan")
    cw.reset()
    pair = dist.new_group([1, 3])
    if rank in (1, 3):
        mine, theirs = x.clone(), x.clone()
        cw.all_reduce(mine, group=pair, incumbent=False)
        dist.all_reduce(theirs, group=pair)
        _same(mine, theirs, "subgroup")
        value = x.clone()
        cw.broadcast(value, 3, group=pair)
        _same(value, torch.arange(12, dtype=torch.float32) * 4, "broadcast from global rank 3")
    dist.barrier()
    held = weakref.ref(dist.group.WORLD)
    cw.all_reduce(torch.ones(4096), incumbent=False)  # a transport that holds the group
    assert _outboxes() > 0, "the 16 KB allreduce did not go through shared memory"
    cw.reset()  # lets it go, and unmaps the shared memory
    assert _outboxes() == 0, "reset() left a shared-memory outbox open"
    dist.destroy_process_group()
    gc.collect()
    assert held() is None, "the destroyed group is still held after ccweave.torch.reset()"


def _outboxes() -> int:
    """This process's open shared-memory outboxes (memfds)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own, closed by now
            count += "ccweave-outbox" in os.readlink(f"/proc/self/fd/{fd}")
    return count


def test_drop_in_collectives_match_torch_distributed(monkeypatch):
    monkeypatch.setenv("CCWEAVE_SHM_MIN_BYTES", "512")  # the larger messages go through shm
    mp.start_processes(_drop_in, args=(4, _free_port()), nprocs=4, start_method="spawn")


def test_ddp_hook_trains_to_the_same_loss_curve_as_stock_ddp():
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a rank that aborts shows where it was
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "train_ddp.py"),
                             "--steps", "12", "--tolerance", "1e-5"],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "same curve" in result.stdout
