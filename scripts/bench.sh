#!/usr/bin/env bash
# Set up, then run every benchmark (each prints its issue's figures and peak RSS) and the
# tests marked slow. Usage: scripts/bench.sh [benchmark names without .py ...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
if [ $# -gt 0 ]; then names=("$@"); else
  names=(); for f in benchmarks/*.py; do names+=("$(basename "$f" .py)"); done
fi
for name in "${names[@]}"; do
  echo "=== benchmarks/$name.py"
  python "benchmarks/$name.py"
done
if [ $# -eq 0 ]; then
  echo "=== tests marked slow"
  python -m pytest -q -m slow
fi
