"""Synthesis at 1024 ranks: time and peak memory (target: every case within 8 GiB).

Synthesizes ring allgather, allreduce and reduce-scatter and hierarchical allreduce on
``dgx-a100:128`` (128 DGX A100 nodes, 1024 ranks) and computes its allgather lower bound.
Each case runs in a fresh subprocess, so peak RSS (the child's own, from ``wait4``) never
mixes between cases. Per case it prints transfers, wall seconds, peak RSS and bytes per
transfer, and seconds per million transfers beside a yardstick timed in the same run
(making a million bare ``Transfer`` objects), so the ratio means something on a noisy
machine.

    python benchmarks/scale.py [--topology dgx-a100:128] [--cases ring-allgather,...]
                               [--limit-gib 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

LIMIT_GIB = 8.0
YARDSTICK_TRANSFERS = 1_000_000


def _synthesize(kind: str, strategy: str) -> Callable[[str], dict[str, object]]:
    def case(topology_name: str) -> dict[str, object]:
        from ccweave.synth.registry import synthesize
        from ccweave.topology import zoo

        topology = zoo.get(topology_name)
        began = time.perf_counter()
        schedule = synthesize(topology, kind, strategy)
        return {"wall_s": time.perf_counter() - began, "transfers": len(schedule.transfers),
                "schedule": schedule.name}
    return case


def _allgather_bound(topology_name: str) -> dict[str, object]:
    from ccweave.bounds import lower_bound
    from ccweave.topology import zoo

    topology = zoo.get(topology_name)
    began = time.perf_counter()
    bound = lower_bound(topology, "allgather", 2**30)
    return {"wall_s": time.perf_counter() - began, "transfers": 0,
            "bound_us_at_1GiB": bound.time_s * 1e6}


def _yardstick(_: str) -> dict[str, object]:
    """Seconds to make a million bare transfers: what this machine's Python costs."""
    import gc

    from ccweave.collectives import Buffer
    from ccweave.schedule import Transfer

    gc.disable()
    began = time.perf_counter()
    made = [Transfer(k % 1024, (k + 1) % 1024, Buffer.OUTPUT, k % 8192, Buffer.OUTPUT,
                     k % 8192, 1, deps=(k - 1,)) for k in range(YARDSTICK_TRANSFERS)]
    return {"wall_s": time.perf_counter() - began, "transfers": len(made)}


CASES: dict[str, Callable[[str], dict[str, object]]] = {
    "ring-allgather": _synthesize("allgather", "ring"),
    "ring-allreduce": _synthesize("allreduce", "ring"),
    "ring-reducescatter": _synthesize("reducescatter", "ring"),
    "hierarchical-allreduce": _synthesize("allreduce", "hierarchical"),
    "allgather-bound": _allgather_bound,
}


def run_case(name: str, topology: str) -> dict[str, object]:
    """Run one case in a fresh Python; its result plus the child's own peak RSS."""
    command = [sys.executable, __file__, "--child", name, "--topology", topology]
    began = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    output = child.stdout.read() if child.stdout else ""
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        return {"case": name, "error": f"exit code {child.returncode}"}
    row = json.loads(output.strip().splitlines()[-1])
    peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # bytes vs KiB
    transfers = int(row["transfers"])
    return {"case": name, **row, "process_s": time.perf_counter() - began,
            "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_GiB": peak / 2**30,
            "bytes_per_transfer": peak / transfers if transfers else None,
            "s_per_million": row["wall_s"] / transfers * 1e6 if transfers else None}


def measure(topology: str, cases: list[str], limit_gib: float) -> dict[str, object]:
    yardstick = run_case("yardstick", topology)
    rows = [run_case(name, topology) for name in cases]
    per_million = yardstick["s_per_million"]
    for row in rows:
        if row.get("s_per_million") is not None:
            row["x_yardstick"] = row["s_per_million"] / per_million
        if "peak_rss_GiB" in row:
            row["within_limit"] = row["peak_rss_GiB"] <= limit_gib
    return {"benchmark": "synthesis at scale", "topology": topology, "limit_GiB": limit_gib,
            "yardstick_s_per_million": per_million, "cases": rows,
            "all_within_limit": all(row.get("within_limit", False) for row in rows)}


def report(result: dict[str, object]) -> str:
    lines = [f"synthesis at scale on {result['topology']} (limit {result['limit_GiB']:g} GiB "
             f"peak RSS per case, each in a fresh process)",
             f"  yardstick: {result['yardstick_s_per_million']:.2f} s to make a million bare "
             "Transfer objects",
             f"  {'case':<24}{'transfers':>12}{'wall s':>10}{'peak GiB':>10}{'B/transfer':>12}"
             f"{'s/M':>8}{'x yard':>8}  verdict"]
    for row in result["cases"]:  # type: ignore[union-attr]
        if "error" in row:
            lines.append(f"  {row['case']:<24}  FAILED: {row['error']}")
            continue
        lines.append(
            f"  {row['case']:<24}{row['transfers']:>12,}{row['wall_s']:>10.1f}"
            f"{row['peak_rss_GiB']:>10.2f}{_fmt(row['bytes_per_transfer'], 0):>12}"
            f"{_fmt(row.get('s_per_million')):>8}{_fmt(row.get('x_yardstick')):>8}  "
            f"{'within' if row['within_limit'] else 'OVER'}")
    lines.append("  all within the limit" if result["all_within_limit"]
                 else "  SOME CASE EXCEEDS THE LIMIT")
    return "\n".join(lines)


def _fmt(value: object, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="dgx-a100:128")
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--limit-gib", type=float, default=LIMIT_GIB)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        case = _yardstick if args.child == "yardstick" else CASES[args.child]
        print(json.dumps(case(args.topology)))
        return 0
    unknown = sorted(set(args.cases.split(",")) - set(CASES))
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}; choose from {', '.join(CASES)}")
    result = measure(args.topology, args.cases.split(","), args.limit_gib)
    print(json.dumps(result) if args.json else report(result))
    return 0 if result["all_within_limit"] else 1


if __name__ == "__main__":
    sys.exit(main())
