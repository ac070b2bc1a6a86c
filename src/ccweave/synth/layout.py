"""Small pieces the classic strategies share: rank orders, route and shape checks,
option handling, schedule names and chunk runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from ccweave.collectives import Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.topology.model import Topology


def topology_order(topology: Topology) -> list[int]:
    """Ranks grouped by ``groups["node"]``, then ``groups["socket"]``, then by number.

    Contiguous pieces of this order stay inside a node (and a socket), so in-order trees
    and chains over it cross the slow links as rarely as their shape allows.
    """
    keys: dict[int, list[int]] = {rank: [] for rank in topology.ranks}
    for kind in ("node", "socket"):
        if kind in topology.groups:
            for rank, (number, _) in topology.group_index(kind).items():
                keys[rank].append(number)
    return sorted(topology.ranks, key=lambda rank: (*keys[rank], rank))


def node_blocks(topology: Topology, order: list[int]) -> list[list[int]]:
    """``order`` cut into its ``groups["node"]`` (one block when the topology has none)."""
    if "node" not in topology.groups:
        return [list(order)]
    index = topology.group_index("node")
    blocks: dict[int, list[int]] = {}
    for rank in order:
        blocks.setdefault(index[rank][0], []).append(rank)
    return list(blocks.values())


def route_bandwidths(topology: Topology) -> np.ndarray:
    """``[src, dst]`` -> bottleneck bandwidth of the route (0 without one, inf on the
    diagonal): what a strategy weighs when it picks which ranks to pair."""
    n = topology.num_ranks
    matrix = np.zeros((n, n))
    for src in range(n):
        for dst in range(n):
            if src == dst:
                matrix[src, dst] = math.inf
            elif topology.has_route(src, dst):
                matrix[src, dst] = topology.route_bandwidth(src, dst)
    return matrix


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def require_power_of_two(topology: Topology, strategy: str) -> None:
    """Raise ``NotApplicableError`` unless the topology has ``2**k`` ranks."""
    n = topology.num_ranks
    if not is_power_of_two(n):
        raise NotApplicableError(
            f"strategy {strategy!r} needs a power-of-two number of ranks; {topology.name!r} "
            f"has {n} (ring and direct take any count)")


def require_routes(topology: Topology, pairs: Iterable[tuple[int, int]], strategy: str) -> None:
    """Raise ``NotApplicableError`` naming the first (src, dst) pair without a route."""
    for src, dst in pairs:
        if not topology.has_route(src, dst):
            raise NotApplicableError(
                f"strategy {strategy!r} sends from rank {src} to rank {dst}, but "
                f"{topology.name!r} has no route between them that avoids other ranks "
                "(try ring, or a strategy that relays through neighbours)")


def require_kind(kind: Kind, supported: Iterable[Kind], strategy: str) -> None:
    supported = list(supported)
    if kind not in supported:
        raise NotApplicableError(
            f"strategy {strategy!r} does not build {kind.value}; it builds "
            + ", ".join(k.value for k in supported))


def reject_options(options: Mapping[str, object], strategy: str,
                   known: Iterable[str] = ()) -> None:
    """Raise ``InputError`` for options the strategy does not take."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        takes = ", ".join(["chunks", *known])
        raise InputError(f"strategy {strategy!r} has no option {unknown[0]!r}; it takes {takes}")


def chunks_for(chunks: int | None, default: int = 1) -> int:
    """Chunks per rank: the caller's choice, else ``default``."""
    if chunks is None:
        return default
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise InputError(f"chunks must be a positive integer, got {chunks!r}")
    return chunks


def pipeline_chunks(num_ranks: int, per_part: int, parts: int = 1) -> int:
    """Chunks per rank so that each of ``parts`` pipelines gets at least ``per_part`` chunks."""
    return max(1, math.ceil(parts * per_part / num_ranks))


def schedule_name(strategy: str, **options: object) -> str:
    """``strategy(key=value, ...)``: a schedule's name with the options that made it."""
    shown = ", ".join(f"{key}={value}" for key, value in options.items() if value is not None)
    return f"{strategy}({shown})"


def runs(slots: Iterable[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Merge ``(src_index, dst_index)`` pairs into ``(src, dst, count)`` runs of
    consecutive slots, so a block that stays contiguous moves as one transfer."""
    merged: list[tuple[int, int, int]] = []
    for src, dst in slots:
        if merged:
            s, d, count = merged[-1]
            if src == s + count and dst == d + count:
                merged[-1] = (s, d, count + 1)
                continue
        merged.append((src, dst, 1))
    return merged
