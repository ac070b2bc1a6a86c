"""torch.distributed point-to-point: gloo (CPU, host-driven) and NCCL (GPU, stream-ordered).

Gloo's send/recv works cannot be polled (``is_completed`` stays false until ``wait``)
and a timed-out ``wait`` closes the pair, so :meth:`wait_some` blocks on the oldest
handle; the compiled order makes that deadlock-free (see program.py). NCCL runs
operations on its streams in issue order and ignores tags, which the same order makes
match on both ends.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from ccweave.runtime.faults import FaultBoard
from ccweave.runtime.transport.base import PeerFailure, Transport

_TIMEOUT_WORDS = ("Timed out", "timed out", "Timeout", "timeout")


def _first_sentence(text: str) -> str:
    """Gloo's message without its source location and advice: ``Connection closed by peer
    [127.0.0.1]:1234``."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    line = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", line)
    return line.split(". ")[0].rstrip(".")


class TorchTransport(Transport):
    """Messages over an initialised ``torch.distributed`` process group.

    Parameters
    ----------
    group: the process group (default: the world); schedule rank ``r`` is group rank ``r``.
    board: where to note lost peers, to name the rank that died (optional).
    """

    def __init__(self, group: dist.ProcessGroup | None = None,
                 board: FaultBoard | None = None) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialised; call "
                               "init_process_group first (or start under torchrun)")
        self.group = group if group is not None else dist.group.WORLD
        backend = str(dist.get_backend(self.group)).lower()
        device = (torch.device("cuda", torch.cuda.current_device())
                  if backend == "nccl" else torch.device("cpu"))
        super().__init__(dist.get_rank(self.group), dist.get_world_size(self.group), device)
        self.name = backend
        self.stream_ordered = backend == "nccl"
        self.board = board
        self._global = [dist.get_global_rank(self.group, r) if group is not None else r
                        for r in range(self.world_size)]

    def isend(self, tensor: torch.Tensor, peer: int, tag: int, channel: int = 0,
              route: tuple[str, ...] | None = None) -> object:
        return dist.isend(tensor, self._global[peer], group=self.group, tag=tag)

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int, channel: int = 0,
              route: tuple[str, ...] | None = None) -> object:
        return dist.irecv(tensor, self._global[peer], group=self.group, tag=tag)

    def wait_some(self, handles: Sequence[object], timeout: float) -> list[int]:
        try:
            handles[0].wait(timedelta(seconds=timeout))  # type: ignore[attr-defined]
        except RuntimeError as error:
            text = str(error)
            if any(word in text for word in _TIMEOUT_WORDS) and "closed" not in text:
                return []
            raise PeerFailure(0, _first_sentence(text) or repr(error)) from None
        return [0]

    def order_after(self, handle: object) -> None:
        handle.wait()  # type: ignore[attr-defined]  # NCCL: the current stream waits

    def barrier(self) -> None:
        if self.stream_ordered:
            dist.barrier(group=self.group, device_ids=[self.device.index])
        else:
            dist.barrier(group=self.group)

    def sum_values(self, values: Sequence[float]) -> list[float]:
        tensor = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, group=self.group)
        return tensor.tolist()

    def explain_loss(self, peer: int) -> str:
        if self.board is None:
            return super().explain_loss(peer)
        return self.board.explain(peer)

    def report_loss(self, peer: int) -> None:
        if self.board is not None:
            self.board.report(peer)
