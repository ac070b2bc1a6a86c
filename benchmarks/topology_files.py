"""Issue 45's figures: the topology files users actually have.

1. Azure's NCCL_TOPO_FILE for ND H100 v5 (a bare PCI tree of class codes; the file
   Azure/msccl-executor-nccl ships as src/test/ndv5/topo.xml) imported with
   ``--gpu-fabric h100-nvswitch``: GPUs, NICs, sockets; ``compare`` at 1 GB (allgather and
   allreduce): the best strategy's time over the bound ``compare`` prints, and over the
   cut bound alone. The cut lets each GPU draw its x16 link's 64 GB/s from host memory
   at once, but a socket's four GPUs share its memory's reads (half of 307.2 GB/s,
   ``ccweave.topology.host_memory``); the delivery bound (``ccweave.bounds``: fabric
   cannot copy) counts that, and so does this file's own socket count, printed beside
   as a check; the trees' own packing rate and pipeline drain are printed too.
2. The same node from the zoo (``dgx-h100``) and from the import: every strategy's
   simulated single-node allgather and allreduce time, import / zoo (the zoo's node is
   built as the import reads Azure's file, host paths included), the share of the
   import's bytes that crossed PCIe and the host-memory traffic on the busier socket
   (bytes over its memory links per second), beside the socket's DRAM peak.
3. An H100 VM dump whose virtual bridges report x1 at 2.5 GT/s
   (tests/fixtures/nccl_topo_h100_vm.xml): warnings, one per bridge, and the host path's
   bandwidth as modelled and as the file says it (``--keep-link-speeds``).

    python benchmarks/topology_files.py [--azure PATH] [--size 1GB] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ccweave.bounds import allgather_cut, reducescatter_cut
from ccweave.compare import compare
from ccweave.peak_rss import peak_rss_bytes
from ccweave.simulate import simulate
from ccweave.topology import host_memory, nccl_xml, zoo
from ccweave.topology.model import NodeKind, Topology
from ccweave.topology.nccl_xml import Options
from ccweave.units import format_size, parse_size

ROOT = Path(__file__).resolve().parent.parent
AZURE = ROOT.parent / "shared" / "fixtures" / "nccl-topo" / "azure-ndv5-topo.xml"
VM_DUMP = ROOT / "tests" / "fixtures" / "nccl_topo_h100_vm.xml"
KINDS = ("allgather", "allreduce")


def azure_figures(path: Path, size: int) -> dict[str, object]:
    start = time.perf_counter()
    topo = nccl_xml.read(path, options=Options(gpu_fabric=("h100-nvswitch",)))
    import_s = time.perf_counter() - start
    fabric = topo.summary()["fabric"]
    out: dict[str, object] = {"import_s": import_s, "gpus": topo.num_ranks,
                              "nics": fabric.get("nic", 0), "sockets": fabric.get("cpu", 0)}
    node = zoo.get("dgx-h100")
    pcie = [i for i, lk in enumerate(topo.links) if lk.kind == "pcie"]
    memory = {cpu: [i for i, lk in enumerate(topo.links) if lk.kind == host_memory.MEMORY_KIND
                    and cpu in (lk.src, lk.dst)] for cpu in ("cpu0", "cpu1")}
    out["socket_memory_GBps"] = max(sum(topo.links[i].bandwidth for i in links)
                                    for links in memory.values()) / 1e9
    for kind in KINDS:
        imported = compare(topo, kind, [size])
        from_zoo = compare(node, kind, [size])
        best = imported.best(size)
        zoo_times = {r.strategy.split("(")[0]: r for r in from_zoo.results}
        rows = []
        for result in imported.results:
            name = result.strategy.split("(")[0]
            twin = zoo_times.get(name)
            schedule = imported.schedule(result)
            sim = simulate(schedule, topo, size)
            moved = float(sim.link_bytes.sum())
            rows.append({"strategy": result.strategy, "import_s": result.time_s,
                         "zoo_s": twin.time_s if twin else None,
                         "zoo_strategy": twin.strategy if twin else None,
                         "import_over_zoo": result.time_s / twin.time_s if twin else None,
                         "pcie_share": float(sim.link_bytes[pcie].sum()) / moved if moved
                         else 0.0,
                         "host_memory_GBps": max(float(sim.link_bytes[links].sum())
                                                 for links in memory.values())
                         / result.time_s / 1e9,
                         "busiest_link_s": float(np.max(sim.link_bytes / topo.bandwidths)),
                         "packing_rate_over_bound": schedule.metadata.get("rate_over_bound"),
                         "import_ratio_to_bound": result.ratio_to_bound,
                         "zoo_ratio_to_bound": twin.ratio_to_bound if twin else None})
        socket_s = socket_bound(topo, size, kind)
        cut_s = max(allgather_cut(topo)[0], reducescatter_cut(topo)[0]
                    if kind == "allreduce" else 0.0) * size
        out[kind] = {"best": best.strategy, "best_ratio_to_bound": best.ratio_to_bound,
                     "bound_method": imported.bounds[0].method.split(" (")[0],
                     "cut_s": cut_s, "best_over_cut": best.time_s / cut_s,
                     "bound_s": best.bound_s, "socket_bound_s": socket_s,
                     "best_over_socket_bound": best.time_s / socket_s,
                     "zoo_bound_s": from_zoo.best(size).bound_s,
                     "zoo_best": from_zoo.best(size).strategy,
                     "zoo_best_ratio_to_bound": from_zoo.best(size).ratio_to_bound,
                     "rows": rows}
    return out


def socket_bound(topo: Topology, size: int, kind: str) -> float:
    """A lower bound the cut bound misses where fabric cannot copy: the ranks below one
    socket's memory receive every byte over their own links, and all that reaches them
    from the host side first crosses the socket's memory read link. So an allgather takes
    at least ``ranks x (N - 1) / N x size`` over (their links in from elsewhere than
    PCIe + the memory read link), for the worst socket; reduce-scatter the same out of
    them (memory write); allreduce the sum, as the RS + AG reference does."""
    n = topo.num_ranks

    def one_way(into: bool) -> float:
        worst = 0.0
        for cpu in (node for node, k in topo.fabric.items() if k is NodeKind.CPU):
            side = host_memory.read_node(cpu) if into else host_memory.write_node(cpu)
            if side not in topo.fabric:
                continue
            ranks, seen, todo = set(), {side}, [side]
            while todo:  # the PCIe tree on this memory's side, down to its ranks
                at = todo.pop()
                for lk in topo.links:
                    ahead, end = (lk.src, lk.dst) if into else (lk.dst, lk.src)
                    if ahead != at or end in seen:
                        continue
                    seen.add(end)
                    if topo.is_rank(end):
                        ranks.add(end)
                    elif topo.fabric[end] is NodeKind.PCIE:
                        todo.append(end)
            other = sum(lk.bandwidth for lk in topo.links
                        if (lk.dst if into else lk.src) in ranks and lk.kind != "pcie")
            memory = topo.link(cpu, side) if into else topo.link(side, cpu)
            worst = max(worst, len(ranks) * (n - 1) / n * size / (other + memory.bandwidth))
        return worst

    if kind == "allgather":
        return one_way(True)
    return one_way(True) + one_way(False)


def vm_figures() -> dict[str, object]:
    modelled = nccl_xml.read(VM_DUMP)
    kept = nccl_xml.read(VM_DUMP, options=Options(keep_link_speeds=True))
    bridges = [w for w in modelled.provenance.warnings if w.startswith("bridge ")]

    def host_path(topo) -> float:
        hosts = {"cpu0", "cpu1", host_memory.write_node("cpu0"), host_memory.write_node("cpu1")}
        links = [lk.bandwidth for lk in topo.links if lk.kind == "pcie" and lk.dst in hosts]
        return min(links) / 1e9

    return {"bridge_warnings": bridges, "host_path_GBps": host_path(modelled),
            "host_path_kept_GBps": host_path(kept)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--azure", type=Path, default=AZURE,
                        help="Azure's ND H100 v5 NCCL_TOPO_FILE")
    parser.add_argument("--size", default="1GB")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    size = parse_size(args.size)
    start = time.perf_counter()
    result: dict[str, object] = {"size_bytes": size, "vm": vm_figures()}
    if args.azure.exists():
        result["azure"] = azure_figures(args.azure, size)
    result["wall_s"] = time.perf_counter() - start
    result["load_average"] = os.getloadavg()
    result["peak_rss_MiB"] = peak_rss_bytes() / 2**20
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    azure = result.get("azure")
    if azure is None:
        print(f"{args.azure}: missing; give --azure PATH (Azure/msccl-executor-nccl "
              "src/test/ndv5/topo.xml)")
    else:
        print(f"Azure ND H100 v5 NCCL_TOPO_FILE, --gpu-fabric h100-nvswitch: {azure['gpus']} "
              f"GPUs, {azure['nics']} NICs, {azure['sockets']} sockets "
              f"(imported in {azure['import_s'] * 1e3:.1f} ms)")
        for kind in KINDS:
            figures = azure[kind]
            print(f"\n{kind} at {format_size(size)}: best on the import {figures['best']} at "
                  f"{figures['best_ratio_to_bound']:.3f} of its bound "
                  f"({figures['bound_s'] * 1e3:.3f} ms, {figures['bound_method']}; "
                  f"{figures['best_over_cut']:.3f} of the cut alone, "
                  f"{figures['cut_s'] * 1e3:.3f} ms); zoo dgx-h100 best "
                  f"{figures['zoo_best']} at {figures['zoo_best_ratio_to_bound']:.3f} of its "
                  f"bound ({figures['zoo_bound_s'] * 1e3:.3f} ms)")
            print(f"  the import's socket {'bound' if kind == 'allgather' else 'RS + AG'} "
                  f"{figures['socket_bound_s'] * 1e3:.3f} ms "
                  f"(best at {figures['best_over_socket_bound']:.3f} of it): a socket's GPUs "
                  f"share its memory's {azure['socket_memory_GBps']:g} GB/s, which the cut "
                  "bound lets each GPU's x16 link draw at once")
            print(f"  {'strategy (import)':<40}{'import ms':>11}{'zoo ms':>10}"
                  f"{'import/zoo':>12}{'PCIe share':>12}{'host GB/s':>11}{'links ms':>10}")
            for row in figures["rows"]:
                zoo_ms = f"{row['zoo_s'] * 1e3:10.3f}" if row["zoo_s"] else f"{'-':>10}"
                ratio = (f"{row['import_over_zoo']:12.4f}" if row["import_over_zoo"]
                         else f"{'-':>12}")
                print(f"  {row['strategy']:<40}{row['import_s'] * 1e3:11.3f}{zoo_ms}{ratio}"
                      f"{row['pcie_share']:12.3f}{row['host_memory_GBps']:11.1f}"
                      f"{row['busiest_link_s'] * 1e3:10.3f}")
                if row["packing_rate_over_bound"] and kind == "allgather":
                    rate_s = row["packing_rate_over_bound"] * figures["cut_s"]  # of the cut
                    print(f"    its tree packing's rate: {rate_s * 1e3:.3f} ms "
                          f"({rate_s / figures['bound_s']:.3f} of the bound)")
            within = figures["best_ratio_to_bound"] <= 1.03
            print(f"  within 1.03 of the bound compare prints: {'yes' if within else 'no'}")
            print(f"  (PCIe share: of all bytes the links carried; host GB/s: bytes over the "
                  f"busier socket's memory links per second, its peak "
                  f"{azure['socket_memory_GBps']:g}; links ms: the busiest link's bytes over "
                  "its bandwidth, the time without fill, drain or waits)")
    vm = result["vm"]
    print(f"\nH100 VM dump with x1 2.5 GT/s bridges: {len(vm['bridge_warnings'])} bridge "
          f"warnings; host path modelled at {vm['host_path_GBps']:g} GB/s "
          f"(--keep-link-speeds: {vm['host_path_kept_GBps']:g} GB/s)")
    for line in vm["bridge_warnings"][:2]:
        print(f"  warning: {line}")
    load = ", ".join(f"{x:.2f}" for x in result["load_average"])
    print(f"\nwall {result['wall_s']:.1f} s; load average {load}; peak RSS "
          f"{result['peak_rss_MiB']:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
