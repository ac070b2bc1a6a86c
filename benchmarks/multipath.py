"""Multipath figures beside the paper's (IEEE Micro 2022; model of ExaMPI'25).

1. Point-to-point between two GPUs of one socket (Mist and Cedar), 64 MB and 1 GB:
   simulated bandwidth of the direct path alone, of direct + host staging (what UCX
   stripes over in the paper) and of every useful path (peer relays too), the chosen
   shares beside the paper's 25-30% through the host. Targets: Mist >= 1.6x the direct
   path (paper 1.67x-1.84x), Cedar >= 1.15x (paper 1.18x-1.23x).
2. Allreduce at 64 MB and 1 GB on mist, cedar, ndv2:2 and dgx1: hierarchical-pipelined
   and flat-pipelined (each tuned at that size, with and without multipath) against ring
   and double-binary-tree (the paper: 1.25x over NCCL on Mist, 1.06x on Cedar).

Every schedule is verified (pinned routes included) before it is timed.

    python benchmarks/multipath.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import ccweave.synth.pipelined  # noqa: F401  (registers the strategies)
from ccweave.collectives import Kind
from ccweave.errors import NotApplicableError
from ccweave.multipath import plan_p2p
from ccweave.simulate import simulate
from ccweave.synth import synthesize
from ccweave.topology import zoo
from ccweave.verify import verify

MB, GB = 2**20, 2**30
SIZES = (64 * MB, GB)
P2P = (("mist", 0, 1, 1.6, "1.67x-1.84x"), ("cedar", 0, 1, 1.15, "1.18x-1.23x"))
MACHINES = ("mist", "cedar", "ndv2:2", "dgx1")
CLASSIC = ("ring", "double-binary-tree")
NEW = ("hierarchical-pipelined", "flat-pipelined")
PAPER_ALLREDUCE = {"mist": "1.25x over NCCL (hierarchical)", "cedar": "1.06x over NCCL (flat)"}


def proven(schedule, topology) -> None:
    verify(schedule, topology)  # with the pinned routes


def p2p_rows() -> list[dict[str, object]]:
    rows = []
    for machine, src, dst, target, paper in P2P:
        topology = zoo.get(machine)
        for size in SIZES:
            host = plan_p2p(topology, src, dst, size, kinds=("direct", "fabric"))
            every = plan_p2p(topology, src, dst, size)
            for plan in (host, every):
                proven(plan.to_schedule(), topology)
            host_share = sum(p.share for p in host.paths if p.path.kind == "fabric")
            rows.append({
                "machine": machine, "size": size, "direct_GBps": host.direct_bandwidth / 1e9,
                "host_GBps": host.bandwidth / 1e9, "host_speedup": host.speedup,
                "host_share": host_share, "all_GBps": every.bandwidth / 1e9,
                "all_speedup": every.speedup, "target": target, "paper": paper,
                "meets": host.speedup >= target,
                "shares": {p.path.describe(): round(p.share, 4) for p in every.paths}})
    return rows


def allreduce_rows() -> list[dict[str, object]]:
    rows = []
    for machine in MACHINES:
        topology = zoo.get(machine)
        for size in SIZES:
            times: dict[str, float] = {}
            names: dict[str, str] = {}
            built = [(name, synthesize(topology, Kind.ALLREDUCE, name)) for name in CLASSIC]
            for name in NEW:
                try:  # tuned without multipath, then striped: what the strategy does itself
                    # (fallback=False: the pipeline itself, not the ring it falls back to)
                    alone = synthesize(topology, Kind.ALLREDUCE, name, size=size,
                                       multipath="off", fallback=False)
                except NotApplicableError:
                    continue
                shape = {k: alone.metadata[k] for k in ("depth", "level", "intra")
                         if k in alone.metadata}
                built.append((name, synthesize(topology, Kind.ALLREDUCE, name, size=size,
                                               fallback=False, **shape)))
                built.append((f"{name} (no multipath)", alone))
            for label, schedule in built:
                proven(schedule, topology)
                times[label] = simulate(schedule, topology, size).time_s
                names[label] = schedule.name
            best_new = min((label for label in times if label in NEW), key=times.get)
            rows.append({"machine": machine, "size": size,
                         "algbw_GBps": {k: size / t / 1e9 for k, t in times.items()},
                         "schedules": names, "best_new": best_new,
                         "vs_ring": times["ring"] / times[best_new],
                         "vs_tree": times["double-binary-tree"] / times[best_new],
                         "paper": PAPER_ALLREDUCE.get(machine, "")})
    return rows


def show(p2p: list[dict[str, object]], allreduce: list[dict[str, object]]) -> None:
    print("Point-to-point between two GPUs of one socket (simulated GB/s)")
    print(f"{'machine':8} {'size':>5} {'direct':>7} {'+host':>7} {'x':>6} {'host %':>7} "
          f"{'all':>7} {'x':>6}  target  paper")
    for r in p2p:
        print(f"{r['machine']:8} {_size(r['size']):>5} {r['direct_GBps']:7.1f} "
              f"{r['host_GBps']:7.1f} {r['host_speedup']:5.2f}x {100 * r['host_share']:6.1f}% "
              f"{r['all_GBps']:7.1f} {r['all_speedup']:5.2f}x  >={r['target']:.2f}x "
              f"{'meets' if r['meets'] else 'MISSES'}  {r['paper']} (host 25-30%)")
    for r in p2p:
        shares = ", ".join(f"{path} {100 * x:.1f}%" for path, x in r["shares"].items())
        print(f"  {r['machine']} {_size(r['size'])} all paths: {shares}")
    print()
    print("Allreduce (simulated algbw GB/s; every schedule verified)")
    labels = [*CLASSIC, *NEW, *(f"{n} (no multipath)" for n in NEW)]
    short = ["ring", "dbtree", "hier", "flat", "hier-nomp", "flat-nomp"]
    print(f"{'machine':8} {'size':>5} " + " ".join(f"{s:>9}" for s in short)
          + "   best new   vs ring  vs tree  paper")
    for r in allreduce:
        cells = " ".join(f"{r['algbw_GBps'][k]:9.2f}" if k in r["algbw_GBps"] else f"{'n/a':>9}"
                         for k in labels)
        print(f"{r['machine']:8} {_size(r['size']):>5} {cells}   "
              f"{'hier' if r['best_new'].startswith('hier') else 'flat':8} "
              f"{r['vs_ring']:6.2f}x {r['vs_tree']:7.2f}x  {r['paper']}")
    for r in allreduce:
        print(f"  {r['machine']} {_size(r['size'])}: "
              + "; ".join(r["schedules"][k] for k in NEW if k in r["schedules"]))


def _size(size: int) -> str:
    return f"{size // GB}GB" if size >= GB else f"{size // MB}MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    p2p = p2p_rows()
    allreduce = allreduce_rows()
    elapsed = time.perf_counter() - start
    if args.json:
        json.dump({"p2p": p2p, "allreduce": allreduce, "seconds": elapsed}, sys.stdout,
                  indent=1)
        print()
    else:
        show(p2p, allreduce)
        print(f"\n{elapsed:.1f} s (synthesis, verification and simulation)")
    return 0 if all(r["meets"] for r in p2p) else 1


if __name__ == "__main__":
    sys.exit(main())
