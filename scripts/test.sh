#!/usr/bin/env bash
# Set up and run the whole test suite (what CI runs): lint, then pytest on both cores.
# Tests marked `slow` are left to scripts/bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
ruff check src tests benchmarks examples
python -m pytest -q -n 2 --durations=15 "$@"
