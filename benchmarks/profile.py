"""The profiler against emulated links: two network namespaces joined by a veth pair
shaped with tc (tbf) at each configured rate, ``ccweave profile`` ranks in each; prints the
recovered bandwidth vs the configured one (target: within 10%), R^2 and peak RSS.
``--star`` also profiles three hosts on a bridge with uplinks of different rates (each
pair's bandwidth is its slower uplink's). Needs root and iproute2.

    python benchmarks/profile.py [--rates 400,800,1600] [--star] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from ccweave.profile import Profile
from ccweave.testbed import Testbed, emulate, run_ranks, unavailable_reason
from ccweave.topology.model import Link, NodeKind, Topology

TOLERANCE = 0.10


def star(rates_mbit: list[float]) -> Topology:
    """Hosts on one switch, each with its own uplink rate (two hosts: one direct link)."""
    links = []
    if len(rates_mbit) == 2:
        rate = min(rates_mbit) * 1e6 / 8
        return Topology("pair", 2, (Link(0, 1, rate), Link(1, 0, rate)))
    for rank, rate in enumerate(rates_mbit):
        links += [Link(rank, "sw", rate * 1e6 / 8), Link("sw", rank, rate * 1e6 / 8)]
    return Topology("star", len(rates_mbit), tuple(links), {"sw": NodeKind.SWITCH})


def profile_on(rates: list[float], sizes: str, iters: int) -> tuple[Profile, float]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "profile.json"
        start = time.perf_counter()
        with Testbed(emulate(star(rates), max_rate_mbit=max(rates))) as bed:
            run_ranks(bed, ["profile", "--sizes", sizes, "--iters", str(iters), "--warmup",
                            "1", "--no-cuda", "--worker-out", str(out)], timeout=600)
        return Profile.load(out), time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="400,800,1600", help="Mbit/s, comma-separated")
    parser.add_argument("--sizes", default="256KB:16MB")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--star", action="store_true",
                        help="also three hosts on a bridge at 800/800/400 Mbit/s")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    setups = [[float(r), float(r)] for r in args.rates.split(",")]
    if args.star:
        setups.append([800.0, 800.0, 400.0])
    rows, ok = [], True
    for rates in setups:
        profile, seconds = profile_on(rates, args.sizes, args.iters)
        for pair in profile.pairs:
            configured = min(rates[pair.a], rates[pair.b]) * 1e6 / 8
            f = pair.curve.fit
            error = f.bandwidth / configured - 1
            ok &= abs(error) <= TOLERANCE
            rows.append({"hosts": len(rates), "pair": f"{pair.a}<->{pair.b}",
                         "configured_MBps": configured / 1e6,
                         "recovered_MBps": f.bandwidth / 1e6, "error": error,
                         "alpha_us": f.alpha * 1e6, "r2": f.r2, "seconds": seconds})
    rss_mb = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                 resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024
    if args.json:
        json.dump({"rows": rows, "peak_rss_MB": rss_mb, "within_10pct": ok}, sys.stdout,
                  indent=1)
        print()
        return 0 if ok else 1
    print(f"{'hosts':>5} {'pair':>6} {'configured':>11} {'recovered':>10} {'error':>7} "
          f"{'alpha(us)':>10} {'R^2':>8} {'time(s)':>8}")
    for r in rows:
        print(f"{r['hosts']:>5} {r['pair']:>6} {r['configured_MBps']:>8.1f}MB/s "
              f"{r['recovered_MBps']:>6.1f}MB/s {r['error']:>+7.1%} {r['alpha_us']:>10.1f} "
              f"{r['r2']:>8.5f} {r['seconds']:>8.1f}")
    print(f"peak RSS (largest of this process and one rank): {rss_mb:.0f} MB")
    print("all within 10% of configured" if ok else "NOT all within 10% of configured")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
