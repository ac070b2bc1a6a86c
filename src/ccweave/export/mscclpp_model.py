"""An MSCCL++ execution plan as its loader sees it: frozen records, parsed and written.

:func:`parse` reads the JSON the way ``ExecutionPlan::Impl`` does: the keys it reads with
``[]`` are required, those it reads with ``value()`` or ``contains()`` take its defaults,
names outside its tables are refused as it refuses them, and keys it never reads are
kept in :attr:`PlanDoc.ignored` (the DSL writes ``reduce_op``, which the executor does
not read: it always sums). :func:`to_dict` writes only keys the loader reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ccweave.collectives import Buffer
from ccweave.errors import InputError
from ccweave.export import mscclpp_spec as spec
from ccweave.export.mscclpp_spec import Channel, OpName
from ccweave.units import shown


@dataclass(frozen=True)
class BufferRef:
    """One ``src_buff``/``dst_buff`` entry: ``size`` chunks from chunk ``index`` of a local
    buffer (``type``), of a remote one (``buffer_id``: the threadblock's remote buffers
    of the operation's channel type), or of a switch channel's group."""

    index: int
    size: int
    type: Buffer | None = None
    buffer_id: int | None = None
    switch_channel_id: int | None = None


@dataclass(frozen=True)
class Op:
    """One operation; ``ops`` holds a pipeline's body, ``tbg`` its (tb_id, tbg_size)."""

    name: OpName
    channel_type: Channel | None = None
    channel_ids: tuple[int, ...] = ()
    src: tuple[BufferRef, ...] = ()
    dst: tuple[BufferRef, ...] = ()
    tbg: tuple[int, int] | None = None
    barrier_id: int | None = None
    num_threadblocks: int | None = None
    semaphore_ids: tuple[int, ...] = ()
    iter_context: tuple[int, int] | None = None
    ops: tuple[Op, ...] = ()

    def flat_count(self) -> int:
        """Operations the loader makes of it (a pipeline and each of its body's)."""
        return 1 + sum(op.flat_count() for op in self.ops)


@dataclass(frozen=True)
class TbChannel:
    """A threadblock's channels of one type: indices into the gpu's channels of that
    type (switch: into its rank groups)."""

    channel_type: Channel
    channel_ids: tuple[int, ...]
    buff: Buffer | None = None


@dataclass(frozen=True)
class Threadblock:
    id: int
    ops: tuple[Op, ...]
    channels: tuple[TbChannel, ...] = ()
    remote_buffer_refs: tuple[tuple[Channel, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class GpuChannel:
    """A gpu's channel entry: one channel per ``connected_to`` peer; a switch entry has
    rank groups (each becomes one switch channel) over ``buffer_type``."""

    channel_type: Channel
    connected_to: tuple[int, ...] = ()
    buffer_type: Buffer | None = None
    rank_groups: tuple[tuple[int, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class RemoteBuffer:
    """A peer's buffer this gpu reaches, through the listed channel types."""

    rank: int
    type: Buffer
    access_channel_types: tuple[Channel, ...]


@dataclass(frozen=True)
class Gpu:
    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    threadblocks: tuple[Threadblock, ...]
    channels: tuple[GpuChannel, ...] = ()
    remote_buffers: tuple[RemoteBuffer, ...] = ()
    semaphores: tuple[int, ...] = ()
    """Initial values."""


@dataclass(frozen=True)
class PlanDoc:
    """A whole plan; defaults are the loader's."""

    name: str
    collective: str
    protocol: str
    inplace: bool
    gpus: tuple[Gpu, ...]
    reuse_resources: bool = False
    use_double_scratch_buffer: bool = False
    buffer_alignment: int = spec.DEFAULT_ALIGNMENT
    min_message_size: int = 0
    max_message_size: int = spec.OPEN_MAX_MESSAGE
    num_threads_per_block: int = spec.DEFAULT_THREADS
    ignored: tuple[str, ...] = field(default=(), compare=False)
    """Paths of keys the loader never reads (``gpus[0].threadblocks[1].ops[2].reduce_op``)."""

    @property
    def uses_packets(self) -> bool:
        return self.protocol == spec.LL


# ---------------------------------------------------------------- parsing


class _Reader:
    """Walks the JSON with a path for messages; records the keys the loader ignores."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.ignored: list[str] = []

    def fail(self, path: str, message: str) -> InputError:
        return InputError(f"{self.source}: {path}: {message}")

    def obj(self, value: object, path: str, known: Iterable[str]) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {shown(value, 60)}")
        self.ignored.extend(f"{path}.{key}" if path else str(key)
                            for key in value if key not in known)
        return value

    def get(self, data: dict, key: str, path: str) -> object:
        if key not in data:
            raise self.fail(path, f"has no {key!r}, which MSCCL++'s loader requires")
        return data[key]

    def integer(self, value: object, path: str, low: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.fail(path, f"expected an integer >= {low}, got {shown(value, 60)}")
        return value

    def boolean(self, value: object, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"expected true or false, got {shown(value, 60)}")
        return value

    def string(self, value: object, path: str) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {shown(value, 60)}")
        return value

    def items(self, value: object, path: str) -> list:
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, got {shown(value, 60)}")
        return value

    def ints(self, value: object, path: str) -> tuple[int, ...]:
        return tuple(self.integer(v, f"{path}[{k}]") for k, v in enumerate(self.items(value,
                                                                                       path)))

    def enum(self, value: object, path: str, table: dict[str, object], what: str):
        if not isinstance(value, str) or value not in table:
            names = ", ".join(table)
            raise self.fail(path, f"{shown(value, 40)} is not {what} MSCCL++'s loader knows "
                                  f"({names})")
        return table[value]


_OPS = {op.value: op for op in OpName}
_CHANNELS = {ch.value: ch for ch in Channel}


def parse(data: object, source: str = "plan") -> PlanDoc:
    """The plan in ``data`` (parsed JSON) as the loader reads it; ``InputError`` names the
    field the loader would stop at."""
    r = _Reader(source)
    top = r.obj(data, "", spec.PLAN_KEYS)
    if not top:
        raise r.fail("plan", "an empty object; an MSCCL++ execution plan has name, collective, "
                             "protocol, inplace and gpus")
    name = r.string(r.get(top, "name", "plan"), "name")
    collective = r.string(r.get(top, "collective", "plan"), "collective")
    protocol = r.string(r.get(top, "protocol", "plan"), "protocol")
    inplace = r.boolean(r.get(top, "inplace", "plan"), "inplace")
    gpus_raw = r.items(r.get(top, "gpus", "plan"), "gpus")
    if not gpus_raw:
        raise r.fail("gpus", "is empty; a plan has one entry per rank")
    gpus = tuple(_gpu(r, g, f"gpus[{k}]", k) for k, g in enumerate(gpus_raw))
    optional = {
        "reuse_resources": (False, r.boolean), "use_double_scratch_buffer": (False, r.boolean),
        "buffer_alignment": (spec.DEFAULT_ALIGNMENT, lambda v, p: r.integer(v, p, 1)),
        "min_message_size": (0, r.integer), "max_message_size": (spec.OPEN_MAX_MESSAGE,
                                                                 r.integer),
        "num_threads_per_block": (spec.DEFAULT_THREADS, lambda v, p: r.integer(v, p, 1))}
    values = {key: check(top[key], key) if key in top else default
              for key, (default, check) in optional.items()}
    if values["max_message_size"] > spec.OPEN_MAX_MESSAGE:
        raise r.fail("max_message_size", f"{values['max_message_size']} does not fit the "
                                         "loader's size_t")
    return PlanDoc(name, collective, protocol, inplace, gpus, ignored=tuple(r.ignored),
                   **values)


def _gpu(r: _Reader, value: object, path: str, rank: int) -> Gpu:
    g = r.obj(value, path, spec.GPU_KEYS)
    gid = r.integer(r.get(g, "id", path), f"{path}.id")
    if gid != rank:
        raise r.fail(f"{path}.id", f"is {gid}; the loader reads gpus[rank] and requires id == "
                                   f"rank ({rank})")
    chunks = [r.integer(r.get(g, key, path), f"{path}.{key}")
              for key in ("input_chunks", "output_chunks", "scratch_chunks")]
    tbs = tuple(_threadblock(r, t, f"{path}.threadblocks[{k}]")
                for k, t in enumerate(r.items(r.get(g, "threadblocks", path),
                                              f"{path}.threadblocks")))
    for k, tb in enumerate(tbs):
        if tb.id != k:
            raise r.fail(f"{path}.threadblocks[{k}].id", f"is {tb.id}; the loader indexes "
                                                         f"threadblocks by id, so it must be {k}")
    channels = tuple(_gpu_channel(r, c, f"{path}.channels[{k}]")
                     for k, c in enumerate(r.items(r.get(g, "channels", path),
                                                   f"{path}.channels")))
    remote = tuple(_remote(r, b, f"{path}.remote_buffers[{k}]")
                   for k, b in enumerate(r.items(r.get(g, "remote_buffers", path),
                                                 f"{path}.remote_buffers")))
    sems: tuple[int, ...] = ()
    if "semaphores" in g:
        sems = tuple(r.integer(r.get(r.obj(s, f"{path}.semaphores[{k}]", spec.SEMAPHORE_KEYS),
                                     "init_value", f"{path}.semaphores[{k}]"),
                               f"{path}.semaphores[{k}].init_value", -2**31)
                     for k, s in enumerate(r.items(g["semaphores"], f"{path}.semaphores")))
    return Gpu(gid, *chunks, tbs, channels, remote, sems)


def _gpu_channel(r: _Reader, value: object, path: str) -> GpuChannel:
    c = r.obj(value, path, spec.CHANNEL_KEYS)
    kind = r.enum(r.get(c, "channel_type", path), f"{path}.channel_type", _CHANNELS,
                  "a channel type")
    if kind is Channel.SWITCH:
        if "buffer_type" not in c and "buff" in c:
            raise r.fail(path, "a switch channel without 'buffer_type': the loader reads the "
                               "channel's buffer from 'buffer_type' (execution_plan.cc, "
                               "parseChannels) and reads 'buff' only on a threadblock's "
                               "channels, so it reads a missing key here; write 'buffer_type' "
                               "(as MSCCL++'s DSL does today)")
        buffer = r.enum(r.get(c, "buffer_type", path), f"{path}.buffer_type",
                        spec.CODE_BUFFER, "a buffer type")
        groups = []
        for k, group in enumerate(r.items(r.get(c, "rank_groups", path), f"{path}.rank_groups")):
            where = f"{path}.rank_groups[{k}]"
            g = r.obj(group, where, spec.GROUP_KEYS)
            groups.append((r.integer(r.get(g, "size", where), f"{where}.size"),
                           r.ints(r.get(g, "ranks", where), f"{where}.ranks")))
        return GpuChannel(kind, buffer_type=buffer, rank_groups=tuple(groups))
    return GpuChannel(kind, r.ints(r.get(c, "connected_to", path), f"{path}.connected_to"))


def _remote(r: _Reader, value: object, path: str) -> RemoteBuffer:
    b = r.obj(value, path, spec.REMOTE_BUFFER_KEYS)
    access = tuple(r.enum(a, f"{path}.access_channel_types[{k}]", _CHANNELS, "a channel type")
                   for k, a in enumerate(r.items(r.get(b, "access_channel_types", path),
                                                 f"{path}.access_channel_types")))
    return RemoteBuffer(r.integer(r.get(b, "rank", path), f"{path}.rank"),
                        r.enum(r.get(b, "type", path), f"{path}.type", spec.CODE_BUFFER,
                               "a buffer type"), access)


def _threadblock(r: _Reader, value: object, path: str) -> Threadblock:
    t = r.obj(value, path, spec.THREADBLOCK_KEYS)
    ops = tuple(_op(r, o, f"{path}.ops[{k}]")
                for k, o in enumerate(r.items(r.get(t, "ops", path), f"{path}.ops")))
    channels = []
    for k, c in enumerate(r.items(r.get(t, "channels", path), f"{path}.channels")):
        where = f"{path}.channels[{k}]"
        ch = r.obj(c, where, spec.TB_CHANNEL_KEYS)
        buff = (r.enum(ch["buff"], f"{where}.buff", spec.CODE_BUFFER, "a buffer type")
                if "buff" in ch else None)
        channels.append(TbChannel(r.enum(r.get(ch, "channel_type", where),
                                         f"{where}.channel_type", _CHANNELS, "a channel type"),
                                  r.ints(r.get(ch, "channel_ids", where), f"{where}.channel_ids"),
                                  buff))
    refs = []
    if "remote_buffer_refs" in t:
        for k, ref in enumerate(r.items(t["remote_buffer_refs"], f"{path}.remote_buffer_refs")):
            where = f"{path}.remote_buffer_refs[{k}]"
            f = r.obj(ref, where, spec.REF_KEYS)
            refs.append((r.enum(r.get(f, "access_channel_type", where),
                                f"{where}.access_channel_type", _CHANNELS, "a channel type"),
                         r.ints(r.get(f, "remote_buffer_ids", where),
                                f"{where}.remote_buffer_ids")))
    return Threadblock(r.integer(r.get(t, "id", path), f"{path}.id"), ops, tuple(channels),
                       tuple(refs))


def _op(r: _Reader, value: object, path: str) -> Op:
    o = r.obj(value, path, spec.OP_KEYS)
    name = r.enum(r.get(o, "name", path), f"{path}.name", _OPS, "an operation")
    fields: dict[str, object] = {}
    if "channel_type" in o:
        fields["channel_type"] = r.enum(o["channel_type"], f"{path}.channel_type", _CHANNELS,
                                        "a channel type")
    if "channel_ids" in o:
        fields["channel_ids"] = r.ints(o["channel_ids"], f"{path}.channel_ids")
    if "tbg_info" in o:
        where = f"{path}.tbg_info"
        t = r.obj(o["tbg_info"], where, spec.TBG_KEYS)
        fields["tbg"] = (r.integer(r.get(t, "tb_id", where), f"{where}.tb_id"),
                         r.integer(r.get(t, "tbg_size", where), f"{where}.tbg_size", 1))
    for key, attr in (("src_buff", "src"), ("dst_buff", "dst")):
        if key in o:
            fields[attr] = tuple(_buffer(r, b, f"{path}.{key}[{k}]")
                                 for k, b in enumerate(r.items(o[key], f"{path}.{key}")))
    for key in ("barrier_id", "num_threadblocks"):
        if key in o:
            fields[key] = r.integer(o[key], f"{path}.{key}")
    if "semaphore_ids" in o:
        fields["semaphore_ids"] = r.ints(o["semaphore_ids"], f"{path}.semaphore_ids")
    if "iter_context" in o:
        where = f"{path}.iter_context"
        it = r.obj(o["iter_context"], where, spec.ITER_KEYS)
        fields["iter_context"] = (r.integer(r.get(it, "unit_size", where), f"{where}.unit_size",
                                            1),
                                  r.integer(r.get(it, "num_chunks", where),
                                            f"{where}.num_chunks", 1))
        fields["ops"] = tuple(_op(r, inner, f"{path}.ops[{k}]")
                              for k, inner in enumerate(r.items(r.get(o, "ops", path),
                                                                f"{path}.ops")))
    elif "ops" in o:
        r.ignored.append(f"{path}.ops")
    return Op(name, **fields)  # type: ignore[arg-type]


def _buffer(r: _Reader, value: object, path: str) -> BufferRef:
    b = r.obj(value, path, spec.BUFF_KEYS)
    ref = BufferRef(r.integer(r.get(b, "index", path), f"{path}.index"),
                    r.integer(r.get(b, "size", path), f"{path}.size"),
                    r.enum(b["type"], f"{path}.type", spec.CODE_BUFFER, "a buffer type")
                    if "type" in b else None,
                    r.integer(b["buffer_id"], f"{path}.buffer_id") if "buffer_id" in b else None,
                    r.integer(b["switch_channel_id"], f"{path}.switch_channel_id")
                    if "switch_channel_id" in b else None)
    return ref


# ---------------------------------------------------------------- writing


def to_dict(plan: PlanDoc) -> dict[str, object]:
    """JSON-ready dict with only keys the loader reads, in the DSL's order."""
    return {"name": plan.name, "collective": plan.collective, "protocol": plan.protocol,
            "inplace": plan.inplace, "reuse_resources": plan.reuse_resources,
            "gpus": [_gpu_dict(g) for g in plan.gpus],
            "num_threads_per_block": plan.num_threads_per_block,
            "use_double_scratch_buffer": plan.use_double_scratch_buffer,
            "buffer_alignment": plan.buffer_alignment,
            "min_message_size": plan.min_message_size,
            "max_message_size": plan.max_message_size}


def _gpu_dict(g: Gpu) -> dict[str, object]:
    return {"id": g.id, "input_chunks": g.input_chunks, "output_chunks": g.output_chunks,
            "scratch_chunks": g.scratch_chunks,
            "threadblocks": [_tb_dict(t) for t in g.threadblocks],
            "channels": [_channel_dict(c) for c in g.channels],
            "remote_buffers": [{"rank": b.rank, "type": spec.BUFFER_CODE[b.type],
                                "access_channel_types": [a.value for a in b.access_channel_types]}
                               for b in g.remote_buffers],
            "semaphores": [{"init_value": v} for v in g.semaphores]}


def _channel_dict(c: GpuChannel) -> dict[str, object]:
    if c.channel_type is Channel.SWITCH:
        assert c.buffer_type is not None
        return {"channel_type": c.channel_type.value,
                "buffer_type": spec.BUFFER_CODE[c.buffer_type],
                "rank_groups": [{"size": size, "ranks": list(ranks)}
                                for size, ranks in c.rank_groups]}
    return {"channel_type": c.channel_type.value, "connected_to": list(c.connected_to)}


def _tb_dict(t: Threadblock) -> dict[str, object]:
    channels: list[dict[str, object]] = []
    for c in t.channels:
        entry: dict[str, object] = {"channel_type": c.channel_type.value,
                                    "channel_ids": list(c.channel_ids)}
        if c.buff is not None:
            entry["buff"] = spec.BUFFER_CODE[c.buff]
        channels.append(entry)
    return {"id": t.id, "ops": [_op_dict(o) for o in t.ops], "channels": channels,
            "remote_buffer_refs": [{"access_channel_type": kind.value,
                                    "remote_buffer_ids": list(ids)}
                                   for kind, ids in t.remote_buffer_refs]}


def _op_dict(o: Op) -> dict[str, object]:
    d: dict[str, object] = {"name": o.name.value}
    writers: list[tuple[str, bool, Callable[[], object]]] = [
        ("channel_type", o.channel_type is not None,
         lambda: o.channel_type.value),  # type: ignore[union-attr]
        ("channel_ids", bool(o.channel_ids), lambda: list(o.channel_ids)),
        ("src_buff", bool(o.src), lambda: [_buff_dict(b) for b in o.src]),
        ("dst_buff", bool(o.dst), lambda: [_buff_dict(b) for b in o.dst]),
        ("tbg_info", o.tbg is not None,
         lambda: {"tb_id": o.tbg[0], "tbg_size": o.tbg[1]}),  # type: ignore[index]
        ("barrier_id", o.barrier_id is not None, lambda: o.barrier_id),
        ("num_threadblocks", o.num_threadblocks is not None, lambda: o.num_threadblocks),
        ("semaphore_ids", bool(o.semaphore_ids), lambda: list(o.semaphore_ids)),
        ("iter_context", o.iter_context is not None,
         lambda: {"unit_size": o.iter_context[0],  # type: ignore[index]
                  "num_chunks": o.iter_context[1]}),  # type: ignore[index]
        ("ops", bool(o.ops), lambda: [_op_dict(inner) for inner in o.ops])]
    for key, present, make in writers:
        if present:
            d[key] = make()
    return d


def _buff_dict(b: BufferRef) -> dict[str, object]:
    d: dict[str, object] = {}
    if b.type is not None:
        d["type"] = spec.BUFFER_CODE[b.type]
    if b.buffer_id is not None:
        d["buffer_id"] = b.buffer_id
    if b.switch_channel_id is not None:
        d["switch_channel_id"] = b.switch_channel_id
    d["index"] = b.index
    d["size"] = b.size
    return d
