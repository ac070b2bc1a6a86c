"""Issue 43, section 3, run by ``benchmarks/taccl.py --testbed-alltoall`` (root, iproute2,
Open MPI): taccl's alltoall with a relay sketch measured on an emulated two-node machine
with a shared NIC, against ``direct`` and against gloo's and Open MPI's own alltoall,
each ccweave time beside the calibrated model's prediction.

One ``ccweave bench`` of ``examples/topologies/shared-nic-2x4.json`` (the netns testbed:
4 ranks a node on 400 Mbit/s links, each node's ranks behind one 100 Mbit/s NIC):
calibrated first (``--save-model``, or ``--model`` of an earlier run), then taccl with
``sketch=relay-per-nic`` (one rank a NIC gathers its node's chunks for the other node and
scatters what arrives; ``fallback=false`` keeps it where a classic strategy simulates
faster), ``direct``, ``gloo all_to_all_single`` and ``MPI_Alltoall``, in alternated rounds.

Targets: where the calibrated model predicts the relay to win over direct, it wins when
measured, and where it predicts direct to win, direct does; every ccweave prediction
within 15% of its measured time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = ROOT / "examples" / "topologies" / "shared-nic-2x4.json"
SIZES = "64KB,256KB,1MB,4MB"
RELAY = "taccl"
DIRECT = "direct"
PREDICTION_TARGET = 0.15
ENV = {"OMP_NUM_THREADS": "1"}
"""As the launchers set it when unset (docs/testbed.md)."""


def bench(model: Path, sizes: str, reps: int, baselines: str) -> dict:
    """``ccweave bench`` of the relay sketch, direct and the incumbents, as JSON."""
    calibration = ["--model", str(model)] if model.exists() else ["--save-model", str(model)]
    argv = ["bench", str(TOPOLOGY), "alltoall", "--sizes", sizes,
            "--strategies", f"{RELAY},{DIRECT}", "--option", f"{RELAY}:sketch=relay-per-nic",
            "--option", f"{RELAY}:fallback=false", "--baselines", baselines,
            "--reps", str(reps), *calibration, "--json"]
    done = subprocess.run([sys.executable, "-m", "ccweave.cli", *argv], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, **ENV})
    if done.returncode not in (0, 1):
        raise SystemExit(f"ccweave {' '.join(argv)} failed ({done.returncode}):\n"
                         f"{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def table(run: dict) -> list[dict[str, object]]:
    """Per size: relay and direct measured and predicted, the incumbents measured."""
    by: dict[int, dict[str, dict]] = {}
    for row in run["rows"]:
        by.setdefault(row["size_bytes"], {})[row["algorithm"]] = row
    found = []
    for size in sorted(by):
        cells = by[size]
        relay, direct = cells.get(RELAY), cells.get(DIRECT)
        if relay is None or direct is None:
            continue
        natives = {name: row["measured_s"] for name, row in cells.items() if row["native"]}
        found.append({
            "size_bytes": size, "relay_schedule": relay["schedule"],
            "relay_s": relay["measured_s"], "relay_predicted_s": relay["predicted_s"],
            "relay_error": relay["error"], "relay_rounds_s": relay["round_s"],
            "direct_s": direct["measured_s"], "direct_predicted_s": direct["predicted_s"],
            "direct_error": direct["error"], "direct_rounds_s": direct["round_s"],
            "predicted_ratio": relay["predicted_s"] / direct["predicted_s"],
            "measured_ratio": relay["measured_s"] / direct["measured_s"],
            "incumbents_s": natives, "wrong": relay["wrong"] + direct["wrong"]})
    return found


def run(model: str | None, sizes: str = SIZES, reps: int = 5,
        baselines: str = "gloo,mpi") -> tuple[dict[str, object], list[tuple[str, bool]]]:
    """The bench, its table printed, and the targets."""
    with tempfile.TemporaryDirectory(prefix="ccweave-a2a-") as folder:
        path = Path(model) if model else Path(folder) / "shared-nic-calibrated.json"
        result = bench(path, sizes, reps, baselines)
    rows = table(result)
    cost = result.get("cost_model") or {}
    print(f"\n7. alltoall on the netns testbed of {TOPOLOGY.name} (calibrated: message "
          f"overhead {cost.get('message_overhead_us', 0):.1f} us, latency "
          f"{cost.get('message_latency_us', 0):.0f} us, link efficiency "
          f"{cost.get('link_efficiency', 1):.2f}, host cores {cost.get('host_cores')}); "
          f"median of {reps} alternated rounds, ms; pred: the calibrated model's time")
    natives = sorted({name for row in rows for name in row["incumbents_s"]})
    print(f"{'size':>6} {'relay':>9} {'pred':>9} {'err':>6} {'direct':>9} {'pred':>9} "
          f"{'err':>6} {'relay/direct pred':>17} {'measured':>8} "
          + " ".join(f"{name:>20}" for name in natives))
    for row in rows:
        size = row["size_bytes"]
        label = f"{size >> 20}MB" if size >= 2**20 else f"{size >> 10}KB"
        print(f"{label:>6} {row['relay_s'] * 1e3:>9.2f} {row['relay_predicted_s'] * 1e3:>9.2f} "
              f"{row['relay_error']:>+6.0%} {row['direct_s'] * 1e3:>9.2f} "
              f"{row['direct_predicted_s'] * 1e3:>9.2f} {row['direct_error']:>+6.0%} "
              f"{row['predicted_ratio']:>17.3f} {row['measured_ratio']:>8.3f} "
              + " ".join(f"{row['incumbents_s'].get(name, float('nan')) * 1e3:>20.2f}"
                         for name in natives), flush=True)
    load = result["load_average"]
    rss = result["peak_rss_MB"]
    print(f"load average {load['before'][0]:.2f} before, {load['after'][0]:.2f} after, on "
          f"{load['cores']} cores; peak RSS per rank: "
          + ", ".join(f"{backend} {max(values):.0f} MB" for backend, values in rss.items()))
    relay_schedules = sorted({row["relay_schedule"] for row in rows})
    print(f"relay schedules: {'; '.join(relay_schedules)}")
    checks = []
    for row in rows:
        size = row["size_bytes"]
        if row["predicted_ratio"] < 1:
            checks.append((f"alltoall {size} B: the model predicts the relay to win "
                           f"({row['predicted_ratio']:.3f} of direct); measured "
                           f"{row['measured_ratio']:.3f}", row["measured_ratio"] < 1))
        else:  # the converse: where it predicts direct, the relay must not win either
            checks.append((f"alltoall {size} B: the model predicts direct to win (the relay "
                           f"{row['predicted_ratio']:.3f} of it); measured "
                           f"{row['measured_ratio']:.3f}", row["measured_ratio"] >= 1))
        for name in ("relay", "direct"):
            error = row[f"{name}_error"]
            checks.append((f"alltoall {size} B {name}: predicted within "
                           f"{PREDICTION_TARGET:.0%} of measured ({error:+.1%})",
                           abs(error) <= PREDICTION_TARGET))
    checks.append(("every element right in every measured case", not any(
        row["wrong"] for row in rows)))
    return {"testbed_alltoall": rows, "bench": result}, checks
