"""nccl-tests-style measurement of executed schedules: for each size, check every element
once, then time warm iterations, out of place and in place.

A time is the slowest rank's (nccl-tests averages over ranks; a collective is done when
its last rank is, and a schedule that leaves ranks idle would look faster than it is),
the median of ``reps`` repetitions; ``#wrong`` is summed over ranks;
``algbw = size / time``, ``busbw = algbw * factor`` (see :attr:`Collective.busbw_factor`).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch

from ccweave.collectives import Collective
from ccweave.errors import CCWeaveError, InputError
from ccweave.plan import Plan
from ccweave.runtime import progress, reference
from ccweave.runtime.executor import Executor, intra_op_threads
from ccweave.runtime.inplace import in_place as in_place_variant
from ccweave.runtime.layout import Layout, layout_for_bytes
from ccweave.runtime.reduce_ops import RedOp
from ccweave.runtime.transport.base import Transport
from ccweave.schedule import Schedule
from ccweave.units import format_size

DTYPES = {"float32": torch.float32, "float": torch.float32, "float16": torch.float16,
          "half": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32,
          "int": torch.int32, "int64": torch.int64, "float64": torch.float64,
          "double": torch.float64}
"""dtype names accepted; nccl-tests' spellings print (``float``, ``half``, ...)."""
_NCCL_NAMES = {torch.float32: "float", torch.float16: "half", torch.bfloat16: "bfloat16",
               torch.int32: "int32", torch.int64: "int64", torch.float64: "double"}


def parse_dtype(text: str | torch.dtype) -> torch.dtype:
    if isinstance(text, torch.dtype):
        return text
    try:
        return DTYPES[str(text).lower().removeprefix("torch.")]
    except KeyError:
        raise InputError(f"dtype {text!r}: choose one of float32, float16, bfloat16, int32, "
                         "int64, float64") from None


def type_name(dtype: torch.dtype) -> str:
    return _NCCL_NAMES.get(dtype, str(dtype).removeprefix("torch."))


@dataclass(frozen=True)
class Result:
    """One mode (out of place or in place) at one size; ``skipped`` says why it did not run."""

    time_us: float | None = None
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None
    wrong: int | None = None
    skipped: str | None = None


@dataclass(frozen=True)
class Row:
    """One nccl-tests row: ``size count type redop root``, then both modes."""

    size_bytes: int
    count: int
    type: str
    redop: str
    root: int
    schedule: str
    out_of_place: Result
    in_place: Result

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Options:
    """How to measure: ``iters`` timed runs after ``warmup``; ``check`` every element."""

    dtype: torch.dtype = torch.float32
    op: RedOp = RedOp.SUM
    iters: int = 20
    warmup: int = 5
    check: bool = True
    modes: tuple[bool, ...] = (False, True)
    """Which modes to run: ``False`` out of place, ``True`` in place."""
    timeout: float = 60.0
    segment_bytes: int | None = None
    """Send messages larger than this as pieces (see :class:`Executor`)."""
    reps: int = 1
    """Timed repetitions of ``iters`` runs each; the median repetition is reported."""
    target_s: float | None = None
    """When set, ``iters`` is the most: one run after the warmup sizes the repetitions
    (its time, the ranks' mean, is not reported) to about this long each."""


class Runner:
    """Executors per schedule and mode, built on first use; one per process and plan."""

    def __init__(self, plan: Plan | Schedule, transport: Transport, options: Options) -> None:
        self.plan = Plan.single(plan) if isinstance(plan, Schedule) else plan
        self.transport = transport
        self.options = options
        self._executors: dict[tuple[int, bool], Executor | str] = {}

    def executor(self, schedule: Schedule, in_place: bool) -> Executor | str:
        """The executor, or why this schedule cannot run in this mode."""
        key = (id(schedule), in_place)
        if key not in self._executors:
            try:
                variant = in_place_variant(schedule) if in_place else schedule
                self._executors[key] = Executor(variant, self.transport,
                                                timeout=self.options.timeout,
                                                segment_bytes=self.options.segment_bytes)
            except CCWeaveError as error:
                if not in_place:
                    raise
                self._executors[key] = str(error)
        return self._executors[key]

    def row(self, size_bytes: int, progress: Callable[[str], None] | None = None) -> Row:
        opts = self.options
        schedule = self.plan.schedule_for(size_bytes)
        coll = schedule.collective
        layout = layout_for_bytes(coll, size_bytes, opts.dtype.itemsize)
        results = {}
        for mode in (False, True):
            if mode not in opts.modes:
                results[mode] = Result(skipped="not requested")
                continue
            executor = self.executor(schedule, mode)
            if isinstance(executor, str):
                results[mode] = Result(skipped=executor)
                continue
            if progress:
                progress(f"{format_size(layout.size_bytes(opts.dtype.itemsize))} "
                         f"{'in-place' if mode else 'out-of-place'}: check and time")
            results[mode] = self._measure(executor, layout, mode)
        reduction = coll.kind.is_reduction
        return Row(layout.size_bytes(opts.dtype.itemsize), layout.count, type_name(opts.dtype),
                   opts.op.value if reduction else "none",
                   coll.root if coll.kind.is_rooted else -1, schedule.name,
                   results[False], results[True])

    def _measure(self, executor: Executor, layout: Layout, in_place: bool) -> Result:
        coll: Collective = executor.schedule.collective
        # the executor's thread count for the whole measurement, not toggled per run:
        # with torch's default (a thread per core, per rank) the buffers' set-up and the
        # switch back after each run woke every rank's pool (6-13% slower on 8 emulated
        # ranks on 2 cores than with OMP_NUM_THREADS=1)
        with intra_op_threads(executor.threads):
            result = measure_call(
                lambda data, out: executor.run(data, None if in_place else out,
                                               self.options.op),
                coll, layout, self.transport, self.options, in_place)
        executor.release()  # views, temporaries and scratch go with this size's buffers
        return result


def measure_call(call: Callable[[torch.Tensor, torch.Tensor], None], coll: Collective,
                 layout: Layout, transport: Transport, opts: Options,
                 in_place: bool = False) -> Result:
    """Check ``call(input, output)`` once, then time it: ``reps`` repetitions of ``iters``
    runs after ``warmup``, each started together (a barrier); a repetition lasts as long
    as its slowest rank, and the median repetition's time per run is reported."""
    rank, ranks = transport.rank, transport.world_size
    data, out = reference.make_buffers(coll, rank, layout, opts.dtype, opts.op, in_place,
                                       transport.device)
    call(data, out)
    wrong = 0
    if opts.check:
        _synchronize(transport.device)
        wrong = reference.count_wrong(coll, rank, layout, out, opts.op, in_place)
    for _ in range(opts.warmup):
        call(data, out)
    iters = _iterations(functools.partial(call, data, out), transport, opts)
    reps = max(1, opts.reps)
    times = [0.0] * (reps * ranks)  # every rank's time of every repetition, summed below
    recorder = progress.of(transport)
    for rep in range(reps):
        with recorder.around(progress.Phase.BARRIER):
            transport.barrier()
        _synchronize(transport.device)
        start = time.perf_counter()
        for _ in range(iters):
            call(data, out)
        _synchronize(transport.device)
        times[rep * ranks + rank] = (time.perf_counter() - start) / iters
    del data, out
    with recorder.around(progress.Phase.REDUCE_VALUES):
        *everyone, total_wrong = transport.sum_values([*times, float(wrong)])
    seconds = statistics.median(max(everyone[rep * ranks:(rep + 1) * ranks])
                                for rep in range(reps))
    size = layout.size_bytes(opts.dtype.itemsize)
    algbw = size / seconds / 1e9 if seconds > 0 else float("inf")
    return Result(seconds * 1e6, algbw, algbw * coll.busbw_factor,
                  int(total_wrong) if opts.check else None)


def _iterations(run: Callable[[], None], transport: Transport, opts: Options) -> int:
    """Timed runs per repetition: ``opts.iters``, or with ``opts.target_s`` as many as
    last that long by one timed run (at most ``opts.iters``; the same on every rank)."""
    if not opts.target_s:
        return max(1, opts.iters)
    start = time.perf_counter()
    run()
    _synchronize(transport.device)
    recorder = progress.of(transport)
    with recorder.around(progress.Phase.REDUCE_VALUES):
        (total,) = transport.sum_values([time.perf_counter() - start])
    once = total / transport.world_size
    return max(1, min(opts.iters, round(opts.target_s / once)) if once > 0 else opts.iters)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(plan: Plan | Schedule, transport: Transport, sizes: Sequence[int],
            options: Options | None = None,
            progress: Callable[[str], None] | None = None) -> list[Row]:
    """Rows for every size (every rank must call this with the same arguments)."""
    runner = Runner(plan, transport, options or Options())
    return [runner.row(size, progress) for size in sizes]
