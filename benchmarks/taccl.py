"""The taccl strategy: TACCL's own files, the routing MILP's worth, the exported schedule
against the classic strategies and the bound, synthesis times.

Every taccl figure is the simulated time of the schedule ``ccweave export`` writes: the
MSCCL XML is printed and read back (``from_xml(to_xml(...))``) and that is timed; the
schedule the strategy scored is timed beside it.

1. TACCL's 11 shipped sketches (``tests/fixtures/taccl/sketch``), read unchanged, on the
   machine each is written for, with the link costs of TACCL's 1 MB profiles
   (``topo-ndv2-1MB.json``, ``topo-dgx2-1MB.json``) and 1 MB chunks: verified, and the
   routing MILP's warm-start makespan and objective beside its own and the LP bound.
2. allgather, alltoall and allreduce on ndv2:2, dgx2:2 and ndv2:4 at 1 MB, 16 MB and
   256 MB (default sketches, ``fallback=false``): exported time, bound, best classic,
   and the routing MILP's worth (warm start vs solved, and the simulated time of each
   routing's schedule).
3. Synthesis wall time, allgather: ndv2:2 (target < 30 s) and ndv2:10 (< 180 s).
4. Alltoall at 1 MB on ndv2:2: taccl's relay schedules (chunks aggregated on the NIC by
   the contiguity stage) against direct, under the zoo's links-only model and under the
   simulator's per-message cost model (``ccweave.topology.cost``) at two settings.

5. (``--after-routing``) Issue 43's figures (``benchmarks/taccl_after_routing.py``): what
   TACCL's sketches lose after routing, relabelled twins, each heuristic, reduce order and
   channel policy, the added machines and formats; the pair ceiling; ndv2:10's synthesis.
6. (``--joint``) The joint routing-and-ordering MILP (``ordering=joint``) on small
   sketches: its size in binaries, the best heuristic order it starts from, what it finds
   within its time limit, and the routing model's LP bound; where it pays is the size
   ``ordering=best`` solves it below (``ordering_joint.MAX_BINARIES``).
7. (``--testbed-alltoall``, root) Alltoall measured on the netns testbed of a two-node
   machine with a shared NIC: taccl with a relay sketch against direct, gloo's and Open
   MPI's own alltoall, 64 KB-4 MB, beside the calibrated model's predictions
   (``benchmarks/taccl_testbed.py``).

    nice python benchmarks/taccl.py [--quick] [--skip-80] [--json FILE]
    nice python benchmarks/taccl.py --after-routing [--before DIR] [--skip-80]
    nice python benchmarks/taccl.py --joint [--json FILE]
    python benchmarks/taccl.py --testbed-alltoall [--model FILE] [--reps 5] [--json FILE]

Each figure is printed with the 1-minute load average; the peak RSS at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ccweave.bounds import lower_bound
from ccweave.collectives import Collective, Kind
from ccweave.errors import NotApplicableError
from ccweave.export.msccl_xml import from_xml, to_xml
from ccweave.peak_rss import peak_rss_bytes
from ccweave.simulate import simulate
from ccweave.synth.registry import strategies_for, synthesize
from ccweave.synth.taccl import logical as logical_mod
from ccweave.synth.taccl import ordering_joint as joint_mod
from ccweave.synth.taccl import profile as profile_mod
from ccweave.synth.taccl import sketch as sketch_mod
from ccweave.synth.taccl.build import TacclOptions, synthesize_taccl
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.sketch_defaults import default_sketches
from ccweave.topology import zoo
from ccweave.topology.cost import CostModel
from ccweave.topology.model import NodeKind
from ccweave.verify import verify

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "taccl"
PROFILES = {"ndv2": "topo-ndv2-1MB.json", "dgx2": "topo-dgx2-1MB.json"}
PROFILE_CHUNK = 2**20
TOPOLOGIES = ("ndv2:2", "dgx2:2", "ndv2:4")
KINDS = (Kind.ALLGATHER, Kind.ALLTOALL, Kind.ALLREDUCE)
SIZES = (2**20, 16 * 2**20, 256 * 2**20)
BOUND_TARGET = 1.05
AG2_SECONDS = 30.0
AG80_SECONDS = 60.0
AG80_SIZES = (2**20, 64 * 2**20, 256 * 2**20)
SAME = 1e-9


def load() -> float:
    return os.getloadavg()[0]


def peak_rss_mib() -> float:
    return peak_rss_bytes() / 2**20


def exported_time(schedule, topology, size) -> float:
    """The simulated time of the schedule the MSCCL XML describes."""
    return simulate(from_xml(to_xml(schedule)), topology, size).time_s


def milp_facts(schedule) -> dict[str, object]:
    """The routing MILP's worth for the kept candidate: warm start vs solved (makespan
    and objective, us), the LP bound, and each routing's simulated schedule."""
    report = schedule.metadata.get("taccl", {})
    routings = report.get("routings", [])
    trees = next((r for r in routings if r.get("method") == "trees"), {})
    milp = next((r for r in routings if r.get("method") == "milp"), {})
    return {"warm_T_us": milp.get("warm_makespan_us"), "milp_T_us": milp.get("makespan_us"),
            "lp_T_us": milp.get("makespan_bound_us"), "warm_obj": milp.get("warm_objective"),
            "milp_obj": milp.get("objective"), "milp_status": milp.get("status"),
            "milp_gap": milp.get("gap"), "binding": milp.get("binding"),
            "trees_sched_us": trees.get("lowered_us"),
            "milp_sched_us": milp.get("lowered_us", "same routes"),
            "kept": report.get("routing", {}).get("kept")}


def _num(value, width=9, digits=1) -> str:
    return f"{value:>{width}.{digits}f}" if isinstance(value, (int, float)) else \
        f"{'-':>{width}}"


def milp_text(m) -> str:
    milp_s = m["milp_sched_us"]
    same = f"{'same':>9}"
    return (f"{_num(m['warm_T_us'])} {_num(m['milp_T_us'])} {_num(m['lp_T_us'])} "
            f"{_num(m['warm_obj'], 10, 2)} {_num(m['milp_obj'], 10, 2)} "
            f"{_num(m['trees_sched_us'])} "
            f"{_num(milp_s) if isinstance(milp_s, float) else same}")


MILP_HEAD = ("   T_warm    T_milp      T_LP   obj_warm   obj_milp  sched_tree sched_milp")


# ------------------------------------------------------------------ TACCL's sketches


def taccl_sketches() -> list[dict[str, object]]:
    print("\n1. TACCL's shipped sketches, read unchanged, TACCL's 1 MB profiles for the costs,"
          " 1 MB chunks (us)")
    print(f"{'sketch':<22} {'machine':<7} {'coll':<10}{MILP_HEAD}   export(us) /bound "
          "synth(s) load")
    rows = []
    for path in sorted((FIXTURES / "sketch").glob("*.json")):
        sketch = sketch_mod.load(path)
        family = "dgx2" if "dgx2" in path.stem else "ndv2"
        machine = family if (sketch.nodes or 1) == 1 else f"{family}:{sketch.nodes}"
        base = zoo.get(machine)
        profile = profile_mod.load(FIXTURES / "topo" / PROFILES[family], PROFILE_CHUNK)
        topology = profile_mod.apply(profile, base)
        kinds = [Kind.ALLGATHER] + ([Kind.ALLTOALL] if path.stem == "sk1-ndv2-n2" else [])
        for kind in kinds:
            chunks = sketch.input_chunkup
            size = PROFILE_CHUNK * Collective(kind, base.num_ranks, chunks).total_chunks
            started = time.perf_counter()
            schedule = synthesize_taccl(base, kind, None, TacclOptions(
                size=size, sketch=str(path), fallback=False,
                profile=str(FIXTURES / "topo" / PROFILES[family])))
            seconds = time.perf_counter() - started
            verify(schedule, topology)
            ours = exported_time(schedule, topology, size)
            bound = lower_bound(topology, kind, size).time_s
            m = milp_facts(schedule)
            row = {"sketch": path.name, "machine": machine, "collective": kind.value,
                   "size": size, "export_us": ours * 1e6, "per_bound": ours / bound,
                   "synth_s": seconds, "load": load(), "verified": True, **m}
            rows.append(row)
            print(f"{path.stem:<22} {machine:<7} {kind.value:<10}{milp_text(m)} "
                  f"{ours * 1e6:>11.1f} {ours / bound:>6.3f} {seconds:>8.1f} {load():>4.2f}",
                  flush=True)
    return rows


# -------------------------------------------------------------------- zoo matrix


def classic_schedules(topology, kind):
    """Every classic strategy that applies, built once and proven (size-agnostic)."""
    built = {}
    for name in strategies_for(kind, classic_only=True):
        try:
            schedule = synthesize(topology, kind, name)
        except NotApplicableError:
            continue
        verify(schedule, topology)
        built[name] = schedule
    return built


def cell(topology, kind, size, classics, time_limit):
    started = time.perf_counter()
    schedule = synthesize_taccl(topology, kind, None,
                                TacclOptions(size=size, fallback=False, time_limit=time_limit))
    seconds = time.perf_counter() - started
    verify(schedule, topology)
    scored = simulate(schedule, topology, size).time_s
    ours = exported_time(schedule, topology, size)
    times = {name: simulate(s, topology, size).time_s for name, s in classics.items()}
    best = min(times, key=times.get)
    bound = lower_bound(topology, kind, size).time_s
    return {"topology": topology.name, "collective": kind.value, "size_MB": size / 2**20,
            "export_us": ours * 1e6, "scored_us": scored * 1e6, "schedule": schedule.name,
            "synth_s": seconds, "classic": best, "classic_us": times[best] * 1e6,
            "ring_us": times.get("ring", float("nan")) * 1e6, "bound_us": bound * 1e6,
            "per_bound": ours / bound, "classic_per_bound": times[best] / bound,
            "per_classic": ours / times[best], "load": load(), "verified": True,
            **milp_facts(schedule)}


def row_text(r) -> str:
    return (f"{r['topology']:<7} {r['collective']:<10} {r['size_MB']:>4.0f}MB "
            f"{r['export_us']:>10.1f} {r['per_bound']:>6.3f} {r['classic']:<18} "
            f"{r['classic_us']:>10.1f} {r['per_classic']:>6.3f}"
            f"{milp_text(r)} {r['synth_s']:>7.1f} {r['load']:>4.2f}")


def matrix(topologies, time_limit) -> list[dict[str, object]]:
    print("\n2. default sketches, fallback=false; times in us (taccl: the exported XML)")
    print(f"{'machine':<7} {'coll':<10} {'size':>6} {'taccl':>10} {'/bound':>6} "
          f"{'best classic':<18} {'classic':>10} {'/clas.':>6}{MILP_HEAD} synth(s) load")
    rows = []
    for name in topologies:
        topology = zoo.get(name)
        for kind in KINDS:
            classics = classic_schedules(topology, kind)
            for size in SIZES:
                row = cell(topology, kind, size, classics, time_limit)
                rows.append(row)
                print(row_text(row), flush=True)
    return rows


# ----------------------------------------------------------------- synthesis time


def synth_time(name: str, size: int, time_limit: float) -> dict[str, object]:
    topology = zoo.get(name)
    started = time.perf_counter()
    schedule = synthesize_taccl(topology, Kind.ALLGATHER, None,
                                TacclOptions(size=size, fallback=False, time_limit=time_limit))
    seconds = time.perf_counter() - started
    verify(schedule, topology)
    ours = simulate(schedule, topology, size).time_s
    bound = lower_bound(topology, Kind.ALLGATHER, size).time_s
    return {"topology": name, "size_MB": size / 2**20, "synth_s": seconds,
            "per_bound": ours / bound, "transfers": len(schedule.transfers),
            "schedule": schedule.name, "load": load()}


# ----------------------------------------------------------------------- alltoall


COST_MODELS = (("zoo model (links only)", None),
               ("per-message costs: overhead 2 us, latency 5 us, one message per "
                "connection", CostModel(2e-6, 5e-6, connection_fifo=True)),
               ("per-message costs: overhead 10 us, latency 5 us, one message per "
                "connection", CostModel(10e-6, 5e-6, connection_fifo=True)))
"""The simulator's cost models alltoall is timed under: the zoo's, and the per-message
costs ``ccweave profile --calibrate`` fits (no NDv2 has been profiled, so two settings
of them stand in)."""


def alltoall() -> list[dict[str, object]]:
    print("\n4. alltoall at 1 MB on ndv2:2: taccl's relay schedules against direct (us)")
    rows = []
    for model, cost in COST_MODELS:
        print(f" {model}")
        rows += _alltoall(model, cost)
    return rows


def _alltoall(model: str, cost) -> list[dict[str, object]]:
    topology = zoo.get("ndv2:2")
    if cost is not None:
        topology = topology.with_cost(cost)
    size = 2**20
    direct = simulate(synthesize(topology, Kind.ALLTOALL, "direct"), topology, size).time_s
    rows = []
    for label, sketch in (("default sketches", None),
                          ("sk1-ndv2-n2 (one relay a node)",
                           str(FIXTURES / "sketch" / "sk1-ndv2-n2.json"))):
        started = time.perf_counter()
        schedule = synthesize_taccl(topology, Kind.ALLTOALL, None,
                                    TacclOptions(size=size, fallback=False, sketch=sketch))
        seconds = time.perf_counter() - started
        verify(schedule, topology)
        ours = exported_time(schedule, topology, size)
        merges = schedule.metadata.get("taccl", {}).get("contiguity", {}).get("merges")
        rows.append({"model": model, "variant": label, "taccl_us": ours * 1e6,
                     "direct_us": direct * 1e6,
                     "per_direct": ours / direct, "merges": merges, "synth_s": seconds,
                     "load": load(), "schedule": schedule.name})
        print(f"  {label:<32} taccl {ours * 1e6:9.1f}  direct {direct * 1e6:9.1f}  "
              f"taccl/direct {ours / direct:.3f}  merged sends {merges}  synth "
              f"{seconds:.1f} s  load {load():.2f}", flush=True)
    return rows


# -------------------------------------------------------------------- joint MILP


JOINT_CASES = (("mist", Kind.ALLGATHER, 1), ("ring:6", Kind.ALLGATHER, 2),
               ("mist", Kind.ALLGATHER, 2), ("mesh:2x3", Kind.ALLGATHER, 2),
               ("ring:4", Kind.ALLTOALL, 2), ("dgx1", Kind.ALLGATHER, 1),
               ("mist", Kind.ALLTOALL, 1), ("cedar", Kind.ALLTOALL, 2),
               ("fully-connected:4", Kind.ALLTOALL, 2), ("fully-connected:6", Kind.ALLGATHER, 2),
               ("mesh:2x4", Kind.ALLGATHER, 2), ("dgx1", Kind.ALLGATHER, 2))
"""Zoo machines with their default sketch (1 MB chunks), from a few hundred binaries to a
few thousand; TACCL's sketches are added below."""
JOINT_TACCL = ("sk1-ndv2-n1", "sk1-ndv2-n2", "sk3-ndv2-n2")


def joint_cases():
    """(label, topology, kind, chunks, sketch, options) of the joint section."""
    for name, kind, chunks in JOINT_CASES:
        topology = zoo.get(name)
        yield (f"{name} {kind.value} c{chunks}", topology, kind, chunks,
               default_sketches(topology, kind)[0], {})
    for stem in JOINT_TACCL:
        path = FIXTURES / "sketch" / f"{stem}.json"
        sketch = sketch_mod.load(path)
        machine = "ndv2" if (sketch.nodes or 1) == 1 else f"ndv2:{sketch.nodes}"
        yield (f"{stem} allgather", zoo.get(machine), Kind.ALLGATHER, sketch.input_chunkup,
               sketch, {"profile": str(FIXTURES / "topo" / PROFILES["ndv2"])})


def joint() -> list[dict[str, object]]:
    """``ordering=joint`` on every case, with no size cap and the default time limit."""
    print(f"\n6. the joint routing-and-ordering MILP (ordering=joint, "
          f"{joint_mod.TIME_LIMIT_S:.0f} s), 1 MB chunks; times in TACCL's ordering model (us)")
    print(f"best: solved by ordering=best (at most {joint_mod.MAX_BINARIES} binaries and the "
          "start above the routing LP bound)")
    print(f"{'case':<30} {'binaries':>8} {'LP bound':>9} {'start':>8} {'joint':>8} "
          f"{'gain':>6} {'status':<11} {'gap':>7} {'solve s':>7} {'export':>8} best load")
    rows = []
    for label, topology, kind, chunks, sketch, extra in joint_cases():
        costs = profile_mod.apply(profile_mod.load(extra["profile"], PROFILE_CHUNK), topology) \
            if extra else topology
        lg = logical_mod.apply(costs, sketch)
        binaries = joint_mod.joint_binaries(lg, Demand(Collective(kind, topology.num_ranks,
                                                                  chunks), lg.symmetry), 10**6)
        size = PROFILE_CHUNK * Collective(kind, topology.num_ranks, chunks).total_chunks
        schedule = synthesize_taccl(topology, kind, chunks, TacclOptions(
            size=size, sketch=sketch, fallback=False, ordering="joint",
            joint_max_binaries=10**6, **extra))
        verify(schedule, costs)
        report = schedule.metadata["taccl"]
        found = next(r for r in report["routings"] if r["method"] == joint_mod.METHOD)
        floor = max((r["makespan_bound_us"] for r in report["routings"]
                     if "makespan_bound_us" in r), default=None)
        routing_t = min(r["makespan_us"] for r in report["routings"]
                        if r["method"] != joint_mod.METHOD)
        row = {"case": label, "binaries": binaries, "lp_bound_us": floor,
               "routing_T_us": routing_t,
               "start_us": found["warm_makespan_us"], "joint_us": found["makespan_us"],
               "gain": found["warm_makespan_us"] / found["makespan_us"] - 1,
               "status": found["status"], "gap": found["gap"], "solve_s": found["seconds"],
               "export_us": exported_time(schedule, costs, size) * 1e6, "load": load(),
               "best_solves": binaries <= joint_mod.MAX_BINARIES and (
                   floor is None or found["warm_makespan_us"] > floor * 1.001)}
        rows.append(row)
        print(f"{label:<30} {binaries:>8} {_num(floor)} {row['start_us']:>8.1f} "
              f"{row['joint_us']:>8.1f} {100 * row['gain']:>5.1f}% {row['status']:<11} "
              f"{100 * row['gap']:>6.2f}% {row['solve_s']:>7.1f} {row['export_us']:>8.1f} "
              f"{'yes' if row['best_solves'] else 'no':>4} {load():.2f}", flush=True)
    return rows


def joint_checks(rows) -> list[tuple[str, bool]]:
    """sk1-ndv2-n1 reaches its routing makespan; the joint order is never slower in the
    model than the order it started from."""
    target = next(r for r in rows if r["case"].startswith("sk1-ndv2-n1"))
    t = target["routing_T_us"]
    return [(f"sk1-ndv2-n1: the joint MILP orders {target['joint_us']:.1f} us against "
             f"{target['start_us']:.1f} from the heuristics (routing makespan {t:.1f}), "
             f"exported {target['export_us']:.1f} us", target["export_us"] <= t * 1.05),
            ("the joint order is never slower than the order it starts from (model)",
             all(r["joint_us"] <= r["start_us"] * (1 + 1e-9) for r in rows))]


def testbed_section(args) -> int:
    """Issue 43's alltoall table: see benchmarks/taccl_testbed.py."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import taccl_testbed

    result, checks = taccl_testbed.run(args.model, args.sizes or taccl_testbed.SIZES,
                                       args.reps)
    rss = peak_rss_mib()
    print(f"\npeak RSS of this process {rss:.0f} MiB (the ranks': above)")
    print("\ntargets:")
    for text, ok in checks:
        print(f"  [{'met' if ok else 'MISSED'}] {text}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({**result, "peak_rss_MiB": rss,
                       "targets": [{"target": t, "met": ok} for t, ok in checks]}, handle,
                      indent=1, default=str)
    return 0 if all(ok for _, ok in checks) else 1


def joint_section(args) -> int:
    rows = joint()
    rss = peak_rss_mib()
    print(f"\npeak RSS of the whole run {rss:.0f} MiB; load average now {load():.2f}")
    checks = joint_checks(rows)
    print("\ntargets:")
    for text, ok in checks:
        print(f"  [{'met' if ok else 'MISSED'}] {text}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"joint": rows, "peak_rss_MiB": rss,
                       "targets": [{"target": t, "met": ok} for t, ok in checks]}, handle,
                      indent=1, default=str)
    return 0 if all(ok for _, ok in checks) else 1


# -------------------------------------------------------------------------- targets


def pair_ceiling(name: str, kind: Kind, size: int) -> float | None:
    """For NVSwitch machines: the least time of any schedule whose GPU-to-GPU sends cross
    the switch (MSCCL's sends do, and so do the machine's routes), over the bound. A GPU
    pair behind one NIC takes everything it receives through its two switch ports or from
    the network through that NIC (the cut the bound takes counts the pair's PCIe links
    instead, which only that NIC's traffic uses)."""
    topology = zoo.get(name)
    switch = next((f for f, k in topology.fabric.items() if k is NodeKind.SWITCH
                   and any(topology.is_rank(lk.src) for lk in topology.links if lk.dst == f)),
                  None)
    nics = [f for f, k in topology.fabric.items() if k is NodeKind.NIC]
    if switch is None or not nics:
        return None
    first = nics[0]
    home = topology.groups["node"][0]
    pair = sorted(r for r in home if first in _ends(topology, r))
    if len(pair) < 2:
        return None
    ports = sum(topology.link(switch, r).bandwidth for r in pair)
    nic_in = max(lk.bandwidth for lk in topology.links if lk.dst == first
                 and topology.kind(lk.src) is NodeKind.SWITCH)  # from the network
    n = topology.num_ranks
    data = len(pair) * (n - 1) * size / n
    phases = 2 if kind is Kind.ALLREDUCE else 1
    return phases * data / (ports + nic_in) / lower_bound(topology, kind, size).time_s


def _ends(topology, rank) -> set:
    """Fabric nodes on the route from ``rank`` towards another node (its way out)."""
    other = next(r for r in topology.ranks if topology.group_of("node", r)
                 != topology.group_of("node", rank))
    return {topology.links[i].dst for i in topology.route(rank, other)}


def targets(sketch_rows, rows, timings, a2a) -> list[tuple[str, bool]]:
    checks = []
    if sketch_rows:
        checks.append((f"all {len({r['sketch'] for r in sketch_rows})} TACCL sketches read "
                       "unchanged, synthesized and verified with TACCL's profiles",
                       len({r["sketch"] for r in sketch_rows}) == 11
                       and all(r["verified"] for r in sketch_rows)))
    cases = [r for r in [*sketch_rows, *rows] if isinstance(r.get("milp_obj"), float)]
    better = [r for r in cases if r["milp_obj"] < r["warm_obj"] * (1 - 1e-6)]
    faster = [r for r in cases if r["milp_T_us"] < r["warm_T_us"] * (1 - 1e-6)]
    at_lp = [r for r in cases if isinstance(r.get("lp_T_us"), float)
             and r["warm_T_us"] <= r["lp_T_us"] * (1 + 1e-6)]
    proven = [r for r in cases if r not in at_lp and r not in better
              and r.get("milp_status") in ("optimal", "within gap")]
    checks.append((f"routing MILP objective better than its warm start in {len(better)} of "
                   f"{len(cases)} cases (makespan lower in {len(faster)}); why not in the "
                   f"rest: in {len(at_lp)} the warm start's makespan is the LP bound (no "
                   f"routing is faster in TACCL's model), in {len(proven)} the MILP proved "
                   "the warm start optimal within its gap, the others stopped at the time "
                   "limit", len(better) * 2 > len(cases)))
    for name, kind in (("ndv2:2", "allgather"), ("dgx2:2", "allgather"),
                       ("dgx2:2", "allreduce")):
        hit = [r for r in rows if r["topology"] == name and r["collective"] == kind
               and r["size_MB"] == 256]
        if hit:
            r = hit[0]
            ceiling = pair_ceiling(name, Kind(kind), 256 * 2**20)
            why = "" if ceiling is None else (f"; schedules MSCCL can run (GPU-to-GPU over "
                                              f"the switch) cannot beat {ceiling:.3f}")
            checks.append((f"{name} {kind} 256MB exported {r['per_bound']:.3f} of the bound "
                           f"<= {BOUND_TARGET}{why}", r["per_bound"] <= BOUND_TARGET))
    checks.append(("every schedule verified", all(r["verified"] for r in rows)))
    checks.append(("every taccl figure is the exported XML's (scored == exported)",
                   all(abs(r["scored_us"] - r["export_us"]) <= r["export_us"] * 1e-9
                       for r in rows)))
    for t in timings:
        limit = AG80_SECONDS if t["topology"] == "ndv2:10" else AG2_SECONDS
        checks.append((f"{t['topology']} allgather {t['size_MB']:.0f}MB synthesized in "
                       f"{t['synth_s']:.1f} s < {limit:.0f} s (load {t['load']:.2f})",
                       t["synth_s"] < limit))
    for r in a2a:
        checks.append((f"ndv2:2 alltoall 1MB, {r['variant']}, {r['model']}: taccl/direct "
                       f"{r['per_direct']:.3f} < 1", r["per_direct"] < 1))
    return checks


def after_routing(args) -> int:
    """Issue 43's figures: see benchmarks/taccl_after_routing.py."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import taccl_after_routing

    print(f"load average at the start {load():.2f}")
    result, checks = taccl_after_routing.run(args.before)
    for name, kind in (("dgx2:2", Kind.ALLGATHER), ("dgx2:2", Kind.ALLREDUCE)):
        ceiling = pair_ceiling(name, kind, 256 * 2**20)
        print(f"\npair_ceiling {name} {kind.value} 256MB: no schedule whose GPU-to-GPU sends "
              f"cross the NVSwitch beats {ceiling:.3f} of the bound")
        result.setdefault("pair_ceiling", {})[f"{name} {kind.value}"] = ceiling
    timings = [] if args.skip_80 else [synth_time("ndv2:10", size, AG80_SECONDS)
                                       for size in AG80_SIZES]
    for t in timings:
        print(f"  {t['topology']:<8} {t['size_MB']:>5.0f}MB synthesized in {t['synth_s']:.1f} s"
              f"  time/bound {t['per_bound']:.3f}  load {t['load']:.2f}", flush=True)
        checks.append((f"{t['topology']} allgather {t['size_MB']:.0f}MB synthesized in "
                       f"{t['synth_s']:.1f} s < {AG80_SECONDS:.0f} s (load {t['load']:.2f})",
                       t["synth_s"] < AG80_SECONDS))
    rss = peak_rss_mib()
    print(f"\npeak RSS of the whole run {rss:.0f} MiB; load average now {load():.2f}")
    print("\ntargets:")
    for text, ok in checks:
        print(f"  [{'met' if ok else 'MISSED'}] {text}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({**result, "timings": timings, "peak_rss_MiB": rss,
                       "targets": [{"target": t, "met": ok} for t, ok in checks]}, handle,
                      indent=1, default=str)
    return 0 if all(ok for _, ok in checks) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="ndv2:2 only in part 2, no TACCL sketches")
    parser.add_argument("--skip-80", action="store_true", help="skip the ndv2:10 timing")
    parser.add_argument("--time-limit", type=float, default=TacclOptions().time_limit,
                        help="taccl's time limit per synthesis (seconds)")
    parser.add_argument("--json", help="also write every row as JSON to this file")
    parser.add_argument("--after-routing", action="store_true",
                        help="issue 43's figures only (benchmarks/taccl_after_routing.py), the "
                             "pair ceiling and the ndv2:10 synthesis times")
    parser.add_argument("--before", metavar="DIR",
                        help="with --after-routing: a checkout of ccweave before issue 43, whose "
                             "exports are timed beside (a subprocess)")
    parser.add_argument("--joint", action="store_true",
                        help="the joint routing-and-ordering MILP section only")
    parser.add_argument("--testbed-alltoall", action="store_true",
                        help="(root) alltoall on the shared-NIC testbed: a relay sketch against "
                             "direct, gloo and Open MPI, with the calibrated predictions")
    parser.add_argument("--model", metavar="FILE",
                        help="with --testbed-alltoall: the calibrated machine to predict with "
                             "(written there by the first run when absent)")
    parser.add_argument("--sizes", help="with --testbed-alltoall: sizes (default 64KB-4MB)")
    parser.add_argument("--reps", type=int, default=5,
                        help="with --testbed-alltoall: alternated rounds (default 5)")
    args = parser.parse_args(argv)
    if args.testbed_alltoall:
        return testbed_section(args)
    if args.joint:
        return joint_section(args)
    if args.after_routing:
        return after_routing(args)
    sketch_rows = [] if args.quick else taccl_sketches()
    rows = matrix(TOPOLOGIES[:1] if args.quick else TOPOLOGIES, args.time_limit)
    timings = [synth_time("ndv2:2", size, args.time_limit) for size in SIZES]
    if not args.skip_80:
        timings += [synth_time("ndv2:10", size, AG80_SECONDS) for size in AG80_SIZES]
    print("\n3. synthesis wall time, allgather:")
    for t in timings:
        print(f"  {t['topology']:<8} {t['size_MB']:>5.0f}MB {t['synth_s']:>7.1f} s  "
              f"time/bound {t['per_bound']:.3f}  {t['transfers']} transfers  "
              f"load {t['load']:.2f}", flush=True)
    a2a = alltoall()
    rss = peak_rss_mib()
    print(f"\npeak RSS of the whole run {rss:.0f} MiB; load average now {load():.2f}")
    checks = targets(sketch_rows, rows, timings, a2a)
    print("\ntargets:")
    for text, ok in checks:
        print(f"  [{'met' if ok else 'MISSED'}] {text}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"sketches": sketch_rows, "rows": rows, "timings": timings,
                       "alltoall": a2a, "peak_rss_MiB": rss,
                       "targets": [{"target": t, "met": ok} for t, ok in checks]}, handle,
                      indent=1, default=str)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
