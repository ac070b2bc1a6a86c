"""One profiling run on a connected transport: host groups, every rank pair by ping-pong,
and each rank's CUDA copy paths when it has a GPU; every rank returns the same Profile."""

from __future__ import annotations

from collections.abc import Sequence

from ccweave.profile import cuda
from ccweave.profile.pingpong import Progress, host_groups, measure_pairs
from ccweave.profile.result import CopyFigure, Curve, PairFigure, Profile

BASE_COPY_PATHS = ("h2d", "d2h", "d2d")


def measure(transport, sizes: Sequence[int], *, iters: int = 5, warmup: int = 2,
            timeout: float = 60.0, device: int | None = None, copies: bool = True,
            progress: Progress = None, pairs: bool = True) -> Profile:
    """Profile the job behind ``transport``.

    Parameters
    ----------
    transport: a connected :class:`ccweave.runtime.transport.base.Transport`.
    sizes: message sizes in bytes (ping-pong and copies).
    iters, warmup: timed and untimed repetitions per size.
    device: this rank's CUDA device for the copy paths (default: the transport's when it
        is a GPU, else ``rank % device count``); launchers pass ``local_rank % count``.
    copies: measure the CUDA copy paths when a GPU is present.
    pairs: ping-pong every pair (skipped: the profile has hosts and copies only).
    """
    sizes = sorted(set(int(s) for s in sizes))
    nodes = host_groups(transport)
    measured = measure_pairs(transport, sizes, iters=iters, warmup=warmup, timeout=timeout,
                             progress=progress) if pairs else {}
    figures = tuple(PairFigure(a, b, Curve.of(sizes, times)) for (a, b), times in
                    sorted(measured.items()))
    notes: list[str] = []
    copy_figures: tuple[CopyFigure, ...] = ()
    reason = cuda.unavailable_reason() if copies else "CUDA copy paths skipped (--no-cuda)"
    # every rank must agree whether copies happen (they meet in sum_values below)
    if transport.sum_values([1.0 if reason else 0.0])[0] > 0:
        notes.append(reason or "CUDA copy paths skipped: not every rank has a GPU")
    else:
        if progress and transport.rank == 0:
            progress("CUDA copy paths (H2D, D2H, D2D, peer)")
        copy_figures = _copies(transport, nodes, sizes, iters, warmup, device)
    return Profile(transport.world_size, transport.name, nodes, figures, copy_figures,
                   tuple(notes))


def _device(transport, device: int | None) -> int:
    import torch

    if device is not None:
        return device
    if transport.device.type == "cuda":
        return transport.device.index or 0
    return transport.rank % torch.cuda.device_count()


def _copies(transport, nodes, sizes: list[int], iters: int, warmup: int,
            device: int | None) -> tuple[CopyFigure, ...]:
    world, count = transport.world_size, len(sizes)
    mine = _device(transport, device)
    slots = [0.0] * world
    slots[transport.rank] = float(mine + 1)
    devices = [int(d) - 1 for d in transport.sum_values(slots)]
    host = next(group for group in nodes if transport.rank in group)
    peer_rank = {devices[r]: r for r in host if r != transport.rank}
    peers = [d for d in cuda.peers_of(mine) if d in peer_rank]
    times = cuda.measure_copies(mine, sizes, iters=iters, warmup=warmup, peers=peers)
    # layout: [rank][h2d, d2h, d2d][size] then [rank][peer rank][size]; zeros = not measured
    base = [0.0] * (world * len(BASE_COPY_PATHS) * count)
    peer = [0.0] * (world * world * count)
    for p, path in enumerate(BASE_COPY_PATHS):
        start = (transport.rank * len(BASE_COPY_PATHS) + p) * count
        base[start:start + count] = times[path]
    for d in peers:
        start = (transport.rank * world + peer_rank[d]) * count
        peer[start:start + count] = times[f"peer:{d}"]
    total = transport.sum_values(base + peer)
    base, peer = total[:len(base)], total[len(base):]
    figures = []
    for rank in range(world):
        for p, path in enumerate(BASE_COPY_PATHS):
            start = (rank * len(BASE_COPY_PATHS) + p) * count
            figures.append(CopyFigure(rank, path, Curve.of(sizes, base[start:start + count])))
        for other in range(world):
            start = (rank * world + other) * count
            if peer[start] > 0:
                figures.append(CopyFigure(rank, "peer", Curve.of(sizes,
                                                                 peer[start:start + count]),
                                          other))
    return tuple(figures)
