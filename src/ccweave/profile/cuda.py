"""CUDA copy paths of one GPU: host to device (H2D), device to host (D2H), within the
device (D2D) and to each peer GPU it can reach directly (peer), timed with CUDA events
on pinned host memory. Untested on a GPU in ccweave's CI (see docs/profiling.md).

Figures are bytes copied per second (a D2D copy reads and writes each byte once more;
CUDA's bandwidthTest counts that twice, nvbandwidth does not, nor do we).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def unavailable_reason() -> str | None:
    """Why CUDA copies cannot be measured here, or ``None`` when they can."""
    try:
        import torch
    except ImportError:
        return "CUDA copy paths skipped: torch is not installed"
    if not torch.cuda.is_available():
        return ("CUDA copy paths skipped: no CUDA GPU (torch.cuda.is_available() is False); "
                "only the transport's rank pairs were measured")
    return None


def peers_of(device: int) -> list[int]:
    """Other visible GPUs ``device`` can copy to directly (peer access)."""
    import torch

    return [other for other in range(torch.cuda.device_count())
            if other != device and torch.cuda.can_device_access_peer(device, other)]


def measure_copies(device: int, sizes: Sequence[int], *, iters: int = 5, warmup: int = 2,
                   peers: Sequence[int] = ()) -> dict[str, list[float]]:
    """Median seconds per size for ``h2d``, ``d2h``, ``d2d`` and ``peer:J`` on ``device``."""
    import torch

    largest = max(sizes)
    dev = torch.device("cuda", device)
    host = torch.empty(largest, dtype=torch.uint8, pin_memory=True)
    src = torch.empty(largest, dtype=torch.uint8, device=dev)
    dst = torch.empty(largest, dtype=torch.uint8, device=dev)
    paths = {"h2d": (host, src), "d2h": (src, host), "d2d": (src, dst)}
    for peer in peers:
        paths[f"peer:{peer}"] = (src, torch.empty(largest, dtype=torch.uint8,
                                                  device=torch.device("cuda", peer)))
    with torch.cuda.device(dev):
        stream = torch.cuda.current_stream(dev)
        return {name: [_time_copy(a, b, size, iters, warmup, stream) for size in sizes]
                for name, (a, b) in paths.items()}


def _time_copy(source, target, size: int, iters: int, warmup: int, stream) -> float:
    """Median seconds of ``target[:size].copy_(source[:size])`` (CUDA events on ``stream``;
    a cross-device copy runs on the source device's current stream)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a, b = source[:size], target[:size]
    samples = []
    for number in range(warmup + iters):
        start.record(stream)
        b.copy_(a, non_blocking=True)
        end.record(stream)
        end.synchronize()
        if number >= warmup:
            samples.append(start.elapsed_time(end) / 1e3)
    return statistics.median(samples)
