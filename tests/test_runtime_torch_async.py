"""``ccweave.torch`` on the transport ``ccweave run`` uses, asynchronously: 4 real gloo
processes (one job, several checks): the data goes over ccweave's own connections, work
handles and the DDP hook's future complete later, in the order called, errors reach
``wait()``; the incumbent's choice is the same on every rank; gloo's send and receive
carry the data only as a fallback that says so once."""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

WORLD = 4
LATE = 0.5
"""Seconds rank 1 waits before joining a collective that rank 0 has already started."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _job(rank: int, world: int, port: int, folder: str) -> None:
    import ccweave.torch as cw
    from ccweave.runtime import incumbent
    from ccweave.runtime.transport.shm import ShmTransport
    from ccweave.runtime.transport.sockets import SocketTransport

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.pop("CCWEAVE_JOB_SECRET", None)  # rank 0 draws one and shares it
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    seen: dict[str, object] = {}

    # the transport: ccweave's sockets under shared memory, data on its own connections
    x = torch.arange(1000, dtype=torch.float32) * (rank + 1)
    cw.all_reduce(x, incumbent=False)
    transport = cw.transport_of()
    sockets = transport.inner if isinstance(transport, ShmTransport) else transport
    seen["layers"] = [type(transport).__name__, type(sockets).__name__]
    seen["lanes"] = len(sockets.lanes) if isinstance(sockets, SocketTransport) else 0
    seen["secret"] = hashlib.sha256(getattr(sockets, "secret", b"")).hexdigest()
    seen["sum_ok"] = bool(torch.equal(x, torch.arange(1000, dtype=torch.float32) * 10))

    # async: three buckets in flight; rank 1 joins late, so rank 0's first cannot be done
    if rank == 1:
        time.sleep(LATE)
    buckets = {name: torch.full((n,), float(rank + 1)) for name, n in
               (("A", 1000), ("B", 7), ("C", 3000))}
    finished: list[str] = []
    works = {}
    for name, tensor in buckets.items():
        works[name] = cw.all_reduce(tensor, async_op=True, incumbent=False)
        works[name].get_future().add_done_callback(lambda _, name=name: finished.append(name))
        if name == "A":
            seen["done_at_return"] = works[name].is_completed()
    seen["waited"] = all(work.wait() for work in works.values())
    seen["completed"] = all(w.is_completed() and w.is_success() for w in works.values())
    seen["finished"] = finished
    seen["values_ok"] = all(bool(torch.all(works[n].get_future().value()[0] == 10))
                            for n in buckets)
    seen["same_tensor"] = works["A"].get_future().value()[0] is buckets["A"]
    odd = cw._state(None).whole_call(cw.Kind.ALLREDUCE, buckets["B"], 0, None, False)
    seen["odd_copies"] = odd.copies  # 7 elements: no split into the ring's chunks

    # the DDP hook's future comes back before the bucket is summed
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
    returned: list[bool] = []

    def hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future:
        future = cw.allreduce_hook(state, bucket)
        returned.append(future.done())
        return future

    hook.__annotations__ = cw.allreduce_hook.__annotations__
    model.register_comm_hook(cw.HookState(incumbent=False), hook)
    loss = model(torch.ones(2, 8) * (rank + 1)).sum()
    if rank == 1:
        time.sleep(LATE)
    loss.backward()
    reference = torch.nn.Linear(8, 4)
    reference.load_state_dict(model.module.state_dict())
    grads = [p.grad.clone() for p in model.parameters()]
    expected = [torch.autograd.grad(reference(torch.ones(2, 8) * (r + 1)).sum(),
                                    list(reference.parameters())) for r in range(world)]
    seen["hook_done_at_return"] = returned[0] if returned else None
    seen["hook_grads_ok"] = all(torch.allclose(g, sum(e[i] for e in expected) / world)
                                for i, g in enumerate(grads))

    # the incumbent: every rank compares the slowest rank's times, so all pick alike,
    # though rank 0 alone finds ccweave slow and rank 1 alone finds gloo slow
    def runner(slow_rank: int, pause: float):
        return lambda: time.sleep(pause if rank == slow_rank else 0.0)

    def slowest(values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tensor.tolist()

    choice = incumbent.measured_choice(runner(0, 0.12), runner(1, 0.04), dist.barrier,
                                       slowest, rounds=2)
    seen["measured"] = [choice.incumbent, round(choice.ccweave_s, 6),
                        round(choice.incumbent_s, 6)]
    for n in (300, 70000):  # the default plan: a first call at each size class decides
        cw.all_reduce(torch.ones(n))
    seen["choices"] = {str(k): [c.incumbent, c.how, c.ccweave_s, c.incumbent_s]
                       for k, c in sorted(cw.choices().items())}

    # per-call cost stays bounded: a size's call is resolved once and buffers stay bound
    a, b = torch.ones(512), torch.ones(512)
    for _ in range(3):
        cw.all_reduce(a, incumbent=False)
        cw.all_reduce(b, incumbent=False)
    state = cw._state(None)
    call = state.whole_call(cw.Kind.ALLREDUCE, a, 0, None, False)
    executor = state.executor(call.schedule, True)
    seen["bound"] = sum(key[0][0] in (a.data_ptr(), b.data_ptr())
                        for key in executor._bindings)
    seen["calls"] = sum(1 for key in state.calls if key[3] == 512)

    # an error on the progress thread reaches wait(): rank 1 never joins this one
    pair = dist.new_group([0, 1])
    if rank in (0, 1):
        cw.TIMEOUT_S = 1.0  # the pair's executors give up after a second without progress
        cw.transport_of(pair)  # both ranks set it up (a collective on the pair)
        if rank == 0:
            work = cw.all_reduce(torch.ones(64), group=pair, async_op=True, incumbent=False)
            start = time.monotonic()
            try:
                work.wait()
                seen["error"] = None
            except Exception as error:  # what reaches the caller is the point
                seen["error"] = [type(error).__name__, str(error)]
            seen["error_after_s"] = time.monotonic() - start
            seen["error_work"] = [work.is_completed(), work.is_success()]
        cw.TIMEOUT_S = 300.0
    dist.barrier()

    # the fallback says so, once, naming why
    os.environ["CCWEAVE_SOCKETS"] = "0"
    stderr, sys.stderr = sys.stderr, io.StringIO()
    try:
        first, second = dist.new_group(list(range(world))), dist.new_group(list(range(world)))
        y = torch.ones(100) * (rank + 1)
        cw.all_reduce(y, group=first, incumbent=False)
        cw.all_reduce(y, group=first, incumbent=False)
        cw.all_reduce(y, group=second, incumbent=False)
        said = sys.stderr.getvalue()
    finally:
        sys.stderr = stderr
        del os.environ["CCWEAVE_SOCKETS"]
    seen["fallback_lines"] = [line for line in said.splitlines() if "ccweave" in line]
    seen["fallback_sum_ok"] = bool(torch.all(y == 160))  # 10, then 40, then 160
    seen["fallback_layers"] = type(cw.transport_of(first).inner).__name__

    Path(folder, f"rank{rank}.json").write_text(json.dumps(seen))
    cw.reset()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    folder = tmp_path_factory.mktemp("torch-async")
    mp.start_processes(_job, args=(WORLD, _free_port(), str(folder)), nprocs=WORLD,
                       start_method="spawn")
    return [json.loads(Path(folder, f"rank{r}.json").read_text()) for r in range(WORLD)]


def test_data_goes_over_ccweaves_own_connections_with_one_secret(ranks):
    for seen in ranks:
        assert seen["layers"] == ["ShmTransport", "SocketTransport"]
        assert seen["lanes"] > 0 and seen["sum_ok"]
    assert len({seen["secret"] for seen in ranks}) == 1  # rank 0's, shared over the group


def test_async_all_reduce_returns_before_the_collective_ends_and_completes_in_order(ranks):
    assert ranks[0]["done_at_return"] is False  # rank 1 had not joined yet
    for seen in ranks:
        assert seen["waited"] and seen["completed"] and seen["values_ok"]
        assert seen["finished"] == ["A", "B", "C"]
        assert seen["same_tensor"]


def test_a_bucket_that_does_not_split_into_the_chunks_is_summed_with_no_copy(ranks):
    for seen in ranks:
        assert seen["odd_copies"] is False and seen["values_ok"]


def test_the_hooks_future_completes_after_it_returns_with_ddps_gradients(ranks):
    assert ranks[0]["hook_done_at_return"] is False
    assert all(seen["hook_grads_ok"] for seen in ranks)


def test_an_error_on_the_progress_thread_reaches_wait_not_a_hang(ranks):
    seen = ranks[0]
    assert seen["error"] is not None and seen["error"][0] == "RuntimeFault"
    assert "rank 1" in seen["error"][1] and "no transfer finished" in seen["error"][1]
    assert seen["error_after_s"] < 30
    assert seen["error_work"] == [True, False]


def test_every_rank_makes_the_same_incumbent_choice(ranks):
    measured = [seen["measured"] for seen in ranks]
    assert all(m == measured[0] for m in measured)
    assert measured[0][0] is True  # the slowest ccweave run (rank 0's) decides for all
    choices = [seen["choices"] for seen in ranks]
    assert choices[0] and all(c == choices[0] for c in choices)
    assert all(how == "measured" for _, how, _, _ in choices[0].values())


def test_a_calls_resolution_and_binding_are_kept_between_calls(ranks):
    for seen in ranks:
        assert seen["calls"] == 1  # both tensors: one resolved call for the size
        assert seen["bound"] == 2  # both stay bound, taking turns without rebinding


def test_the_gloo_fallback_says_why_in_one_line_once(ranks):
    lines = ranks[0]["fallback_lines"]
    assert len(lines) == 1, lines
    assert lines[0].startswith("ccweave.torch:") and "CCWEAVE_SOCKETS=0" in lines[0]
    assert "gloo's send and receive" in lines[0]
    for seen in ranks[1:]:
        assert seen["fallback_lines"] == []
    for seen in ranks:
        assert seen["fallback_sum_ok"] and seen["fallback_layers"] == "TorchTransport"

