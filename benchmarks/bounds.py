"""Time the exact allgather cut bound of a 1024-rank machine (target: under 10 s).

128 DGX A100-like nodes: per node an NVSwitch with 300 GB/s per GPU each way, each GPU
with its own 25 GB/s NIC on one non-blocking network switch (``ccweave.topology.zoo``'s
``dgx-a100:128`` when the zoo has it). Alongside the time it reports one plain max-flow
on the same machine, timed in the same run, so the ratio means something on a noisy box.

    python benchmarks/bounds.py [--topology dgx-a100:128] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from ccweave.bounds import allgather_cut, lower_bound
from ccweave.topology.model import Link, NodeKind, Topology

TARGET_S = 10.0
GB = 1e9


def dgx_a100_cluster(nodes: int = 128, gpus: int = 8) -> Topology:
    """The benchmark machine built inline (used when the zoo is not there)."""
    links: list[Link] = []
    fabric = {"net": NodeKind.SWITCH}

    def duplex(a, b, gbps: float) -> None:
        links.extend([Link(a, b, gbps * GB), Link(b, a, gbps * GB)])

    for node in range(nodes):
        fabric[f"n{node}.nvswitch"] = NodeKind.SWITCH
        for gpu in range(gpus):
            rank = node * gpus + gpu
            fabric[f"n{node}.nic{gpu}"] = NodeKind.NIC
            duplex(rank, f"n{node}.nvswitch", 300.0)
            duplex(rank, f"n{node}.nic{gpu}", 25.0)
            duplex(f"n{node}.nic{gpu}", "net", 25.0)
    groups = {"node": tuple(tuple(range(k * gpus, (k + 1) * gpus)) for k in range(nodes))}
    return Topology(f"dgx-a100-inline:{nodes}", nodes * gpus, tuple(links), fabric, groups)


def machine(name: str) -> Topology:
    """A zoo machine by name, or the inline DGX A100 cluster if the zoo is missing."""
    try:
        from ccweave.topology import zoo
    except ImportError:
        zoo = None
    if zoo is not None and hasattr(zoo, "get"):
        return zoo.get(name)
    if name != "dgx-a100:128":
        sys.exit(f"benchmarks/bounds.py: no zoo here to build {name!r}; "
                 "only dgx-a100:128 is built inline")
    return dgx_a100_cluster()


def one_max_flow(topology: Topology) -> float:
    """Seconds for one max-flow: every rank (capacity 1) to the last rank, on the links."""
    n, index = topology.num_ranks, topology.node_index
    size = len(topology.nodes) + 1
    src = [index[lk.src] for lk in topology.links] + [size - 1] * n
    dst = [index[lk.dst] for lk in topology.links] + list(range(n))
    scale = 2**30 // (n + 1)
    caps = np.concatenate([np.minimum(topology.bandwidths / topology.bandwidths.max() * scale,
                                      n * scale), np.full(n, scale)]).astype(np.int32)
    matrix = scipy.sparse.csr_array((caps, (src, dst)), shape=(size, size))
    start = time.perf_counter()
    scipy.sparse.csgraph.maximum_flow(matrix, size - 1, n - 1)
    return time.perf_counter() - start


def run(name: str, repeat: int) -> dict[str, object]:
    times, reference = [], []
    for _ in range(repeat):
        topology = machine(name)  # fresh: nothing cached
        start = time.perf_counter()
        per_byte, witness = allgather_cut(topology)
        times.append(time.perf_counter() - start)
        reference.append(min(one_max_flow(topology) for _ in range(5)))
    bound = lower_bound(topology, "allgather", 2**30)
    seconds, flow = statistics.median(times), statistics.median(reference)
    ranks_in = sum(1 for node in witness if topology.is_rank(node))
    return {
        "topology": topology.name, "ranks": topology.num_ranks,
        "links": len(topology.links), "seconds": seconds, "seconds_all": times,
        "target_s": TARGET_S, "within_target": seconds < TARGET_S,
        "algbw_GBps": 1 / per_byte / GB, "busbw_GBps": bound.busbw / GB,
        "witness_ranks": ranks_in, "witness_nodes": len(witness),
        "one_max_flow_s": flow, "max_flows_equivalent": seconds / flow,
        "peak_rss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="dgx-a100:128")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = run(args.topology, max(1, args.repeat))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['topology']}: {result['ranks']} ranks, {result['links']} links")
        print(f"allgather cut bound: {result['seconds']:.3f} s (median of {args.repeat}; "
              f"target < {TARGET_S:.0f} s: {'ok' if result['within_target'] else 'MISSED'})")
        print(f"  bound: algbw {result['algbw_GBps']:.2f} GB/s, busbw "
              f"{result['busbw_GBps']:.2f} GB/s; witness {result['witness_ranks']} ranks, "
              f"{result['witness_nodes']} nodes")
        print(f"  reference: one max-flow {result['one_max_flow_s'] * 1e3:.2f} ms; the bound "
              f"costs {result['max_flows_equivalent']:.0f} of them")
        print(f"  peak RSS {result['peak_rss_MiB']:.0f} MiB")
    return 0 if result["within_target"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
