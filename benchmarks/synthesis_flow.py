"""Issue 14's flow and auto figures (and issue 12's sized strategies inside auto).

1. Alltoall, time / bound (the maximum concurrent flow bound) of the ``flow`` strategy
   beside the best classic strategy (ring, direct, pairwise), at 64 KB, 16 MB and 1 GB on
   every zoo machine, ndv2:2, ndv2:4, dgx2:2, dgx-a100:4, torus:8x8, mesh:4x4 and seeded
   random heterogeneous topologies. Target: flow <= 1.10 at 1 GB everywhere.
2. ``auto`` against every single strategy it tries, 1 KB to 1 GB (doubling), simulated:
   at each size, auto's time over each strategy's own time there (each sized strategy
   tuned at that size). Target: never above 1. Beside it, the best single strategy for
   all sizes and its worst slowdown against auto (what the per-size plan buys).

Every schedule is verified before it is timed; each row prints the load average and the
peak RSS so far (2-core machine shared with others: the seconds are indicative).

    python benchmarks/synthesis_flow.py [--part alltoall|auto] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time

from ccweave.bounds import lower_bound
from ccweave.collectives import Kind
from ccweave.compare import build_verified, compare
from ccweave.select import DEFAULT_SIZES, auto_strategies, winners_plan
from ccweave.simulate import simulate
from ccweave.topology import zoo
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.units import format_size
from ccweave.verify import verify

KB, MB, GB = 2**10, 2**20, 2**30
ALLTOALL_SIZES = (64 * KB, 16 * MB, GB)
ALLTOALL_MACHINES = ("dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "mist", "cedar",
                     "ndv2:2", "ndv2:4", "dgx2:2", "dgx-a100:4", "torus:8x8", "mesh:4x4")
RANDOM = ((1, 6), (2, 8), (3, 8), (4, 10), (5, 12), (6, 16))
"""(seed, ranks) of the random heterogeneous topologies."""
CLASSIC_ALLTOALL = ("ring", "direct", "pairwise")
TARGET = 1.10

AUTO_MACHINES = ("dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "mist", "cedar")
AUTO_KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv")


def random_topology(seed: int, ranks: int) -> Topology:
    """A ring over the ranks (so all reach all) in a shuffled order, two switches over
    random subsets, and ``ranks`` extra one-way links; bandwidths 5-100 GB/s, alphas
    0-2.6 us, all drawn independently per link (heterogeneous, asymmetric)."""
    rng = random.Random(seed)
    bandwidths, alphas = (5, 12.5, 25, 50, 100), (0.0, 0.3, 0.7, 2.6)
    links: list[Link] = []

    def link(a, b):
        links.append(Link(a, b, rng.choice(bandwidths) * 1e9, rng.choice(alphas) * 1e-6))

    order = list(range(ranks))
    rng.shuffle(order)
    for a, b in zip(order, order[1:] + order[:1]):
        link(a, b)
        link(b, a)
    fabric = {}
    for number in range(2):
        switch = f"sw{number}"
        fabric[switch] = NodeKind.SWITCH
        for rank in rng.sample(range(ranks), rng.randint(2, max(2, ranks // 2))):
            link(rank, switch)
            link(switch, rank)
    for _ in range(ranks):
        a, b = rng.sample(range(ranks), 2)
        link(a, b)
    return Topology(f"random{seed}:{ranks}", ranks, tuple(links), fabric)


def _stamp() -> dict[str, float]:
    return {"load1": os.getloadavg()[0],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def alltoall_rows(machines) -> list[dict[str, object]]:
    rows = []
    for topology in machines:
        for size in ALLTOALL_SIZES:
            bound = lower_bound(topology, Kind.ALLTOALL, size)
            classic = compare(topology, Kind.ALLTOALL, [size], list(CLASSIC_ALLTOALL))
            best = classic.best(size)
            start = time.perf_counter()
            flow = build_verified(topology, Kind.ALLTOALL, "flow", size=size)
            seconds = time.perf_counter() - start
            flow_time = simulate(flow, topology, size).time_s
            rows.append({"machine": topology.name, "ranks": topology.num_ranks,
                         "size": size, "bound_s": bound.time_s, "bound": bound.method,
                         "classic": best.strategy, "classic_ratio": best.ratio_to_bound,
                         "flow_ratio": flow_time / bound.time_s, "flow": flow.name,
                         "flow_transfers": len(flow.transfers), "synth_s": seconds,
                         **_stamp()})
            _print_alltoall(rows[-1])
    return rows


def _print_alltoall(row: dict[str, object]) -> None:
    mark = ""
    if row["size"] == GB:
        mark = "ok" if row["flow_ratio"] <= TARGET else "MISSED"
    print(f"{row['machine']:<12}{row['ranks']:>4} {format_size(row['size']):>6}"
          f"{row['classic']:>10} {row['classic_ratio']:>8.3f}{row['flow_ratio']:>8.3f} {mark:<6}"
          f"{row['synth_s']:>7.1f}{row['flow_transfers']:>8}  {row['flow']:<48}"
          f"load {row['load1']:.2f}  rss {row['peak_rss_mib']:.0f} MiB", flush=True)


def auto_rows() -> list[dict[str, object]]:
    rows = []
    for machine in AUTO_MACHINES:
        topology = zoo.get(machine)
        for kind in AUTO_KINDS:
            start = time.perf_counter()
            names = auto_strategies(kind)
            result = compare(topology, kind, DEFAULT_SIZES, names)
            plan = winners_plan(result)  # what best_plan returns, from the same comparison
            seconds = time.perf_counter() - start
            worst, worst_at = 0.0, None
            single: dict[str, float] = {}  # each strategy's worst time over auto's
            for size in DEFAULT_SIZES:
                chosen = plan.schedule_for(size)
                verify(chosen, topology)
                mine = simulate(chosen, topology, size).time_s
                for row in result.results:
                    if row.size_bytes != size:
                        continue
                    if mine / row.time_s > worst:
                        worst, worst_at = mine / row.time_s, (row.strategy, size)
                    single[row.strategy] = max(single.get(row.strategy, 0.0),
                                               row.time_s / mine)
            best_single = min(single, key=single.get)
            used = sorted({e.schedule.name.split("(")[0] for e in plan.entries})
            rows.append({"machine": machine, "collective": kind,
                         "strategies": sorted({r.strategy for r in result.results}),
                         "refused": len(result.skipped), "sizes": len(DEFAULT_SIZES),
                         "worst_ratio": worst,
                         "worst_vs": None if worst_at is None else worst_at[0],
                         "worst_at": None if worst_at is None else worst_at[1],
                         "best_single": best_single,
                         "best_single_slowdown": single[best_single],
                         "entries": len(plan.entries), "used": used, "seconds": seconds,
                         **_stamp()})
            _print_auto(rows[-1])
    return rows


def _print_auto(row: dict[str, object]) -> None:
    mark = "ok" if row["worst_ratio"] <= 1 + 1e-9 else "SLOWER"
    versus = f"{row['worst_vs']} at {format_size(row['worst_at'])}" if row["worst_vs"] \
        else "-"
    single = f"{row['best_single']} {row['best_single_slowdown']:.2f}x"
    print(f"{row['machine']:<10}{row['collective']:<14}{len(row['strategies']):>4}"
          f"{row['worst_ratio']:>9.4f} {mark:<7}{versus:<34}{single:<30}{row['entries']:>4}  "
          f"{'+'.join(row['used']):<58}{row['seconds']:>7.1f} s  load {row['load1']:.2f}  "
          f"rss {row['peak_rss_mib']:.0f} MiB", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("alltoall", "auto"), action="append",
                        help="run only this part (repeatable; default both)")
    parser.add_argument("--json", action="store_true", help="print JSON at the end")
    args = parser.parse_args()
    parts = args.part or ["alltoall", "auto"]
    report: dict[str, object] = {}
    start = time.perf_counter()
    if "alltoall" in parts:
        print("alltoall: time / bound (max concurrent flow), best classic vs flow; "
              f"target flow <= {TARGET} at 1GB (every schedule verified)")
        print(f"{'machine':<12}{'N':>4} {'size':>6}{'classic':>10} {'ratio':>8}{'flow':>8} "
              f"{'':<6}{'synth s':>7}{'xfers':>8}  {'flow schedule':<48}")
        machines = [zoo.get(name) for name in ALLTOALL_MACHINES]
        machines += [random_topology(seed, ranks) for seed, ranks in RANDOM]
        report["alltoall"] = alltoall_rows(machines)
        at_1gb = [r["flow_ratio"] for r in report["alltoall"] if r["size"] == GB]
        print(f"flow at 1GB: worst {max(at_1gb):.3f} over {len(at_1gb)} machines "
              f"({sum(r <= TARGET for r in at_1gb)} within {TARGET})\n")
    if "auto" in parts:
        print(f"auto vs every strategy it tries, {format_size(DEFAULT_SIZES[0])}.."
              f"{format_size(DEFAULT_SIZES[-1])} doubling ({len(DEFAULT_SIZES)} sizes), "
              "simulated: worst auto time / strategy time (target <= 1)")
        print(f"{'machine':<10}{'collective':<14}{'#':>4}{'worst':>9} {'':<7}"
              f"{'against':<34}{'best single (its worst)':<30}{'rng':>4}  "
              f"{'strategies auto uses':<58}")
        report["auto"] = auto_rows()
        worst = max(r["worst_ratio"] for r in report["auto"])
        print(f"auto: worst ratio {worst:.4f} over {len(report['auto'])} (machine, "
              f"collective) pairs x {len(DEFAULT_SIZES)} sizes\n")
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"wall {wall:.1f} s, peak RSS {peak:.0f} MiB, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        json.dump({**report, "wall_s": wall, "peak_rss_mib": peak}, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
