"""MPI point-to-point over mpi4py (Open MPI under ``mpirun``), host-driven.

Buffers travel as bytes (``MPI.BYTE``), so every torch dtype works, bfloat16 included;
reductions happen in torch. CPU tensors only are tested; a CUDA tensor is handed to
mpi4py as is, which needs a CUDA-aware MPI.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np
import torch

from ccweave.runtime.transport.base import PeerFailure, Transport


def _mpi():
    from mpi4py import MPI

    return MPI


class MPITransport(Transport):
    """Messages over an MPI communicator (default ``COMM_WORLD``)."""

    name = "mpi"

    def __init__(self, comm: object | None = None, device: torch.device | None = None) -> None:
        mpi = _mpi()
        self.MPI = mpi
        self.comm = comm if comm is not None else mpi.COMM_WORLD
        super().__init__(self.comm.Get_rank(), self.comm.Get_size(),
                         device or torch.device("cpu"))

    def _buffer(self, tensor: torch.Tensor) -> list[object]:
        if tensor.device.type == "cpu":
            return [tensor.view(torch.uint8).numpy(), self.MPI.BYTE]
        return [tensor, self.MPI.BYTE]

    def isend(self, tensor: torch.Tensor, peer: int, tag: int, channel: int = 0,
              route: tuple[str, ...] | None = None) -> object:
        buffer = self._buffer(tensor)
        return (self.comm.Isend(buffer, dest=peer, tag=tag), buffer)

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int, channel: int = 0,
              route: tuple[str, ...] | None = None) -> object:
        buffer = self._buffer(tensor)
        return (self.comm.Irecv(buffer, source=peer, tag=tag), buffer)

    def wait_some(self, handles: Sequence[object], timeout: float) -> list[int]:
        requests = [handle[0] for handle in handles]  # type: ignore[index]
        deadline = time.monotonic() + timeout
        testsome = self.MPI.Request.Testsome
        while True:
            try:
                done = testsome(requests)
            except self.MPI.Exception as error:
                raise PeerFailure(0, str(error)) from None
            if done:
                return list(done)
            if time.monotonic() > deadline:
                return []
            os.sched_yield()

    def barrier(self) -> None:
        self.comm.Barrier()

    def sum_values(self, values: Sequence[float]) -> list[float]:
        send = np.asarray(values, dtype=np.float64)
        recv = np.empty_like(send)
        self.comm.Allreduce(send, recv, op=self.MPI.SUM)
        return recv.tolist()
