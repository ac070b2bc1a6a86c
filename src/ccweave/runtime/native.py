"""The incumbents: each backend's own collective, called as a user of that backend would
(gloo through ``torch.distributed``, Open MPI through mpi4py), on the same buffers and
layout as ccweave's schedules, so both are timed and checked alike.

| collective | torch.distributed (gloo) | MPI |
|---|---|---|
| allreduce | ``all_reduce`` | ``MPI_Allreduce`` |
| allgather | ``all_gather_into_tensor`` | ``MPI_Allgather`` |
| reduce-scatter | ``reduce_scatter_tensor`` | ``MPI_Reduce_scatter_block`` |
| alltoall | ``all_to_all_single`` | ``MPI_Alltoall`` |
| broadcast / reduce | ``broadcast`` / ``reduce`` | ``MPI_Bcast`` / ``MPI_Reduce`` |
| gather / scatter | ``gather`` / ``scatter`` | ``MPI_Gather`` / ``MPI_Scatter`` |
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ccweave.collectives import Collective, Kind
from ccweave.errors import InputError
from ccweave.runtime.reduce_ops import RedOp
from ccweave.runtime.transport.base import Transport

Call = Callable[[torch.Tensor, torch.Tensor], None]
"""``call(input, output)`` with ccweave's out-of-place buffers (see runtime/reference.py)."""
NATIVE_KINDS = frozenset({Kind.ALLREDUCE, Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL,
                          Kind.BROADCAST, Kind.REDUCE, Kind.GATHER, Kind.SCATTER})


def native_name(backend: str, kind: Kind) -> str:
    """What reports call the incumbent, e.g. ``gloo all_reduce``, ``MPI_Allreduce``."""
    if backend == "mpi":
        return "MPI_" + _MPI_NAMES[kind]
    return f"{backend} {_TORCH_NAMES[kind]}"


def native_call(transport: Transport, collective: Collective, op: RedOp = RedOp.SUM) -> Call:
    """The backend's own ``collective`` on ``transport``'s group or communicator."""
    kind = collective.kind
    if kind not in NATIVE_KINDS:
        raise InputError(f"no native {kind.value} to compare with; use one of "
                         f"{', '.join(sorted(k.value for k in NATIVE_KINDS))}")
    inner = transport
    while hasattr(inner, "inner"):  # the process group under shared memory and sockets
        inner = inner.inner
    if inner.name == "mpi":
        return _mpi_call(inner, collective, op)
    return _torch_call(inner, collective, op)


_TORCH_NAMES = {Kind.ALLREDUCE: "all_reduce", Kind.ALLGATHER: "all_gather_into_tensor",
                Kind.REDUCESCATTER: "reduce_scatter_tensor", Kind.ALLTOALL: "all_to_all_single",
                Kind.BROADCAST: "broadcast", Kind.REDUCE: "reduce", Kind.GATHER: "gather",
                Kind.SCATTER: "scatter"}
_MPI_NAMES = {Kind.ALLREDUCE: "Allreduce", Kind.ALLGATHER: "Allgather",
              Kind.REDUCESCATTER: "Reduce_scatter_block", Kind.ALLTOALL: "Alltoall",
              Kind.BROADCAST: "Bcast", Kind.REDUCE: "Reduce", Kind.GATHER: "Gather",
              Kind.SCATTER: "Scatter"}


def _torch_call(transport: Transport, collective: Collective, op: RedOp) -> Call:
    import torch.distributed as dist

    group = transport.group  # type: ignore[attr-defined]
    kind, n, rank = collective.kind, collective.num_ranks, transport.rank
    root = collective.root if kind.is_rooted else 0
    global_root = dist.get_global_rank(group, root) if group is not dist.group.WORLD else root
    reduce_op = {RedOp.SUM: dist.ReduceOp.SUM, RedOp.PROD: dist.ReduceOp.PRODUCT,
                 RedOp.MAX: dist.ReduceOp.MAX, RedOp.MIN: dist.ReduceOp.MIN}[op]

    def call(data: torch.Tensor, out: torch.Tensor) -> None:
        if kind is Kind.ALLREDUCE:
            out.copy_(data)
            dist.all_reduce(out, reduce_op, group=group)
        elif kind is Kind.ALLGATHER:
            dist.all_gather_into_tensor(out, data, group=group)
        elif kind is Kind.REDUCESCATTER:
            dist.reduce_scatter_tensor(out, data, reduce_op, group=group)
        elif kind is Kind.ALLTOALL:
            dist.all_to_all_single(out, data, group=group)
        elif kind is Kind.BROADCAST:
            if rank == root:
                out.copy_(data)
            dist.broadcast(out, global_root, group=group)
        elif kind is Kind.REDUCE:
            work = data.clone()
            dist.reduce(work, global_root, reduce_op, group=group)
            if rank == root:
                out.copy_(work)
        elif kind is Kind.GATHER:
            parts = list(out.chunk(n)) if rank == root else None
            dist.gather(data, parts, global_root, group=group)
        else:  # scatter
            parts = list(data.chunk(n)) if rank == root else None
            dist.scatter(out, parts, global_root, group=group)

    return call


def _mpi_call(transport: Transport, collective: Collective, op: RedOp) -> Call:
    MPI = transport.MPI  # type: ignore[attr-defined]
    comm = transport.comm  # type: ignore[attr-defined]
    kind, rank = collective.kind, transport.rank
    root = collective.root if kind.is_rooted else 0
    mpi_op = {RedOp.SUM: MPI.SUM, RedOp.PROD: MPI.PROD, RedOp.MAX: MPI.MAX,
              RedOp.MIN: MPI.MIN}[op]

    types = {torch.float32: MPI.FLOAT, torch.float64: MPI.DOUBLE, torch.int32: MPI.INT32_T,
             torch.int64: MPI.INT64_T}

    def buf(tensor: torch.Tensor) -> object:
        if tensor.dtype not in types:
            raise InputError(f"MPI's own collectives take float32, float64, int32 or int64 "
                             f"here, not {tensor.dtype}")
        return [tensor.numpy(), types[tensor.dtype]]

    def call(data: torch.Tensor, out: torch.Tensor) -> None:
        if kind is Kind.ALLREDUCE:
            comm.Allreduce(buf(data), buf(out), op=mpi_op)
        elif kind is Kind.ALLGATHER:
            comm.Allgather(buf(data), buf(out))
        elif kind is Kind.REDUCESCATTER:
            comm.Reduce_scatter_block(buf(data), buf(out), op=mpi_op)
        elif kind is Kind.ALLTOALL:
            comm.Alltoall(buf(data), buf(out))
        elif kind is Kind.BROADCAST:
            if rank == root:
                out.copy_(data)
            comm.Bcast(buf(out), root=root)
        elif kind is Kind.REDUCE:
            comm.Reduce(buf(data), buf(out) if rank == root else None, op=mpi_op, root=root)
        elif kind is Kind.GATHER:
            comm.Gather(buf(data), buf(out) if rank == root else None, root=root)
        else:  # scatter
            comm.Scatter(buf(data) if rank == root else None, buf(out), root=root)

    return call
