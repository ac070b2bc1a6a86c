"""Section ``mscclpp`` of benchmarks/gpu_stacks.py (issue 41): MSCCL++ execution plans.

1. MSCCL++'s 11 test plans (``../shared/fixtures/mscclpp/plans``), read unchanged: each
   proven to implement its collective, or refused with the reason.
2. Round trip: every strategy's schedule (ring, trees, hierarchical, flat-pipelined,
   hierarchical-pipelined, flow, taccl) on dgx1, dgx-a100, dgx-h100, ndv2:2 and
   dgx-a100:2, for each collective MSCCL++ serves (allreduce, allgather, reducescatter,
   alltoall): exported as an MSCCL++ plan (with as many threadblocks as the machine's GPU
   has SMs) and as MSCCL XML, read back, proven, and simulated at 1 MB and 256 MB: the
   ratio to the schedule it came from. Where the schedule pins routes (which neither format
   can say), the ratio to the schedule without them is shown beside (``unpinned++``); where
   MSCCL XML misses 2%, a ``lost:`` line says what the format cannot express, in figures.
   The XML export is given the machine, as ``ccweave export`` takes it from the schedule.

    nice python benchmarks/gpu_stacks.py --section mscclpp [--json FILE]
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

from ccweave.errors import CCWeaveError
from ccweave.export import msccl_spec as spec
from ccweave.export import msccl_xml, mscclpp, passes
from ccweave.export.emit import emit_tree
from ccweave.export.fusion import forwards
from ccweave.export.lanes import Reach, timings
from ccweave.export.lowering import channel_groups, lower, split_counts, transfer_order
from ccweave.export.msccl_xml import estimate_sizes, from_xml, to_xml
from ccweave.export.mscclpp_write import ExportOptions
from ccweave.export.problems import Severity
from ccweave.export.xml_check import analyze
from ccweave.export.xml_import import from_analysis
from ccweave.simulate import simulate
from ccweave.synth import strategies, synthesize
from ccweave.topology import zoo
from ccweave.verify import check

PLANS = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "mscclpp" / "plans"
MACHINES = ("dgx1", "dgx-a100", "dgx-h100", "ndv2:2", "dgx-a100:2")
STRATEGIES = ("ring", "trees", "hierarchical", "flat-pipelined", "hierarchical-pipelined",
              "flow", "taccl")
KINDS = ("allreduce", "allgather", "reducescatter", "alltoall")
SIZES = (2**20, 256 * 2**20)
TOLERANCE = 0.02
SMS = {"dgx1": 80, "ndv2": 80, "dgx-a100": 108, "dgx-h100": 132}
"""SMs of each machine's GPU (V100 SXM2 80, A100 108, H100 SXM 132): the threadblocks an
MSCCL++ plan may hold, one 1024-thread block resident per SM."""
TACCL_SIZE = 64 * 2**20


def load() -> float:
    return os.getloadavg()[0]


def mscclpp_section(report: dict) -> None:
    """Section ``mscclpp`` of benchmarks/gpu_stacks.py."""
    started = time.perf_counter()
    print(f"mscclpp: MSCCL++ execution plans, out and in (load {load():.2f})")
    report["mscclpp"] = {"fixtures": fixtures(), "round_trips": round_trips(MACHINES,
                                                                            STRATEGIES)}
    print(f"mscclpp: {time.perf_counter() - started:.0f} s (load {load():.2f})")


# ---------------------------------------------------------------- 1. fixtures


def fixtures() -> list[dict[str, object]]:
    print("\n1. MSCCL++'s test plans, read unchanged")
    if not PLANS.is_dir():
        print(f"   skipped: {PLANS} is missing")
        return []
    rows = []
    for path in sorted(PLANS.glob("*.json")):
        try:
            verdict = mscclpp.judge(mscclpp.read(path))
            row = {"plan": path.name, "read": True, "proven": verdict.ok,
                   "verdict": verdict.message}
        except CCWeaveError as error:
            row = {"plan": path.name, "read": False, "proven": False,
                   "verdict": f"refused: {error}"}
        rows.append(row)
        mark = "proven" if row["proven"] else "NOT proven" if row["read"] else "refused"
        print(f"   {path.name:<27} {mark:<10} {row['verdict']}")
    read = sum(r["read"] for r in rows)
    proven = sum(r["proven"] for r in rows)
    print(f"   fixture plans read {read}/{len(rows)} (the loader's own checks passed), proven "
          f"{proven}/{len(rows)}, each other one refused or not proven with its reason above "
          f"(load {load():.2f})")
    return rows


# ---------------------------------------------------------------- 2. round trip


def _ratios(back, schedule, topology) -> list[float]:
    return [simulate(back, topology, size).time_s / simulate(schedule, topology, size).time_s
            for size in SIZES]


def _mscclpp(schedule, topology, machine) -> dict[str, object]:
    """Export as an MSCCL++ plan (in the schedule's own buffer mode, so the round trip
    keeps every transfer), read back, prove, time."""
    options = ExportOptions(inplace=schedule.in_place,
                            max_threadblocks=SMS[machine.split(":")[0]])
    start = time.perf_counter()
    try:
        plan = mscclpp.to_plan(schedule, topology, options)
        back = mscclpp.from_data(json.loads(json.dumps(plan)), "round-trip")
    except CCWeaveError as error:
        return {"refused": str(error)}
    seconds = time.perf_counter() - start
    proof = check(back, topology)
    return {"proven": proof.ok, "ratios": _ratios(back, schedule, topology),
            "threadblocks": max(len(g["threadblocks"]) for g in plan["gpus"]),
            "protocol": plan["protocol"], "seconds": seconds,
            **({} if proof.ok else {"problem": proof.problems[0].message})}


def _xml(schedule, topology) -> dict[str, object]:
    try:
        back = from_xml(to_xml(schedule, topology=topology))
    except CCWeaveError as error:
        return {"refused": str(error)}
    proof = check(back, topology)
    return {"proven": proof.ok, "ratios": _ratios(back, schedule, topology),
            **({} if proof.ok else {"problem": proof.problems[0].message})}


def _pair(ratios) -> str:
    if ratios is None:
        return ""
    if isinstance(ratios, str):
        return f"refused ({ratios[:60]})"
    return " ".join(f"{r:7.4f}{'!' if abs(r - 1) > TOLERANCE else ' '}" for r in ratios)


def _cell(result: dict[str, object], unpinned: list[float] | None) -> str:
    if "refused" in result:
        return f"{'refused':>17}"
    ratios = result["ratios"]
    text = " ".join(f"{r:7.4f}{'!' if abs(r - 1) > TOLERANCE else ' '}" for r in ratios)
    return text + ("" if result["proven"] else " UNPROVEN")


def round_trips(machines, names) -> list[dict[str, object]]:
    print(f"\n2. Round trip: simulated time of what is read back / the schedule's, at 1 MB and "
          f"256 MB ('!' past {TOLERANCE:.0%}); tbs: MSCCL++ threadblocks per GPU")
    print(f"   {'machine':<10} {'strategy':<22} {'collective':<13} {'transfers':>9} "
          f"{'MSCCL++ 1MB  256MB':>18} {'tbs':>4} {'MSCCL XML 1MB 256MB':>20} "
          f"{'unpinned++':>17} {'unpinned XML':>17} load")
    rows = []
    registered = strategies()
    for machine in machines:
        topology = zoo.get(machine)
        for name in names:
            for kind in KINDS:
                if kind not in {k.value for k in registered[name].collectives}:
                    continue
                options = {"size": TACCL_SIZE} if name == "taccl" else {}
                try:
                    schedule = synthesize(topology, kind, name, **options)
                except CCWeaveError:
                    continue  # the strategy does not build it here
                row = _row(machine, name, kind, schedule, topology)
                rows.append(row)
    _summary(rows)
    return rows


def _unpinned(result, schedule, topology) -> list[float] | None:
    """The read-back time over the schedule's without its pinned routes (what neither
    format can say), or None when it pins none."""
    if "ratios" not in result or not any(t.via for t in schedule.transfers):
        return None
    bare = replace(schedule, transfers=tuple(replace(t, via=None) for t in schedule.transfers))
    return [r * simulate(schedule, topology, s).time_s / simulate(bare, topology, s).time_s
            for r, s in zip(result["ratios"], SIZES)]


def _spread(schedule):
    """The schedule with its transfers dealt over 16 channels (round robin per rank pair):
    MSCCL XML's export gives each (peer, channel) a threadblock, so few steps share one."""
    seen: dict[tuple[int, int], int] = {}
    rows = []
    for t in schedule.transfers:
        k = seen.get((t.src, t.dst), 0)
        seen[(t.src, t.dst)] = k + 1
        rows.append(replace(t, channel=k % 16))
    return replace(schedule, transfers=tuple(rows))


def _xml_loss(schedule, topology, xml, unpinned) -> list[str]:
    """Where MSCCL XML misses 2%, what the format loses, in figures: pinned routes (the
    schedule without them against the schedule), then the order one threadblock runs its
    steps in (the XML against the schedule without routes; beside it, the XML of the
    schedule with every transfer spread over 16 channels against the same, or why that
    cannot be exported)."""
    if "ratios" not in xml or all(abs(r - 1) <= TOLERANCE for r in xml["ratios"]):
        return []
    lost = []
    rest = xml["ratios"]
    base = schedule
    if unpinned is not None:
        base = replace(schedule, transfers=tuple(replace(t, via=None)
                                                 for t in schedule.transfers))
        pinned = [t for t in schedule.transfers if t.via]
        nodes = sorted({node for t in pinned for node in t.via})
        bare = [x / u for x, u in zip(xml["ratios"], unpinned)]
        lost.append(f"MSCCL XML cannot express pinned routes ({len(pinned)} of "
                    f"{len(schedule.transfers)} transfers through {', '.join(nodes[:4])}"
                    f"{' ...' if len(nodes) > 4 else ''}; MSCCL picks each send's path): the "
                    f"schedule without them takes {_times(bare)} the schedule's time")
        rest = unpinned
    if any(abs(r - 1) > TOLERANCE for r in rest):
        local = _ratios(_gpu_local(base), base, topology)
        if any(abs(r - 1) > TOLERANCE for r in local):
            lost.append("MSCCL XML orders steps only within a GPU: with each wait on another "
                        "GPU's transfer replaced by what that GPU's own steps wait on, the "
                        f"schedule{' without its routes' if unpinned is not None else ''} "
                        f"takes {_times(local)} its time")
        try:
            spread = _ratios(from_xml(to_xml(_spread(schedule), topology=topology)), base,
                             topology)
            beside = f"every transfer spread over 16 channels: {_times(spread)}"
        except CCWeaveError as error:
            beside = f"spread over 16 channels it is refused: {str(error)[:90]}"
        lowered = passes.run(schedule, topology, estimate_sizes(0, None))
        lost.append("MSCCL XML runs a threadblock's steps one after another, an order the "
                    f"schedule does not have: {_times(rest)} the schedule"
                    f"{' without its routes' if unpinned is not None else ''} ({beside}); "
                    + _limits(lowered))
        if lowered.held_by:
            ratios, broke = _unheld(schedule, topology, base)
            lost.append(f"lanes held to {lowered.capped} a connection because more broke "
                        f"MSCCL's limits ({lowered.held_by}): with the lanes it tried first "
                        f"(one for every transfer the schedule runs at once, within the "
                        f"channels; it breaks {broke or 'none'}), the XML reads back at "
                        f"{_times(ratios)} the schedule"
                        f"{' without its routes' if unpinned is not None else ''}")
    return lost


def _unheld(schedule, topology, base) -> tuple[list[float], str]:
    """The XML of ``schedule`` with the lanes the export tries first (a lane for each
    transfer the schedule runs at once, as many as MSCCL's channels allow), read back
    with MSCCL's other limits aside: its time against ``base``'s, and the first limit it
    breaks ('' if none). What holding the lanes to those limits cost."""
    sched = split_counts(schedule)
    order = transfer_order(sched.transfers)
    reach = Reach(sched.transfers, order, timings(sched, topology, estimate_sizes(0, None)))
    fwd = forwards(sched, order)
    first = spec.MAX_CHANNELS // channel_groups(sched.num_ranks)
    most = passes._fitting(sched, order, reach, fwd, first, None)
    low = passes._attempt(sched, order, reach, fwd, most, None)
    coll = spec.COLL_NAMES[spec.Runtime.MSCCL].get(sched.collective.kind)
    header = msccl_xml._header(low.schedule, msccl_xml.DEFAULT_PROTO, spec.Runtime.MSCCL, coll,
                               0, None, None)
    root = emit_tree(low.program, low.layout, low.steps, header,
                     msccl_xml._chunks(low.schedule, coll is None))
    analysis = analyze(root, spec.Runtime.MSCCL)
    malformed = [p for p in analysis.problems if p.severity is Severity.MALFORMED]
    back = from_analysis(analysis, "unheld lanes", malformed)
    return _ratios(back, base, topology), low.overflow


def _gpu_local(schedule):
    """``schedule`` with only the waits MSCCL XML can say: a transfer waits on the
    transfers its steps on its own GPUs are anchored on (the lowering's anchors), not on
    transfers of other GPUs."""
    sched = split_counts(schedule)
    program = lower(sched)
    carried = {i: t for t, i in program.send_of.items()}
    carried.update({i: t for t, i in program.recv_of.items()})
    rows = []
    for index, t in enumerate(sched.transfers):
        steps = {program.send_of[index], program.recv_of[index]}
        deps = sorted({carried[a] for step in steps for a in program.anchors[step]} - {index})
        rows.append(replace(t, deps=tuple(deps)))
    return replace(sched, transfers=tuple(rows))


def _limits(lowered: passes.Lowered) -> str:
    """How much of MSCCL's room the export took: channels, threadblocks a GPU (those
    another can wait on: 128), lanes a connection and their caps (and the limit wider
    lanes broke), local threadblocks."""
    channels = 1 + max(t.channel for t in lowered.schedule.transfers)
    blocks = max(len(rank) for rank in lowered.layout.tbs)
    local = max(sum(tb.send < 0 and tb.recv < 0 for tb in rank) for rank in lowered.layout.tbs)
    lanes: dict[tuple[int, int], set[int]] = {}
    for t in lowered.schedule.transfers:
        if not t.is_local:
            lanes.setdefault((t.src, t.dst), set()).add(t.channel)
    widest = max(map(len, lanes.values()), default=1)
    full = [f"{channels}/{spec.MAX_CHANNELS} channels"] if channels >= spec.MAX_CHANNELS else []
    if blocks > spec.MAX_DEPID + 1:
        full.append(f"{blocks} threadblocks a GPU, past the {spec.MAX_DEPID + 1} a step can "
                    f"wait on ({local} left for local steps)")
    if lowered.held_by:
        full.append(f"lanes held to {lowered.capped} a connection (wider ones broke: "
                    f"{lowered.held_by})")
    if lowered.longest is not None:
        full.append(f"lanes held to {lowered.longest} transfers for {spec.MAX_STEPS} steps")
    said = "at MSCCL's limits: " + ", ".join(full) if full else "within MSCCL's limits"
    return (f"the export: {channels} channels, up to {blocks} threadblocks a GPU ({local} "
            f"local), up to {widest} channels a peer pair; {said}")


def _times(ratios) -> str:
    return " / ".join(f"{r:.4f}x" for r in ratios) + " (1 MB / 256 MB)"


def _row(machine, name, kind, schedule, topology) -> dict[str, object]:
    pp = _mscclpp(schedule, topology, machine)
    xml = _xml(schedule, topology)
    unpinned = _unpinned(pp, schedule, topology)
    xml_unpinned = _unpinned(xml, schedule, topology)
    lost = _xml_loss(schedule, topology, xml, xml_unpinned)
    row = {"machine": machine, "strategy": name, "collective": kind,
           "transfers": len(schedule.transfers),
           "pinned": sum(1 for t in schedule.transfers if t.via), "mscclpp": pp, "xml": xml,
           "mscclpp_unpinned": unpinned, "xml_unpinned": xml_unpinned, "xml_lost": lost,
           "load": load()}
    tbs = pp.get("threadblocks", "-")
    print(f"   {machine:<10} {name:<22} {kind:<13} {len(schedule.transfers):>9} "
          f"{_cell(pp, unpinned)} {tbs:>4} {_cell(xml, None):>20} {_pair(unpinned):>17} "
          f"{_pair(xml_unpinned):>17} {load():.2f}", flush=True)
    for line in lost:
        print(f"      lost: {line}")
    for fmt, result in (("MSCCL++", pp), ("MSCCL XML", xml)):
        if "refused" in result:
            print(f"      {fmt} refused: {result['refused']}")
    return row


def _summary(rows) -> None:
    for fmt in ("mscclpp", "xml"):
        done = [r for r in rows if "ratios" in r[fmt]]
        worst = max(done, key=lambda r: max(abs(x - 1) for x in r[fmt]["ratios"]),
                    default=None)
        within = sum(all(abs(x - 1) <= TOLERANCE for x in r[fmt]["ratios"]) for r in done)
        proven = sum(r[fmt]["proven"] for r in done)
        refused = len(rows) - len(done)
        name = "MSCCL++" if fmt == "mscclpp" else "MSCCL XML"
        print(f"   {name}: {len(done)}/{len(rows)} exported and read back ({refused} refused), "
              f"{proven} proven, {within} within {TOLERANCE:.0%} at both sizes", end="")
        if worst is not None:
            ratios = ", ".join(f"{x:.4f}" for x in worst[fmt]["ratios"])
            print(f"; worst {worst['machine']} {worst['strategy']} {worst['collective']} "
                  f"({ratios})")
        else:
            print()
        if fmt == "xml":
            missed = [r for r in rows if r["xml_lost"]]
            routes = sum(any("pinned routes" in line for line in r["xml_lost"]) for r in missed)
            order = sum(any("threadblock's steps" in line for line in r["xml_lost"])
                        for r in missed)
            limits = sum(any("at MSCCL's limits" in line for line in r["xml_lost"])
                         for r in missed)
            local = sum(any("only within a GPU" in line for line in r["xml_lost"])
                        for r in missed)
            refused = [r for r in rows if "refused" in r[fmt]]
            print(f"      of the {len(missed)} past {TOLERANCE:.0%}: {routes} lose pinned routes, "
                  f"{local} waits on other GPUs, {order} a threadblock's order ({limits} of "
                  "them with the export at MSCCL's limits); each 'lost:' line above says how "
                  "much")
            for r in refused:
                print(f"      refused: {r['machine']} {r['strategy']} {r['collective']} "
                      f"({r['transfers']} transfers): {r[fmt]['refused'][:160]}")
        key = "mscclpp_unpinned" if fmt == "mscclpp" else "xml_unpinned"
        unpinned = [r for r in rows if r[key]]
        if unpinned:
            within = sum(all(abs(x - 1) <= TOLERANCE for x in r[key]) for r in unpinned)
            print(f"      of the {len(unpinned)} with pinned routes, {within} within "
                  f"{TOLERANCE:.0%} of the schedule without its routes")
