"""Issue 45's figures: the topology files users actually have.

1. Azure's NCCL_TOPO_FILE for ND H100 v5 (a bare PCI tree of class codes; the file
   Azure/msccl-executor-nccl ships as src/test/ndv5/topo.xml) imported with
   ``--gpu-fabric h100-nvswitch``: GPUs, NICs, sockets; ``compare`` at 1 GB (allgather and
   allreduce): the best strategy's time over the bound.
2. The same node from the zoo (``dgx-h100``) and from the import: every strategy's
   simulated single-node allgather and allreduce time, import / zoo, the share of the
   import's bytes that crossed PCIe (host paths the zoo's NVSwitch servers leave out) and
   the host-memory traffic that implies on the busier socket (bytes into and out of its
   CPU node per second), to hold beside what the socket's memory can move.
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

from ccweave.compare import compare
from ccweave.peak_rss import peak_rss_bytes
from ccweave.topology import nccl_xml, zoo
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
    host = {cpu: [i for i, lk in enumerate(topo.links) if lk.kind == "pcie"
                  and cpu in (lk.src, lk.dst)] for cpu in ("cpu0", "cpu1")}
    for kind in KINDS:
        imported = compare(topo, kind, [size])
        from_zoo = compare(node, kind, [size])
        best = imported.best(size)
        zoo_times = {r.strategy.split("(")[0]: r for r in from_zoo.results}
        rows = []
        for result in imported.results:
            name = result.strategy.split("(")[0]
            twin = zoo_times.get(name)
            from ccweave.simulate import simulate

            sim = simulate(imported.schedule(result), topo, size)
            moved = float(sim.link_bytes.sum())
            rows.append({"strategy": result.strategy, "import_s": result.time_s,
                         "zoo_s": twin.time_s if twin else None,
                         "zoo_strategy": twin.strategy if twin else None,
                         "import_over_zoo": result.time_s / twin.time_s if twin else None,
                         "pcie_share": float(sim.link_bytes[pcie].sum()) / moved if moved
                         else 0.0,
                         "host_memory_GBps": max(float(sim.link_bytes[links].sum())
                                                 for links in host.values())
                         / result.time_s / 1e9,
                         "import_ratio_to_bound": result.ratio_to_bound,
                         "zoo_ratio_to_bound": twin.ratio_to_bound if twin else None})
        out[kind] = {"best": best.strategy, "best_ratio_to_bound": best.ratio_to_bound,
                     "bound_s": best.bound_s, "zoo_bound_s": from_zoo.best(size).bound_s,
                     "zoo_best": from_zoo.best(size).strategy,
                     "zoo_best_ratio_to_bound": from_zoo.best(size).ratio_to_bound,
                     "rows": rows}
    return out


def vm_figures() -> dict[str, object]:
    modelled = nccl_xml.read(VM_DUMP)
    kept = nccl_xml.read(VM_DUMP, options=Options(keep_link_speeds=True))
    bridges = [w for w in modelled.provenance.warnings if w.startswith("bridge ")]

    def host_path(topo) -> float:
        links = [lk.bandwidth for lk in topo.links if lk.kind == "pcie"
                 and lk.dst in ("cpu0", "cpu1")]
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
                  f"({figures['bound_s'] * 1e3:.3f} ms); zoo dgx-h100 best "
                  f"{figures['zoo_best']} at {figures['zoo_best_ratio_to_bound']:.3f} of its "
                  f"bound ({figures['zoo_bound_s'] * 1e3:.3f} ms)")
            print(f"  {'strategy (import)':<40}{'import ms':>11}{'zoo ms':>10}"
                  f"{'import/zoo':>12}{'PCIe share':>12}{'host GB/s':>11}")
            for row in figures["rows"]:
                zoo_ms = f"{row['zoo_s'] * 1e3:10.3f}" if row["zoo_s"] else f"{'-':>10}"
                ratio = (f"{row['import_over_zoo']:12.4f}" if row["import_over_zoo"]
                         else f"{'-':>12}")
                print(f"  {row['strategy']:<40}{row['import_s'] * 1e3:11.3f}{zoo_ms}{ratio}"
                      f"{row['pcie_share']:12.3f}{row['host_memory_GBps']:11.1f}")
            print("  (PCIe share: of all bytes the links carried; host GB/s: bytes into and out "
                  "of the busier socket's host memory per second)")
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
