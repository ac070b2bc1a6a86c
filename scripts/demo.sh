#!/usr/bin/env bash
# The main job on a built-in machine: synthesize every strategy (taccl once per size), prove
# it, simulate it over sizes and compare with the classic baselines and the lower bound.
# Usage: scripts/demo.sh [TOPO] [COLLECTIVE] [SIZES]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
topo=${1:-ndv2:2}
collective=${2:-allgather}
sizes=${3:-1MB,16MB,256MB,1GB}
ccweave topo show "$topo"
ccweave bounds "$topo" "$collective" --sizes "$sizes"
ccweave compare "$topo" "$collective" --sizes "$sizes" --strategies all
