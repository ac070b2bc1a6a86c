"""Schedule -> MSCCL++ execution plan: the export's front and its first pass.

1. **Buffers** (:func:`prepare`): in place or not (an allreduce in place by default:
   PyTorch's ``all_reduce`` passes one buffer); a schedule made in place drops its
   self-copies and must be proven again.
2. **Operations** (:mod:`.mscclpp_actions`): what the executor runs for each transfer.
3. **Threadblocks** (:mod:`.mscclpp_layout`): chains of dependent operations, and the
   syncs the chains leave out.
4. **Emit** (:mod:`.mscclpp_emit`): the plan's records.

The plan must fit the executor's tables (64 operations and 16 channels per threadblock)
and its threadblocks must all be resident at once: step 3 retries with fewer operations
per threadblock until every one fits, and past ``max_threadblocks`` per GPU shares
threadblocks along the schedule's simulated timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ccweave.collectives import Kind
from ccweave.errors import InputError
from ccweave.export import mscclpp_spec as spec
from ccweave.export.mscclpp_actions import Action, actions, channel_kinds
from ccweave.export.mscclpp_emit import Emitter, Header
from ccweave.export.mscclpp_layout import Layout
from ccweave.export.mscclpp_model import PlanDoc
from ccweave.schedule import Op as TransferOp
from ccweave.schedule import Schedule, topological_order
from ccweave.topology.model import Topology


@dataclass(frozen=True)
class ExportOptions:
    """How to write a plan.

    protocol: ``Simple``, ``LL`` or ``None`` (:func:`choose_protocol` decides).
    inplace: ``None``: an allreduce in place (PyTorch's ``all_reduce`` passes one buffer),
        anything else as the schedule is.
    min_bytes, max_bytes: the sizes ``[min_bytes, max_bytes)`` the plan serves
        (``None``: no upper end), written as the loader's inclusive
        ``min_message_size``/``max_message_size``.
    name: the plan's name (default: the schedule's).
    max_threadblocks: threadblocks per GPU at most. The executor's threadblocks spin on
        each other, so all must be resident at once: one 1024-thread block per SM always
        is, and the smallest GPU of the machines ccweave models (V100) has 80 SMs (A100
        108, H100 132: raise it there).
    """

    protocol: str | None = None
    inplace: bool | None = None
    min_bytes: int = 0
    max_bytes: int | None = None
    name: str | None = None
    threads_per_block: int = spec.DEFAULT_THREADS
    max_threadblocks: int = 80


BUDGETS = (64, 56, 48, 40, 34, 28, 24, 20, 16)
"""Operations per threadblock the layout aims at, largest first, until every threadblock
fits the executor's 64 (its estimate of waits and signals is rough)."""


# ---------------------------------------------------------------- pass 1: buffers


def prepare(schedule: Schedule, options: ExportOptions) -> Schedule:
    """The schedule in the buffer mode the plan declares (``InputError`` if it is not
    proven in place when asked to be)."""
    from ccweave.verify import check

    kind = schedule.collective.kind
    if kind not in spec.COLLECTIVES:
        raise InputError(f"{schedule.name or 'the schedule'}: {kind.value} has no MSCCL++ "
                         "plan: a plan names no root or peer (MSCCL++ picks a plan by "
                         "collective, ranks and size only), and its DSL and NCCL shim serve "
                         f"{', '.join(spec.COLLECTIVES.values())}")
    inplace = options.inplace
    if inplace is None:
        inplace = schedule.in_place or kind is Kind.ALLREDUCE
    if inplace == schedule.in_place:
        return schedule
    if not inplace:
        raise InputError(f"{schedule.name or 'the schedule'} is in place; it cannot be "
                         "exported out of place (its input and output are one buffer)")
    converted = in_place(schedule)
    result = check(converted)
    if not result.ok:
        raise InputError(f"{schedule.name or 'the schedule'} is not proven in place "
                         f"({result.problems[0].message}); export it out of place "
                         "(--out-of-place)")
    return converted


def in_place(schedule: Schedule) -> Schedule:
    """``schedule`` run in place: local copies onto their own slot (which in place are
    the same memory) are dropped, and whoever waited on one waits on what it waited on."""
    coll = schedule.collective
    keep: list[int] = []
    mapped: dict[int, tuple[int, ...]] = {}
    for index in topological_order(schedule.transfers):
        t = schedule.transfers[index]
        deps = tuple(sorted({d for dep in t.deps for d in mapped[dep]}))
        if t.is_local and t.op is TransferOp.COPY and \
                coll.in_place_alias(t.src, t.src_buffer, t.src_index) == \
                coll.in_place_alias(t.dst, t.dst_buffer, t.dst_index):
            mapped[index] = deps
            continue
        mapped[index] = (index,)
        keep.append(index)
    new = {old: k for k, old in enumerate(keep)}
    transfers = tuple(replace(schedule.transfers[old],
                              deps=tuple(sorted({new[d] for dep in schedule.transfers[old].deps
                                                 for d in mapped[dep]})))
                      for old in keep)
    return replace(schedule, transfers=transfers, in_place=True)


def open_end(max_bytes: int | None) -> int:
    """``max_message_size`` for a range ending before ``max_bytes`` (``None``: open): the
    loader's bound is inclusive, and from 4 GiB the executor's 32-bit offsets wrap."""
    high = spec.LIMITS.offset_bytes if max_bytes is None else max_bytes - 1
    return min(high, spec.LIMITS.offset_bytes)


# ---------------------------------------------------------------- front


def choose_protocol(schedule: Schedule, topology: Topology, max_bytes: int | None) -> str:
    """LL where it pays: at the top of the size range, LL's time (the schedule at twice
    the bytes: a packet carries its flag beside its data) beats Simple's (the schedule,
    plus one signal's latency, the route's alpha, for every transfer between two ranks on
    the critical path: Simple orders a peer's step by a signal after the data). An open
    range is Simple (LL's doubled bytes lose at large sizes)."""
    from ccweave.simulate import simulate

    if max_bytes is None or not schedule.transfers:
        return spec.SIMPLE
    top = max(1, max_bytes - 1)
    simple = simulate(schedule, topology, top)
    signals = sum(topology.route_alpha(step.src, step.dst) for step in simple.critical_path
                  if step.src != step.dst)
    packets = simulate(schedule, topology, 2 * top)
    return spec.LL if packets.time_s < simple.time_s + signals else spec.SIMPLE


def lower(schedule: Schedule, topology: Topology, options: ExportOptions) -> PlanDoc:
    """The plan of ``schedule`` on ``topology`` (see the module docstring)."""
    if topology.num_ranks != schedule.num_ranks:
        raise InputError(f"{schedule.name or 'the schedule'} is for {schedule.num_ranks} "
                         f"ranks but topology {topology.name!r} has {topology.num_ranks}")
    if options.min_bytes < 0 or (options.max_bytes is not None
                                 and options.max_bytes <= options.min_bytes):
        raise InputError(f"size range [{options.min_bytes}, {options.max_bytes}) is empty or "
                         "negative")
    if options.min_bytes > spec.LIMITS.offset_bytes:
        raise InputError(f"min size {options.min_bytes}: the executor's 32-bit offsets wrap "
                         "from 4 GiB; MSCCL++ plans serve smaller messages")
    if options.max_threadblocks < 2:
        raise InputError(f"max_threadblocks {options.max_threadblocks}: a plan needs at least 2 "
                         "threadblocks per GPU (one controls the others)")
    sched = prepare(schedule, options)
    protocol = options.protocol or choose_protocol(sched, topology, options.max_bytes)
    if protocol not in spec.PROTOCOLS:
        raise InputError(f"protocol {protocol!r}: MSCCL++ plans are "
                         f"{' or '.join(spec.PROTOCOLS)}")
    kinds = channel_kinds(topology)
    acts, scratch = actions(sched, kinds, protocol)
    coll = sched.collective
    header = Header(options.name or sched.name or coll.kind.value, spec.COLLECTIVES[coll.kind],
                    protocol, options.min_bytes, open_end(options.max_bytes),
                    options.threads_per_block)
    limit = options.max_threadblocks - (protocol != spec.LL)
    order = _order(acts)
    times = None
    problem = ""
    for budget in BUDGETS:
        layout = Layout(acts, order, budget, None, kinds=kinds)
        if max(layout.count(r) for r in range(sched.num_ranks)) > limit:
            if times is None:
                times = _timeline(sched, topology, acts, options)
                where = _position(order)
                order = sorted(range(len(acts)), key=lambda a: (times[0][a], where[a]))
            layout = Layout(acts, order, budget, limit, times, kinds)
        doc = Emitter(sched, acts, layout, kinds, scratch, header).emit()
        problem = _overflow(doc, options)
        if not problem:
            return doc
    raise InputError(f"cannot export {sched.name or 'the schedule'} as an MSCCL++ plan: "
                     f"{problem}; use fewer chunks (--chunks), a schedule with fewer steps, or "
                     "raise --max-threadblocks where the GPU holds more at once")


def _order(acts: list[Action]) -> list[int]:
    """Actions in creation order: a topological one (each after its deps)."""
    return list(range(len(acts)))


def _position(order: list[int]) -> list[int]:
    where = [0] * len(order)
    for k, a in enumerate(order):
        where[a] = k
    return where


def _timeline(schedule: Schedule, topology: Topology, acts: list[Action],
              options: ExportOptions) -> tuple[list[float], list[float]]:
    """Per action, when its transfer may start and when it finishes in the simulation at
    the size the threadblocks are shared for: the range's top, or 256 MB if open."""
    from ccweave.simulate import simulate

    size = min(options.max_bytes or SHARE_AT, SHARE_AT)
    result = simulate(schedule, topology, size)
    return ([float(result.ready[a.transfer]) for a in acts],
            [float(result.finish[a.transfer]) for a in acts])


SHARE_AT = 256 * 2**20
"""The size whose simulated timeline decides how threadblocks are shared past the
limit, when the range is open: where bandwidth, not latency, decides the order."""


def _overflow(doc: PlanDoc, options: ExportOptions) -> str:
    """What of the executor's tables the plan overflows ('' if nothing)."""
    limits = spec.LIMITS
    for gpu in doc.gpus:
        if len(gpu.threadblocks) > options.max_threadblocks:
            return (f"too many threadblocks: gpu {gpu.id} needs {len(gpu.threadblocks)}, over "
                    f"{options.max_threadblocks} (all must be resident at once)")
        for tb in gpu.threadblocks:
            where = f"gpu {gpu.id} threadblock {tb.id}"
            count = sum(op.flat_count() for op in tb.ops)
            if count > limits.operations_per_threadblock:
                return f"{where} has {count} operations (MAX_OPERATION is " \
                       f"{limits.operations_per_threadblock})"
            for channel in tb.channels:
                if len(channel.channel_ids) > limits.channels_per_threadblock:
                    return f"{where} uses {len(channel.channel_ids)} {channel.channel_type.value}" \
                           f" channels (MAX_CHANNEL is {limits.channels_per_threadblock})"
            for kind, ids in tb.remote_buffer_refs:
                if len(ids) > limits.channels_per_threadblock:
                    return f"{where} reaches {len(ids)} remote buffers through {kind.value} " \
                           f"channels (at most {limits.channels_per_threadblock})"
    return ""


def notes(schedule: Schedule, topology: Topology, options: ExportOptions) -> list[str]:
    """What the plan cannot say or asks of its caller: pinned routes dropped, the size
    granule the executor needs, in-place conversion, the buffer mode PyTorch passes."""
    found = []
    name = schedule.name or "the schedule"
    pinned = [t for t in schedule.transfers if t.via]
    if pinned:
        nodes = sorted({node for t in pinned for node in t.via})  # type: ignore[union-attr]
        found.append(f"{name}: {len(pinned)} transfer(s) pinned to routes through "
                     f"{', '.join(nodes[:6])}{', ...' if len(nodes) > 6 else ''} become plain "
                     "puts (MSCCL++ channels pick the path); the algorithm stays correct, the "
                     "routes are not kept")
    coll = schedule.collective
    granule = spec.DEFAULT_ALIGNMENT * coll.total_chunks
    found.append(f"{name}: the executor runs sizes that are multiples of {granule} bytes "
                 f"({spec.DEFAULT_ALIGNMENT} x {coll.total_chunks} chunks; checkMessageSize), "
                 "and throws on others")
    inplace = options.inplace
    if inplace is None:
        inplace = schedule.in_place or coll.kind is Kind.ALLREDUCE
    if inplace and not schedule.in_place:
        found.append(f"{name}: written in place (MSCCL++ picks a plan only for calls of its "
                     "buffer mode; PyTorch's all_reduce passes one buffer); "
                     "--out-of-place keeps it out of place")
    return found
