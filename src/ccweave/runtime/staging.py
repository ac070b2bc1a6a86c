"""A GPU tensor's bytes through page-locked host memory, for host-driven transports
(ccweave's sockets and shared memory move host memory; gloo's send and receive too).

The caller's thread marks when the tensor's data is ready (an event on its current
stream, :meth:`Staging.mark`); the progress thread copies it down into a pinned buffer
on a stream of its own once that event has passed, runs the collective on the host
buffer, copies the result back up and waits for that copy before it completes the
future, so whoever waits on the future reads the result. CPU tensors need none of it
(:data:`NO_STAGING`).

Unchecked on a GPU: no GPU was available while this was written (docs/runtime.md).
"""

from __future__ import annotations

import torch


class Staging:
    """The pinned host buffer and copy stream for one CUDA tensor shape and dtype."""

    def __init__(self, like: torch.Tensor) -> None:
        self.device = like.device
        self.host = torch.empty(like.numel(), dtype=like.dtype, pin_memory=True)
        self.stream = torch.cuda.Stream(device=like.device)

    def mark(self) -> object:
        """An event on the caller's current stream: the tensor's data is ready after it."""
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    def down(self, tensor: torch.Tensor, ready: object) -> torch.Tensor:
        """The host buffer holding ``tensor``'s data (waits for it)."""
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(ready)  # type: ignore[arg-type]
            self.host.copy_(tensor.reshape(-1), non_blocking=True)
        self.stream.synchronize()
        return self.host

    def up(self, tensor: torch.Tensor) -> None:
        """Copy the host buffer back into ``tensor`` and wait until it is there."""
        with torch.cuda.stream(self.stream):
            tensor.view(-1).copy_(self.host, non_blocking=True)
        self.stream.synchronize()


class _NoStaging:
    """CPU tensors: the tensor is its own host buffer."""

    def mark(self) -> None:
        return None

    def down(self, tensor: torch.Tensor, ready: object) -> torch.Tensor:
        return tensor.view(-1)

    def up(self, tensor: torch.Tensor) -> None:
        return None


NO_STAGING = _NoStaging()


def staging_for(tensor: torch.Tensor, host_driven: bool) -> Staging | _NoStaging:
    """How ``tensor`` reaches a transport: staged when it lives on a GPU and the
    transport moves host memory."""
    if tensor.device.type == "cpu" or not host_driven:
        return NO_STAGING
    return Staging(tensor)
