"""How fast the simulator runs: a 256-rank ring allreduce (~130k transfers) on a ring.

Prints transfers, wall seconds, transfers/s (target >= 200,000/s) and peak RSS, and the
ratio to a trivial baseline measured in the same run (iterating the transfers in
topological order in Python), so the figure means something on a noisy machine. Beside
the hand-built schedule it times the one ``synthesize(zoo.get("ring:N"), "allreduce",
"ring")`` makes (two rings, local copies, FIFO deps: what users simulate).

    python benchmarks/simulator.py [--ranks 256] [--size 256MB] [--repeat 3] [--json]
                                   [--no-synthesized]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.schedule import Schedule, ScheduleBuilder, topological_order
from ccweave.simulate import simulate
from ccweave.synth.registry import synthesize
from ccweave.topology import zoo
from ccweave.topology.model import Link, Topology
from ccweave.units import parse_size

TARGET_PER_S = 200_000
BANDWIDTH = 50e9
ALPHA = 0.5e-6


def ring_topology(ranks: int) -> Topology:
    """``ring:N``: rank ``r`` joined to ``r+1`` both ways, 50 GB/s, 0.5 us per link."""
    links = []
    for rank in range(ranks):
        nxt = (rank + 1) % ranks
        links += [Link(rank, nxt, BANDWIDTH, ALPHA, "nvlink"),
                  Link(nxt, rank, BANDWIDTH, ALPHA, "nvlink")]
    return Topology(f"ring:{ranks}", ranks, tuple(links))


def ring_allreduce(ranks: int) -> Schedule:
    """Reduce-scatter then allgather around the ring ``r -> r+1``, one chunk per rank."""
    builder = ScheduleBuilder(Collective(Kind.ALLREDUCE, ranks), in_place=True)
    for step in range(ranks - 1):  # chunk c is reduced along c, c+1, ..., ends at c-1
        for rank in range(ranks):
            chunk = (rank - step) % ranks
            builder.reduce(rank, (rank + 1) % ranks, (Buffer.OUTPUT, chunk),
                           (Buffer.OUTPUT, chunk))
    for step in range(ranks - 1):  # rank r owns chunk r+1 and passes chunks on
        for rank in range(ranks):
            chunk = (rank + 1 - step) % ranks
            builder.copy(rank, (rank + 1) % ranks, (Buffer.OUTPUT, chunk),
                         (Buffer.OUTPUT, chunk))
    return builder.build("ring", topology=f"ring:{ranks}")


def baseline(schedule: Schedule) -> float:
    """Seconds to walk the transfers in topological order, reading what a simulator reads.

    The garbage collector is paused, as :func:`simulate` pauses it, so the ratio compares
    interpreter work alone."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        began = time.perf_counter()
        transfers = schedule.transfers
        total = 0
        for index in topological_order(transfers):
            transfer = transfers[index]
            total += transfer.count + len(transfer.deps) + transfer.src + transfer.dst
        return time.perf_counter() - began
    finally:
        if enabled:
            gc.enable()


def measure_synthesized(ranks: int, size: int, repeat: int) -> dict[str, object]:
    """Simulation speed on the ring strategy's own allreduce for ``ring:N``."""
    topology = zoo.get(f"ring:{ranks}")
    began = time.perf_counter()
    schedule = synthesize(topology, "allreduce", "ring")
    build_s = time.perf_counter() - began
    simulate(schedule, topology, size)
    wall = min(_timed(simulate, schedule, topology, size) for _ in range(repeat))
    count = len(schedule.transfers)
    return {"synthesized_schedule": schedule.name, "synthesized_transfers": count,
            "synthesized_build_s": build_s, "synthesized_wall_s": wall,
            "synthesized_transfers_per_s": count / wall,
            "synthesized_meets_target": count / wall >= TARGET_PER_S}


def measure(ranks: int, size: int, repeat: int) -> dict[str, object]:
    began = time.perf_counter()
    topology, schedule = ring_topology(ranks), ring_allreduce(ranks)
    build_s = time.perf_counter() - began
    rss_before = _peak_rss_mib()
    simulate(schedule, topology, size)  # warm the route cache and the allocator
    wall = min(_timed(simulate, schedule, topology, size) for _ in range(repeat))
    base = min(baseline(schedule) for _ in range(repeat))
    result = simulate(schedule, topology, size)
    chunk = size / ranks
    closed_form = 2 * (ranks - 1) * (ALPHA + chunk / BANDWIDTH)
    count = len(schedule.transfers)
    return {
        "benchmark": "simulate ring allreduce on ring",
        "ranks": ranks,
        "size_bytes": size,
        "transfers": count,
        "build_s": build_s,
        "wall_s": wall,
        "transfers_per_s": count / wall,
        "target_per_s": TARGET_PER_S,
        "meets_target": count / wall >= TARGET_PER_S,
        "baseline_s": base,
        "ratio_to_baseline": wall / base,
        "simulated_time_s": result.time_s,
        "closed_form_s": closed_form,
        "busbw_GBps": result.busbw / 1e9,
        "peak_rss_MiB": _peak_rss_mib(),
        "peak_rss_before_simulate_MiB": rss_before,
    }


def _timed(function, *args) -> float:
    began = time.perf_counter()
    function(*args)
    return time.perf_counter() - began


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes vs KiB


def report(row: dict[str, object]) -> str:
    verdict = "meets" if row["meets_target"] else "MISSES"
    lines = [
        f"simulator benchmark: ring allreduce, {row['ranks']} ranks, "
        f"{row['size_bytes'] / 2**20:g} MB, on ring:{row['ranks']}",
        f"  transfers          {row['transfers']:>12,}     "
        f"(schedule built in {row['build_s']:.2f} s, not timed below)",
        f"  wall               {row['wall_s']:>12.3f} s   (best of repeats)",
        f"  transfers/s        {row['transfers_per_s']:>12,.0f}     "
        f"{verdict} the target {TARGET_PER_S:,}/s",
        f"  baseline walk      {row['baseline_s']:>12.3f} s   "
        "(topological order + reading each transfer)",
        f"  simulate/baseline  {row['ratio_to_baseline']:>12.2f} x",
        f"  peak RSS           {row['peak_rss_MiB']:>12.1f} MiB "
        f"({row['peak_rss_before_simulate_MiB']:.1f} MiB after building the schedule)",
        f"  simulated time     {row['simulated_time_s'] * 1e6:>12.3f} us  "
        f"(closed form {row['closed_form_s'] * 1e6:.3f} us)",
        f"  busbw              {row['busbw_GBps']:>12.3f} GB/s",
    ]
    if "synthesized_transfers" in row:
        verdict = "meets" if row["synthesized_meets_target"] else "MISSES"
        lines += [
            f"synthesized {row['synthesized_schedule']} allreduce on ring:{row['ranks']}",
            f"  transfers          {row['synthesized_transfers']:>12,}     "
            f"(synthesized in {row['synthesized_build_s']:.2f} s, not timed below)",
            f"  wall               {row['synthesized_wall_s']:>12.3f} s   (best of repeats)",
            f"  transfers/s        {row['synthesized_transfers_per_s']:>12,.0f}     "
            f"{verdict} the target {TARGET_PER_S:,}/s",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--size", default="256MB", help="size buffer, e.g. 256MB")
    parser.add_argument("--repeat", type=int, default=3, help="take the best of this many")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-synthesized", action="store_true",
                        help="time the hand-built schedule only")
    args = parser.parse_args(argv)
    size, repeat = parse_size(args.size), max(1, args.repeat)
    row = measure(args.ranks, size, repeat)
    if not args.no_synthesized:
        row.update(measure_synthesized(args.ranks, size, repeat))
    print(json.dumps(row) if args.json else report(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
