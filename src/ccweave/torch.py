"""Drop-in collectives for ``torch.distributed`` that run ccweave schedules.

``ccweave.torch.all_reduce(tensor)`` behaves like ``torch.distributed.all_reduce(tensor)``
on an initialised process group (gloo or NCCL), but moves the data with a ccweave
schedule: the plan given with ``plan=`` or registered with :func:`use` (an ``auto`` plan
file, or :func:`use_auto` to build one), else the ring on a switch of the group's size.
:func:`allreduce_hook` is a DDP communication hook.

The data travels as in ``ccweave run`` and ``bench``: over gloo, on ccweave's own
connections and shared memory between a host's ranks (gloo's send and receive only as a
fallback that says so); over NCCL, with NCCL's point-to-point calls. ``async_op=True``
returns a work handle at once and the collective runs on the group's progress thread,
first in, first out; the hook returns its future the same way, so DDP's buckets are
summed while backward goes on. For allreduce with an ``auto`` plan (or the default), the
group's own ``all_reduce`` is a candidate at every size: it runs where the calibrated
model, or a first call timed on every rank, finds it faster.

Every rank of the group must call the same collectives in the same order, like
``torch.distributed``. Sizes that do not split into the schedule's chunks run as they
are, in chunks one element apart in size (padded through a buffer kept for the next call
only where a schedule moves chunks between places of unequal size).
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from ccweave import plan as plan_io
from ccweave.collectives import Collective, Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.plan import Plan
from ccweave.runtime import incumbent as incumbents
from ccweave.runtime.executor import Executor
from ccweave.runtime.incumbent import Choice
from ccweave.runtime.inplace import in_place as in_place_variant
from ccweave.runtime.reduce_ops import RedOp
from ccweave.runtime.staging import staging_for
from ccweave.runtime.transport.base import Transport
from ccweave.runtime.transport.torchgroup import group_transport, say_fallback
from ccweave.runtime.worker import GroupWorker, Work
from ccweave.schedule import Schedule
from ccweave.topology.model import Topology
from ccweave.verify import verify

TAG_BASE = 1 << 20
"""Message tags are ``TAG_BASE + transfer index``, clear of small user tags."""
DEFAULT_STRATEGY = "ring"
TIMEOUT_S = 300.0
AUTO_PREFIX = "auto("
"""The name :func:`ccweave.select.best_plan` gives its plans."""

PlanLike = Plan | Schedule | str | Path

_plans: dict[tuple[Kind, int, int], Plan] = {}
_defaults: dict[tuple[Kind, int, int], Plan] = {}
_models: dict[int, tuple[Plan, Topology]] = {}
"""id(plan) -> (plan, the calibrated machine it was made for): the incumbent's model."""
_files: dict[str, Plan] = {}
_groups: dict[int, _Group] = {}
_ops: dict[object, tuple[RedOp, bool]] = {}


def _as_plan(plan: PlanLike) -> Plan:
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, Schedule):
        return Plan.single(plan)
    key = str(plan)
    if key not in _files:
        _files[key] = plan_io.load(plan)
    return _files[key]


def use(plan: PlanLike, model: Topology | str | Path | None = None) -> Plan:
    """Register ``plan`` (a Plan, Schedule or file) for its collective, ranks and root;
    it is verified once here. Returns the plan.

    ``model``: the calibrated machine the plan was made for (a topology file that ``bench
    --save-model`` or ``profile --calibrate`` wrote): allreduce then runs the group's own
    ``all_reduce`` at the sizes where the model finds it faster. Without one (or with an
    uncalibrated machine) a first call at each size class is timed instead."""
    plan = _as_plan(plan)
    for entry in plan.entries:
        verify(entry.schedule)
    coll = plan.collective
    _plans[(coll.kind, coll.num_ranks, coll.root)] = plan
    if model is not None:
        _register_model(plan, model)
    _forget_calls()
    return plan


def use_auto(topology: str | Path | Topology, *kinds: str,
             sizes: Sequence[int] | None = None,
             strategies: Sequence[str] | None = None) -> list[Plan]:
    """Register ``auto`` plans for ``topology`` (a zoo name, a file or a Topology): for
    each of ``kinds`` (default allreduce) the fastest simulated schedule per size
    (:func:`ccweave.select.best_plan`); a calibrated topology is also the model the
    incumbent is judged by. Every rank computes the same plans (the simulator is
    deterministic); on a big machine that takes a while, so ``ccweave synth TOPO KIND
    --strategy auto -o plan.json`` once and :func:`use` of the file is the cheaper habit.
    Returns the plans."""
    from ccweave.select import DEFAULT_SIZES, best_plan
    from ccweave.topology.io import load

    machine = topology if isinstance(topology, Topology) else load(topology)
    return [use(best_plan(machine, Kind.parse(kind), sizes or DEFAULT_SIZES, strategies),
                model=machine)
            for kind in kinds or ("allreduce",)]


def _register_model(plan: Plan, model: Topology | str | Path) -> None:
    from ccweave.topology.io import load

    machine = model if isinstance(model, Topology) else load(model)
    if machine.num_ranks != plan.collective.num_ranks:
        raise InputError(f"model {machine.name!r} has {machine.num_ranks} ranks, but plan "
                         f"{plan.name!r} is for {plan.collective.num_ranks}; give the "
                         "machine the plan was made for")
    if incumbents.is_calibrated(machine):
        _models[id(plan)] = (plan, machine)


def reset() -> None:
    """Forget registered plans, cached executors, transports and progress threads (e.g.
    after a new group).

    Each group's progress thread finishes what is queued first, then its transport is
    closed: shared memory waits (5 s at most) until its peers have read what it sent,
    then unmaps. The cached transports hold their process groups: call this before
    ``destroy_process_group`` to let the group go there, as it does in a program without
    ccweave (on every rank: a group's next call here makes its transport anew, a
    collective). At exit it runs by itself (``atexit``), so a group ccweave still holds
    is not torn down during interpreter finalization, with gloo's threads running."""
    for state in _groups.values():
        state.close()
    _groups.clear()
    _plans.clear()
    _defaults.clear()
    _models.clear()
    _files.clear()


atexit.register(reset)


def choices(group: dist.ProcessGroup | None = None) -> dict[int, Choice]:
    """What allreduce runs at each size class so far in ``group`` (the class of ``n``
    bytes is ``n.bit_length()``): the incumbent or ccweave's schedule, and the times
    that decided it (the same on every rank)."""
    state = _groups.get(id(_group(group)))
    if state is None:
        return {}
    return {klass: choice for (_, klass, _), (_, choice) in state.choices.items()}


def transport_of(group: dist.ProcessGroup | None = None) -> Transport:
    """The transport ccweave runs ``group``'s collectives on (made on first use, a
    collective on the group)."""
    return _state(group).transport


# ------------------------------------------------------------------ per group


def _group(group: dist.ProcessGroup | None) -> dist.ProcessGroup:
    if not dist.is_initialized():
        raise InputError("ccweave.torch needs an initialised process group "
                         "(torch.distributed.init_process_group, or start under torchrun)")
    return group if group is not None else dist.group.WORLD


def _state(group: dist.ProcessGroup | None) -> _Group:
    group = _group(group)
    state = _groups.get(id(group))
    if state is None:
        state = _groups[id(group)] = _Group(group)
    return state


def _forget_calls() -> None:
    for state in _groups.values():
        state.calls.clear()


@dataclass
class _Call:
    """One whole-buffer collective at one size, resolved once: the schedule and its
    executor, the padding buffer, the staging, and whether the incumbent runs instead."""

    plan: Plan
    schedule: Schedule
    run: Callable[[torch.Tensor, RedOp], None]
    copies: bool
    """Whether a run copies the buffer (padding, or a schedule with no in-place variant)."""
    staging: object
    incumbent: bool


class _Group:
    """What ccweave keeps for one process group: its transport, its progress thread,
    executors, resolved calls and the incumbent's choices."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.backend = str(dist.get_backend(group)).lower()
        self.transport, self.fallback = group_transport(group)
        if self.fallback:
            say_fallback(self.rank, self.size, self.fallback)
        self.recorder = None
        if group is dist.group.WORLD:  # a ccweave launcher's progress record, if it asks
            from ccweave.runtime import progress

            self.recorder = progress.Recorder.from_env(dist.get_rank(), TIMEOUT_S)
            self.transport.progress = self.recorder  # type: ignore[attr-defined]
            self.recorder.phase(progress.Phase.IDLE)
        self.worker = (None if self.transport.stream_ordered
                       else GroupWorker(f"ccweave-group-{self.size}-ranks-{id(group):x}"))
        self.executors: dict[tuple[int, bool], Executor] = {}
        self.variants: dict[int, tuple[Schedule, Schedule | None]] = {}
        self.calls: dict[tuple, _Call] = {}
        self.choices: dict[tuple[int, int, torch.dtype], tuple[Plan, Choice]] = {}
        """(id(plan), size class, dtype) -> (the plan, kept so its id stays its own; the
        choice)."""

    def close(self) -> None:
        if self.worker is not None:
            self.worker.drain(TIMEOUT_S)
            self.worker.close()
        self.transport.close()
        if self.recorder is not None:
            self.recorder.close()

    # ---------------------------------------------------------- running

    def execute(self, task: Callable[[], object], async_op: bool, like: torch.Tensor,
                future: torch.futures.Future | None = None) -> Work | None:
        """Run ``task`` in the group's order: now (``async_op`` false: returns when done,
        raising its error) or on the progress thread (a :class:`Work` at once). NCCL
        transports only issue work on streams, so their tasks run on the caller's thread
        and the work completes through CUDA events."""
        if self.worker is None:
            result = task()
            if not async_op and future is None:
                return None
            future = future if future is not None else _future(like)
            future.set_result(result)
            return Work(future)
        if not async_op and future is None:
            self.worker.call(task)
            return None
        return Work(self.worker.submit(task, future if future is not None else _future(like)))

    def executor(self, schedule: Schedule, in_place: bool) -> Executor | None:
        """The executor of ``schedule`` (``in_place``: of its in-place variant; ``None``
        when it has none)."""
        if in_place:
            if id(schedule) not in self.variants:
                try:
                    variant = in_place_variant(schedule)
                except NotApplicableError:
                    variant = None
                self.variants[id(schedule)] = (schedule, variant)  # holds the id's owner
            variant = self.variants[id(schedule)][1]
            if variant is None:
                return None
            schedule = variant
        key = (id(schedule), in_place)
        if key not in self.executors:
            self.executors[key] = Executor(schedule, self.transport, timeout=TIMEOUT_S,
                                           tag_base=TAG_BASE, uneven=True)
        return self.executors[key]

    def plan(self, kind: Kind, root: int, plan: PlanLike | None) -> tuple[Plan, bool]:
        """The plan for a call, and whether it is an ``auto`` plan or the default (where
        the incumbent is a candidate)."""
        if plan is not None:
            chosen = _as_plan(plan)
            auto = chosen.name.startswith(AUTO_PREFIX)
        else:
            key = (kind, self.size, root)
            chosen = _plans.get(key)
            auto = chosen is None or chosen.name.startswith(AUTO_PREFIX)
            if chosen is None:
                chosen = _defaults.get(key)
            if chosen is None:
                from ccweave.synth.registry import synthesize
                from ccweave.topology.io import load

                schedule = synthesize(load(f"switch:{self.size}"), kind, DEFAULT_STRATEGY,
                                      root=root)
                verify(schedule)
                chosen = _defaults[key] = Plan.single(schedule)
        coll = chosen.collective
        if (coll.kind is not kind or coll.num_ranks != self.size
                or (kind.is_rooted and coll.root != root)):
            raise InputError(f"plan {chosen.name or ''!r} is for {coll.describe()}, but this "
                             f"call is {kind.value} on {self.size} ranks"
                             + (f" with root {root}" if kind.is_rooted else ""))
        return chosen, auto

    def whole_call(self, kind: Kind, flat: torch.Tensor, root: int, plan: PlanLike | None,
                   incumbent: bool | None) -> _Call:
        """The resolved call of a whole-buffer collective (allreduce, broadcast, reduce)
        on ``flat``'s size, dtype and device (made on first use)."""
        key = (kind, root, _plan_key(plan), flat.numel(), flat.dtype, flat.device,
               incumbent)
        call = self.calls.get(key)
        if call is None:
            call = self.calls[key] = self._whole_call(kind, flat, root, plan, incumbent)
        return call

    def _whole_call(self, kind: Kind, flat: torch.Tensor, root: int, plan: PlanLike | None,
                    incumbent: bool | None) -> _Call:
        chosen, auto = self.plan(kind, root, plan)
        size_bytes = flat.numel() * flat.element_size()
        schedule = chosen.schedule_for(size_bytes)
        staging = staging_for(flat, host_driven=not self.transport.stream_ordered)
        host = torch.device("cpu") if staging is not _no_staging() else flat.device
        run, copies = self._whole_runner(schedule, flat.numel(), flat.dtype, host)
        call = _Call(chosen, schedule, run, copies, staging, False)
        consider = auto if incumbent is None else incumbent
        if consider and kind is Kind.ALLREDUCE and flat.numel():
            call.incumbent = self.choice(chosen, flat, call).incumbent
        return call

    def _whole_runner(self, schedule: Schedule, numel: int, dtype: torch.dtype,
                      device: torch.device
                      ) -> tuple[Callable[[torch.Tensor, RedOp], None], bool]:
        """``run(flat, op)``: the schedule on ``flat`` in place; where its size does not
        split into the chunks, with chunks one element apart (:mod:`ccweave.runtime.uneven`)
        or, where the schedule allows none, through a padded buffer kept for the next
        call; through an output buffer where the schedule has no in-place variant; and
        whether it copies the buffer so."""
        per = schedule.collective.total_chunks
        padded = -(-numel // per) * per
        executor = self.executor(schedule, True)
        if executor is not None and (padded == numel or executor.runs_uneven(numel)):
            return (lambda flat, op: executor.run(flat, None, op)), False
        pad = torch.zeros(padded, dtype=dtype, device=device) if padded != numel else None
        if executor is not None:

            def padded_run(flat: torch.Tensor, op: RedOp) -> None:
                pad[:numel].copy_(flat)
                executor.run(pad, None, op)
                flat.copy_(pad[:numel])

            return padded_run, True
        out_of_place = self.executor(schedule, False)
        assert out_of_place is not None
        if out_of_place.runs_uneven(numel):
            pad, padded = None, numel
        out = torch.empty(padded, dtype=dtype, device=device)

        def copied_run(flat: torch.Tensor, op: RedOp) -> None:
            source = flat
            if pad is not None:
                pad[:numel].copy_(flat)
                source = pad
            out_of_place.run(source, out, op)
            flat.copy_(out[:numel])

        return copied_run, True

    # ---------------------------------------------------------- the incumbent

    def choice(self, plan: Plan, flat: torch.Tensor, call: _Call) -> Choice:
        """Whether the group's own all_reduce beats ``plan`` at ``flat``'s size class:
        by the plan's calibrated model on gloo, else by timing both once (every rank
        here together, the slowest rank's times deciding)."""
        size_bytes = flat.numel() * flat.element_size()
        klass = incumbents.size_class(size_bytes)
        key = (id(plan), klass, flat.dtype)
        known = self.choices.get(key)
        if known is not None:
            return known[1]
        model = _models.get(id(plan))
        if model is not None and self.backend == "gloo":
            found = incumbents.model_choices(plan, model[1], [klass])[klass]
        else:
            found = self._measure(flat, call)
        self.choices[key] = (plan, found)
        return found

    def _measure(self, flat: torch.Tensor, call: _Call) -> Choice:
        if self.worker is not None:
            self.worker.drain()  # this thread runs the executor now: nothing else may
        scratch = torch.zeros_like(flat)
        staging = call.staging

        def finished() -> None:  # NCCL and the staging copies run on streams
            if scratch.device.type == "cuda":
                torch.cuda.synchronize(scratch.device)

        def ours() -> None:
            host = staging.down(scratch, staging.mark())  # type: ignore[attr-defined]
            call.run(host, RedOp.SUM)
            staging.up(scratch)  # type: ignore[attr-defined]
            self.transport.flush(TIMEOUT_S)
            finished()

        def theirs() -> None:
            dist.all_reduce(scratch, group=self.group)
            finished()

        def slowest(values: list[float]) -> list[float]:
            times = torch.tensor(values, dtype=torch.float64, device=self.transport.device)
            dist.all_reduce(times, op=dist.ReduceOp.MAX, group=self.group)
            return times.tolist()

        try:
            theirs()
        except RuntimeError:  # a dtype or op the backend lacks: the same on every rank
            return Choice(False, float("nan"), float("nan"), "incumbent refused the dtype")
        return incumbents.measured_choice(ours, theirs, self.transport.barrier, slowest)


def _no_staging() -> object:
    from ccweave.runtime.staging import NO_STAGING

    return NO_STAGING


def _plan_key(plan: PlanLike | None) -> object:
    if plan is None:
        return None
    if isinstance(plan, (str, Path)):
        return str(plan)
    return id(plan)  # the call keeps the plan, so the id stays its own


def _future(like: torch.Tensor) -> torch.futures.Future:
    """A future for results on ``like``'s device (CUDA: completing it records an event
    its waiters' streams wait on)."""
    if like.device.type == "cuda":
        return torch.futures.Future(devices=[like.device])
    return torch.futures.Future()


# ------------------------------------------------------------------ plumbing


def _root(group: dist.ProcessGroup, global_rank: int | None, group_rank: int | None,
          name: str) -> int:
    """The root as a group rank, from torch's ``src``/``dst`` or ``group_src``/``group_dst``."""
    if group_rank is not None:
        return group_rank
    if global_rank is None:
        raise InputError(f"give {name} (a global rank) or group_{name} (a rank in the group)")
    return global_rank if group is dist.group.WORLD else dist.get_group_rank(group, global_rank)


def _flat(tensor: torch.Tensor, name: str) -> torch.Tensor:
    if not tensor.is_contiguous():
        raise InputError(f"{name} must be contiguous (call .contiguous() first)")
    return tensor.view(-1)


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


@dataclass(frozen=True)
class _Segments:
    """Per-rank segments of ``length`` elements, padded to ``padded`` (a chunk multiple)."""

    count: int
    length: int
    padded: int

    def pack(self, flat: torch.Tensor) -> torch.Tensor:
        if self.padded == self.length:
            return flat
        out = flat.new_zeros(self.count * self.padded)
        out.view(self.count, self.padded)[:, :self.length] = flat.view(self.count, self.length)
        return out

    def unpack(self, padded: torch.Tensor, flat: torch.Tensor) -> None:
        if padded.data_ptr() != flat.data_ptr():
            flat.view(self.count, self.length).copy_(
                padded.view(self.count, self.padded)[:, :self.length])


def _segments(coll: Collective, elements: int) -> _Segments:
    """Split ``elements`` of the size buffer into ``N`` rank segments of ``c`` chunks."""
    if elements % coll.num_ranks:
        raise InputError(f"{elements} elements do not split into {coll.num_ranks} equal "
                         "rank segments")
    length = elements // coll.num_ranks
    per = coll.chunks_per_rank
    return _Segments(coll.num_ranks, length, -(-length // per) * per)


def _reduce_op(op: object) -> tuple[RedOp, bool]:
    """(the ccweave op, whether to divide by the group size afterwards: AVG)."""
    try:
        return _ops[op]
    except (KeyError, TypeError):
        pass
    found = (RedOp.SUM, True) if "AVG" in str(op).upper() else (RedOp.parse(op), False)
    with contextlib.suppress(TypeError):  # an unhashable op object: parsed each call
        _ops[op] = found
    return found


def _on_host(tensor: torch.Tensor, transport: Transport) -> torch.Tensor:
    """``tensor`` where a host-driven transport can move it (a CPU copy of a GPU tensor)."""
    if tensor.device.type == "cpu" or transport.stream_ordered:
        return tensor
    return tensor.cpu()


def _whole(kind: Kind, tensor: torch.Tensor, group: dist.ProcessGroup | None, root: int | None,
           op: RedOp, average: bool, plan: PlanLike | None, async_op: bool,
           incumbent: bool | None = False, future: torch.futures.Future | None = None,
           value: Callable[[torch.Tensor], object] = lambda t: [t]) -> Work | None:
    """Allreduce, broadcast, reduce: the tensor is the whole buffer, in and out."""
    state = _state(group)
    flat = _flat(tensor, "tensor")
    root = 0 if root is None else root
    call = state.whole_call(kind, flat, root, plan, incumbent)
    if call.incumbent:
        return _incumbent_all_reduce(state, tensor, op, average, async_op, future, value)
    staging = call.staging
    ready = staging.mark()  # type: ignore[attr-defined]
    divide = average and (kind is not Kind.REDUCE or state.rank == root)
    size, transport = state.size, state.transport

    def task() -> object:
        host = staging.down(flat, ready)  # type: ignore[attr-defined]
        call.run(host, op)
        if divide:
            host.div_(size)
        staging.up(flat)  # type: ignore[attr-defined]
        transport.flush(TIMEOUT_S)  # nothing a peer waits on stays queued here
        return value(tensor)

    return state.execute(task, async_op, tensor, future)


def _incumbent_all_reduce(state: _Group, tensor: torch.Tensor, op: RedOp, average: bool,
                          async_op: bool, future: torch.futures.Future | None,
                          value: Callable[[torch.Tensor], object]) -> Work | None:
    """The group's own all_reduce, where it is the faster (``op`` as torch names it; an
    average is a sum divided afterwards, as gloo has no AVG)."""
    torch_op = {RedOp.SUM: dist.ReduceOp.SUM, RedOp.PROD: dist.ReduceOp.PRODUCT,
                RedOp.MAX: dist.ReduceOp.MAX, RedOp.MIN: dist.ReduceOp.MIN}[op]
    size = state.size
    if not async_op and future is None:
        dist.all_reduce(tensor, op=torch_op, group=state.group)
        if average:
            tensor.div_(size)
        return None
    work = dist.all_reduce(tensor, op=torch_op, group=state.group, async_op=True)

    def finish(done: torch.futures.Future) -> object:
        done.value()  # raises the collective's error
        if average:
            tensor.div_(size)
        return value(tensor)

    chained = work.get_future().then(finish)
    if future is None:
        return Work(chained)
    chained.add_done_callback(lambda done: _settle(future, done))
    return None


def _settle(future: torch.futures.Future, done: torch.futures.Future) -> None:
    try:
        future.set_result(done.value())
    except BaseException as error:  # the collective's error reaches the caller
        future.set_exception(error)


# ------------------------------------------------------------------ collectives


def all_reduce(tensor: torch.Tensor, op: object = dist.ReduceOp.SUM,
               group: dist.ProcessGroup | None = None, async_op: bool = False, *,
               plan: PlanLike | None = None, incumbent: bool | None = None) -> Work | None:
    """``torch.distributed.all_reduce``, in place, with a ccweave schedule.

    Parameters
    ----------
    tensor: contiguous, on the CPU (gloo) or a GPU (NCCL; or gloo, staged through
        pinned host memory).
    op: SUM, PRODUCT, MAX, MIN or AVG (floating point).
    group, async_op: as torch's. ``async_op=True`` returns a :class:`Work` at once; the
        collective runs on the group's progress thread after those called before it.
    plan: a Plan, Schedule or file to use instead of the registered or default one.
    incumbent: whether the group's own all_reduce may run instead where it is faster
        (``None``: for ``auto`` plans and the default ring, not for a plan of one
        strategy).
    """
    red, average = _reduce_op(op)
    return _whole(Kind.ALLREDUCE, tensor, group, 0, red, average, plan, async_op, incumbent)


def broadcast(tensor: torch.Tensor, src: int | None = None,
              group: dist.ProcessGroup | None = None, async_op: bool = False,
              group_src: int | None = None, *, plan: PlanLike | None = None) -> Work | None:
    """``torch.distributed.broadcast`` (``src`` is a global rank)."""
    root = _root(_group(group), src, group_src, "src")
    return _whole(Kind.BROADCAST, tensor, group, root, RedOp.SUM, False, plan, async_op)


def reduce(tensor: torch.Tensor, dst: int | None = None, op: object = dist.ReduceOp.SUM,
           group: dist.ProcessGroup | None = None, async_op: bool = False,
           group_dst: int | None = None, *, plan: PlanLike | None = None) -> Work | None:
    """``torch.distributed.reduce``: the result lands in ``tensor`` on ``dst`` (a global
    rank); other ranks' tensors may be overwritten with partial results."""
    red, average = _reduce_op(op)
    root = _root(_group(group), dst, group_dst, "dst")
    return _whole(Kind.REDUCE, tensor, group, root, red, average, plan, async_op)


def _run_split(kind: Kind, big: torch.Tensor, small: torch.Tensor, small_is_input: bool,
               state: _Group, root: int, op: RedOp, plan: PlanLike | None) -> None:
    """Allgather/gather (small in, big out) and reduce-scatter/scatter (big in, small
    out): the big buffer holds one segment per rank."""
    big_flat, small_flat = _flat(big, "the larger tensor"), _flat(small, "the smaller tensor")
    size = state.size
    if big_flat.numel() != small_flat.numel() * size:
        raise InputError(f"{kind.value}: the larger tensor must hold {size} x the smaller "
                         f"({size} x {small_flat.numel()} elements), got {big_flat.numel()}")
    chosen, _ = state.plan(kind, root, plan)
    schedule = chosen.schedule_for(big_flat.numel() * big_flat.element_size())
    segments = _segments(schedule.collective, big_flat.numel())
    own = _Segments(1, segments.length, segments.padded)
    executor = state.executor(schedule, False)
    assert executor is not None
    big_host, small_host = _on_host(big_flat, state.transport), _on_host(small_flat,
                                                                         state.transport)
    packed_small = own.pack(small_host)
    if small_is_input:
        direct = segments.padded == segments.length and not _overlaps(small_host, big_host)
        packed_big = big_host if direct else big_host.new_empty(size * segments.padded)
        executor.run(packed_small, packed_big, op)
        segments.unpack(packed_big, big_host)
        if big_host is not big_flat:
            big_flat.copy_(big_host)
    else:
        executor.run(segments.pack(big_host), packed_small, op)
        own.unpack(packed_small, small_host)
        if small_host is not small_flat:
            small_flat.copy_(small_host)
    state.transport.flush(TIMEOUT_S)


def _split(kind: Kind, big: torch.Tensor, small: torch.Tensor, small_is_input: bool,
           group: dist.ProcessGroup | None, root: int, op: RedOp, plan: PlanLike | None,
           async_op: bool, result: torch.Tensor,
           after: Callable[[], None] | None = None) -> Work | None:
    state = _state(group)

    def task() -> object:
        _run_split(kind, big, small, small_is_input, state, root, op, plan)
        if after is not None:
            after()
        return [result]

    return state.execute(task, async_op, result)


def all_gather_into_tensor(output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                           group: dist.ProcessGroup | None = None, async_op: bool = False,
                           *, plan: PlanLike | None = None) -> Work | None:
    """``torch.distributed.all_gather_into_tensor``: rank ``r``'s input lands in segment
    ``r`` of every rank's output."""
    return _split(Kind.ALLGATHER, output_tensor, input_tensor, True, group, 0, RedOp.SUM,
                  plan, async_op, output_tensor)


def reduce_scatter_tensor(output: torch.Tensor, input: torch.Tensor,
                          op: object = dist.ReduceOp.SUM,
                          group: dist.ProcessGroup | None = None, async_op: bool = False,
                          *, plan: PlanLike | None = None) -> Work | None:
    """``torch.distributed.reduce_scatter_tensor``: rank ``r`` gets the reduction of
    segment ``r`` of every rank's input."""
    red, average = _reduce_op(op)
    size = dist.get_world_size(_group(group))
    after = (lambda: output.div_(size)) if average else None
    return _split(Kind.REDUCESCATTER, input, output, False, group, 0, red, plan, async_op,
                  output, after)


def all_to_all_single(output: torch.Tensor, input: torch.Tensor,
                      output_split_sizes: Sequence[int] | None = None,
                      input_split_sizes: Sequence[int] | None = None,
                      group: dist.ProcessGroup | None = None, async_op: bool = False, *,
                      plan: PlanLike | None = None) -> Work | None:
    """``torch.distributed.all_to_all_single`` with equal splits: segment ``j`` of rank
    ``i``'s input lands in segment ``i`` of rank ``j``'s output."""
    state = _state(group)
    for splits in (output_split_sizes, input_split_sizes):
        if splits is not None and len(set(splits)) > 1:
            raise InputError("all_to_all_single: ccweave schedules move equal splits; "
                             "pass equal split sizes (or none)")
    in_flat, out_flat = _flat(input, "input"), _flat(output, "output")
    if in_flat.numel() != out_flat.numel():
        raise InputError("all_to_all_single: input and output must have the same size")
    chosen, _ = state.plan(Kind.ALLTOALL, 0, plan)
    schedule = chosen.schedule_for(in_flat.numel() * in_flat.element_size())
    segments = _segments(schedule.collective, in_flat.numel())

    def task() -> object:
        source = _on_host(in_flat, state.transport)
        target = _on_host(out_flat, state.transport)
        packed_in = segments.pack(source)
        packed_out = target if segments.padded == segments.length else \
            target.new_empty(state.size * segments.padded)
        executor = state.executor(schedule, False)
        assert executor is not None
        executor.run(packed_in, packed_out, RedOp.SUM)
        segments.unpack(packed_out, target)
        if target is not out_flat:
            out_flat.copy_(target)
        state.transport.flush(TIMEOUT_S)
        return [output]

    return state.execute(task, async_op, output)


def gather(tensor: torch.Tensor, gather_list: list[torch.Tensor] | None = None,
           dst: int | None = None, group: dist.ProcessGroup | None = None,
           async_op: bool = False, group_dst: int | None = None, *,
           plan: PlanLike | None = None) -> Work | None:
    """``torch.distributed.gather``: ``dst`` (a global rank) receives every rank's tensor
    into ``gather_list``."""
    state = _state(group)
    size, root = state.size, _root(state.group, dst, group_dst, "dst")
    if state.rank == root and (gather_list is None or len(gather_list) != size):
        raise InputError(f"gather: dst needs a gather_list of {size} tensors")
    big = tensor.new_empty(size * tensor.numel())

    def scatter_out() -> None:
        if state.rank == root:
            for number, part in enumerate(big.view(size, -1)):
                gather_list[number].copy_(part.view_as(gather_list[number]))  # type: ignore[index]

    return _split(Kind.GATHER, big, tensor.contiguous(), True, group, root, RedOp.SUM, plan,
                  async_op, tensor, scatter_out)


def scatter(tensor: torch.Tensor, scatter_list: list[torch.Tensor] | None = None,
            src: int | None = None, group: dist.ProcessGroup | None = None,
            async_op: bool = False, group_src: int | None = None, *,
            plan: PlanLike | None = None) -> Work | None:
    """``torch.distributed.scatter``: rank ``r`` receives ``scatter_list[r]`` of ``src``."""
    state = _state(group)
    size, root = state.size, _root(state.group, src, group_src, "src")
    if state.rank == root:
        if scatter_list is None or len(scatter_list) != size:
            raise InputError(f"scatter: src needs a scatter_list of {size} tensors")
        big = torch.cat([part.reshape(-1) for part in scatter_list])
    else:
        big = tensor.new_empty(size * tensor.numel())
    small = tensor if tensor.is_contiguous() else tensor.contiguous()
    after = (lambda: tensor.copy_(small)) if small is not tensor else None
    return _split(Kind.SCATTER, big, small, False, group, root, RedOp.SUM, plan, async_op,
                  tensor, after)


all_gather_single = all_gather_into_tensor
"""torch 2.13's name for :func:`all_gather_into_tensor`."""
reduce_scatter_single = reduce_scatter_tensor
"""torch 2.13's name for :func:`reduce_scatter_tensor`."""


# ------------------------------------------------------------------ DDP


@dataclass(frozen=True)
class HookState:
    """State for :func:`allreduce_hook`: the group, an optional plan, and whether the
    group's own all_reduce may run where it is faster (``None``: for auto plans and the
    default ring)."""

    group: dist.ProcessGroup | None = None
    plan: PlanLike | None = None
    incumbent: bool | None = None


def allreduce_hook(state: HookState | dist.ProcessGroup | None,
                   bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook averaging gradients with ccweave's all_reduce, like
    torch's default ``allreduce_hook`` (divide by the group size, then sum).

    The future comes back at once and completes when the group's progress thread has
    summed the bucket, so later buckets' gradients are computed meanwhile; buckets run
    in the order DDP hands them over, the same on every rank.
    ``model.register_comm_hook(HookState(plan=...), ccweave.torch.allreduce_hook)``.
    """
    if isinstance(state, HookState):
        group, plan, incumbent = state.group, state.plan, state.incumbent
    else:
        group, plan, incumbent = state, None, None
    tensor = bucket.buffer()
    tensor.div_(_state(group).size)
    future = _future(tensor)
    _whole(Kind.ALLREDUCE, tensor, group, 0, RedOp.SUM, False, plan, True, incumbent,
           future=future, value=lambda t: t)
    return future


# DDP checks the hook's annotations as objects; postponed (string) ones would fail that check
allreduce_hook.__annotations__ = {"state": object, "bucket": dist.GradBucket,
                                  "return": torch.futures.Future[torch.Tensor]}
