"""Issue 41's figures: ccweave's output on the GPU stacks people run, proven by the
consumers' own files or code. One section per stack; ``--section`` picks them.

- ``tuner``: stock NCCL's example tuner plugin (NVIDIA/nccl ``plugins/tuner/example``,
  ``../shared/fixtures/nccl-tuner``), built with gcc and loaded, against ccweave's tuner
  files: (1) the rules and both sides of every boundary on which the plugin makes NCCL run
  what ccweave says (100% required); (2) how many measurements a tuner file needs, ccweave's
  fit against NVIDIA's ``optimize_config.py`` (run as shipped) on the same measurements.

- ``mscclpp``: MSCCL++ execution plans (``../shared/fixtures/mscclpp``): MSCCL++'s own 11
  test plans read and proven or refused with the reason; every strategy's schedule on
  five machines exported as an MSCCL++ plan and as MSCCL XML, read back, proven and timed
  against itself (benchmarks/gpu_stacks_mscclpp.py).

- ``lint``: why a runtime ignores an algorithm: each rule of RCCL, microsoft/msccl, the
  Azure executor and MSCCL++'s NCCL shim caught on the input crafted to break it; upstream's
  correct files pass (benchmarks/gpu_stacks_lint.py).

    nice python benchmarks/gpu_stacks.py [--section tuner] [--section mscclpp] \
        [--section lint] [--json FILE]

Each section prints the 1-minute load average beside its figures; the peak RSS at the end.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from gpu_stacks_lint import lint_section
from gpu_stacks_mscclpp import mscclpp_section

from ccweave.peak_rss import peak_rss_bytes

SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


# ------------------------------------------------------------------------ tuner


TUNER_MACHINES = ("dgx1", "cedar", "mist", "dgx-a100", "dgx-h100", "ndv2:2", "dgx-a100:2",
                  "dgx-h100:4")
TUNER_SEEDS = 5
TUNER_NOISE = 0.02
TUNER_SWEEP = tuple(2**k for k in range(10, 31))  # nccl-tests -b 1K -e 1G -f 2: 21 sizes
TUNER_TARGET = 0.01
"""A tuner file is good when NCCL, following it, is within 1% of the best choice on average
over 1 KB .. 1 GB on every machine; and within 5% at every size (``TUNER_WORST``)."""
TUNER_WORST = 0.05


def tuner_section(report: dict) -> None:
    from ccweave.nccl import plugin

    fixture = SHARED / "nccl-tuner"
    if shutil.which("gcc") is None or not (fixture / "plugin.c").is_file():
        why = "gcc" if shutil.which("gcc") is None else str(fixture)
        print(f"tuner: skipped: {why} is missing, so NCCL's example plugin cannot be built")
        report["tuner"] = {"skipped": why}
        return
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        started = time.perf_counter()
        library = plugin.build(fixture, work)
        print(f"tuner: built NCCL's example plugin with gcc in "
              f"{time.perf_counter() - started:.2f} s ({load()})")
        report["tuner"] = {"agreement": _agreement(library, fixture, work),
                           "measurements": _measurements(library, fixture, work)}


def _agreement(library: Path, fixture: Path, work: Path) -> dict:
    """Every rule of every machine's file, asked at both sides of every boundary."""
    from ccweave.nccl import constants as C
    from ccweave.nccl import tuner
    from ccweave.nccl.fit import fit
    from ccweave.nccl.measured import read
    from ccweave.nccl.model import nccl_model, pick
    from ccweave.nccl.plugin import ExampleTuner
    from ccweave.topology import zoo

    cases = [(name, nccl_model(zoo.get(name))) for name in TUNER_MACHINES]
    sample = read(fixture / "scripts" / "sample_performance_data.csv")
    cases.append(("dgx-h100 fitted to sample_performance_data.csv",
                  fit(nccl_model(zoo.get("dgx-h100")), sample).model))
    total_rules = total_asked = total_agree = 0
    rows = []
    started = time.perf_counter()
    for name, model in cases:
        rules = tuner.rules(model)
        config = work / "nccl_tuner.conf"
        tuner.write(config, rules)
        sizes = sorted({(r.collective, s) for r in rules
                        for s in (r.min_bytes - 1, r.min_bytes, r.max_bytes, r.max_bytes + 1)
                        if 0 <= s <= tuner.MAX_BYTES})
        agree = 0
        system = model.system
        with ExampleTuner(library, config, system.ranks, system.nodes) as example:
            for collective, size in sizes:
                table = model.cost_table(C.FUNCTIONS.index(collective), size)
                marked, channels = example.coll_info(collective, size, table)
                algo, proto, _ = pick(marked)
                want = model.choose(collective, size)
                agree += (C.ALGORITHMS[algo], C.PROTOCOLS[proto], channels) == (
                    want.algorithm, want.protocol, want.channels)
        rows.append({"machine": name, "rules": len(rules), "asked": len(sizes),
                     "agree": agree})
        total_rules += len(rules)
        total_asked += len(sizes)
        total_agree += agree
        print(f"  {name:<48} {len(rules):4d} rules, plugin agrees at {agree}/{len(sizes)} "
              "rule boundaries (both sides)")
    share = total_agree / total_asked
    print(f"tuner: the compiled plugin agrees with ccweave on {total_agree}/{total_asked} "
          f"boundary sizes of {total_rules} rules ({share:.1%}; 100% required) in "
          f"{time.perf_counter() - started:.2f} s ({load()})")
    return {"machines": rows, "rules": total_rules, "asked": total_asked,
            "agree": total_agree}


def _measurements(library: Path, fixture: Path, work: Path) -> dict:
    """Regret of NCCL following a tuner file made from k measured sizes per combination:
    ccweave's fit against optimize_config.py, on the same measurements of a machine; the
    machine keeps NCCL's shape (``scaled``) or not (``off-shape``)."""
    return {shape: _needed(library, fixture, work, shape) for shape in ("scaled", "off-shape")}


def _needed(library: Path, fixture: Path, work: Path, shape: str) -> dict:
    from ccweave.nccl import constants as C
    from ccweave.nccl.model import nccl_model
    from ccweave.topology import zoo

    machine, collective = "dgx-a100:2", "allreduce"
    prior = nccl_model(zoo.get(machine))
    func = C.FUNCTIONS.index(collective)
    combos = prior.candidates(func)
    evaluation = np.unique(np.geomspace(2**10, 2**30, 400).astype(np.int64)).tolist()
    counts = (1, 2, 3, 5, 9, 21)
    results: dict[int, dict[str, list[tuple[float, float]]]] = {
        k: {"ccweave": [], "optimize_config": []} for k in counts}
    started = time.perf_counter()
    for seed in range(TUNER_SEEDS):
        rng = np.random.default_rng(seed)
        truth = _truth(prior, func, rng, shape == "off-shape")
        for k in counts:
            sizes = _subsample(TUNER_SWEEP, k)
            measured = _measure(truth, prior, func, combos, sizes, rng)
            ours = _ccweave_file(prior, measured, work / f"ccweave-{seed}-{k}.conf")
            theirs = _optimize_config_file(fixture, measured, prior, work, seed, k)
            for label, path in (("ccweave", ours), ("optimize_config", theirs)):
                results[k][label].append(_regret(library, path, prior, truth, func,
                                                 evaluation))
    described = {"scaled": "NCCL's model with each combination's latency x U(0.5, 2) and "
                           "bandwidth x U(0.6, 1.5)",
                 "off-shape": "the same plus a term NCCL's model lacks, g x sqrt(bytes), up "
                              "to 30% of the transfer time at 1 MB"}[shape]
    print(f"tuner: measurements a tuner file needs, {collective} on {machine} ({len(combos)} "
          f"algorithm/protocol combinations), {TUNER_SEEDS} machines ({described}, "
          f"{TUNER_NOISE:.0%} noise), NCCL following the file at {len(evaluation)} sizes "
          "1 KB..1 GB: mean / worst slowdown against the best choice")
    rows = []
    needed: dict[str, dict[str, int]] = {"mean": {}, "worst": {}}
    for k in counts:
        line = {"sizes_per_combination": k, "measurements": k * len(combos)}
        shown = []
        for label in ("ccweave", "optimize_config"):
            means = [m for m, _ in results[k][label]]
            worst = float(np.max([w for _, w in results[k][label]]))
            line[label] = {"mean": float(np.mean(means)), "worst_mean": float(max(means)),
                           "worst": worst}
            shown.append(f"{label} {np.mean(means):6.2%} / {worst:6.2%}")
            if label not in needed["mean"] and max(means) <= TUNER_TARGET:
                needed["mean"][label] = k * len(combos)
            if label not in needed["worst"] and worst <= TUNER_WORST:
                needed["worst"][label] = k * len(combos)
        rows.append(line)
        print(f"  {k:2d} sizes x {len(combos)} = {k * len(combos):3d} measurements: "
              + "   ".join(shown))
    most = counts[-1] * len(combos)
    for label in ("ccweave", "optimize_config"):
        said = [f"{needed[key][label]}" if label in needed[key] else f"more than {most}"
                for key in ("mean", "worst")]
        print(f"tuner: {label} needs {said[0]} measurements to be within "
              f"{TUNER_TARGET:.0%} of the best on average on every machine, {said[1]} to be "
              f"within {TUNER_WORST:.0%} at every size")
    print(f"tuner: took {time.perf_counter() - started:.1f} s ({load()})")
    return {"machine": machine, "collective": collective, "truth": described, "rows": rows,
            "needed": needed}


def _truth(prior, func: int, rng, off_shape: bool) -> Callable[[int, int, int], float]:
    """A machine's time in us per (algorithm, protocol, bytes): NCCL's shape with each
    combination's latency and bandwidth scaled at random, and (``off_shape``) a term in
    sqrt(bytes) NCCL's model has not."""
    scale = {}
    for a, p in prior.candidates(func):
        latency = float(np.exp(rng.uniform(math.log(0.5), math.log(2.0))))
        bandwidth = float(rng.uniform(0.6, 1.5))
        _, bw = prior.line(func, a, p, 2**20)
        extra = float(rng.uniform(0, 0.3)) * (2**20 / (1000 * bw)) / math.sqrt(2**20) \
            if off_shape else 0.0
        scale[a, p] = (latency, bandwidth, extra)

    def time_us(a: int, p: int, size: int) -> float:
        latency, bandwidth, extra = scale[a, p]
        lat, bw = prior.line(func, a, p, size)
        return lat * latency + size / (1000 * bw * bandwidth) + extra * math.sqrt(size)

    return time_us


def _subsample(sweep: tuple[int, ...], k: int) -> list[int]:
    """``k`` sizes of the sweep, evenly spaced in log size, both ends first."""
    if k == 1:
        return [sweep[len(sweep) // 2]]
    picks = np.round(np.linspace(0, len(sweep) - 1, k)).astype(int)
    return [sweep[i] for i in sorted(set(picks.tolist()))]


def _measure(truth, prior, func, combos, sizes, rng) -> list[dict]:
    from ccweave.nccl import constants as C

    rows = []
    for a, p in combos:
        for size in sizes:
            time_us = truth(a, p, size) * (1 + rng.normal(0, TUNER_NOISE))
            rows.append({"collective": C.FUNCTIONS[func], "size_bytes": size,
                         "algorithm": C.ALGORITHMS[a], "protocol": C.PROTOCOLS[p],
                         "channels": prior.channels(a, p, size),
                         "nodes": prior.system.nodes, "ranks": prior.system.ranks,
                         "pipeOps": -1, "regBuff": -1,
                         "bandwidth_gbps": size / time_us / 1e3, "latency_us": time_us})
    return rows


def _ccweave_file(prior, measured: list[dict], path: Path) -> Path:
    from ccweave.nccl import tuner
    from ccweave.nccl.fit import fit
    from ccweave.nccl.measured import Measurement

    rows = [Measurement(r["collective"], r["size_bytes"], r["algorithm"], r["protocol"],
                        r["latency_us"], r["ranks"], r["nodes"]) for r in measured]
    fitted = fit(prior, rows)
    tuner.write(path, tuner.rules(fitted.model, [measured[0]["collective"]]))
    return path


def _optimize_config_file(fixture: Path, measured: list[dict], prior, work: Path,
                          seed: int, k: int) -> Path:
    """NVIDIA's script, as shipped, on the same measurements (its default metric,
    latency_us, and its default ranges: midpoints between the measured sizes)."""
    data = work / f"data-{seed}-{k}.csv"
    with data.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(measured[0]))
        writer.writeheader()
        writer.writerows(measured)
    out = work / f"optimize-{seed}-{k}.conf"
    out.unlink(missing_ok=True)
    subprocess.run([sys.executable, str(fixture / "scripts" / "optimize_config.py"),
                    str(data), "-o", str(out)], check=True, capture_output=True, text=True)
    return out


def _regret(library: Path, path: Path, prior, truth, func: int, sizes: list[int]
            ) -> tuple[float, float]:
    """NCCL with the plugin reading ``path``: what it runs at each size (the plugin's mark
    in NCCL's own cost table, or NCCL's choice where no rule matches), its time on the
    machine against the machine's best."""
    from ccweave.nccl import constants as C
    from ccweave.nccl.model import pick
    from ccweave.nccl.plugin import ExampleTuner

    losses = []
    system = prior.system
    with ExampleTuner(library, path, system.ranks, system.nodes) as example:
        for size in sizes:
            table = prior.cost_table(func, size)
            marked, _ = example.coll_info(C.FUNCTIONS[func], size, table)
            algo, proto, _ = pick(marked)
            best = min(truth(a, p, size) for a, p in prior.candidates(func))
            losses.append(truth(algo, proto, size) / best - 1)
    return float(np.mean(losses)), float(np.max(losses))


# ------------------------------------------------------------------------ main


SECTIONS: dict[str, Callable[[dict], None]] = {"tuner": tuner_section,
                                               "mscclpp": mscclpp_section,
                                               "lint": lint_section}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--section", action="append", choices=sorted(SECTIONS),
                        help="run only these sections (repeatable; default all)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    report: dict = {}
    for name in args.section or list(SECTIONS):
        SECTIONS[name](report)
    peak = peak_rss_bytes() / 2**20
    report["peak_rss_MiB"] = peak
    print(f"peak RSS {peak:.0f} MiB ({load()})")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
