#!/usr/bin/env bash
# Set up everything ccweave needs on a fresh Debian machine: Debian packages (Open MPI for
# the MPI executor, iproute2 for the emulated testbed), a virtual environment in .venv with
# ccweave, its test tools, mpi4py and the CPU build of torch (pinned: an unpinned torch pulls
# a multi-GB CUDA build). Safe to run again; it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin)
[ -e /usr/include/x86_64-linux-gnu/mpi/mpi.h ] || [ -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] \
  || dpkg -s libopenmpi-dev >/dev/null 2>&1 || need_apt+=(libopenmpi-dev)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v tc >/dev/null 2>&1 || need_apt+=(iproute2)
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing Debian packages: ${need_apt[*]}"
  $sudo apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
. .venv/bin/activate
pip_quiet=(--quiet --disable-pip-version-check)
python -m pip install "${pip_quiet[@]}" --upgrade pip 2>/dev/null || true
python -m pip install "${pip_quiet[@]}" "torch==2.13.0"
python -m pip install "${pip_quiet[@]}" -e ".[test,mpi]"
echo "setup: ready (.venv: $(python -c 'import ccweave, torch; print("ccweave", ccweave.__version__, "torch", torch.__version__)'))"
