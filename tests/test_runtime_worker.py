"""A group's progress thread runs collectives first in, first out, completes each one's
future with its result or its error (never a hang), and runs a call on the caller's
thread when nothing is queued."""

from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")

from ccweave.runtime.worker import GroupWorker, Work  # noqa: E402


def test_tasks_run_in_the_order_they_were_submitted_on_one_thread():
    worker = GroupWorker("ccweave-test")
    ran: list[tuple[int, str]] = []

    def task(number: int, pause: float):
        def run() -> int:
            time.sleep(pause)  # a later, shorter task must still wait its turn
            ran.append((number, threading.current_thread().name))
            return number
        return run

    futures = [worker.submit(task(n, 0.02 * (5 - n))) for n in range(5)]
    assert [f.wait() for f in futures] == list(range(5))
    assert [n for n, _ in ran] == list(range(5))
    assert {name for _, name in ran} == {"ccweave-test"}
    worker.close()


def test_an_error_on_the_thread_reaches_the_future_and_the_next_task_still_runs():
    worker = GroupWorker("ccweave-test")

    def fails() -> None:
        raise RuntimeError("rank 3 died")

    work = Work(worker.submit(fails))
    after = worker.submit(lambda: "next")
    with pytest.raises(RuntimeError, match="rank 3 died"):
        work.wait()
    assert work.is_completed() and not work.is_success()
    assert isinstance(work.exception(), RuntimeError)
    assert after.wait() == "next"
    worker.close()


def test_work_is_not_completed_until_its_task_ends():
    worker = GroupWorker("ccweave-test")
    gate = threading.Event()
    work = Work(worker.submit(lambda: gate.wait(5) and [torch.ones(2)]))
    assert not work.is_completed() and work.exception() is None
    assert worker.busy
    gate.set()
    assert work.wait() and work.is_completed() and work.is_success()
    assert torch.equal(work.get_future().value()[0], torch.ones(2))
    assert worker.drain(5) and not worker.busy
    worker.close()


def test_a_call_runs_on_the_callers_thread_when_idle_and_after_the_queue_when_not():
    worker = GroupWorker("ccweave-test")
    assert worker.call(lambda: threading.current_thread().name) == \
        threading.current_thread().name
    gate = threading.Event()
    order: list[str] = []
    worker.submit(lambda: (gate.wait(5), order.append("queued")))
    threading.Timer(0.05, gate.set).start()
    where = worker.call(lambda: (order.append("call"), threading.current_thread().name)[1])
    assert order == ["queued", "call"]  # the call waited for what was queued before it
    assert where == "ccweave-test"
    with pytest.raises(ValueError, match="bad"):
        worker.call(lambda: (_ for _ in ()).throw(ValueError("bad")))
    assert not worker.busy  # a failed inline call does not leave the group busy
    worker.close()
