"""Ping-pong between every pair of ranks over the executor's transport
(:class:`ccweave.runtime.transport.base.Transport`: gloo, NCCL or MPI).

Pairs take turns (a barrier between pairs) so no two measurements share a link. For each
size the initiator sends, the peer sends the same bytes back, and the one-way time is
half the median round trip; the result reaches every rank.
"""

from __future__ import annotations

import hashlib
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from itertools import combinations

from ccweave.errors import RuntimeFault

PING_TAG = 4242
PONG_TAG = 4243
Progress = Callable[[str], None] | None


def _finish(transport, handle: object, peer: int, timeout: float) -> None:
    """Block until ``handle`` is done (stream-ordered transports: until the device is)."""
    if transport.stream_ordered:
        import torch

        transport.order_after(handle)
        torch.cuda.synchronize(transport.device)
        return
    if not transport.wait_some([handle], timeout):
        raise RuntimeFault(f"ping-pong: rank {transport.rank} heard nothing from rank {peer} "
                           f"in {timeout:g} s; {transport.explain_loss(peer)}")


def pingpong(transport, peer: int, sizes: Sequence[int], *, initiator: bool, iters: int = 5,
             warmup: int = 2, timeout: float = 60.0, buffer=None) -> list[float] | None:
    """One-way seconds per size (half the median round trip) on the initiator; ``None`` on
    the responder, which echoes every message."""
    import torch

    if buffer is None:
        buffer = torch.zeros(max(sizes), dtype=torch.uint8, device=transport.device)
    times: list[float] = []
    for size in sizes:
        view = buffer[:size]
        rounds = []
        for number in range(warmup + iters):
            start = time.perf_counter()
            if initiator:
                _finish(transport, transport.isend(view, peer, PING_TAG), peer, timeout)
                _finish(transport, transport.irecv(view, peer, PONG_TAG), peer, timeout)
            else:
                _finish(transport, transport.irecv(view, peer, PING_TAG), peer, timeout)
                _finish(transport, transport.isend(view, peer, PONG_TAG), peer, timeout)
            if number >= warmup:
                rounds.append(time.perf_counter() - start)
        times.append(statistics.median(rounds) / 2)
    return times if initiator else None


def measure_pairs(transport, sizes: Sequence[int], *, iters: int = 5, warmup: int = 2,
                  timeout: float = 60.0,
                  progress: Progress = None) -> dict[tuple[int, int], tuple[float, ...]]:
    """One-way times per size for every pair ``(a, b)``, ``a < b``, known to every rank."""
    import torch

    sizes = list(sizes)
    buffer = torch.zeros(max(sizes), dtype=torch.uint8, device=transport.device)
    pairs = list(combinations(range(transport.world_size), 2))
    found = [0.0] * (len(pairs) * len(sizes))
    for number, (a, b) in enumerate(pairs):
        if transport.rank in (a, b):
            if progress and transport.rank == a:
                progress(f"ping-pong rank {a} <-> rank {b} ({number + 1}/{len(pairs)})")
            peer = b if transport.rank == a else a
            times = pingpong(transport, peer, sizes, initiator=transport.rank == a,
                             iters=iters, warmup=warmup, timeout=timeout, buffer=buffer)
            if times is not None:
                found[number * len(sizes):(number + 1) * len(sizes)] = times
        transport.barrier()
    total = transport.sum_values(found)
    return {pair: tuple(total[n * len(sizes):(n + 1) * len(sizes)])
            for n, pair in enumerate(pairs)}


def host_groups(transport) -> tuple[tuple[int, ...], ...]:
    """Ranks grouped by host name, in rank order (every rank learns every host)."""
    name = socket.gethostname().encode()
    slot = [0.0] * transport.world_size
    slot[transport.rank] = float(int(hashlib.sha1(name).hexdigest()[:12], 16) + 1)
    ids = transport.sum_values(slot)
    groups: dict[float, list[int]] = {}
    for rank, host in enumerate(ids):
        groups.setdefault(host, []).append(rank)
    return tuple(tuple(g) for g in groups.values())
