"""Issue 43's figures, run by ``benchmarks/taccl.py --after-routing``: what TACCL's
sketches lose after routing, relabelled twins, TACCL's heuristics and channel policies,
and the machines and formats added.

For each of TACCL's sketches (its 1 MB profiles, 1 MB chunks): TACCL's routing makespan
(the least over the routings tried: the MILP's, in TACCL's model), the order bound of the
routes kept (no order of them is faster: ``ccweave.synth.taccl.ordering_bound``), stage 2's
makespan, the exported MSCCL XML's simulated time and its ratios to both; the same
sketch relabelled by an automorphism of its machine; with ``--before DIR`` (a checkout
of ccweave before issue 43) the export of the code there, run in a subprocess. Then each
ordering heuristic alone, each reduce-scatter order, each ncclize channel policy, and
rows for dgx-a100-4nic:3, a TACCL custom profile and TACCL's minmax/maxmin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from ccweave.bounds import lower_bound
from ccweave.collectives import Collective, Kind
from ccweave.errors import InputError
from ccweave.export import ncclize
from ccweave.export.msccl_xml import from_xml, to_xml
from ccweave.simulate import simulate
from ccweave.synth.taccl import logical, profile, sketch
from ccweave.synth.taccl.build import ReduceOrder, TacclOptions, synthesize_taccl
from ccweave.synth.taccl.demand import Demand
from ccweave.synth.taccl.ordering import Heuristic
from ccweave.synth.taccl.routing import RoutingMethod, route
from ccweave.synth.taccl.solver import SolverSettings
from ccweave.topology import io, zoo
from ccweave.verify import verify

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "taccl"
CUSTOM = ROOT / "tests" / "fixtures" / "taccl_custom" / "topo-custom-4gpu.json"
PROFILES = {"ndv2": "topo-ndv2-1MB.json", "dgx2": "topo-dgx2-1MB.json"}
TARGET = 1.05
TWIN_TARGET = 0.005
AUTOMORPHISMS = {"dgx2": tuple(r ^ 1 for r in range(16)),  # each GPU pair swapped
                 "ndv2": (2, 3, 0, 1, 6, 7, 4, 5)}  # NVLink pairs (0 2)(1 3)(4 6)(5 7)
"""A permutation of local ranks per family that is an automorphism of the machine (checked
below) and commutes with TACCL's symmetry offsets."""
TACCL_DEFAULT = {"one-node NVLink": Heuristic.BACKWARD, "switch": Heuristic.LONGEST_REMAINING,
                 "multi-node": Heuristic.OWN_NODE_FIRST}


def load() -> float:
    return os.getloadavg()[0]


def case(path: Path) -> dict[str, object]:
    """A TACCL sketch file with its machine, profile and 1 MB-chunk size."""
    data = json.loads(path.read_text())
    family = "dgx2" if "dgx2" in path.stem else "ndv2"
    machine = family if data["nnodes"] == 1 else f"{family}:{data['nnodes']}"
    base = zoo.get(machine)
    profile_file = FIXTURES / "topo" / PROFILES[family]
    return {"path": path, "data": data, "family": family, "machine": machine, "base": base,
            "profile": str(profile_file),
            "topology": profile.apply(profile.load(profile_file), base)}


def size_of(c: dict, kind: Kind) -> int:
    chunks = c["data"]["hyperparameters"]["input_chunkup"]
    return 2**20 * Collective(kind, c["base"].num_ranks, chunks).total_chunks


def synth(c: dict, kind: Kind, sketch_file: str, **options) -> tuple[object, float]:
    started = time.perf_counter()
    schedule = synthesize_taccl(c["base"], kind, None, TacclOptions(
        size=size_of(c, kind), sketch=sketch_file, fallback=False, profile=c["profile"],
        **options))
    return schedule, time.perf_counter() - started


def exported_us(schedule, topology, size) -> float:
    return simulate(from_xml(to_xml(schedule)), topology, size).time_s * 1e6


def relabelled(data: dict, local: tuple[int, ...]) -> dict:
    """A TACCL sketch with its local ranks renamed by ``local``."""
    twin = json.loads(json.dumps(data))
    intra = twin.get("intranode_sketch", {})
    if "switches" in intra:
        intra["switches"] = [sorted(local[x] for x in group) for group in intra["switches"]]
    inter = twin.get("internode_sketch")
    if inter:
        for key in ("internode_conn", "gpus_to_sender_rev_map"):
            if isinstance(inter.get(key), dict):
                inter[key] = {str(local[int(k)]): sorted(local[x] for x in v)
                              for k, v in inter[key].items()}
    return twin


def is_automorphism(topology, local: tuple[int, ...]) -> bool:
    """Whether renaming local ranks by ``local`` in every node keeps every rank pair's
    route figures (latency, bottleneck) the same."""
    size = len(topology.groups["node"][0])
    image = [(r // size) * size + local[r % size] for r in range(topology.num_ranks)]

    def figures(a, b):
        links = [topology.links[i] for i in topology.route(a, b)]
        return round(sum(lk.alpha for lk in links), 15), min(lk.bandwidth for lk in links)

    return all(figures(a, b) == figures(image[a], image[b])
               for a in topology.ranks for b in topology.ranks if a != b)


def before_times(before: str, cases: list[tuple[dict, Kind]]) -> dict[str, float]:
    """The exported times of the code in checkout ``before`` (a subprocess)."""
    jobs = [{"key": f"{c['path'].stem}/{kind.value}", "machine": c["machine"],
             "kind": kind.value, "sketch": str(c["path"]), "profile": c["profile"],
             "size": size_of(c, kind)} for c, kind in cases]
    script = (
        "import json, sys\n"
        "from ccweave.collectives import Kind\n"
        "from ccweave.export.msccl_xml import from_xml, to_xml\n"
        "from ccweave.simulate import simulate\n"
        "from ccweave.synth.taccl import profile\n"
        "from ccweave.synth.taccl.build import TacclOptions, synthesize_taccl\n"
        "from ccweave.topology import zoo\n"
        "out = {}\n"
        "for job in json.loads(sys.argv[1]):\n"
        "    base = zoo.get(job['machine'])\n"
        "    topo = profile.apply(profile.load(job['profile']), base)\n"
        "    s = synthesize_taccl(base, Kind(job['kind']), None, TacclOptions(size=job['size'],"
        " sketch=job['sketch'], fallback=False, profile=job['profile']))\n"
        "    out[job['key']] = simulate(from_xml(to_xml(s)), topo, job['size']).time_s * 1e6\n"
        "print(json.dumps(out))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(before) / "src")}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(jobs)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def sketches(before: str | None) -> list[dict[str, object]]:
    paths = sorted((FIXTURES / "sketch").glob("*.json"))
    cases = [(case(p), kind) for p in paths
             for kind in [Kind.ALLGATHER] + ([Kind.ALLTOALL] if p.stem == "sk1-ndv2-n2" else [])]
    old = before_times(before, cases) if before else {}
    print("\n5. after routing: TACCL's sketches, its 1 MB profiles, 1 MB chunks (us); T: TACCL's "
          "routing makespan (least over the routings, the MILP's model); bound: the order "
          "bound of the kept routes; twin: relabelled by a machine automorphism")
    print(f"{'sketch':<16} {'coll':<9} {'T':>8} {'bound':>8} {'set by':<16} {'ordered':>8} "
          f"{'export':>8} {'/T':>6} {'/bound':>6} {'before':>8} {'b/T':>6} {'twin':>8} "
          f"{'diff%':>6} {'kept':<13} {'heuristic':<18} {'synth s':>7} load")
    rows = []
    for c, kind in cases:
        local = AUTOMORPHISMS[c["family"]]
        assert is_automorphism(c["base"], local), f"{local} is not an automorphism"
        schedule, seconds = synth(c, kind, str(c["path"]))
        topology, size = c["topology"], size_of(c, kind)
        verify(schedule, topology)
        ours = exported_us(schedule, topology, size)
        report = schedule.metadata["taccl"]
        routing = report["routing"]
        t_routing = min(r["makespan_us"] for r in report["routings"]  # the routing model's
                        if r["method"] != "joint")  # (the joint MILP's is an order's)
        twin_path = Path(f"/tmp/ccweave-twin-{c['path'].stem}.json")
        twin_path.write_text(json.dumps(relabelled(c["data"], local)))
        twin, _ = synth(c, kind, str(twin_path))
        verify(twin, topology)
        twin_us = exported_us(twin, topology, size)
        key = f"{c['path'].stem}/{kind.value}"
        row = {"sketch": c["path"].stem, "collective": kind.value, "machine": c["machine"],
               "T_us": t_routing, "order_bound_us": routing["order_bound_us"],
               "bound_set_by": routing["order_bound_set_by"],
               "ordered_us": report["ordering"]["makespan_us"], "export_us": ours,
               "per_T": ours / t_routing, "per_order_bound": ours / routing["order_bound_us"],
               "before_us": old.get(key), "twin_us": twin_us,
               "twin_diff": abs(twin_us - ours) / ours, "kept": routing["kept"],
               "twin_kept": twin.metadata["taccl"]["routing"]["kept"],
               "twin_heuristic": twin.metadata["taccl"]["ordering"]["heuristic"],
               "routings": [{k: r.get(k) for k in ("method", "makespan_us", "lowered_us",
                                                    "note")} for r in report["routings"]],
               "twin_routings": [{k: r.get(k) for k in ("method", "makespan_us",
                                                         "lowered_us", "note")}
                                 for r in twin.metadata["taccl"]["routings"]],
               "labels": schedule.metadata.get("labels"),
               "twin_labels": twin.metadata.get("labels"),
               "heuristic": report["ordering"]["heuristic"], "synth_s": seconds,
               "load": load(), "schedule": schedule, "case": c, "kind": kind}
        rows.append(row)
        before_text = f"{row['before_us']:>8.1f} {row['before_us'] / t_routing:>6.3f}" \
            if row["before_us"] else f"{'-':>8} {'-':>6}"
        print(f"{row['sketch']:<16} {kind.value:<9} {t_routing:>8.1f} "
              f"{row['order_bound_us']:>8.1f} {row['bound_set_by'][:16]:<16} "
              f"{row['ordered_us']:>8.1f} {ours:>8.1f} {row['per_T']:>6.3f} "
              f"{row['per_order_bound']:>6.3f} {before_text} {twin_us:>8.1f} "
              f"{100 * row['twin_diff']:>6.2f} {row['kept']:<13} {row['heuristic']:<18} "
              f"{seconds:>7.1f} {load():.2f}", flush=True)
    return rows


def taccl_default(c: dict) -> Heuristic:
    """The heuristic TACCL's solve picks for a sketch (its parse_and_get_topo)."""
    if c["data"]["intranode_sketch"]["strategy"] == "switch":
        return TACCL_DEFAULT["switch"]
    return TACCL_DEFAULT["multi-node" if c["data"]["nnodes"] > 1 else "one-node NVLink"]


def heuristics(rows: list[dict]) -> list[dict[str, object]]:
    chosen = [h for h in Heuristic]
    print("\n6. each ordering heuristic alone (ordering=NAME), exported us; * TACCL's pick for "
          "the sketch; best = ordering=best")
    print(f"{'sketch':<16} " + " ".join(f"{h.value[:14]:>14}" for h in chosen)
          + f" {'best':>8} load")
    table = []
    for row in rows:
        if row["kind"] is not Kind.ALLGATHER:
            continue
        c = row["case"]
        times = {}
        for h in chosen:
            schedule, _ = synth(c, Kind.ALLGATHER, str(c["path"]), ordering=h.value)
            times[h.value] = exported_us(schedule, c["topology"], size_of(c, Kind.ALLGATHER))
        pick = taccl_default(c).value
        table.append({"sketch": row["sketch"], "times_us": times, "best_us": row["export_us"],
                      "taccl_pick": pick, "load": load()})
        print(f"{row['sketch']:<16} " + " ".join(
            f"{times[h.value]:>13.1f}{'*' if h.value == pick else ' '}" for h in chosen)
            + f" {row['export_us']:>8.1f} {load():.2f}", flush=True)
    return table


def reduce_orders(rows: list[dict]) -> list[dict[str, object]]:
    print("\n7. reduce-scatter orders (TACCL's reverse heuristics 12 and 18, and the "
          "allgather's times reversed), exported reduce-scatter us, best fan-in of each")
    orders = [r.value for r in ReduceOrder]
    print(f"{'sketch':<16} " + " ".join(f"{o:>18}" for o in orders) + " load")
    table = []
    for row in rows:
        if row["kind"] is not Kind.ALLGATHER:
            continue
        c = row["case"]
        schedule, _ = synth(c, Kind.REDUCESCATTER, str(c["path"]))
        verify(schedule, c["topology"])
        tried = schedule.metadata["reduce_order"]["tried_us"]
        best = defaultdict(lambda: float("inf"))
        for label, us in tried.items():
            best[label.split(",")[0]] = min(best[label.split(",")[0]], us)
        table.append({"sketch": row["sketch"], "orders_us": dict(best), "load": load()})
        print(f"{row['sketch']:<16} " + " ".join(f"{best[o]:>18.1f}" for o in orders)
              + f" {load():.2f}", flush=True)
    return table


def channel_policies(rows: list[dict]) -> list[dict[str, object]]:
    print("\n8. ncclize channel policies on the exported schedules (us; match-topology is "
          "TACCL's default; scale-remote 2 doubles inter-node channels)")
    policies = [("as-scheduled", 1), ("one", 1), ("match-topology", 1),
                ("match-topology", 2), ("max-concurrency", 1)]
    print(f"{'sketch':<16} {'coll':<9} " + " ".join(
        f"{p + ('x' + str(k) if k > 1 else ''):>17}" for p, k in policies))
    table = []
    for row in rows:
        c, schedule = row["case"], row["schedule"]
        size = size_of(c, row["kind"])
        times = {}
        for policy, scale in policies:
            label = policy + (f"x{scale}" if scale > 1 else "")
            try:
                applied = ncclize.apply(schedule, policy, c["base"], scale)
                times[label] = exported_us(applied, c["topology"], size)
            except InputError as error:  # an export MSCCL refuses: said, not hidden
                times[label] = f"refused: {str(error)[:60]}"
        table.append({"sketch": row["sketch"], "collective": row["kind"].value,
                      "times_us": times})
        print(f"{row['sketch']:<16} {row['kind'].value:<9} " + " ".join(
            f"{v:>17.1f}" if isinstance(v, float) else f"{v[:17]:>17}"
            for v in times.values()), flush=True)
    return table


def machines_and_formats() -> list[dict[str, object]]:
    print("\n9. added machines and formats")
    out = []
    topology = zoo.get("dgx-a100-4nic:3")
    size = 64 * 2**20
    started = time.perf_counter()
    schedule = synthesize_taccl(topology, Kind.ALLGATHER, None,
                                TacclOptions(size=size, fallback=False))
    seconds = time.perf_counter() - started
    verify(schedule, topology)
    ours = exported_us(schedule, topology, size)
    bound = lower_bound(topology, Kind.ALLGATHER, size).time_s * 1e6
    out.append({"case": "dgx-a100-4nic:3 allgather 64MB (msccl-tools#46)", "export_us": ours,
                "bound_us": bound, "per_bound": ours / bound, "synth_s": seconds,
                "load": load()})
    custom = io.load(f"{CUSTOM}:2")
    sk = Path("/tmp/ccweave-custom-sketch.json")
    sk.write_text(json.dumps({"nnodes": 2, "intranode_sketch": {"strategy": "none"},
                              "internode_sketch": {"strategy": "relay",
                                                   "internode_conn": {"0": [0]}},
                              "symmetry_offsets": [[4, 8]],
                              "hyperparameters": {"input_chunkup": 2}}))
    size = 16 * 2**20
    started = time.perf_counter()
    schedule = synthesize_taccl(custom, Kind.ALLGATHER, None,
                                TacclOptions(size=size, sketch=str(sk), fallback=False))
    seconds = time.perf_counter() - started
    verify(schedule, custom)
    ours = exported_us(schedule, custom, size)
    bound = lower_bound(custom, Kind.ALLGATHER, size).time_s * 1e6
    out.append({"case": "TACCL custom profile (4 GPUs, 1 NIC) x2 allgather 16MB",
                "export_us": ours, "bound_us": bound, "per_bound": ours / bound,
                "synth_s": seconds, "load": load()})
    for strategy in ("none", "minmax", "maxmin"):
        lg = logical.apply(zoo.get("ndv2"), sketch.from_dict(
            {"nnodes": 1, "intranode_sketch": {"strategy": strategy},
             "hyperparameters": {"input_chunkup": 1}}, f"{strategy}.json"))
        demand = Demand(Collective(Kind.ALLGATHER, 8, 1), lg.symmetry)
        routing = route(lg, demand, 2**20, method=RoutingMethod.MILP,
                        settings=SolverSettings(time_limit_s=10.0))[-1]
        loads: dict[int, float] = defaultdict(float)
        for hops in routing.hops:
            for edge, _ in hops:
                for link in lg.edges[edge].route:
                    loads[link] += 2**20 / lg.topology.links[link].bandwidth * 1e6
        usable = {link for e in lg.edges for link in e.route}
        out.append({"case": f"ndv2 one node, TACCL strategy {strategy}: routing T, most and "
                            "least loaded link (us)", "T_us": routing.makespan_s * 1e6,
                    "max_link_us": max(loads.values()),
                    "min_link_us": min(loads.get(lk, 0.0) for lk in usable), "load": load()})
    for row in out:
        print("  " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                               for k, v in row.items()), flush=True)
    return out


def checks(rows: list[dict]) -> list[tuple[str, bool]]:
    found = []
    for row in rows:
        name = f"{row['sketch']} {row['collective']}"
        if row["per_T"] <= TARGET:
            found.append((f"{name}: exported {row['per_T']:.3f} of the routing makespan "
                          f"<= {TARGET}", True))
        else:
            feasible = row["order_bound_us"] <= row["T_us"] * TARGET
            why = (f"the kept routes' order bound is {row['order_bound_us'] / row['T_us']:.3f} "
                   f"of T (set by {row['bound_set_by']}): no order of them reaches T; exported "
                   f"{row['per_order_bound']:.3f} of that bound")
            found.append((f"{name}: exported {row['per_T']:.3f} of the routing makespan; "
                          + why + " (explained for these routes only: other routes may reach "
                          "T, see docs/taccl.md)", not feasible
                          and row["per_order_bound"] <= TARGET))
        found.append((f"{name}: relabelled twin within {100 * row['twin_diff']:.2f}% <= "
                      f"{100 * TWIN_TARGET:.1f}%", row["twin_diff"] <= TWIN_TARGET))
    return found


def run(before: str | None) -> tuple[dict[str, object], list[tuple[str, bool]]]:
    rows = sketches(before)
    result = {"sketches": [{k: v for k, v in r.items() if k not in ("schedule", "case", "kind")}
                           for r in rows]}
    result["channel_policies"] = channel_policies(rows)
    result["heuristics"] = heuristics(rows)
    result["reduce_orders"] = reduce_orders(rows)
    result["machines_and_formats"] = machines_and_formats()
    return result, checks(rows)
