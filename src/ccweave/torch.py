"""Drop-in collectives for ``torch.distributed`` that run ccweave schedules.

``ccweave.torch.all_reduce(tensor)`` behaves like ``torch.distributed.all_reduce(tensor)``
on an initialised process group (gloo or NCCL), but moves the data with a ccweave
schedule: the plan given with ``plan=`` or registered with :func:`use` (an ``auto`` plan
file, or :func:`use_auto` to build one), else the ring on a switch of the group's size.
:func:`allreduce_hook` is a DDP communication hook.

Calls run to completion before they return (``async_op=True`` returns a finished work);
every rank of the group must call the same collective, like ``torch.distributed``. Sizes
that do not split into the schedule's chunks are padded through a temporary buffer.
"""

from __future__ import annotations

import atexit
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from ccweave import plan as plan_io
from ccweave.collectives import Collective, Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.plan import Plan
from ccweave.runtime.executor import Executor
from ccweave.runtime.inplace import in_place as in_place_variant
from ccweave.runtime.reduce_ops import RedOp
from ccweave.runtime.transport.base import Transport
from ccweave.runtime.transport.shm import with_shared_memory
from ccweave.runtime.transport.torchdist import TorchTransport
from ccweave.schedule import Schedule
from ccweave.verify import verify

TAG_BASE = 1 << 20
"""Message tags are ``TAG_BASE + transfer index``, clear of small user tags."""
DEFAULT_STRATEGY = "ring"
TIMEOUT_S = 300.0

PlanLike = Plan | Schedule | str | Path

_plans: dict[tuple[Kind, int, int], Plan] = {}
_defaults: dict[tuple[Kind, int, int], Plan] = {}
_executors: dict[tuple[int, bool, int], Executor] = {}
_transports: dict[int, Transport] = {}
_in_place: dict[int, Schedule | None] = {}


def _as_plan(plan: PlanLike) -> Plan:
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, Schedule):
        return Plan.single(plan)
    return plan_io.load(plan)


def use(plan: PlanLike) -> Plan:
    """Register ``plan`` (a Plan, Schedule or file) for its collective, ranks and root;
    it is verified once here. Returns the plan."""
    plan = _as_plan(plan)
    for entry in plan.entries:
        verify(entry.schedule)
    coll = plan.collective
    _plans[(coll.kind, coll.num_ranks, coll.root)] = plan
    return plan


def use_auto(topology: str | Path, *kinds: str, sizes: Sequence[int] | None = None,
             strategies: Sequence[str] | None = None) -> list[Plan]:
    """Register ``auto`` plans for ``topology`` (a zoo name or a file): for each of
    ``kinds`` (default allreduce) the fastest simulated schedule per size
    (:func:`ccweave.synth.select.best_plan`). Every rank computes the same plans (the
    simulator is deterministic); on a big machine that takes a while, so ``ccweave synth
    TOPO KIND --strategy auto -o plan.json`` once and :func:`use` of the file is the
    cheaper habit. Returns the plans."""
    from ccweave.synth.select import DEFAULT_SIZES, best_plan
    from ccweave.topology.io import load

    machine = load(topology)
    return [use(best_plan(machine, Kind.parse(kind), sizes or DEFAULT_SIZES, strategies))
            for kind in kinds or ("allreduce",)]


def reset() -> None:
    """Forget registered plans, cached executors and transports (e.g. after a new group).

    Each transport is closed first: shared memory waits (5 s at most) until its peers
    have read what it sent, then unmaps. The cached transports hold their process groups:
    call this before ``destroy_process_group`` to let the group go there, as it does in a
    program without ccweave (on every rank: a group's next call here makes its transport
    anew, a collective). At exit it runs by itself (``atexit``), so a group ccweave still
    holds is not torn down during interpreter finalization, with gloo's threads running."""
    for transport in _transports.values():
        transport.close()
    _plans.clear()
    _defaults.clear()
    _executors.clear()
    _transports.clear()
    _in_place.clear()


atexit.register(reset)


# ------------------------------------------------------------------ plumbing


def _group(group: dist.ProcessGroup | None) -> dist.ProcessGroup:
    if not dist.is_initialized():
        raise InputError("ccweave.torch needs an initialised process group "
                         "(torch.distributed.init_process_group, or start under torchrun)")
    return group if group is not None else dist.group.WORLD


def _transport(group: dist.ProcessGroup) -> Transport:
    """The group's transport: torch.distributed p2p, with shared memory between ranks on
    one host over gloo (created on first use; a collective on the group)."""
    key = id(group)
    if key not in _transports:
        inner = TorchTransport(None if group is dist.group.WORLD else group)
        if inner.name == "gloo":
            inner = with_shared_memory(inner, group=group)
        _transports[key] = inner
    return _transports[key]


def _plan(kind: Kind, group: dist.ProcessGroup, root: int, plan: PlanLike | None) -> Plan:
    size = dist.get_world_size(group)
    if plan is not None:
        chosen = _as_plan(plan)
    else:
        key = (kind, size, root)
        chosen = _plans.get(key) or _defaults.get(key)
        if chosen is None:
            from ccweave.synth.registry import synthesize
            from ccweave.topology.io import load

            schedule = synthesize(load(f"switch:{size}"), kind, DEFAULT_STRATEGY, root=root)
            verify(schedule)
            chosen = _defaults[key] = Plan.single(schedule)
    coll = chosen.collective
    if coll.kind is not kind or coll.num_ranks != size or (kind.is_rooted and coll.root != root):
        raise InputError(f"plan {chosen.name or ''!r} is for {coll.describe()}, but this call "
                         f"is {kind.value} on {size} ranks"
                         + (f" with root {root}" if kind.is_rooted else ""))
    return chosen


def _in_place_executor(schedule: Schedule, group: dist.ProcessGroup) -> Executor | None:
    """The executor of ``schedule``'s in-place variant (``None``: it cannot run in place)."""
    if id(schedule) not in _in_place:
        try:
            _in_place[id(schedule)] = in_place_variant(schedule)
        except NotApplicableError:
            _in_place[id(schedule)] = None
    variant = _in_place[id(schedule)]
    return None if variant is None else _executor(variant, True, group)


def _executor(schedule: Schedule, in_place: bool, group: dist.ProcessGroup) -> Executor:
    key = (id(schedule), in_place, id(group))
    if key not in _executors:
        _executors[key] = Executor(schedule, _transport(group), timeout=TIMEOUT_S,
                                   tag_base=TAG_BASE)
    return _executors[key]


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


def _segments(coll: Collective, elements: int, whole: bool) -> _Segments:
    """Split ``elements`` of the size buffer the way ``coll`` cuts it: one segment of
    ``N*c`` chunks (whole-buffer collectives) or ``N`` segments of ``c`` chunks."""
    if whole:
        per = coll.total_chunks
        return _Segments(1, elements, -(-elements // per) * per)
    if elements % coll.num_ranks:
        raise InputError(f"{elements} elements do not split into {coll.num_ranks} equal "
                         "rank segments")
    length = elements // coll.num_ranks
    per = coll.chunks_per_rank
    return _Segments(coll.num_ranks, length, -(-length // per) * per)


class _Done:
    """What ``async_op=True`` returns: the work already finished."""

    def __init__(self, result: Sequence[torch.Tensor]) -> None:
        self._future: torch.futures.Future = torch.futures.Future()
        self._future.set_result(list(result))

    def wait(self, timeout: object = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        return self._future


def _finish(async_op: bool, *tensors: torch.Tensor) -> _Done | None:
    return _Done(tensors) if async_op else None


def _reduce_op(op: object) -> tuple[RedOp, bool]:
    """(the ccweave op, whether to divide by the group size afterwards: AVG)."""
    if "AVG" in str(op).upper():
        return RedOp.SUM, True
    return RedOp.parse(op), False


def _run_whole(kind: Kind, tensor: torch.Tensor, group: dist.ProcessGroup, root: int,
               op: RedOp, plan: PlanLike | None) -> None:
    """Allreduce, broadcast, reduce: the tensor is the whole buffer, in and out."""
    flat = _flat(tensor, "tensor")
    size_bytes = flat.numel() * flat.element_size()
    schedule = _plan(kind, group, root, plan).schedule_for(size_bytes)
    segments = _segments(schedule.collective, flat.numel(), whole=True)
    buffer = segments.pack(flat)
    executor = _in_place_executor(schedule, group)
    if executor is not None:
        executor.run(buffer, None, op)
    else:
        out = torch.empty_like(buffer)
        _executor(schedule, False, group).run(buffer, out, op)
        buffer.copy_(out)
    segments.unpack(buffer, flat)


# ------------------------------------------------------------------ collectives


def all_reduce(tensor: torch.Tensor, op: object = dist.ReduceOp.SUM,
               group: dist.ProcessGroup | None = None, async_op: bool = False, *,
               plan: PlanLike | None = None) -> _Done | None:
    """``torch.distributed.all_reduce``, in place, with a ccweave schedule.

    ``op``: SUM, PRODUCT, MAX, MIN or AVG (floating point). ``plan``: a Plan, Schedule or
    file to use instead of the registered or default one.
    """
    group = _group(group)
    red, average = _reduce_op(op)
    _run_whole(Kind.ALLREDUCE, tensor, group, 0, red, plan)
    if average:
        tensor.div_(dist.get_world_size(group))
    return _finish(async_op, tensor)


def broadcast(tensor: torch.Tensor, src: int | None = None,
              group: dist.ProcessGroup | None = None, async_op: bool = False,
              group_src: int | None = None, *, plan: PlanLike | None = None) -> _Done | None:
    """``torch.distributed.broadcast`` (``src`` is a global rank)."""
    group = _group(group)
    _run_whole(Kind.BROADCAST, tensor, group, _root(group, src, group_src, "src"), RedOp.SUM,
               plan)
    return _finish(async_op, tensor)


def reduce(tensor: torch.Tensor, dst: int | None = None, op: object = dist.ReduceOp.SUM,
           group: dist.ProcessGroup | None = None, async_op: bool = False,
           group_dst: int | None = None, *, plan: PlanLike | None = None) -> _Done | None:
    """``torch.distributed.reduce``: the result lands in ``tensor`` on ``dst`` (a global
    rank); other ranks' tensors may be overwritten with partial results."""
    group = _group(group)
    red, average = _reduce_op(op)
    root = _root(group, dst, group_dst, "dst")
    _run_whole(Kind.REDUCE, tensor, group, root, red, plan)
    if average and dist.get_rank(group) == root:
        tensor.div_(dist.get_world_size(group))
    return _finish(async_op, tensor)


def _run_split(kind: Kind, big: torch.Tensor, small: torch.Tensor, small_is_input: bool,
               group: dist.ProcessGroup, root: int, op: RedOp,
               plan: PlanLike | None) -> None:
    """Allgather/gather (small in, big out) and reduce-scatter/scatter (big in, small
    out): the big buffer holds one segment per rank."""
    big_flat, small_flat = _flat(big, "the larger tensor"), _flat(small, "the smaller tensor")
    size = dist.get_world_size(group)
    if big_flat.numel() != small_flat.numel() * size:
        raise InputError(f"{kind.value}: the larger tensor must hold {size} x the smaller "
                         f"({size} x {small_flat.numel()} elements), got {big_flat.numel()}")
    schedule = _plan(kind, group, root, plan).schedule_for(big_flat.numel()
                                                           * big_flat.element_size())
    segments = _segments(schedule.collective, big_flat.numel(), whole=False)
    own = _Segments(1, segments.length, segments.padded)
    packed_small = own.pack(small_flat)
    executor = _executor(schedule, False, group)
    if small_is_input:
        direct = segments.padded == segments.length and not _overlaps(small_flat, big_flat)
        packed_big = big_flat if direct else big_flat.new_empty(size * segments.padded)
        executor.run(packed_small, packed_big, op)
        segments.unpack(packed_big, big_flat)
    else:
        executor.run(segments.pack(big_flat), packed_small, op)
        own.unpack(packed_small, small_flat)


def all_gather_into_tensor(output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                           group: dist.ProcessGroup | None = None, async_op: bool = False,
                           *, plan: PlanLike | None = None) -> _Done | None:
    """``torch.distributed.all_gather_into_tensor``: rank ``r``'s input lands in segment
    ``r`` of every rank's output."""
    group = _group(group)
    _run_split(Kind.ALLGATHER, output_tensor, input_tensor, True, group, 0, RedOp.SUM, plan)
    return _finish(async_op, output_tensor)


def reduce_scatter_tensor(output: torch.Tensor, input: torch.Tensor,
                          op: object = dist.ReduceOp.SUM,
                          group: dist.ProcessGroup | None = None, async_op: bool = False,
                          *, plan: PlanLike | None = None) -> _Done | None:
    """``torch.distributed.reduce_scatter_tensor``: rank ``r`` gets the reduction of
    segment ``r`` of every rank's input."""
    group = _group(group)
    red, average = _reduce_op(op)
    _run_split(Kind.REDUCESCATTER, input, output, False, group, 0, red, plan)
    if average:
        output.div_(dist.get_world_size(group))
    return _finish(async_op, output)


def all_to_all_single(output: torch.Tensor, input: torch.Tensor,
                      output_split_sizes: Sequence[int] | None = None,
                      input_split_sizes: Sequence[int] | None = None,
                      group: dist.ProcessGroup | None = None, async_op: bool = False, *,
                      plan: PlanLike | None = None) -> _Done | None:
    """``torch.distributed.all_to_all_single`` with equal splits: segment ``j`` of rank
    ``i``'s input lands in segment ``i`` of rank ``j``'s output."""
    group = _group(group)
    size = dist.get_world_size(group)
    for splits in (output_split_sizes, input_split_sizes):
        if splits is not None and len(set(splits)) > 1:
            raise InputError("all_to_all_single: ccweave schedules move equal splits; "
                             "pass equal split sizes (or none)")
    in_flat, out_flat = _flat(input, "input"), _flat(output, "output")
    if in_flat.numel() != out_flat.numel():
        raise InputError("all_to_all_single: input and output must have the same size")
    schedule = _plan(Kind.ALLTOALL, group, 0, plan).schedule_for(
        in_flat.numel() * in_flat.element_size())
    segments = _segments(schedule.collective, in_flat.numel(), whole=False)
    packed_in = segments.pack(in_flat)
    packed_out = out_flat if segments.padded == segments.length else \
        out_flat.new_empty(size * segments.padded)
    _executor(schedule, False, group).run(packed_in, packed_out, RedOp.SUM)
    segments.unpack(packed_out, out_flat)
    return _finish(async_op, output)


def gather(tensor: torch.Tensor, gather_list: list[torch.Tensor] | None = None,
           dst: int | None = None, group: dist.ProcessGroup | None = None,
           async_op: bool = False, group_dst: int | None = None, *,
           plan: PlanLike | None = None) -> _Done | None:
    """``torch.distributed.gather``: ``dst`` (a global rank) receives every rank's tensor
    into ``gather_list``."""
    group = _group(group)
    size, root = dist.get_world_size(group), _root(group, dst, group_dst, "dst")
    big = tensor.new_empty(size * tensor.numel())
    _run_split(Kind.GATHER, big, tensor.contiguous(), True, group, root, RedOp.SUM, plan)
    if dist.get_rank(group) == root:
        if gather_list is None or len(gather_list) != size:
            raise InputError(f"gather: dst needs a gather_list of {size} tensors")
        for number, part in enumerate(big.view(size, -1)):
            gather_list[number].copy_(part.view_as(gather_list[number]))
    return _finish(async_op, tensor)


def scatter(tensor: torch.Tensor, scatter_list: list[torch.Tensor] | None = None,
            src: int | None = None, group: dist.ProcessGroup | None = None,
            async_op: bool = False, group_src: int | None = None, *,
            plan: PlanLike | None = None) -> _Done | None:
    """``torch.distributed.scatter``: rank ``r`` receives ``scatter_list[r]`` of ``src``."""
    group = _group(group)
    size, root = dist.get_world_size(group), _root(group, src, group_src, "src")
    if dist.get_rank(group) == root:
        if scatter_list is None or len(scatter_list) != size:
            raise InputError(f"scatter: src needs a scatter_list of {size} tensors")
        big = torch.cat([part.reshape(-1) for part in scatter_list])
    else:
        big = tensor.new_empty(size * tensor.numel())
    small = tensor if tensor.is_contiguous() else tensor.contiguous()
    _run_split(Kind.SCATTER, big, small, False, group, root, RedOp.SUM, plan)
    if small is not tensor:
        tensor.copy_(small)
    return _finish(async_op, tensor)


all_gather_single = all_gather_into_tensor
"""torch 2.13's name for :func:`all_gather_into_tensor`."""
reduce_scatter_single = reduce_scatter_tensor
"""torch 2.13's name for :func:`reduce_scatter_tensor`."""


# ------------------------------------------------------------------ DDP


@dataclass(frozen=True)
class HookState:
    """State for :func:`allreduce_hook`: the group and an optional plan."""

    group: dist.ProcessGroup | None = None
    plan: PlanLike | None = None


def allreduce_hook(state: HookState | dist.ProcessGroup | None,
                   bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook averaging gradients with ccweave's all_reduce, like
    torch's default ``allreduce_hook`` (divide by the group size, then sum).

    ``model.register_comm_hook(HookState(plan=...), ccweave.torch.allreduce_hook)``.
    """
    if isinstance(state, HookState):
        group, plan = state.group, state.plan
    else:
        group, plan = state, None
    tensor = bucket.buffer()
    tensor.div_(dist.get_world_size(_group(group)))
    all_reduce(tensor, group=group, plan=plan)
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(tensor)
    return future


# DDP checks the hook's annotations as objects; postponed (string) ones would fail that check
allreduce_hook.__annotations__ = {"state": object, "bucket": dist.GradBucket,
                                  "return": torch.futures.Future[torch.Tensor]}
