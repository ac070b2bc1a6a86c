"""Issue 2's figures: how close the classic strategies come to the lower bound.

For allgather, reduce-scatter, allreduce and alltoall at 1 GB on every zoo machine (and
ndv2:2, dgx2:2): every classic strategy is synthesized, proven and simulated; the table
shows the best one's time / bound. Also ring allgather on ring:8 (target: within 1%).

    python benchmarks/classic.py [--size 1GB] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from ccweave.compare import compare
from ccweave.synth import get_strategy, strategies_for
from ccweave.topology import zoo
from ccweave.units import format_size, parse_size

MACHINES = ["dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "mist", "cedar", "ndv2:2",
            "dgx2:2"]
KINDS = ["allgather", "reducescatter", "allreduce", "alltoall"]


def best_rows(size: int) -> list[dict[str, object]]:
    rows = []
    for machine in MACHINES:
        topo = zoo.get(machine)
        for kind in KINDS:
            classic = [name for name in strategies_for(kind, classic_only=True)
                       if not get_strategy(name).slow]
            result = compare(topo, kind, [size], classic)
            best = result.best(size)
            rows.append({"machine": machine, "collective": kind, "best": best.schedule,
                         "time_s": best.time_s, "bound_s": best.bound_s,
                         "ratio_to_bound": best.ratio_to_bound,
                         "strategies": len({r.strategy for r in result.results})})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1GB")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    size = parse_size(args.size)
    start = time.perf_counter()
    ring8 = compare(zoo.get("ring:8"), "allgather", [size], ["ring"]).best(size)
    rows = best_rows(size)
    wall = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.json:
        json.dump({"size_bytes": size, "ring8_allgather_ratio": ring8.ratio_to_bound,
                   "rows": rows, "wall_s": wall, "peak_rss_mib": peak_mib}, sys.stdout,
                  indent=1)
        print()
        return 0
    print(f"ring allgather on ring:8 at {format_size(size)}: time/bound "
          f"{ring8.ratio_to_bound:.4f} (target <= 1.01)")
    print(f"\nbest classic strategy, time / bound at {format_size(size)} (every schedule "
          "verified):")
    print(f"{'machine':<10}" + "".join(f"{k:>15}" for k in KINDS))
    for machine in MACHINES:
        cells = [r for r in rows if r["machine"] == machine]
        print(f"{machine:<10}" + "".join(f"{r['ratio_to_bound']:>15.3f}" for r in cells))
    print("\nwinners:")
    for row in rows:
        print(f"  {row['machine']:<10} {row['collective']:<14} {row['best']}")
    print(f"\nwall {wall:.1f} s, peak RSS {peak_mib:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
