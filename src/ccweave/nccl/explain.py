"""What ran, and what would have been faster: NCCL Inspector's calls beside the bound, NCCL's
own model of the machine and ccweave's best schedule on it.

Per collective, size and what NCCL ran (where the Inspector recorded it), :func:`explain`
puts the measured time and bus bandwidth beside the lower bound, NCCL's model's time for
what ran and for its own pick, and ccweave's fastest proven schedule (simulated). A row is
flagged where another choice takes at least :data:`FASTER_BY` less time, each judged by one
model against itself: another NCCL algorithm and protocol by NCCL's model, ccweave's
schedule by ccweave's simulator against its simulation of the algorithm NCCL ran (NCCL's
ring is ccweave's ``ring``, its tree ``double-binary-tree``; where the records do not say,
the algorithm NCCL's model picks). The measured figures are printed beside, never mixed in.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ccweave.collectives import Collective, Kind
from ccweave.compare import compare
from ccweave.nccl import constants as C
from ccweave.nccl.inspector import Call
from ccweave.nccl.model import TuningModel, function
from ccweave.topology.model import Topology
from ccweave.units import GB_PER_S, format_size

FASTER_BY = 0.10
"""A choice is flagged when its modelled time is at least 10% below the reference's."""


@dataclass(frozen=True)
class Option:
    """One way to run the call and its modelled (or simulated) time."""

    label: str
    time_s: float
    busbw_GBps: float


@dataclass(frozen=True)
class Row:
    """One collective at one size, as it ran, beside the bound and the alternatives."""

    collective: Kind
    size_bytes: int
    records: int
    ran: str | None
    """``algorithm/protocol`` as NCCL spells them in its tuner files; ``None`` where the
    records do not say (the Inspector's JSON)."""
    channels: int | None
    bucket: str | None
    """Prometheus' size bucket the row stands for (its size is the one the bucket's mean
    time and bandwidth imply)."""
    time_s: float
    busbw_GBps: float
    bound_s: float
    bound_busbw_GBps: float
    nccl_ran: Option | None
    nccl_pick: Option
    ccweave: Option | None
    flags: tuple[str, ...]

    @property
    def ratio_to_bound(self) -> float:
        return self.time_s / self.bound_s if self.bound_s > 0 else float("inf")


@dataclass(frozen=True)
class Explanation:
    topology: str
    rows: tuple[Row, ...]
    skipped: tuple[str, ...]


def explain(calls: Sequence[Call], topology: Topology, model: TuningModel,
            strategies: Sequence[str] | None = None,
            progress: Callable[[str], None] | None = None) -> Explanation:
    """Rows for ``calls`` on ``topology``: calls of communicators of another size are left
    out (with a line in ``skipped``), the rest grouped by collective, size and what ran."""
    ranks = topology.num_ranks
    groups: dict[tuple, list[Call]] = defaultdict(list)
    other: dict[int, int] = defaultdict(int)
    for call in calls:
        if call.ranks != ranks:
            other[call.ranks] += 1
            continue
        groups[call.collective, call.size_bytes, call.algorithm, call.protocol].append(call)
    skipped = [f"{n} record(s) of communicators of {r} ranks: {topology.name} has {ranks}"
               for r, n in sorted(other.items())]
    sizes: dict[Kind, set[int]] = defaultdict(set)
    for kind, size, _, _ in groups:
        sizes[kind].add(size)
    simulated: dict[tuple[Kind, int], dict[str, Option]] = {}
    bounds: dict[tuple[Kind, int], float] = {}
    for kind, wanted in sorted(sizes.items(), key=lambda item: item[0].value):
        ordered = sorted(wanted)
        if progress:
            progress(f"{kind.value}: ccweave's schedules at {len(ordered)} size(s)")
        names = None
        if strategies:  # the algorithms NCCL runs are simulated too, as references
            names = list(dict.fromkeys([*strategies, *_available(kind)]))
        result = compare(topology, kind, ordered, names)
        for bound in result.bounds:
            bounds[kind, bound.size_bytes] = bound.time_s
        for size in ordered:
            rows = [r for r in result.results if r.size_bytes == size]
            simulated[kind, size] = {r.strategy: Option(f"ccweave {r.strategy}", r.time_s,
                                                        r.busbw_GBps) for r in rows}
            if not rows:
                skipped.append(f"{kind.value} {format_size(size)}: no ccweave strategy "
                               "applies (" + "; ".join(s.reason for s in result.skipped)[:200]
                               + ")")
    chosen = set(strategies) if strategies else None
    rows = [_row(kind, size, algo, proto, group, model, bounds[kind, size],
                 simulated[kind, size], chosen, topology)
            for (kind, size, algo, proto), group in sorted(
                groups.items(), key=lambda item: (item[0][0].value, item[0][1],
                                                  str(item[0][2]), str(item[0][3])))]
    return Explanation(topology.name, tuple(rows), tuple(skipped))


def _busbw(kind: Kind, ranks: int, size: int, time_s: float) -> float:
    return size / time_s / GB_PER_S * Collective(kind, ranks).busbw_factor if time_s else 0.0


def _available(kind: Kind) -> list[str]:
    """ccweave's strategies that are NCCL's algorithms for ``kind``."""
    from ccweave.synth.registry import strategies_for

    return [name for name in AS_CCWEAVE.values() if name in strategies_for(kind)]


def _row(kind: Kind, size: int, algo: str | None, proto: str | None, group: list[Call],
         model: TuningModel, bound_s: float, simulated: dict[str, Option],
         chosen: set[str] | None, topology: Topology) -> Row:
    n = topology.num_ranks
    time_s = statistics.median(c.time_s for c in group)
    busbw = statistics.median(c.busbw_GBps for c in group)
    channels = [c.channels for c in group if c.channels]
    choice = model.choose(kind, size)
    pick = Option(f"nccl {choice.algorithm}/{choice.protocol} x{choice.channels}",
                  choice.time_s, _busbw(kind, n, size, choice.time_s))
    ran = f"{algo}/{proto}" if algo and proto else None
    nccl_ran = None
    flags = []
    if algo and proto:
        us = model.time_us(function(kind), C.ALGORITHMS.index(algo), C.PROTOCOLS.index(proto),
                           size)
        if us >= 0 and model.enabled[function(kind)][C.ALGORITHMS.index(algo)][
                C.PROTOCOLS.index(proto)]:
            nccl_ran = Option(f"nccl {ran}", us * 1e-6, _busbw(kind, n, size, us * 1e-6))
        else:
            flags.append(f"NCCL ran {ran}, which NCCL's model of {topology.name} would not "
                         "run at all: the machine is not the topology given, or NCCL_ALGO/"
                         "NCCL_PROTO or a tuner forced it")
    if nccl_ran and ran != f"{choice.algorithm}/{choice.protocol}":
        if pick.time_s <= nccl_ran.time_s * (1 - FASTER_BY):
            flags.append(
                f"NCCL's model: {choice.algorithm}/{choice.protocol} would take "
                f"{pick.time_s * 1e6:.1f} us against {nccl_ran.time_s * 1e6:.1f} us for "
                f"{ran}; export NCCL_ALGO={_nccl_name(choice.algorithm)} "
                f"NCCL_PROTO={_proto_name(choice.protocol)} for these calls, or a tuner file "
                f"(ccweave tune {topology.name} --nccl-tuner)")
        else:
            flags.append(f"NCCL ran {ran} where its model of {topology.name} picks "
                         f"{choice.algorithm}/{choice.protocol} (within {FASTER_BY:.0%}): "
                         "the model's figures are close here")
    if time_s < bound_s:
        inside = (", or NCCL reduced inside the switch (NVLS, SHARP), which the bound does not "
                  "model" if kind.is_reduction else "")
        flags.append(f"measured faster than the bound ({time_s / bound_s:.2f} of it): "
                     f"{topology.name} is slower than the machine the records come from"
                     f"{inside}; compare with a topology of that machine (ccweave topo import)")
    offered = [o for name, o in simulated.items() if chosen is None or name in chosen]
    ccweave = min(offered, key=lambda o: o.time_s) if offered else None
    nccl_algo = algo or choice.algorithm
    like = simulated.get(AS_CCWEAVE.get(nccl_algo, ""))
    if ccweave and like and ccweave.time_s <= like.time_s * (1 - FASTER_BY):
        strategy = ccweave.label.removeprefix("ccweave ")
        flags.append(
            f"ccweave's {strategy} simulates {ccweave.time_s * 1e6:.1f} us (busbw "
            f"{ccweave.busbw_GBps:.1f} GB/s) against {like.time_s * 1e6:.1f} us for its "
            f"{like.label.removeprefix('ccweave ')}, NCCL's {nccl_algo}"
            f"{'' if algo else ' (the model picks it; the records do not say what ran)'}: "
            f"ccweave synth {topology.name} {kind.value} --strategy {strategy} -o s.json, "
            "then ccweave export s.json")
    return Row(kind, size, len(group), ran, max(channels) if channels else None,
               group[0].bucket, time_s,
               busbw, bound_s, _busbw(kind, n, size, bound_s), nccl_ran, pick, ccweave,
               tuple(flags))


AS_CCWEAVE = {"ring": "ring", "tree": "double-binary-tree"}
"""NCCL's algorithms that are ccweave strategies: the simulator's reference for each."""
_NCCL_ALGO_NAMES = {"tree": "Tree", "ring": "Ring", "collnet_direct": "CollNetDirect",
                    "collnet_chain": "CollNetChain", "nvls": "NVLS", "nvls_tree": "NVLSTree",
                    "pat": "PAT"}


def _nccl_name(algorithm: str) -> str:
    """As ``NCCL_ALGO`` takes it (``ncclAlgoStr``)."""
    return _NCCL_ALGO_NAMES[algorithm]


def _proto_name(protocol: str) -> str:
    return {"ll": "LL", "ll128": "LL128", "simple": "Simple"}[protocol]
