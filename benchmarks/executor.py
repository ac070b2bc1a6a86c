"""Figures for the executor (issue 5), measured on this machine:

1. correctness: every collective x every classic strategy at 4 and 8 ranks, sizes 1 KB to
   64 MB, over gloo and over MPI, out of place and in place: #wrong must be 0;
2. speed: 4 local processes, 64 MB float32 allreduce, ccweave's ring against the
   backend's own collective (gloo ``all_reduce``, ``MPI_Allreduce``) in the same run,
   alternating, median of ``--reps``: time ratio (target <= 1.3 each);
3. overhead: the executor's own cost per operation (null transport, in process), and a
   1 KB allreduce over each backend per call and per operation;
with each rank's peak RSS.

    python benchmarks/executor.py [--parts correctness,speed,overhead] [--ranks 4,8]
        [--backends gloo,mpi] [--sizes 1KB:64MB:4] [--size 64MB] [--reps 9] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ccweave.units import format_size, parse_size, parse_sizes

TARGET_RATIO = 1.3
TWO_NODES = Path(__file__).resolve().parents[1] / "examples/topologies/two-nodes.json"
"""4 ranks on two nodes, so the hierarchical strategy builds too (8 ranks: cedar:2)."""


def log(text: str) -> None:
    print(text, flush=True)


# ------------------------------------------------------------------ correctness


def correctness(args, folder: Path) -> dict:
    from ccweave.runtime import batch
    from ccweave.topology.io import load

    machines = {4: str(TWO_NODES), 8: "cedar:2"}
    sizes = tuple(parse_sizes(args.sizes))
    summary = {}
    for ranks in args.ranks:
        schedules = batch.classic_schedules(load(machines[ranks]))
        cases = [batch.Case(f"{s}/{sc.collective.kind.value}", sc, sizes)
                 for s, sc in schedules]
        for backend in args.backends:
            started = time.monotonic()
            results = batch.launch(cases, ranks, folder, backend, timeout=300)
            peaks = json.loads((folder / "results.json.rss").read_text())
            wrong = [r for r in results if r["out_of_place"]["wrong"]
                     or (r["in_place"]["wrong"] or 0)]
            ran = sum(1 + (r["in_place"]["skipped"] is None) for r in results)
            skipped = sorted({r["case"] for r in results if r["in_place"]["skipped"]})
            key = f"{backend}/{ranks}"
            summary[key] = {
                "strategies": len({c.name.split("/")[0] for c in cases}),
                "cases": len(cases), "sizes": [format_size(s) for s in sizes], "runs": ran,
                "wrong_elements": sum((r["out_of_place"]["wrong"] or 0)
                                      + (r["in_place"]["wrong"] or 0) for r in results),
                "wrong_runs": [(r["case"], r["size_bytes"]) for r in wrong],
                "in_place_not_applicable": skipped,
                "peak_rss_mb_per_rank": peaks,
                "seconds": round(time.monotonic() - started, 1)}
            s = summary[key]
            log(f"correctness {key}: {s['cases']} schedules ({s['strategies']} strategies) x "
                f"{len(sizes)} sizes {s['sizes'][0]}..{s['sizes'][-1]}: {s['runs']} runs, "
                f"#wrong {s['wrong_elements']} "
                f"({'Correct' if not wrong else 'WRONG: ' + str(s['wrong_runs'][:5])}); "
                f"in place n/a for {', '.join(skipped) or 'none'}; peak RSS per rank "
                f"{min(peaks):.0f}-{max(peaks):.0f} MB [{s['seconds']} s]")
    return summary


# ------------------------------------------------------------------ speed (workers)


def speed_worker(backend: str, size: int, reps: int, out: str) -> None:
    """One rank: ccweave's ring against the backend's allreduce, alternating."""
    import torch

    from ccweave.runtime.executor import Executor
    from ccweave.runtime.inplace import in_place as in_place_variant
    from ccweave.runtime.job import connect, detect, disconnect
    from ccweave.synth.registry import synthesize
    from ccweave.topology.io import load

    job = detect()
    assert job is not None
    transport = connect(backend, job, 300)
    ranks = transport.world_size
    numel = size // 4
    x = torch.full((numel,), float(transport.rank + 1))
    y = torch.empty_like(x)
    scratch = torch.empty_like(x)
    if backend == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        xn, yn = x.numpy(), y.numpy()

        def native() -> None:
            comm.Allreduce(xn, yn, op=MPI.SUM)
    else:
        import torch.distributed as dist

        scratch.copy_(x)

        def native() -> None:  # in place (gloo's only mode); values grow, speed does not
            dist.all_reduce(scratch)

    candidates = {}
    for chunks in (1, 2, 4):
        schedule = synthesize(load(f"switch:{ranks}"), "allreduce", "ring", chunks=chunks)
        executor = Executor(schedule, transport, timeout=300)
        candidates[f"ring(chunks={chunks})"] = (executor, len(executor.program.ops))
    runs = {"native": native}
    for name, (executor, _) in candidates.items():
        runs[name] = (lambda e: lambda: e.run(x, y))(executor)
    in_place = Executor(in_place_variant(synthesize(load(f"switch:{ranks}"), "allreduce",
                                                    "ring")), transport, timeout=300)
    inout = x.clone()
    runs["ring(chunks=1) in place"] = lambda: in_place.run(inout)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for rep in range(reps + 2):
        for name, run in runs.items():
            transport.barrier()
            start = time.perf_counter()
            run()
            elapsed = time.perf_counter() - start
            mean = transport.sum_values([elapsed])[0] / ranks
            if rep >= 2:
                times[name].append(mean)
    check = float(bool((y == ranks * (ranks + 1) / 2).all()))
    # small messages: per call and per operation
    small = {}
    tiny_x, tiny_y = torch.ones(256), torch.empty(256)
    executor, ops = candidates["ring(chunks=1)"]
    for name, run in (("ccweave ring", lambda: executor.run(tiny_x, tiny_y)),
                      ("native", _small_native(backend, tiny_x, tiny_y))):
        for _ in range(20):
            run()
        transport.barrier()
        start = time.perf_counter()
        for _ in range(200):
            run()
        elapsed = (time.perf_counter() - start) / 200
        small[name] = transport.sum_values([elapsed])[0] / ranks * 1e6
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    per_rank = transport.sum_values([rss if r == transport.rank else 0.0
                                     for r in range(ranks)])
    ok = transport.sum_values([check])[0] == ranks
    if transport.rank == 0:
        Path(out).write_text(json.dumps({
            "backend": backend, "ranks": ranks, "size": size, "reps": reps,
            "median_s": {name: statistics.median(v) for name, v in times.items()},
            "all_s": times, "ops_per_rank": {n: o for n, (_, o) in candidates.items()},
            "small_us": small, "small_ops_per_rank": ops, "peak_rss_mb": per_rank,
            "correct": ok}))
    transport.barrier()
    disconnect(transport)


def _small_native(backend: str, x, y):
    if backend == "mpi":
        from mpi4py import MPI

        xn, yn = x.numpy(), y.numpy()
        return lambda: MPI.COMM_WORLD.Allreduce(xn, yn, op=MPI.SUM)
    import torch.distributed as dist

    return lambda: dist.all_reduce(y)


def speed(args, folder: Path) -> dict:
    from ccweave.runtime.launch import launch_local, launch_mpi

    summary = {}
    for backend in args.backends:
        out = folder / f"speed-{backend}.json"
        argv = ["--worker", backend, "--size", str(args.size_bytes), "--reps", str(args.reps),
                "--out", str(out)]
        launch = launch_mpi if backend == "mpi" else launch_local
        launch(argv, 4, script=str(Path(__file__).resolve()))
        data = json.loads(out.read_text())
        med = data["median_s"]
        ratio = med["ring(chunks=1)"] / med["native"]
        best = min((n for n in med if n.startswith("ring")), key=med.get)
        data["ratio"] = ratio
        data["best_ring"] = best
        data["best_ratio"] = med[best] / med["native"]
        summary[backend] = data
        native = "gloo all_reduce" if backend != "mpi" else "MPI_Allreduce"
        log(f"speed {backend}: 4 processes, {format_size(args.size_bytes)} float32 allreduce, "
            f"median of {args.reps} alternating reps: ccweave ring {med['ring(chunks=1)']*1e3:.1f}"
            f" ms vs {native} {med['native']*1e3:.1f} ms -> ratio {ratio:.2f} "
            f"({'<=' if ratio <= TARGET_RATIO else '>'} {TARGET_RATIO}); best ring {best} "
            f"ratio {data['best_ratio']:.2f}; correct {data['correct']}")
        log("  all medians (ms): " + ", ".join(f"{k} {v*1e3:.1f}" for k, v in med.items()))
        small = data["small_us"]
        log(f"  1KB allreduce: ccweave ring {small['ccweave ring']:.0f} us/call "
            f"({data['small_ops_per_rank']} ops per rank: "
            f"{small['ccweave ring'] / data['small_ops_per_rank']:.0f} us/op) vs {native} "
            f"{small['native']:.0f} us/call")
        log("  peak RSS per rank (MB): "
            + ", ".join(f"{v:.0f}" for v in data["peak_rss_mb"]))
    return summary


# ------------------------------------------------------------------ overhead


class NullTransport:
    """Every message completes at once: what is left is the executor's own work."""

    name = "null"
    stream_ordered = False

    def __init__(self, rank: int, world_size: int) -> None:
        import torch

        self.rank, self.world_size, self.device = rank, world_size, torch.device("cpu")

    def isend(self, tensor, peer, tag):
        return None

    def irecv(self, tensor, peer, tag):
        return None

    def wait_some(self, handles, timeout):
        return list(range(len(handles)))

    def report_loss(self, peer):
        pass

    def explain_loss(self, peer):
        return ""


def overhead(args) -> dict:
    import torch

    from ccweave.runtime.executor import Executor
    from ccweave.synth.registry import synthesize
    from ccweave.topology.io import load

    summary = {}
    for ranks in args.ranks:
        for strategy, chunks in (("ring", 1), ("ring", 4)):
            schedule = synthesize(load(f"switch:{ranks}"), "allreduce", strategy,
                                  chunks=chunks)
            executor = Executor(schedule, NullTransport(0, ranks))  # type: ignore[arg-type]
            chunk_elems = 2  # 8 bytes per chunk: small messages
            x = torch.ones(schedule.collective.input_chunks * chunk_elems)
            y = torch.empty(schedule.collective.output_chunks * chunk_elems)
            for _ in range(50):
                executor.run(x, y)
            reps = 500
            start = time.perf_counter()
            for _ in range(reps):
                executor.run(x, y)
            per_call = (time.perf_counter() - start) / reps
            ops = len(executor.program.ops)
            key = f"{schedule.name} {ranks} ranks"
            summary[key] = {"ops_per_rank": ops, "us_per_call": per_call * 1e6,
                            "us_per_op": per_call / ops * 1e6}
            log(f"overhead (null transport, in process): {key}: {ops} ops per rank, "
                f"{per_call*1e6:.1f} us per call, {per_call/ops*1e6:.2f} us per op")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="correctness,speed,overhead")
    parser.add_argument("--ranks", default="4,8")
    parser.add_argument("--backends", default="gloo,mpi")
    parser.add_argument("--sizes", default="1KB:64MB:4", help="correctness sizes")
    parser.add_argument("--size", default="64MB", help="speed: allreduce size")
    parser.add_argument("--reps", type=int, default=9, help="speed: alternating repetitions")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        speed_worker(args.worker, int(args.size), args.reps, args.out)
        return 0
    args.ranks = [int(r) for r in args.ranks.split(",")]
    args.backends = [b.strip() for b in args.backends.split(",")]
    args.size_bytes = parse_size(args.size)
    parts = [p.strip() for p in args.parts.split(",")]
    figures: dict[str, object] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ccweave-bench-") as name:
        folder = Path(name)
        if "overhead" in parts:
            figures["overhead"] = overhead(args)
        if "speed" in parts:
            figures["speed"] = speed(args, folder)
        if "correctness" in parts:
            figures["correctness"] = correctness(args, folder)
    load = os.getloadavg()
    figures["load_average"] = load
    log(f"load average during the run: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
        f"on {os.cpu_count()} CPUs (other work on the machine slows every figure)")
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    figures["peak_rss_mb"] = {"benchmark": own, "largest_child": children}
    log(f"peak RSS: this process {own:.0f} MB, largest rank {children:.0f} MB; "
        f"{time.monotonic() - started:.0f} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    ok = all(v["wrong_elements"] == 0 for v in figures.get("correctness", {}).values())
    ok = ok and all(v["correct"] for v in figures.get("speed", {}).values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
