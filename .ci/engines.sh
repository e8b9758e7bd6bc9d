#!/usr/bin/env bash
# CI: the engines of accelbackends.integrations.ray (Ray Train) installed into CI's venv, and
# the tests that run a real local Ray (tests/integrations/test_ray.py, and Ray Train's own
# torch-backend cases in tests/environments/test_peer_cases.py; both skipped without Ray).
# Runs after the venv exists; torch must stay the pinned CPU build, which is checked.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
torch_before=$(.venv/bin/python -c 'import torch; print(torch.__version__)')
.venv/bin/pip install --quiet --disable-pip-version-check -e '.[ray]'
torch_after=$(.venv/bin/python -c 'import torch; print(torch.__version__)')
if [ "$torch_before" != "$torch_after" ]; then
    echo "installing Ray replaced torch $torch_before with $torch_after" >&2
    exit 1
fi
installed=$(date +%s)
echo "engines: ray $(.venv/bin/python -c 'import ray; print(ray.__version__)') beside torch" \
    "$torch_after (installed in $((installed - start)) s)"
RAY_USAGE_STATS_ENABLED=0 .venv/bin/python -m pytest -q tests/integrations/test_ray.py \
    tests/environments/test_peer_cases.py::test_rays_torch_backend_cases_with_accelbackends_torch_config
echo "engines: tests took $(($(date +%s) - installed)) s"
